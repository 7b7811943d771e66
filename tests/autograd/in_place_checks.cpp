// In-place ops that autograd refuses are refused before they write (issue #9): a leaf that requires grad,
// a view of one (PyTorch's check_inplace), a row without a formula while a graph is needed. fill_ and
// zero_ have PyTorch's zero gradient (FillBackward0, ZeroBackward0).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const char* const kViewOfLeaf = "a view of a leaf Variable that requires grad is being used in an in-place operation.";

struct Figures {
  int64_t allocated, reserved;
  Figures()
      : allocated(caching_allocator(kSim).memory_allocated()), reserved(caching_allocator(kSim).memory_reserved()) {}
  bool operator==(const Figures&) const = default;
};

}  // namespace

TEST_CASE("an in-place op through a view of a leaf that requires grad is refused; the leaf is unchanged") {
  const Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device(kSim)).requires_grad_();
  const std::vector<double> values = x.tolist();
  const Tensor row = x.select(0, 0);
  const Tensor column = x.t().select(0, 1);  // a view of a view: its base is still x
  const Tensor other = ones({3}, device(kSim));
  const uint64_t version = x.version();
  const Figures before;

  std::string message = error_of([&] { row.mul_(3.0); });
  CHECK(contains(message, kViewOfLeaf));
  CHECK(contains(message, "mul_scalar_"));
  CHECK_THROWS_AS(row.mul_(3.0), std::runtime_error);
  CHECK_THROWS_WITH_AS(row.add_(other), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(row.copy_(other), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(row.zero_(), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(row.fill_(7.0), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(row.relu_(), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(sqrt_(row), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(lerp_(row, other, 0.5), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(column.neg_(), doctest::Contains(kViewOfLeaf), std::runtime_error);
  CHECK_THROWS_WITH_AS(x.narrow(1, 0, 2).div_(2.0), doctest::Contains(kViewOfLeaf), std::runtime_error);

  CHECK(x.tolist() == values);
  CHECK(x.version() == version);
  CHECK(x.is_leaf());
  CHECK(Figures() == before);

  // The leaf's gradient is still the one of the unchanged leaf.
  sum(x * x).backward();
  CHECK(x.grad().tolist() == std::vector<double>{2, 4, 6, 8, 10, 12});

  // Allowed where PyTorch allows it: under no_grad, and through a view of a non-leaf.
  {
    NoGradGuard no_grad;
    row.mul_(3.0);
  }
  CHECK(x.tolist() == std::vector<double>{3, 6, 9, 4, 5, 6});
  const Tensor h = x * 1.0;
  h.select(0, 1).mul_(2.0);
  CHECK(h.tolist() == std::vector<double>{3, 6, 9, 8, 10, 12});
}

TEST_CASE("an in-place op on a leaf that requires grad is refused before it writes") {
  const Tensor w = from_vector({-1, 2, -3}, {3}, device(kSim)).requires_grad_();
  const uint64_t version = w.version();
  const Figures before;
  CHECK_THROWS_WITH_AS(w.relu_(), doctest::Contains("leaf tensor that requires grad"), std::runtime_error);
  CHECK_THROWS_WITH_AS(w.mul_(0.0), doctest::Contains("leaf tensor that requires grad"), std::runtime_error);
  CHECK_THROWS_WITH_AS(w.zero_(), doctest::Contains("leaf tensor that requires grad"), std::runtime_error);
  CHECK_THROWS_WITH_AS(w.copy_(zeros({3}, device(kSim))), doctest::Contains("leaf tensor that requires grad"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(w.masked_fill_(ones({3}, device(kSim)) > 0.0, 5.0),
                       doctest::Contains("leaf tensor that requires grad"), std::runtime_error);
  CHECK(w.tolist() == std::vector<double>{-1, 2, -3});
  CHECK(w.version() == version);
  CHECK(Figures() == before);
}

TEST_CASE("an in-place op whose row has no formula is refused before it writes when a graph is needed") {
  const Tensor w = from_vector({1, 2, 3}, {3}, device(kSim)).requires_grad_();
  const Tensor h = w * 2.0;
  const uint64_t version = h.version();
  const Figures before;
  const std::string message = error_of([&] { h.copy_(zeros({3}, device(kSim))); });
  CHECK(contains(message, "copy_ is not differentiable"));
  CHECK(contains(message, "core/op_table.h"));
  CHECK_THROWS_AS(h.copy_(zeros({3}, device(kSim))), std::logic_error);
  CHECK(h.tolist() == std::vector<double>{2, 4, 6});
  CHECK(h.version() == version);
  CHECK(h.grad_fn_name() == "MulBackward1");  // x * scalar, as PyTorch
  CHECK(Figures() == before);
}

TEST_CASE("fill_ and zero_ on a non-leaf or a view of one record FillBackward0 and ZeroBackward0: a zero gradient") {
  fresh_sim();
  {
    const Tensor w = from_vector({1, 2, 3, 4}, {2, 2}, device(kSim)).requires_grad_();
    Tensor h = w * 2.0;
    h.fill_(5.0);
    CHECK(h.grad_fn_name() == "FillBackward0");
    CHECK(h.tolist() == std::vector<double>(4, 5.0));
    sum(h).backward();
    CHECK(w.grad().tolist() == std::vector<double>(4, 0.0));

    Tensor z = w * 3.0;
    z.zero_();
    CHECK(z.grad_fn_name() == "ZeroBackward0");
    (z + w).sum().backward();  // the gradient reaches w only through the addition
    CHECK(w.grad().tolist() == std::vector<double>(4, 1.0));

    // Through a view of a non-leaf: the view's history is rebased; the rows not written keep their values.
    Tensor g = w * 1.0;
    Tensor row = g.select(0, 0);
    row.zero_();
    CHECK(row.grad_fn_name() == "ZeroBackward0");
    CHECK(g.tolist() == std::vector<double>{0, 0, 3, 4});
    w.set_grad(Tensor());
    sum(row * 1.0).backward();
    CHECK(w.grad().tolist() == std::vector<double>(4, 0.0));
  }
  CHECK(allocated() == 0);
}
