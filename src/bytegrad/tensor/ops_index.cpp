// Indexing and joining: index_select, gather, cat, stack, constant_pad_nd. Each allocates its one contiguous output.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "bytegrad/core/checked_convert.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

void check_index_dtype(const char* op, const Tensor& index) {
  if (index.dtype() != ScalarType::int64 && index.dtype() != ScalarType::int32)
    throw std::invalid_argument(fmt::format("{}: the index {} must be int64 or int32", op, describe(index)));
}

}  // namespace

Tensor ops_detail::index_select_impl(const Tensor& x, int64_t dim, const Tensor& index, const char* op) {
  check_same_device(op, x, index);
  check_index_dtype(op, index);
  if (index.dim() > 1)
    throw std::invalid_argument(fmt::format("{}: the index {} must be 0-d or 1-d", op, describe(index)));
  dim = wrap_dim(dim, x.dim(), op);
  check_indices_in_range(op, index, dim, x.dim() > 0 ? x.sizes()[dim] : 1);
  Shape shape = x.sizes();
  if (x.dim() > 0) shape[dim] = index.numel();
  Tensor out = empty(shape, TensorOptions{x.dtype(), x.device()});
  backend_of(x).index_select(kv(out), kv(x), dim, kv(index.dim() == 0 ? index.view({1}) : index));
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  AllocationScope scope("index_select");
  OpRecording recording = begin_recording<OpId::index_select>(
      {x, index}, [&] { return op_args::Dim{wrap_dim(dim, x.dim(), "index_select")}; });
  Tensor out = without_recording([&] { return index_select_impl(x, dim, index); });
  recording.finish({out});
  return out;
}

namespace {

Tensor gather_compute(const Tensor& x, int64_t dim, const Tensor& index) {
  AllocationScope scope("gather");
  check_same_device("gather", x, index);
  check_index_dtype("gather", index);
  dim = wrap_dim(dim, x.dim(), "gather");
  if (index.dim() != x.dim())
    throw std::invalid_argument(
        fmt::format("gather: the index {} must have the rank of the input {}", describe(index), describe(x)));
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim && index.sizes()[d] > x.sizes()[d])
      throw std::invalid_argument(fmt::format("gather: the index {} is larger than the input {} at dimension {}",
                                              describe(index), describe(x), d));
  check_indices_in_range("gather", index, dim, x.dim() > 0 ? x.sizes()[dim] : 1);
  Tensor out = empty(index.sizes(), TensorOptions{x.dtype(), x.device()});
  backend_of(x).gather(kv(out), kv(x), dim, kv(index));
  return out;
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = without_recording([&] { return gather_compute(x, dim, index); });
  record_for_autograd({x}, [&] { return make_record<OpId::gather>({x, index}, {out}, {dim}); });
  return out;
}

namespace {

// PyTorch keeps a 1-d tensor of size 0 (once the only empty tensor there was) out of cat's shape checks,
// whatever the other inputs' shapes; it still takes part in the result's dtype.
bool is_legacy_empty(const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; }

// legacy_cat_wrap_dim: dim is wrapped by the first input that is not a legacy empty one (left as it is
// when every input is).
int64_t cat_wrap_dim(int64_t dim, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.defined() && !is_legacy_empty(t)) return wrap_dim(dim, t.dim(), "cat");
  return dim;
}

// PyTorch's cat: the result has result_type over every input (float32 with float64 gives float64) and the
// sizes of the first input that is not a legacy empty one, summed along dim (shape [0] when every input is
// one); it is one contiguous allocation, into which each input is copied (converting its dtype as it is read).
Tensor cat_compute(const std::vector<Tensor>& tensors, int64_t dim) {
  AllocationScope scope("cat");
  if (tensors.empty()) throw std::invalid_argument("cat: expected a non-empty list of tensors");
  ResultTypeState promotion;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined("cat", t);
    check_same_device("cat", tensors.front(), t);
    if (t.dim() == 0)
      throw std::invalid_argument(
          fmt::format("cat: zero-dimensional tensor (at position {}) cannot be concatenated", i));
    promotion.add(t.dtype(), true);
  }
  const ScalarType dtype = promotion.result();
  dim = cat_wrap_dim(dim, tensors);
  const Tensor* first = nullptr;
  Shape shape{0};
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t)) continue;
    if (first == nullptr) {
      first = &t;
      shape = t.sizes();
      shape[dim] = 0;
    }
    if (t.dim() != first->dim())
      throw std::invalid_argument(
          fmt::format("cat: tensors must have the same rank, got {} and {}", describe(*first), describe(t)));
    for (int64_t d = 0; d < t.dim(); ++d)
      if (d != dim && t.sizes()[d] != first->sizes()[d])
        throw std::invalid_argument(fmt::format("cat: sizes must match except in dimension {}, got {} and {}", dim,
                                                describe(*first), describe(t)));
    if (__builtin_add_overflow(shape[dim], t.sizes()[dim], &shape[dim]))
      throw std::length_error(
          fmt::format("cat: the sizes along dimension {} add up to more than int64 can count", dim));
  }
  Tensor out = empty(shape, TensorOptions{dtype, tensors.front().device()});
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t)) continue;
    backend_of(out).copy(kv(out.narrow(dim, offset, t.sizes()[dim])), kv(t));
    offset += t.sizes()[dim];
  }
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = without_recording([&] { return cat_compute(tensors, dim); });
  record_for_autograd(tensors, [&] { return make_record<OpId::cat>(tensors, {out}, {cat_wrap_dim(dim, tensors)}); });
  return out;
}

// The cat of the inputs unsqueezed at dim.
static Tensor stack_compute(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) throw std::invalid_argument("stack: expected a non-empty list of tensors");
  dim = wrap_dim(dim, tensors.front().dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  for (const Tensor& t : tensors) {
    check_defined("stack", t);
    if (t.sizes() != tensors.front().sizes())
      throw std::invalid_argument(fmt::format("stack: expects each tensor to be equal size, but got {} and {}",
                                              describe(tensors.front()), describe(t)));
    unsqueezed.push_back(t.unsqueeze(dim));
  }
  return cat(unsqueezed, dim);
}

// PyTorch: cat of the inputs unsqueezed at dim (views), one allocation; one StackBackward node.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  AllocationScope scope("stack");
  Tensor out = without_recording([&] { return stack_compute(tensors, dim); });
  record_for_autograd(tensors, [&] {
    return make_record<OpId::stack>(tensors, {out}, {wrap_dim(dim, tensors.front().dim() + 1, "stack")});
  });
  return out;
}

namespace {

// PyTorch's constant_pad_nd (PadNd.cpp): crop by the negative entries (narrow); if nothing is padded, clone
// the cropped view (preserve_format: its dimension order, dense); otherwise a new contiguous tensor of the
// padded sizes, filled with `value`, the cropped input copied into its middle. (PyTorch picks channels-last
// for a 4-d or 5-d input laid out exactly channels-last; bytegrad's inputs here never are, so contiguous.)
Tensor constant_pad_nd_compute(const Tensor& x, const Shape& pad) {
  const char* op = "constant_pad_nd";
  check_defined(op, x);
  if (pad.size() % 2 != 0)
    throw std::invalid_argument(fmt::format("{}: the pad list must have an even length, got {}", op, pad.size()));
  const int64_t padded_dims = static_cast<int64_t>(pad.size()) / 2;
  if (padded_dims > x.dim())
    throw std::invalid_argument(
        fmt::format("{}: the pad list of length {} pads more dimensions than {} has", op, pad.size(), describe(x)));
  Tensor cropped = x;
  Shape padded_shape = x.sizes();
  bool all_non_positive = true;
  for (int64_t i = 0; i < padded_dims; ++i) {
    const int64_t d = x.dim() - 1 - i, before = pad[2 * i], after = pad[2 * i + 1];
    const int64_t size = x.sizes()[d] + before + after;
    if (size < 0)
      throw std::invalid_argument(fmt::format("{}: padding ({}, {}) leaves dimension {} of {} with a negative size {}",
                                              op, before, after, d, describe(x), size));
    padded_shape[d] = size;
    if (before < 0) cropped = cropped.narrow(d, -before, cropped.sizes()[d] + before);
    if (after < 0) cropped = cropped.narrow(d, 0, cropped.sizes()[d] + after);
    all_non_positive = all_non_positive && before <= 0 && after <= 0;
  }
  const TensorOptions options{x.dtype(), x.device()};
  if (all_non_positive) {
    Tensor out = empty_strided(cropped.sizes(), elementwise_output_strides(cropped.sizes(), {&cropped}), options);
    backend_of(out).copy(kv(out), kv(cropped));
    return out;
  }
  return empty(padded_shape, options);  // filled and copied into by the caller
}

}  // namespace

Tensor constant_pad_nd(const Tensor& x, const Shape& pad, double value) {
  AllocationScope scope("constant_pad_nd");
  check_defined("constant_pad_nd", x);
  // The value is only converted (and checked) when something is padded: PyTorch fills the padded output with
  // it, and returns a clone of the cropped input, never reading it, when no pad entry is positive.
  const bool pads = std::any_of(pad.begin(), pad.end(), [](int64_t p) { return p > 0; });
  if (pads) value = checked_convert(value, x.dtype(), "constant_pad_nd");
  Tensor out = without_recording([&] {
    Tensor padded = constant_pad_nd_compute(x, pad);
    if (std::all_of(pad.begin(), pad.end(), [](int64_t p) { return p <= 0; })) return padded;  // the clone
    backend_of(padded).fill(kv(padded), value);
    Tensor middle = padded;
    Tensor source = x;
    const int64_t padded_dims = static_cast<int64_t>(pad.size()) / 2;
    for (int64_t i = 0; i < padded_dims; ++i) {
      const int64_t d = x.dim() - 1 - i, before = pad[2 * i], after = pad[2 * i + 1];
      if (before < 0) source = source.narrow(d, -before, source.sizes()[d] + before);
      if (after < 0) source = source.narrow(d, 0, source.sizes()[d] + after);
      middle = middle.narrow(d, std::max<int64_t>(before, 0), source.sizes()[d]);
    }
    if (middle.numel() > 0) backend_of(padded).copy(kv(middle), kv(source));
    return padded;
  });
  record_for_autograd({x}, [&] { return make_record<OpId::constant_pad_nd>({x}, {out}, {pad, value}); });
  return out;
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return bytegrad::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return bytegrad::gather(*this, dim, index); }

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  check_defined("repeat_interleave", x);
  if (repeats < 0)
    throw std::invalid_argument(fmt::format("repeat_interleave: repeats must be non-negative, got {}", repeats));
  Tensor input = dim ? x : x.flatten();
  const int64_t d = wrap_dim(dim.value_or(0), input.dim(), "repeat_interleave");
  input = input.unsqueeze(d + 1);
  Shape expanded = input.sizes();
  expanded[static_cast<size_t>(d + 1)] = repeats;
  return input.expand(expanded).clone().flatten(d, d + 1);
}

}  // namespace bytegrad
