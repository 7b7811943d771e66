// MultiheadSelfAttention on an unbatched (L, E) input, as nn.MultiheadAttention accepts it (issue 25: refused
// before): the values and gradients of the batch-of-one call, the (L, E) result, masks, and the memory of the
// (1, L, E) call event for event (the unsqueeze and squeeze are views). PyTorch's recording of the same
// decomposition on x.unsqueeze(0) and on a (1, L, E) input (tests/data/pytorch_probes/sdpa_mask/mask.events,
// cases mha_bytegrad_unsqueezed / mha_bytegrad_batched1, tools/probes/sdpa_mask_probe.py) is replayed in
// tests/nn/sdpa_mask.cpp.
#include <cstdlib>
#include <fstream>
#include <string>

#include "bytegrad/nn/attention.h"
#include "nn_helpers.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("MultiheadSelfAttention on an unbatched (L, E) input is the batch-of-one call") {
  manual_seed(41);
  nn::MultiheadSelfAttention attn(8, 2, true, f64());
  const int64_t L = 5;
  const Tensor x = randn({L, 8}, f64());
  const Tensor w = randn({L, 8}, f64());
  SUBCASE("values and shape") {
    NoGradGuard no_grad;
    const Tensor y = attn(x);
    CHECK(y.sizes() == Shape{L, 8});
    CHECK(y.tolist() == attn(x.unsqueeze(0)).squeeze(0).tolist());
    // with a bool mask (true = masked out), a float mask and is_causal, as the batched call
    const Tensor causal = triu(ones({L, L}, TensorOptions{ScalarType::bool_, kCpu}), 1);
    CHECK(attn(x, causal).tolist() == attn(x.unsqueeze(0), causal).squeeze(0).tolist());
    CHECK(attn(x, std::nullopt, true).tolist() == attn(x, causal).tolist());
    const Tensor additive = randn({L, L}, f64());
    CHECK(attn(x, additive).tolist() == attn(x.unsqueeze(0), additive).squeeze(0).tolist());
  }
  SUBCASE("gradients match finite differences") {
    check_gradients([&](auto& v) { return sum(attn(v[0]) * w); }, {x});
    check_parameter_gradients(attn, [&] { return sum(attn(x, std::nullopt, true) * w); });
  }
}

TEST_CASE("MultiheadSelfAttention unbatched: the memory of the (1, L, E) call, forward and backward, on sim and meta") {
  for (Device device : {kSim, kMeta}) {
    CAPTURE(device.str());
    fresh(device);
    manual_seed(0);
    nn::MultiheadSelfAttention attn(48, 4, true, TensorOptions{ScalarType::float32, device});
    const Tensor x2 = randn({10, 48}, TensorOptions{ScalarType::float32, device});
    const Tensor x3 = randn({1, 10, 48}, TensorOptions{ScalarType::float32, device});
    auto step = [&](const Tensor& x) {
      const Tensor leaf = x.detach().requires_grad_(true);  // a new leaf each time: its .grad is made afresh
      Tensor y = attn(leaf);
      y.backward(ones_like(y));
      attn.zero_grad();
    };
    step(x3);  // the gradients' first blocks out of the way, as in both calls below
    const AllocationEvents batched = allocation_events(device, [&] { step(x3); });
    const AllocationEvents unbatched = allocation_events(device, [&] { step(x2); });
    CHECK(unbatched == batched);
    CHECK(!batched.empty());
  }
}

TEST_CASE("MultiheadSelfAttention: inputs of other ranks or widths are refused with their shape") {
  nn::MultiheadSelfAttention attn(4, 2, true, f64());
  CHECK_THROWS_WITH_AS(attn(randn({4}, f64())), doctest::Contains("unbatched (L, 4)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(attn(randn({3, 5}, f64())), doctest::Contains("[3, 5]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(attn(randn({1, 2, 3, 4}, f64())), doctest::Contains("(B, L, 4)"), std::invalid_argument);
}

// PyTorch's events for the same decomposition (tools/probes/sdpa_mask_probe.py's BytegradMha on x.unsqueeze(0),
// case mha_bytegrad_unsqueezed, plain mode: from the start mark to the parameters' gradients freed), which
// equal those of its (1, L, E) call (mha_bytegrad_batched1). nn.MultiheadAttention itself projects an unbatched
// input with three separate linears (its query, key and value stop being one tensor after unsqueeze(1)), so its
// own unbatched events (mha_torch_unbatched_*) differ from its batched ones; MultiheadSelfAttention keeps its
// packed projection.
TEST_CASE("MultiheadSelfAttention unbatched: PyTorch's recording of the decomposition, replayed on sim and meta") {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/sdpa_mask/mask.events");
  REQUIRE(in.good());
  AllocationEvents recorded;
  std::vector<size_t> recorded_marks;
  bool open = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# case ", 0) == 0) {
      open = line.find("name=mha_bytegrad_unsqueezed ") != std::string::npos &&
             line.find("mode=plain") != std::string::npos;
      continue;
    }
    if (!open) continue;
    if (line.rfind("# mark ", 0) == 0) {
      recorded_marks.push_back(recorded.size());
      if (line.rfind("# mark params_grads_freed", 0) == 0) break;
    } else if (line.rfind("alloc ", 0) == 0) {
      recorded.emplace_back("alloc", std::stoll(line.substr(6)));
    } else if (line.rfind("free_completed ", 0) == 0) {
      recorded.emplace_back("free", std::stoll(line.substr(15)));
    }
  }
  REQUIRE(recorded_marks.size() == 5);  // start, forward, backward, freed, params_grads_freed
  for (Device device : {kSim, kMeta}) {
    CAPTURE(device.str());
    fresh(device);
    manual_seed(0);
    nn::MultiheadSelfAttention attn(48, 4, true, TensorOptions{ScalarType::float32, device});
    Tensor x = randn({10, 48}, TensorOptions{ScalarType::float32, device}).requires_grad_(true);
    // the cuBLAS workspace PyTorch had allocated before the case (CUBLAS_WORKSPACE_CONFIG=:0:0: none here)
    setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
    const AllocationEvents replayed = allocation_events(device, [&] {
      Tensor y = attn(x);
      y.backward(ones_like(y));
      y = Tensor();
      x = Tensor();
      attn.zero_grad();
    });
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
    CHECK(replayed == recorded);
  }
}
