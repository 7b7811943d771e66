// What an outside program reaches for around autograd: requires_grad in TensorOptions, PyTorch's repr
// suffixes (requires_grad=True, grad_fn=<...>), and saved_tensors() naming each node's module, counting
// shared storage once, charging allocator blocks, with totals and a table. Memory figures are arithmetic:
// numel * element size rounded up to a multiple of 512 (sizes below 1 MiB); matrix products park no
// cuBLAS workspace (":0:0", the goldens' setting).
#include <doctest/doctest.h>

#include <memory>
#include <sstream>
#include <string>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/saved_tensors.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/module_list.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct NoWorkspace {
  NoWorkspace() { set_blas_workspace_config(":0:0"); }
  ~NoWorkspace() { set_blas_workspace_config(std::nullopt); }
};

// class Net(nn.Module): fc1 = Linear(100, 50); fc2 = Linear(50, 10); forward: fc2(relu(fc1(x)))
class Net : public nn::Module {
 public:
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(100, 50, kSim));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(50, 10, kSim));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace

TEST_CASE("TensorOptions::requires_grad makes the factory's tensor a leaf that requires grad") {
  fresh_sim();
  {
    MemoryProbe p(kSim);
    Tensor w = randn({2, 3}, {.device = kSim, .requires_grad = true});
    CHECK(w.requires_grad());
    CHECK(w.is_leaf());
    CHECK(w.grad_fn_name() == "");
    CHECK(p.allocated_delta_is(512));  // 2*3*4 = 24 -> one 512-byte block, nothing else
    Tensor b = zeros({3}, device(kSim).with_requires_grad());
    CHECK(b.requires_grad());
    for (const Tensor& t :
         {ones({2}, TensorOptions{}.with_device(kSim).with_requires_grad()),
          full({2}, 3.0, {.device = kSim, .requires_grad = true}), empty({2}, {.device = kSim, .requires_grad = true}),
          rand({2}, {.device = kSim, .requires_grad = true}), arange(4.0, {.device = kSim, .requires_grad = true}),
          tensor({1.0, 2.0}, {.device = kSim, .requires_grad = true})})
      CHECK(t.requires_grad());
    CHECK_FALSE(randn({2}, device(kSim)).requires_grad());
    // Gradients flow into it as into any leaf.
    sum(w * 2.0).backward();
    CHECK(w.grad().tolist() == std::vector<double>(6, 2.0));
  }
  // Only floating point tensors can require grad (torch: "Only Tensors of floating point ... can require
  // gradients"), refused before anything is allocated.
  MemoryProbe p(kSim);
  CHECK(contains(error_of([] { zeros({4}, {.dtype = ScalarType::int64, .device = kSim, .requires_grad = true}); }),
                 "floating point"));
  CHECK(contains(error_of([] { randint(0, 5, {4}, {.device = kSim, .requires_grad = true}); }), "floating point"));
  CHECK(p.allocated_delta_is(0));
  CHECK(p.peak_allocated_delta_is(0));
}

TEST_CASE("printing shows requires_grad=True on leaves and grad_fn=<...> on results, as PyTorch's repr") {
  fresh_sim();
  const Tensor x = tensor({1.0, 2.0}, {.device = kSim, .requires_grad = true});
  CHECK(x.str() == "tensor([1., 2.], device='sim', requires_grad=True)");
  CHECK((x * x).str() == "tensor([1., 4.], device='sim', grad_fn=<MulBackward0>)");
  // A C++ scalar operand is libtorch's mul.Scalar, whose node is MulBackward1 (Python wraps the scalar in
  // a tensor and gets MulBackward0).
  CHECK((x * 2.0).str() == "tensor([2., 4.], device='sim', grad_fn=<MulBackward1>)");
  CHECK(sum(x).str() == "tensor(3., device='sim', grad_fn=<SumBackward0>)");
  CHECK(x.detach().str() == "tensor([1., 2.], device='sim')");
  {
    NoGradGuard no_grad;
    CHECK((x * 2.0).str() == "tensor([2., 4.], device='sim')");
  }
  // A Linear's output: addmm with the bias, as torch's grad_fn=<AddmmBackward0>; dtype goes before it.
  nn::Linear lin(2, 1, kSim);
  const std::string out = lin(ones({1, 2}, device(kSim))).str();
  CHECK(contains(out, "device='sim', grad_fn=<AddmmBackward0>)"));
  const Tensor x64 = tensor({1.0}, {.dtype = ScalarType::float64, .device = kCpu, .requires_grad = true});
  CHECK(x64.str() == "tensor([1.], dtype=float64, requires_grad=True)");
  CHECK(ones({2}, device(kSim)).str() == "tensor([1., 1.], device='sim')");
}

TEST_CASE("saved_tensors names each node's module, charges blocks once per storage, totals and prints") {
  NoWorkspace no_workspace;
  fresh_sim();
  manual_seed(0);
  Net net;
  Tensor x = randn({3, 100}, device(kSim));
  Tensor loss = sum(net(x));
  SavedTensors report = saved_tensors(loss);
  // Backward order: SumBackward0 (saves nothing); fc2's AddmmBackward0: mat1 = relu's output (3, 50),
  // 600 bytes -> block 1024, and mat2 = fc2.weight.t() (50, 10), 2000 bytes -> block 2048; fc2's TBackward0;
  // ReluBackward0: its result, the storage fc2 saved as mat1 (charged once, above); fc1's AddmmBackward0:
  // mat1 = x (3, 100), 1200 bytes -> block 1536 (mat2 is not needed: x needs no gradient).
  REQUIRE(report.size() == 4);
  CHECK(report[0].node == "AddmmBackward0");
  CHECK(report[0].module == "fc2");
  CHECK(report[0].name == "mat1");
  CHECK(report[0].bytes == 3 * 50 * 4);
  CHECK(report[0].block_bytes == 1024);
  CHECK(report[0].charged_bytes == 1024);
  CHECK(report[0].graph_only);  // only the graph holds relu's output
  CHECK(report[1].module == "fc2");
  CHECK(report[1].name == "mat2");
  CHECK(report[1].bytes == 50 * 10 * 4);
  CHECK(report[1].block_bytes == 2048);
  CHECK(report[1].charged_bytes == 2048);
  CHECK_FALSE(report[1].graph_only);  // the parameter holds it too
  CHECK(report[2].node == "ReluBackward0");
  CHECK(report[2].module == "");  // relu ran in Net's own forward: the top of the model
  CHECK(report[2].block_bytes == 1024);
  CHECK(report[2].charged_bytes == 0);  // the same storage as report[0]
  CHECK(report[2].graph_only);
  CHECK(report[3].module == "fc1");
  CHECK(report[3].name == "mat1");
  CHECK(report[3].bytes == 3 * 100 * 4);
  CHECK(report[3].block_bytes == 1536);
  CHECK_FALSE(report[3].graph_only);  // x is held by the test
  CHECK(report.storages == 3);
  CHECK(report.total_block_bytes == 1024 + 2048 + 1536);
  CHECK(report.graph_only_block_bytes == 1024);

  const std::string table = report.table();
  CAPTURE(table);
  CHECK(contains(table, "module"));
  CHECK(contains(table, "fc1"));
  CHECK(contains(table, "fc2"));
  CHECK(contains(table, "1.00 KiB (1024 B)"));
  CHECK(contains(table, "1.50 KiB (1536 B)"));
  CHECK(contains(table,
                 "4 saved tensors in 3 storages: 4.50 KiB (4608 B) in blocks, 1.00 KiB (1024 B) held only by "
                 "the graph"));
  std::ostringstream streamed;
  streamed << report;
  CHECK(streamed.str() == table);

  // What only the graph holds is what dropping it frees: relu's output (1024) and the loss itself (4 bytes
  // -> 512); fc1's and fc2's outputs were freed during the forward pass.
  MemoryProbe p(kSim);
  loss = Tensor();
  CHECK(p.allocated_delta_is(-(1024 + 512)));
}

TEST_CASE("module names follow the model's path; a multi-input forward names itself with module_scope()") {
  NoWorkspace no_workspace;
  fresh_sim();
  class Block : public nn::Module {
   public:
    Block() { proj = register_module("proj", std::make_shared<nn::Linear>(4, 4, kSim)); }
    Tensor forward(const Tensor& x) override { return (*proj)(x); }
    Tensor forward(const Tensor& x, const Tensor& y) {
      auto scope = module_scope();
      return (*proj)(x)*y;
    }
    std::shared_ptr<nn::Linear> proj;
  };
  class Model : public nn::Module {
   public:
    Model() {
      blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
      blocks->push_back(std::make_shared<Block>());
      blocks->push_back(std::make_shared<Block>());
    }
    Tensor forward(const Tensor& x) override {
      Tensor h = (*(*blocks)[0])(x);
      return blocks->at<Block>(1)->forward(h, h);
    }
    std::shared_ptr<nn::ModuleList> blocks;
  };
  Model model;
  Tensor x = randn({2, 4}, device(kSim));
  SavedTensors report = saved_tensors(sum(model(x)));
  // SumBackward0; in blocks.1, MulBackward0 (self = blocks.1.proj's output, other = h, block 0's output);
  // blocks.1.proj's AddmmBackward0 (mat1 = h again, mat2 = weight.t()); blocks.0.proj's AddmmBackward0
  // (mat1 = x). Every tensor here is 2*4*4 = 32 bytes or 4*4*4 = 64 bytes: one 512-byte block each.
  REQUIRE(report.size() == 5);
  CHECK(report[0].node == "MulBackward0");
  CHECK(report[0].module == "blocks.1");
  CHECK(report[1].module == "blocks.1");
  CHECK(report[1].name == "other");
  CHECK(report[1].charged_bytes == 512);
  CHECK(report[2].node == "AddmmBackward0");
  CHECK(report[2].module == "blocks.1.proj");
  CHECK(report[2].name == "mat1");
  CHECK(report[2].charged_bytes == 0);  // h, charged to mul's "other" above
  CHECK(report[4].module == "blocks.0.proj");
  // mul's self, h, blocks.1.proj's weight, x: four storages.
  CHECK(report.storages == 4);
  CHECK(report.total_block_bytes == 4 * 512);
  CHECK(model.blocks->at<Block>(1)->proj->name() == "blocks.1.proj");
}
