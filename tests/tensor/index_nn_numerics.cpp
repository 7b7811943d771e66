// index_select, gather, embedding, cat, stack and dropout.
#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("index_select, gather and embedding pick the right elements") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    const Tensor x = arange(12.0, bytegrad::device(device)).view({3, 4});  // float32: 12.0
    const Tensor rows = tensor({2, 0, 2}, TensorOptions{ScalarType::int64, device});
    CHECK(index_select(x, 0, rows).tolist() == std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
    CHECK(x.index_select(1, tensor({3, 1}, TensorOptions{ScalarType::int32, device})).tolist() ==
          std::vector<double>{3, 1, 7, 5, 11, 9});
    CHECK(index_select(x.t(), 0, tensor({1}, TensorOptions{ScalarType::int64, device})).tolist() ==
          std::vector<double>{1, 5, 9});
    const Tensor picks = tensor({{0, 3}, {1, 1}, {2, 0}}, TensorOptions{ScalarType::int64, device});
    CHECK(gather(x, 1, picks).tolist() == std::vector<double>{0, 3, 5, 5, 10, 8});
    CHECK(gather(x, 0, tensor({{2, 1, 0, 0}}, TensorOptions{ScalarType::int64, device})).tolist() ==
          std::vector<double>{8, 5, 2, 3});
    const Tensor ids = tensor({{1, 2}, {0, 1}}, TensorOptions{ScalarType::int64, device});
    const Tensor looked_up = embedding(x, ids);
    CHECK(looked_up.sizes() == Shape{2, 2, 4});
    CHECK(looked_up.tolist() == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7});
    CHECK_THROWS_AS(index_select(x, 0, tensor({3}, TensorOptions{ScalarType::int64, device})), std::out_of_range);
  }
}

TEST_CASE("cat and stack join along a dimension") {
  const Tensor a = tensor({{1, 2}, {3, 4}}, bytegrad::device(kSim));
  const Tensor b = tensor({{5, 6}}, bytegrad::device(kSim));
  CHECK(cat({a, b}).tolist() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(cat({a, a.t()}, 1).tolist() == std::vector<double>{1, 2, 1, 3, 3, 4, 2, 4});
  const Tensor s = stack({a, a * 10}, 1);
  CHECK(s.sizes() == Shape{2, 2, 2});
  CHECK(s.tolist() == std::vector<double>{1, 2, 10, 20, 3, 4, 30, 40});
  CHECK(stack({a, a}).sizes() == Shape{2, 2, 2});
}

TEST_CASE("dropout zeroes elements, scales the rest by 1/(1-p), and is seeded") {
  manual_seed(30);
  const Tensor x = randn({50, 40}, bytegrad::device(kSim));
  manual_seed(7);
  const DropoutResult first = dropout_with_mask(x, 0.25);
  manual_seed(7);
  const DropoutResult again = dropout_with_mask(x, 0.25);
  CHECK(first.mask.dtype() == ScalarType::bool_);
  CHECK(first.mask.tolist() == again.mask.tolist());
  const auto out = first.output.tolist(), in = x.tolist(), kept = first.mask.tolist();
  int64_t kept_count = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (kept[i] != 0) {
      ++kept_count;
      CHECK(out[i] == doctest::Approx(in[i] / 0.75).epsilon(1e-6));
    } else {
      CHECK(out[i] == 0);
    }
  }
  CHECK(kept_count > 1300);  // about 1500 of 2000 kept
  CHECK(kept_count < 1700);
  // Eval mode (and p == 0) return the input itself.
  CHECK(dropout(x, 0.25, /*train=*/false).shares_storage_with(x));
  CHECK(dropout(x, 0.0).shares_storage_with(x));
  CHECK(dropout(x, 1.0).tolist() == std::vector<double>(2000, 0.0));
}
