// Inputs the fuzzers found that broke the library, kept as plain tests.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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

// ---- found by the op fuzzer after issue 25's branches were merged

namespace {

// The sim device's allocated bytes now and at their peak since the last reset.
struct SimBytes {
  int64_t now, peak;
};
SimBytes sim_bytes() {
  return {caching_allocator(kSim).memory_allocated(), caching_allocator(kSim).max_memory_allocated()};
}

}  // namespace

TEST_CASE("regression: a Python-number scalar promotes as in PyTorch, with the output as the only allocation") {
  // PyTorch 2.11 (tests/data/pytorch_probes/bad_inputs/pytorch_2_11.txt): `int64 + 2.5` is float32 [3.5, 3.5];
  // a float scalar with an integral or bool tensor computes in the default dtype (float32), an int scalar
  // with a bool tensor in int64; the tensor's dtype otherwise. These were refused ("convert the tensor first").
  const TensorOptions int64_sim{ScalarType::int64, kSim};
  const Tensor ones_int = ones({2}, int64_sim);
  caching_allocator(kSim).reset_peak_stats();
  const SimBytes before = sim_bytes();
  const Tensor sum = ones_int + 2.5;
  CHECK(sum.dtype() == ScalarType::float32);
  CHECK(sum.tolist() == std::vector<double>{3.5, 3.5});
  // One float32 output of 2 elements: 2 * 4 = 8 bytes, rounded to the 512-byte block; nothing else at the
  // peak (TensorIterator keeps the scalar on the host as a wrapped number; no converted copy on CUDA).
  CHECK(sim_bytes().now - before.now == 512);
  CHECK(sim_bytes().peak - before.now == 512);

  const Tensor mask = from_vector({1, 0, 1}, {3}, TensorOptions{ScalarType::bool_, kSim});
  const Tensor shifted = mask + 2;  // bool + int -> int64
  CHECK(shifted.dtype() == ScalarType::int64);
  CHECK(shifted.tolist() == std::vector<double>{3, 2, 3});
  CHECK((mask * 1).dtype() == ScalarType::int64);  // PyTorch: torch.tensor([True]) * 1 is int64
  const Tensor halves = mask * 0.5;
  CHECK(halves.dtype() == ScalarType::float32);
  CHECK(halves.tolist() == std::vector<double>{0.5, 0, 0.5});

  const Tensor squares = from_vector({0, 1, 4, 9}, {4}, TensorOptions{ScalarType::int32, kSim});
  const Tensor roots = pow(squares, 0.5);  // float32, sqrt
  CHECK(roots.dtype() == ScalarType::float32);
  CHECK(roots.tolist() == std::vector<double>{0, 1, 2, 3});
  CHECK(pow(2.5, squares).dtype() == ScalarType::float32);
  CHECK(pow(mask, 2).dtype() == ScalarType::int64);  // bool ** 2: int64 [1, 0, 1]
  CHECK(pow(mask, 2).tolist() == std::vector<double>{1, 0, 1});
  const Tensor quarters = squares / 4.5;  // true division by a float: float32
  CHECK(quarters.dtype() == ScalarType::float32);
  CHECK(quarters.tolist()[2] == doctest::Approx(4.0 / 4.5));
  const Tensor reversed = 1.5 - squares;  // rsub
  CHECK(reversed.dtype() == ScalarType::float32);
  CHECK(reversed.tolist() == std::vector<double>{1.5, 0.5, -2.5, -7.5});
  // alpha follows the type computed in: int64 + 2.5 * 0.5 computes in float32, so a fractional alpha is fine.
  CHECK(add(ones_int, 2.5, 0.5).tolist() == std::vector<double>{2.25, 2.25});
  CHECK_THROWS_AS(add(ones_int, 2, 0.5), std::invalid_argument);  // int64 computation: alpha must be whole
  // The same on meta: dtype and the one 512-byte block.
  const Tensor meta_int = ones({2}, TensorOptions{ScalarType::int64, kMeta});
  const int64_t meta_before = caching_allocator(kMeta).memory_allocated();
  const Tensor meta_sum = meta_int + 2.5;
  CHECK(meta_sum.dtype() == ScalarType::float32);
  CHECK(caching_allocator(kMeta).memory_allocated() - meta_before == 512);
}

TEST_CASE("regression: in-place scalar ops refuse a promoted result type, before writing") {
  // PyTorch: int64.add_(2.5) "result type Float can't be cast to the desired output type Long"; bool.mul_(0)
  // likewise (result type Long).
  const Tensor x = from_vector({1, 2}, {2}, TensorOptions{ScalarType::int64, kSim});
  const std::string message = refusal_of([&] { x.add_(2.5); });
  CHECK(message.find("result type Float can't be cast to the desired output type Long") != std::string::npos);
  CHECK(x.tolist() == std::vector<double>{1, 2});
  const Tensor mask = from_vector({1, 0}, {2}, TensorOptions{ScalarType::bool_, kSim});
  CHECK_THROWS_AS(mask.mul_(0), std::invalid_argument);
  CHECK(mask.tolist() == std::vector<double>{1, 0});
  x.add_(3);  // an int scalar keeps int64
  CHECK(x.tolist() == std::vector<double>{4, 5});
  // A whole divisor leaves an integer computation, which div (floating rows) refuses, as before.
  CHECK_THROWS_AS(x / 2, std::invalid_argument);
}

TEST_CASE("regression: relu, pow and relu_backward refuse bool tensors, as PyTorch has no bool kernel") {
  const Tensor mask = from_vector({1, 0}, {2}, TensorOptions{ScalarType::bool_, kSim});
  CHECK_THROWS_AS(relu(mask), std::invalid_argument);       // "Boolean inputs not supported for relu"
  CHECK_THROWS_AS(pow(mask, mask), std::invalid_argument);  // "pow_cuda" not implemented for 'Bool'
  CHECK_THROWS_AS(relu_backward(mask, mask), std::invalid_argument);
  const Tensor counts = from_vector({2, 3}, {2}, TensorOptions{ScalarType::int64, kSim});
  CHECK(pow(counts, mask).tolist() == std::vector<double>{2, 1});  // int64 computation: fine
}

TEST_CASE("regression: maximum_, addcmul_ and addcdiv_ promote mixed dtypes and write self's") {
  // PyTorch's TensorIterator: the result type of all operands, cast to self (canCast), no copies on CUDA.
  const Tensor self = from_vector({1, 5}, {2}, TensorOptions{ScalarType::bfloat16, kSim});
  const Tensor other = from_vector({3, 2}, {2}, TensorOptions{ScalarType::float64, kSim});
  const Tensor ints = from_vector({2, 4}, {2}, TensorOptions{ScalarType::int64, kSim});
  caching_allocator(kSim).reset_peak_stats();
  const SimBytes before = sim_bytes();
  maximum_(self, other);
  CHECK(self.dtype() == ScalarType::bfloat16);
  CHECK(self.tolist() == std::vector<double>{3, 5});
  addcmul_(self, ints, other, 0.5);  // 3 + 0.5 * 2 * 3, 5 + 0.5 * 4 * 2
  CHECK(self.tolist() == std::vector<double>{6, 9});
  addcdiv_(self, other, ints, 2);  // 6 + 2 * 3 / 2, 9 + 2 * 2 / 4
  CHECK(self.tolist() == std::vector<double>{9, 10});
  CHECK(sim_bytes().now == before.now);  // in place: nothing allocated, not even for a moment
  CHECK(sim_bytes().peak == before.now);
  // A result that cannot be cast into self is refused before anything is written.
  const Tensor int_self = from_vector({1, 2}, {2}, TensorOptions{ScalarType::int64, kSim});
  CHECK_THROWS_AS(maximum_(int_self, other), std::invalid_argument);
  CHECK(int_self.tolist() == std::vector<double>{1, 2});
  // lerp_ keeps PyTorch's one-dtype rule.
  CHECK_THROWS_AS(lerp_(self, other, 0.5), std::invalid_argument);
}

TEST_CASE("regression: in-place ops on an empty view with a stride-0 dimension are accepted") {
  // PyTorch counts an empty tensor contiguous (so non-overlapping and dense) whatever its strides.
  const Tensor base = zeros({4}, TensorOptions{ScalarType::float32, kSim});
  const Tensor empty_expanded = base.as_strided({3, 0}, {0, 1}, 0);
  empty_expanded.add_(1.0);
  empty_expanded.neg_();
  sqrt_(empty_expanded);
  empty_expanded.copy_(zeros({0}, TensorOptions{ScalarType::float32, kSim}));
  CHECK(base.tolist() == std::vector<double>{0, 0, 0, 0});
  // A non-empty expanded view is still refused.
  CHECK_THROWS_AS(base.as_strided({3, 1}, {0, 1}, 0).add_(1.0), std::invalid_argument);
}

TEST_CASE("regression: dropout with p = 1 multiplies any dtype by zero; constant_pad_nd checks a value it uses") {
  // PyTorch's _dropout: p == 1 is input * zeros({}) whatever the dtype (only 0 < p < 1 draws).
  const Tensor counts = from_vector({3, 7}, {2}, TensorOptions{ScalarType::uint8, kSim});
  const Tensor dropped = dropout(counts, 1.0);
  CHECK(dropped.dtype() == ScalarType::uint8);
  CHECK(dropped.tolist() == std::vector<double>{0, 0});
  CHECK_THROWS_AS(dropout(counts, 0.5), std::invalid_argument);
  // constant_pad_nd only fills (and converts the value) when something is padded; cropping alone clones.
  const Tensor row = from_vector({1, 2, 3}, {3}, TensorOptions{ScalarType::uint8, kSim});
  CHECK(constant_pad_nd(row, {-1, 0}, -1.25).tolist() == std::vector<double>{2, 3});
  CHECK_THROWS_AS(constant_pad_nd(row, {1, 0}, -1.25), std::invalid_argument);
}

TEST_CASE("regression: cat and stack refuse operands on two devices, on meta as elsewhere") {
  const Tensor on_meta = zeros({2}, TensorOptions{ScalarType::float32, kMeta});
  const Tensor on_cpu = zeros({2}, TensorOptions{ScalarType::float32, kCpu});
  CHECK_THROWS_AS(cat({on_meta, on_cpu}), std::invalid_argument);
  CHECK_THROWS_AS(stack({on_meta, on_cpu}), std::invalid_argument);
  CHECK(cat({on_cpu}).device() == kCpu);  // a lone tensor is no mix
}

TEST_CASE("regression: softmax and log_softmax of a 0-d infinity or NaN are NaN") {
  // PyTorch runs a 0-d input as one slice of one element: exp(x - max) with x - max = inf - inf = NaN.
  for (const double x : {INFINITY, -INFINITY, NAN}) {
    const Tensor t = scalar_tensor(x, TensorOptions{ScalarType::float64, kSim});
    CHECK(std::isnan(softmax(t, 0).item()));
    CHECK(std::isnan(log_softmax(t, 0).item()));
  }
  const Tensor finite = scalar_tensor(-3.5, TensorOptions{ScalarType::float32, kSim});
  CHECK(softmax(finite, 0).item() == 1.0);
  CHECK(log_softmax(finite, -1).item() == 0.0);
}

TEST_CASE("regression: copy_ into a view with overlapping rows from the same storage is defined (no memcpy overlap)") {
  // ASan+UBSan in the op fuzzer's long run: memcpy-param-overlap in the cpu copy kernel. The destination's
  // rows overlap each other (strides {1, 1}), which PyTorch's overlap check calls too hard and allows; the
  // source is the same storage shifted by one, so a row's source and target overlap.
  for (Device device : {kCpu, kSim}) {
    const Tensor storage = arange(8.0, TensorOptions{ScalarType::float64, device});
    const Tensor dst = storage.as_strided({2, 2}, {1, 1}, 0);
    const Tensor src = storage.as_strided({2, 2}, {2, 1}, 1);
    dst.copy_(src);  // the values written are PyTorch's "undefined"; what lies past the view is untouched
    const std::vector<double> after = storage.tolist();
    CHECK(std::vector<double>(after.begin() + 3, after.end()) == std::vector<double>{3, 4, 5, 6, 7});
  }
}

TEST_CASE("regression: integer products, powers and sums that overflow wrap around (no signed overflow)") {
  // ASan+UBSan in the op fuzzer's long run: "signed integer overflow" in integer pow and in prod. PyTorch's
  // integer kernels wrap in two's complement; the reference here is computed in uint64.
  const Tensor big = from_vector({3037000500.0, 2.0}, {2}, TensorOptions{ScalarType::int64, kSim});
  const uint64_t square = uint64_t{3037000500} * uint64_t{3037000500};
  const double wrapped_square = static_cast<double>(static_cast<int64_t>(square));  // as tolist() reads it
  CHECK((big * big).tolist()[0] == wrapped_square);
  CHECK(pow(big, 2).tolist()[0] == wrapped_square);
  CHECK(pow(big, 64).tolist()[1] == 0.0);  // 2 ** 64 wraps to 0
  CHECK(prod(from_vector({4611686018427387904.0, 2.0}, {2}, TensorOptions{ScalarType::int64, kSim})).tolist()[0] ==
        static_cast<double>(std::numeric_limits<int64_t>::min()));  // 2^62 * 2 = 2^63 wraps to INT64_MIN
  const Tensor ints32 = from_vector({2147483647.0}, {1}, TensorOptions{ScalarType::int32, kSim});
  CHECK((ints32 + 1).tolist()[0] == -2147483648.0);
}
