// Inputs the fuzzers found that broke the library, kept as plain tests.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using bytegrad::testing::ScopedEnv;

namespace {

std::string refusal_of(auto&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument");
  return {};
}

}  // namespace

TEST_CASE("regression: a CUBLAS_WORKSPACE_CONFIG with a long run of digits is refused, not a stack overflow") {
  // std::regex recursed once per digit and crashed (SIGSEGV) on runs of some tens of thousands of digits.
  const std::string huge_size = ":" + std::string(200000, '9') + ":2";
  const std::string message = refusal_of([&] { set_blas_workspace_config(huge_size); });
  CHECK(message.find("CUBLAS_WORKSPACE_CONFIG=':9999") == 0);
  CHECK(message.find("is out of range") != std::string::npos);
  CHECK(message.size() < 600);  // an excerpt of the text, not all 200004 characters
  // A long run that is no pair: refused in code (with an excerpt), the default from the variable (PyTorch's
  // rule, with its warning); a long pair list of small numbers is summed.
  const std::string no_pair_message = refusal_of([&] { set_blas_workspace_config(std::string(200000, '7')); });
  CHECK(no_pair_message.find("CUBLAS_WORKSPACE_CONFIG='7777") == 0);
  CHECK(no_pair_message.size() < 600);
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", std::string(200000, '7').c_str());
    CHECK(blas_workspace_bytes(kMeta) == size_t{4096} * 1024 * 8);
  }
  std::string many_pairs;
  for (int i = 0; i < 20000; ++i) many_pairs += ":1:1";
  set_blas_workspace_config(many_pairs);
  CHECK(blas_workspace_bytes(kMeta) == size_t{20000} * 1024);
  set_blas_workspace_config(std::nullopt);
}

TEST_CASE("regression: configuration errors quote an excerpt of a huge setting, not all of it") {
  const std::string long_key(100000, 'k');
  const std::string alloc_message = refusal_of([&] { AllocatorConfig::parse(long_key + ":1"); });
  CHECK(alloc_message.find("BYTEGRAD_ALLOC_CONF: unrecognized option 'kkkk") == 0);
  CHECK(alloc_message.find("(100000 characters)") != std::string::npos);
  CHECK(alloc_message.size() < 300);
  const std::string long_value = "max_split_size_mb:" + std::string(100000, '0') + "19";
  const std::string value_message = refusal_of([&] { AllocatorConfig::parse(long_value); });
  CHECK(value_message.find("max_split_size_mb is too small") != std::string::npos);
  CHECK(value_message.size() < 300);
}

// ---- found by the op fuzzer (tests/fuzz/op_fuzz.cpp)

TEST_CASE("regression: dimension ops on a 0-d tensor are refused, not a read past its sizes") {
  // unbind, split, chunk, slice, narrow, size and stride indexed sizes()[0] of a 0-d tensor (a segfault
  // for unbind and slice). PyTorch raises IndexError "Dimension specified as 0 but tensor has no
  // dimensions" for unbind, size and stride (out_of_range here) and a RuntimeError for split, chunk,
  // slice and narrow ("cannot be applied to a 0-dim tensor": invalid_argument). select refused it already.
  for (Device device : {kCpu, kSim, kMeta}) {
    const Tensor x = scalar_tensor(2.5, TensorOptions{ScalarType::float32, device});
    CHECK_THROWS_AS(x.unbind(0), std::out_of_range);
    CHECK_THROWS_AS(x.split(1, 0), std::invalid_argument);
    CHECK_THROWS_AS(x.chunk(2, -1), std::invalid_argument);
    CHECK_THROWS_AS(x.select(0, 0), std::invalid_argument);
    CHECK_THROWS_AS(x.slice(0, -5, -3, 1), std::invalid_argument);
    CHECK_THROWS_AS(x.narrow(0, 0, 1), std::invalid_argument);
    CHECK_THROWS_AS(x.size(0), std::out_of_range);
    CHECK_THROWS_AS(x.stride(0), std::out_of_range);
    // squeeze takes 0 and -1 on a 0-d tensor, as PyTorch, and nothing else.
    CHECK(x.squeeze(0).dim() == 0);
    CHECK(x.squeeze(-1).dim() == 0);
    CHECK_THROWS_AS(x.squeeze(1), std::out_of_range);
  }
  // split_size 0 is PyTorch's for a dimension of size 0 only: one empty part.
  const Tensor empty_rows = zeros({0, 3}, TensorOptions{ScalarType::float32, kSim});
  const std::vector<Tensor> parts = empty_rows.split(0, 0);
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].sizes() == Shape{0, 3});
  CHECK_THROWS_AS(zeros({2, 3}, TensorOptions{ScalarType::float32, kSim}).split(0, 0), std::invalid_argument);
}

TEST_CASE("regression: amax/amin/argmax of an empty tensor over non-empty dimensions give an empty result") {
  // Refused whenever numel() == 0; PyTorch refuses only a reduction over an empty dimension.
  const Tensor x = zeros({0, 3}, TensorOptions{ScalarType::float32, kSim});
  CHECK(amax(x, {1}).sizes() == Shape{0});
  CHECK(amin(x, {1}, true).sizes() == Shape{0, 1});
  CHECK(argmax(x, 1).sizes() == Shape{0});
  CHECK_THROWS_AS(amax(x, {0}), std::invalid_argument);
  CHECK_THROWS_AS(amax(x), std::invalid_argument);
  CHECK_THROWS_AS(max(x), std::invalid_argument);
}

TEST_CASE("regression: copy_ on meta from another device checks that the source broadcasts") {
  const Tensor dst = zeros({}, TensorOptions{ScalarType::int64, kMeta});
  const Tensor src = zeros({2, 0}, TensorOptions{ScalarType::bool_, kCpu});
  CHECK_THROWS_AS(dst.copy_(src), std::invalid_argument);
  const Tensor row = zeros({3}, TensorOptions{ScalarType::float32, kCpu});
  const Tensor grid = zeros({2, 3}, TensorOptions{ScalarType::float32, kMeta});
  grid.copy_(row);  // broadcasts: accepted
}

TEST_CASE("regression: mse_loss of empty tensors is NaN (mean) or 0 (sum), its 0-d result one 512-byte block") {
  // The 0-d result reused the input-sized block, which for an empty input holds no element (as_strided
  // refused it); PyTorch's resize_({}) grows that storage: one element, a 512-byte block on sim.
  for (Device device : {kCpu, kSim}) {
    const Tensor input = zeros({0, 1}, TensorOptions{ScalarType::float32, device});
    const Tensor target = zeros({0, 1}, TensorOptions{ScalarType::float32, device});
    const int64_t before = device == kSim ? caching_allocator(kSim).memory_allocated() : 0;
    const Tensor mean_loss = mse_loss(input, target, Reduction::mean);
    CHECK(std::isnan(mean_loss.item()));
    if (device == kSim) CHECK(caching_allocator(kSim).memory_allocated() - before == 512);
    CHECK(mse_loss(input, target, Reduction::sum).item() == 0.0);
    // Broadcast to an empty shape, as in the fuzzer's case: [1, 1] with [0, 1].
    const Tensor one = ones({1, 1}, TensorOptions{ScalarType::bfloat16, device});
    CHECK(mse_loss(one, target.to(ScalarType::bfloat16), Reduction::sum).item() == 0.0);
  }
}
