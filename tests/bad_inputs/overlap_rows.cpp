// Bad-input rows: writes whose source overlaps their destination (PyTorch's internal and partial
// overlap rules), and view and shape errors. The runner checks that the fixture's values are untouched:
// each write is refused before anything is written.
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

namespace {

// The first 9 elements of a's storage as a dense 3x3 view (a itself is 3x4): x and x.t() cover the same
// bytes with different strides.
Tensor square_view_of(const Tensor& a) { return a.view({12}).slice(0, 0, 9).view({3, 3}); }

// PyTorch's two sentences (MemoryOverlap.cpp).
constexpr const char* kPartial =
    "some elements of the input tensor and the written-to tensor refer to a single memory location";
constexpr const char* kInternal = "more than one element of the written-to tensor refers to a single memory location";

}  // namespace

std::vector<Row> overlap_rows() {
  using E = Expect;
  return {
      // ------------------------------------------------------------ an input partly over the destination
      {"copy_ from its own transpose", E::invalid_argument, kPartial,
       [](Fixture& f) {
         const Tensor x = square_view_of(f.a);
         x.copy_(x.t());
       }},
      {"add_ of its own transpose", E::invalid_argument, kPartial,
       [](Fixture& f) {
         const Tensor x = square_view_of(f.a);
         x.add_(x.t());
       }},
      {"mul_ by its own transpose, as another view of the storage", E::invalid_argument, kPartial,
       [](Fixture& f) { square_view_of(f.a).mul_(square_view_of(f.a).t()); }},
      {"copy_ shifted by one element", E::invalid_argument, kPartial,
       [](Fixture& f) { f.a.view({12}).slice(0, 1, 12).copy_(f.a.view({12}).slice(0, 0, 11)); }},
      {"add_ shifted by one element", E::invalid_argument, kPartial,
       [](Fixture& f) { f.a.view({12}).slice(0, 1, 12).add_(f.a.view({12}).slice(0, 0, 11)); }},
      {"sub_ of the rows below", E::invalid_argument, kPartial,
       [](Fixture& f) { f.a.slice(0, 0, 2).sub_(f.a.slice(0, 1, 3)); }},
      {"add_ of its own first row, broadcast", E::invalid_argument, kPartial,
       [](Fixture& f) { f.a.add_(f.a.select(0, 0)); }},
      {"div_ by a slice two elements behind", E::invalid_argument, kPartial,
       [](Fixture& f) { f.a.view({12}).slice(0, 2, 12).div_(f.a.view({12}).slice(0, 0, 10)); }},
      {"lerp_ toward an overlapping end", E::invalid_argument, kPartial,
       [](Fixture& f) { lerp_(f.a.slice(0, 1, 3), f.a.slice(0, 0, 2), 0.5); }},
      {"addcmul_ with an overlapping factor", E::invalid_argument, kPartial,
       [](Fixture& f) { addcmul_(f.a.slice(0, 1, 3), f.leaf.detach().slice(0, 0, 2), f.a.slice(0, 0, 2), 0.5); }},
      {"addcdiv_ with an overlapping divisor", E::invalid_argument, kPartial,
       [](Fixture& f) { addcdiv_(f.a.slice(0, 0, 2), f.leaf.detach().slice(0, 0, 2), f.a.slice(0, 1, 3), 0.5); }},
      {"maximum_ (out=self) with an overlapping other", E::invalid_argument, kPartial,
       [](Fixture& f) { maximum_(f.a.view({12}).slice(0, 1, 12), f.a.view({12}).slice(0, 0, 11)); }},
      {"masked_fill_ with a mask that overlaps the target", E::invalid_argument, kPartial,
       [](Fixture& f) { f.flags.slice(0, 1, 4).masked_fill_(f.flags.slice(0, 0, 3), 1.0); }},
      // ------------------------------------------------------------ a destination that shares elements
      {"mul_ into an expanded view", E::invalid_argument, kInternal,
       [](Fixture& f) {
         f.a.select(0, 0).expand({3, 4}).mul_(2.0);
       }},
      {"copy_ into an expanded view", E::invalid_argument, kInternal,
       [](Fixture& f) {
         f.a.select(0, 0).expand({3, 4}).copy_(f.leaf.detach());
       }},
      {"sqrt_ into an expanded view", E::invalid_argument, "dimension 0 of size 3 has stride 0",
       [](Fixture& f) {
         sqrt_(f.a.select(1, 0).unsqueeze(0).expand({3, 3}));
       }},
      {"relu_ into a stride-0 as_strided view", E::invalid_argument, kInternal,
       [](Fixture& f) {
         f.a.as_strided({2, 2}, {0, 1}, 0).relu_();
       }},
      {"addcmul_ into an expanded view", E::invalid_argument, kInternal,
       [](Fixture& f) {
         addcmul_(f.a.select(0, 0).expand({3, 4}), f.leaf.detach(), f.leaf.detach());
       }},
      {"add_ of itself into an expanded view", E::invalid_argument, kInternal,
       [](Fixture& f) {
         const Tensor e = f.a.select(0, 0).expand({3, 4});
         e.add_(e);
       }},
      // ----------------------------------------------------------------------------- views and shapes
      {"unbind of a 0-d tensor", E::out_of_range, "Dimension specified as 0 but tensor has no dimensions",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).unbind(0); }},
      {"unbind(-1) of a 0-d tensor", E::out_of_range, "tensor has no dimensions",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).unbind(-1); }},
      {"split of a 0-d tensor", E::invalid_argument, "split expects at least a 1-dimensional tensor",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).split(1, 0); }},
      {"chunk of a 0-d tensor", E::invalid_argument, "chunk expects at least a 1-dimensional tensor",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).chunk(2, 0); }},
      {"narrow of a 0-d tensor", E::invalid_argument, "narrow() cannot be applied to a 0-dim tensor",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).narrow(0, 0, 1); }},
      {"slice of a 0-d tensor", E::invalid_argument, "slice() cannot be applied to a 0-dim tensor",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).slice(0, 0, 1); }},
      {"cat with a 0-d tensor after a valid one", E::invalid_argument, "zero-dimensional tensor (at position 1)",
       [](Fixture& f) {
         cat({f.a, f.a.select(0, 0).select(0, 0)}, 0);
       }},
      {"cat of a legacy empty tensor and a mismatched one", E::invalid_argument,
       "sizes must match except in dimension 0",
       [](Fixture& f) {
         cat({f.a, f.a.view({12}).slice(0, 0, 0), f.b}, 0);
       }},
      {"linear with a 0-d input", E::invalid_argument, "need to be at least 1D, but they are 0D and 2D",
       [](Fixture& f) { linear(f.a.select(0, 0).select(0, 0), f.a); }},
      {"linear with a 1-d weight and a bias (addmm wants a matrix)", E::invalid_argument, "2-d",
       [](Fixture& f) { linear(f.a, f.a.select(0, 0), f.a.select(0, 0).select(0, 0)); }},
      {"linear with a 3-d weight", E::invalid_argument, "must be 1-d or 2-d",
       [](Fixture& f) {
         linear(f.a, f.a.view({3, 2, 2}));
       }},
  };
}

}  // namespace bytegrad::bad_inputs
