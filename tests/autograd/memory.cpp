// When autograd holds and frees memory, on sim, as arithmetic from PyTorch's rules (reference section 14).
#include <doctest/doctest.h>

#include <cstdlib>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct NoWorkspace {  // the goldens' setting: no cuBLAS workspace parked by matrix products
  NoWorkspace() { setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1); }
  ~NoWorkspace() { unsetenv("CUBLAS_WORKSPACE_CONFIG"); }
};

}  // namespace

// Reference section 14.4, without the cuBLAS workspaces (CUBLAS_WORKSPACE_CONFIG=:0:0).
TEST_CASE("the measured Linear(256,512) -> Linear(512,1) iteration, byte for byte") {
  NoWorkspace no_workspace;
  fresh_sim();
  {
    nn::Linear lin1(256, 512, true, device(kSim));
    nn::Linear lin2(512, 1, true, device(kSim));
    Tensor x = randn({1024, 256}, device(kSim));
    // params 512*256*4 = 524288, 512*4 = 2048, 512*4 = 2048, 4 -> 512; x 1024*256*4 = 1048576
    CHECK(allocated() == 1577472);
    Tensor out = lin2(lin1(x));
    // h = 1024*512*4 = 2097152 (saved by lin2's addmm as mat1), out = 1024*4 = 4096
    CHECK(allocated() == 1577472 + 2097152 + 4096);
    Tensor loss = sum(out);
    CHECK(allocated() == 1577472 + 2097152 + 4096 + 512);
    caching_allocator(kSim).reset_peak_stats();
    loss.backward();
    // h released; grads W1 524288 + b1 2048 + W2 2048 + b2 512 = 528896 stay; out and loss still alive.
    CHECK(allocated() == 1577472 + 528896 + 4096 + 512);
    // The peak is PyTorch's, when b1.grad is summed: params and x, out, loss, the root gradient (512),
    // grad_h (2097152), all four gradients, plus the sum kernel's private scratch (a 4194304-byte staging
    // buffer and a 16-byte semaphore block, 512): 8403456 = 76560896 - 2 * 33554432 - 1048576 (the
    // reference's figure without the two cuBLAS workspaces and the cuBLASLt block).
    CHECK(peak() == 1577472 + 4096 + 512 + 512 + 2097152 + 528896 + 4194816);
    CHECK(peak() == 76560896 - 2 * 33554432 - 1048576);
    CHECK(lin1.weight().grad().defined());
    // Second iteration: gradients are added in place, nothing new persists.
    const void* w1_grad = lin1.weight().grad().data_ptr();
    Tensor loss2 = sum(lin2(lin1(x)));
    loss2.backward();
    CHECK(lin1.weight().grad().data_ptr() == w1_grad);
    // (the second iteration's lin2 output was a temporary: only loss2's 512 bytes remain)
    CHECK(allocated() == 1577472 + 528896 + 4096 + 512 + 512);
    lin1.zero_grad();
    lin2.zero_grad();
    CHECK(allocated() == 1577472 + 4096 + 512 + 512);
  }
  CHECK(allocated() == 0);
}

TEST_CASE("saved_tensors lists what each node keeps alive") {
  NoWorkspace no_workspace;
  fresh_sim();
  nn::Linear lin1(8, 16, true, device(kSim));
  nn::Linear lin2(16, 1, true, device(kSim));
  Tensor x = randn({4, 8}, device(kSim));
  Tensor loss = sum(lin2(relu(lin1(x))));
  auto report = saved_tensors(loss);
  // Backward order: SumBackward0 (nothing), lin2's AddmmBackward0 (mat1 = relu output, mat2 = W2.t()),
  // TBackward0, ReluBackward0 (result), lin1's AddmmBackward0 (mat1 = x, for W1's gradient; mat2 is not
  // needed because x needs no gradient).
  REQUIRE(report.size() == 4);
  CHECK(report[0].node == "AddmmBackward0");
  CHECK(report[0].name == "mat1");
  CHECK(report[0].sizes == Shape{4, 16});
  CHECK(report[0].bytes == 4 * 16 * 4);
  CHECK(report[1].name == "mat2");
  CHECK(report[1].shares_storage);  // a view of the parameter: costs nothing
  CHECK(report[2].node == "ReluBackward0");
  CHECK(report[2].shares_storage);  // the same storage lin2 saved as mat1
  CHECK(report[3].node == "AddmmBackward0");
  CHECK(report[3].name == "mat1");
  CHECK(report[3].sizes == Shape{4, 8});
  CHECK(report[3].shares_storage);  // x itself
  loss.backward();
  for (const auto& saved : saved_tensors(loss)) CHECK(saved.released);
}

TEST_CASE("no_grad forward keeps no activations") {
  NoWorkspace no_workspace;
  fresh_sim();
  nn::Linear lin1(256, 512, false, device(kSim));
  nn::Linear lin2(512, 1, false, device(kSim));
  Tensor x = randn({1024, 256}, device(kSim));
  const int64_t base = allocated();  // 524288 + 2048 + 1048576
  Tensor with_grad = lin2(lin1(x));
  CHECK(allocated() == base + 2097152 + 4096);  // h is kept for lin2's weight gradient
  with_grad = Tensor();
  CHECK(allocated() == base);
  {
    NoGradGuard no_grad;
    Tensor out = lin2(lin1(x));
    CHECK(allocated() == base + 4096);  // h was freed as soon as lin2 had used it
  }
}

// Reference section 14.4's event sequence for the first backward, minus the autograd thread's cuBLAS
// workspace, which bytegrad does not make (it runs backward on the calling thread).
TEST_CASE("the first backward allocates and frees in PyTorch's order") {
  NoWorkspace no_workspace;
  fresh_sim();
  nn::Linear lin1(256, 512, true, device(kSim));
  nn::Linear lin2(512, 1, true, device(kSim));
  Tensor x = randn({1024, 256}, device(kSim));
  Tensor loss = sum(lin2(lin1(x)));
  caching_allocator(kSim).record_history(true);
  loss.backward();
  std::vector<std::pair<std::string, size_t>> events;
  for (const TraceEntry& e : caching_allocator(kSim).snapshot().trace)
    if (e.action == TraceAction::alloc || e.action == TraceAction::free_requested)
      events.emplace_back(std::string(trace_action_name(e.action)), e.size);
  caching_allocator(kSim).record_history(false);
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"alloc", 4},        // root gradient ones_like(loss)
      {"alloc", 2097152},  // grad_h = grad @ W2 (1024*512*4)
      {"alloc", 4096},     // contiguous copy of the expanded grad for cuBLAS
      {"free_requested", 4096},
      {"alloc", 2048},  // W2's gradient (1*512*4)
      {"alloc", 4096},  // the copy again, for the weight product
      {"free_requested", 4096},
      {"alloc", 4},                 // b2's gradient: grad summed down to (1)
      {"free_requested", 2097152},  // h released with lin2's saved tensors
      {"alloc", 524288},            // W1's gradient (512*256*4)
      {"alloc", 2048},              // b1's gradient (512*4)
      {"alloc", 4194304},           // its sum kernel's staging buffer (kernels/reduce_scratch.h)
      {"alloc", 16},                // and semaphores (4 grid columns)
      {"free_requested", 16},
      {"free_requested", 4194304},
      {"free_requested", 2097152},  // grad_h consumed
      {"free_requested", 4},        // the root gradient, when backward returns
  };
  CHECK(events == expected);
}
