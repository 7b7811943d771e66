// Bad input to the tensor layer (issue #9): shapes whose element count or byte size overflows int64,
// as_strided views reaching past their storage, and indices outside [0, size). Each is refused with a
// typed exception whose message names the problem, before anything is allocated or written.
#include <stdexcept>

#include "helpers.h"
#include "bytegrad/tensor/ops_support.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// The device's allocator figures (the host allocator's for cpu), to check that a refused call left them as
// they were.
struct Figures {
  int64_t allocated = 0, reserved = 0;
  explicit Figures(Device d) {
    if (d.uses_caching_allocator()) {
      allocated = caching_allocator(d).memory_allocated();
      reserved = caching_allocator(d).memory_reserved();
    } else {
      allocated = reserved = host_allocator().memory_allocated();
    }
  }
  bool operator==(const Figures&) const = default;
};

}  // namespace

TEST_CASE("shapes whose element count overflows int64 are refused, naming the shape") {
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    const Figures before(d);
    std::string message = error_of([&] { empty({int64_t{1} << 32, int64_t{1} << 32}, bytegrad::device(d)); });
    CAPTURE(message);
    CHECK(contains(message, "empty: the shape [4294967296, 4294967296] has 18446744073709551616 (2^64) elements"));
    CHECK(contains(message, "more than int64 can count"));
    CHECK_THROWS_AS(empty({int64_t{1} << 32, int64_t{1} << 32}, bytegrad::device(d)), std::length_error);
    CHECK_THROWS_AS(empty({(int64_t{1} << 62) + 1, 16}, bytegrad::device(d)), std::length_error);
    CHECK(contains(error_of([&] {
                     zeros({(int64_t{1} << 62) + 1, 16}, bytegrad::device(d));
                   }),
                   "[4611686018427387905, 16]"));
    // Elements that fit but bytes that do not: 2^61 float32 elements are 2^63 bytes.
    message = error_of([&] { empty({int64_t{1} << 61}, bytegrad::device(d)); });
    CHECK(contains(message, "overflowed"));
    CHECK_THROWS_AS(empty({int64_t{1} << 61}, bytegrad::device(d)), std::length_error);
    CHECK_THROWS_AS(empty_strided({2, 2}, {int64_t{1} << 62, 1}, bytegrad::device(d)), std::length_error);
    // A zero anywhere makes the count 0, whatever the other sizes (as c10's safe_multiply_u64).
    CHECK(empty({int64_t{1} << 40, int64_t{1} << 40, 0}, bytegrad::device(d)).numel() == 0);
    CHECK(Figures(d) == before);
  }
}

TEST_CASE("negative sizes and strides are refused, naming the shape") {
  const Figures before(kSim);
  CHECK_THROWS_WITH_AS(empty({2, -3}, bytegrad::device(kSim)),
                       doctest::Contains("negative dimension -3 in shape [2, -3]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(empty_strided({2, 3}, {-3, 1}, bytegrad::device(kSim)), doctest::Contains("negative strides"),
                       std::invalid_argument);
  CHECK(Figures(kSim) == before);
}

TEST_CASE("views whose shape would overflow int64 are refused, the tensor unchanged") {
  const Tensor x = from_vector({1, 2, 3, 4}, {4}, bytegrad::device(kSim));
  const Tensor one = x.narrow(0, 0, 1);
  const Figures before(kSim);
  CHECK_THROWS_WITH_AS(one.expand({int64_t{1} << 32, int64_t{1} << 32}),
                       doctest::Contains("expand: the shape [4294967296, 4294967296]"), std::length_error);
  CHECK_THROWS_WITH_AS(x.view({int64_t{1} << 32, int64_t{1} << 32, -1}),
                       doctest::Contains("view: the shape [4294967296, 4294967296, -1]"), std::length_error);
  CHECK_THROWS_AS(x.reshape({int64_t{1} << 62, 16}), std::length_error);
  CHECK_THROWS_AS(arange(0.0, 1e30, 1.0, bytegrad::device(kSim)), std::length_error);
  CHECK(Figures(kSim) == before);
  CHECK(x.tolist() == std::vector<double>{1, 2, 3, 4});
  CHECK(x.sizes() == Shape{4});
}

TEST_CASE("as_strided past the end of the storage is refused, as PyTorch's setStorage check") {
  for (Device d : {kCpu, kSim, kMeta}) {
    CAPTURE(d.str());
    const Tensor x = zeros({2, 3}, bytegrad::device(d));  // 24 bytes
    const Tensor neighbour = ones({2, 3}, bytegrad::device(d));
    const Figures before(d);
    std::string message = error_of([&] { x.as_strided({2, 4}, {4, 1}, 0); });
    CHECK(contains(message,
                   "as_strided: sizes [2, 4], strides [4, 1], storage offset 0, and itemsize 4 requiring a "
                   "storage size of 32 are out of bounds for storage of size 24"));
    CHECK_THROWS_AS(x.as_strided({2, 4}, {4, 1}, 0), std::out_of_range);
    CHECK_THROWS_AS(x.as_strided({1}, {1}, 6), std::out_of_range);                       // one past the end
    CHECK_THROWS_AS(x.as_strided({2}, {1}, int64_t{1} << 40), std::out_of_range);        // far away
    CHECK_THROWS_AS(x.as_strided({2}, {1}, (int64_t{1} << 62) + 5), std::length_error);  // bytes overflow
    CHECK_THROWS_WITH_AS(x.as_strided({3}, {-1}, 2), doctest::Contains("negative strides"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(x.as_strided({3}, {1}, -1), doctest::Contains("negative storage offset"),
                         std::invalid_argument);
    // In bounds, including the last element and an empty view anywhere.
    CHECK(x.as_strided({2, 2}, {3, 1}, 1).numel() == 4);
    CHECK(x.as_strided({1}, {1}, 5).numel() == 1);
    CHECK(x.as_strided({0}, {1}, 100).numel() == 0);
    CHECK(Figures(d) == before);
    if (d != kMeta) {
      // The write that used to land in the neighbour (ASan: heap-buffer-overflow in cpu_copy.cpp) is refused.
      CHECK_THROWS_AS(x.as_strided({4, 3}, {3, 1}, 0).copy_(full({4, 3}, 7.0, bytegrad::device(d))), std::out_of_range);
      CHECK(x.tolist() == std::vector<double>(6, 0.0));
      CHECK(neighbour.tolist() == std::vector<double>(6, 1.0));
    }
  }
}

TEST_CASE("index_select and gather refuse negative and too-large indices before computing") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    const Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, bytegrad::device(d));
    const auto idx = [&](std::vector<double> v) {
      const int64_t n = static_cast<int64_t>(v.size());
      return from_vector(v, {n}, TensorOptions{ScalarType::int64, d});
    };
    const Tensor negative = idx({0, -1}), too_large = idx({3});
    const Tensor negative32 = from_vector({-2}, {1}, TensorOptions{ScalarType::int32, d});
    const Tensor gather_index = from_vector({0, 1, -1, 0, 1, 1}, {3, 2}, TensorOptions{ScalarType::int64, d});
    const Tensor gather_too_large = from_vector({3, 0}, {1, 2}, TensorOptions{ScalarType::int64, d});
    const Figures before(d);
    std::string message = error_of([&] { index_select(x, 0, negative); });
    CHECK(contains(message, "index_select: index -1 is out of range for dimension 0 with size 3"));
    CHECK(contains(message, "valid indices are 0 to 2"));
    CHECK(contains(message, "index out of range in self"));
    CHECK_THROWS_AS(index_select(x, 0, negative), std::out_of_range);
    CHECK_THROWS_AS(x.index_select(0, too_large), std::out_of_range);
    CHECK_THROWS_WITH_AS(index_select(x, 1, negative32), doctest::Contains("index -2 is out of range for dimension 1"),
                         std::out_of_range);

    message = error_of([&] { gather(x, 1, gather_index); });
    CHECK(contains(message, "gather: index -1 is out of range for dimension 1 with size 2"));
    CHECK_THROWS_AS(gather(x, 1, gather_index), std::out_of_range);
    CHECK_THROWS_AS(gather(x, 0, gather_too_large), std::out_of_range);
    CHECK(Figures(d) == before);
    CHECK(x.tolist() == std::vector<double>{1, 2, 3, 4, 5, 6});
    CHECK(negative.tolist() == std::vector<double>{0, -1});
    // In range still works.
    CHECK(index_select(x, 0, idx({2, 0})).tolist() == std::vector<double>{5, 6, 1, 2});
  }
  // meta has no index values to check: shapes only.
  const Tensor m = zeros({3, 2}, bytegrad::device(kMeta));
  CHECK(index_select(m, 0, zeros({4}, TensorOptions{ScalarType::int64, kMeta})).sizes() == Shape{4, 2});
}
