// Tensor basics: metadata, views (which allocate nothing) and copies.
#include "bytegrad/tensor/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <stdexcept>

#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/pending_scores.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

// ------------------------------------------------------------------------------------------ metadata

Device TensorOptions::resolved_device() const { return device ? *device : default_device(); }

void Tensor::throw_undefined() { throw std::logic_error("use of an undefined tensor"); }

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t range = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  if (dim < -range || dim >= range)
    throw std::out_of_range(fmt::format("{}: dimension {} out of range for a {}-d tensor (expected [{}, {}])", op, dim,
                                        ndim, -range, range - 1));
  return dim < 0 ? dim + range : dim;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "Tensor(undefined)";
  return fmt::format("Tensor(shape={}, dtype={}, device={})", shape_str(t.sizes()), scalar_type_name(t.dtype()),
                     t.device().str());
}

namespace {
// size and stride index sizes()[dim]: a 0-d tensor has none, so it is refused as PyTorch refuses it
// (IndexError "Dimension specified as 0 but tensor has no dimensions"). The views' own checks are below.
void check_has_dimensions(const Tensor& t, int64_t dim, const char* op) {
  if (t.dim() == 0)
    throw std::out_of_range(fmt::format("{}: dimension specified as {} but tensor has no dimensions", op, dim));
}
}  // namespace

int64_t Tensor::size(int64_t dim) const {
  check_has_dimensions(*this, dim, "size");
  return sizes()[wrap_dim(dim, this->dim(), "size")];
}
int64_t Tensor::stride(int64_t dim) const {
  check_has_dimensions(*this, dim, "stride");
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}
int64_t Tensor::numel() const { return shape_numel(sizes()); }

namespace {

// Address of t's element 0 (nullptr on meta).
void* element_zero(const Tensor& t) {
  char* base = static_cast<char*>(t.storage()->data());
  if (!base) return nullptr;
  return base + t.storage_offset() * static_cast<int64_t>(t.element_size());
}

}  // namespace

void* Tensor::data_ptr() const {
  // Its caller reads or writes the memory outside the backend calls: scores left pending over it
  // (pending_scores.h) are written first.
  if (pending_scores_exist()) {
    const StridedView view = view_for_kernels();
    const std::array<const StridedView*, 1> views{&view};
    settle_pending_scores(views);
  }
  return element_zero(*this);
}

bool Tensor::is_contiguous() const { return view_for_kernels().is_contiguous(); }

StridedView Tensor::view_for_kernels() const {
  return StridedView{element_zero(*this), dtype(), sizes(), strides(), device()};
}

size_t storage_bytes_for(const char* op, const Shape& sizes, const Shape& strides, int64_t storage_offset,
                         size_t element_size) {
  if (sizes.size() != strides.size())
    throw std::invalid_argument(fmt::format("{}: {} sizes but {} strides", op, sizes.size(), strides.size()));
  for (int64_t stride : strides)
    if (stride < 0)
      throw std::invalid_argument(fmt::format("{}: negative strides are not supported, got strides {} (sizes {})", op,
                                              shape_str(strides), shape_str(sizes)));
  if (storage_offset < 0)
    throw std::invalid_argument(fmt::format("{}: negative storage offset {}", op, storage_offset));
  for (int64_t size : sizes)
    if (size == 0) return 0;
  // Elements up to and including the furthest one, then bytes; each step checked.
  int64_t elements = storage_offset;
  bool overflowed = __builtin_add_overflow(elements, int64_t{1}, &elements);
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t reach = 0;
    overflowed = overflowed || __builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
                 __builtin_add_overflow(elements, reach, &elements);
  }
  int64_t bytes = 0;
  overflowed = overflowed || __builtin_mul_overflow(elements, static_cast<int64_t>(element_size), &bytes);
  if (overflowed)
    throw std::length_error(
        fmt::format("{}: storage size calculation overflowed with sizes {}, strides {} and storage "
                    "offset {} (more than int64 can count in bytes)",
                    op, shape_str(sizes), shape_str(strides), storage_offset));
  return static_cast<size_t>(bytes);
}

// --------------------------------------------------------------------------------------------- views

namespace {

// A view of `base`: its storage and version counter, shared. allocate_shared is handed this maker, whose
// conversion builds the TensorImpl in its recycled block (no TensorImpl made elsewhere and moved there).
struct ViewOf {
  const TensorImpl& base;
  const Shape& sizes;
  const Shape& strides;
  int64_t offset;
  operator TensorImpl() const {  // NOLINT(google-explicit-constructor): converted where allocate_shared constructs
    return TensorImpl{.storage = base.storage,
                      .sizes = sizes,
                      .strides = strides,
                      .storage_offset = offset,
                      .dtype = base.dtype,
                      .version = base.version,
                      .is_view = true};
  }
};

std::shared_ptr<TensorImpl> view_impl(const TensorImpl& base, const Shape& sizes, const Shape& strides,
                                      int64_t offset) {
  return make_shared_recycled<TensorImpl>(ViewOf{base, sizes, strides, offset});
}

}  // namespace

Tensor Tensor::as_strided(const Shape& new_sizes, const Shape& new_strides, int64_t offset) const {
  if (new_sizes.size() != new_strides.size())
    throw std::invalid_argument(
        fmt::format("as_strided: {} sizes but {} strides", new_sizes.size(), new_strides.size()));
  check_shape("as_strided", new_sizes);
  // PyTorch's setStorage check: every element must lie inside the storage (on meta too: its storage has a
  // size, only no bytes behind it).
  const size_t needed = storage_bytes_for("as_strided", new_sizes, new_strides, offset, element_size());
  if (needed > storage()->nbytes())
    throw std::out_of_range(fmt::format(
        "as_strided: sizes {}, strides {}, storage offset {}, and itemsize {} requiring a storage size of {} are out "
        "of bounds for storage of size {}",
        shape_str(new_sizes), shape_str(new_strides), offset, element_size(), needed, storage()->nbytes()));
  // Views share the version counter: given here, so that no counter of its own is made and dropped.
  return Tensor(view_impl(impl(), new_sizes, new_strides, offset));
}

namespace {

// A view whose geometry the calling op derived from `base`'s own (a transpose, a slice, a select, ...):
// its sizes are non-negative with a countable product by construction, so as_strided's shape check, which
// is for sizes a user gives, is skipped. Its reach is checked against the storage still (a storage may
// have been resized to 0 under its tensors); when it does not fit, as_strided reports it.
Tensor derived_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  const TensorImpl& impl = base.impl();
  if (storage_bytes_for("as_strided", sizes, strides, offset, element_size(impl.dtype)) > impl.storage->nbytes())
    return base.as_strided(sizes, strides, offset);
  return Tensor(view_impl(impl, sizes, strides, offset));
}

}  // namespace

Tensor Tensor::alias() const {
  Tensor out = derived_view(*this, sizes(), strides(), storage_offset());
  out.impl().is_view = false;  // detach()'s kind: no base kept
  return out;
}

namespace {

// Reports a view (or copy) op to autograd once it is made (none saves an input: record_for_autograd);
// returns the output for tail calls.
template <OpId op>
Tensor recorded(const Tensor& input, Tensor output, ArgsOf<op> args = {}) {
  record_for_autograd({input}, [&] { return make_record<op>({input}, {output}, std::move(args)); });
  return output;
}

}  // namespace

namespace {

// Resolves one -1 in a requested shape; throws if the element counts disagree.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1;
  std::optional<size_t> infer_at;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at)
        throw std::invalid_argument(fmt::format("{}: only one dimension can be inferred in {}", op, shape_str(shape)));
      infer_at = i;
    } else if (out[i] < 0) {
      throw std::invalid_argument(fmt::format("{}: invalid shape dimension {} in {}", op, out[i], shape_str(shape)));
    } else if (__builtin_mul_overflow(known, out[i], &known)) {
      known = 0;  // only right when a later size is 0: checked after the loop
    }
  }
  Shape given;  // the sizes asked for, without the one to infer
  for (int64_t size : out)
    if (size != -1) given.push_back(size);
  if (!checked_numel(given))
    throw std::length_error(
        fmt::format("{}: the shape {} has more elements than int64 can count", op, shape_str(shape)));
  if (infer_at) {
    if (known == 0 || numel % known != 0)
      throw std::invalid_argument(
          fmt::format("{}: shape {} is invalid for input of size {}", op, shape_str(shape), numel));
    out[*infer_at] = numel / known;
  } else if (known != numel) {
    throw std::invalid_argument(
        fmt::format("{}: shape {} is invalid for input of size {}", op, shape_str(shape), numel));
  }
  return out;
}

// The strides that let old (sizes, strides) be read as new sizes without copying, if any (PyTorch's
// computeStride rule: each run of dimensions that is contiguous in memory may be re-split freely).
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& new_sizes) {
  if (old_sizes.empty()) return Shape(new_sizes.size(), 1);
  const int64_t numel = shape_numel(old_sizes);
  if (numel == 0 && old_sizes == new_sizes) return old_strides;
  Shape new_strides(new_sizes.size());
  if (numel == 0) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    bool chunk_ends = tensor_d == 0 ||
                      (old_sizes[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape new_sizes = infer_shape(shape, numel(), "view");
  auto new_strides = view_strides(sizes(), strides(), new_sizes);
  if (!new_strides)
    throw std::invalid_argument(fmt::format(
        "view: {} cannot be viewed as {}: its strides {} span non-contiguous memory; use reshape (which copies)",
        describe(*this), shape_str(new_sizes), shape_str(strides())));
  return recorded<OpId::view>(*this, derived_view(*this, new_sizes, *new_strides, storage_offset()));
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape new_sizes = infer_shape(shape, numel(), "reshape");
  if (auto new_strides = view_strides(sizes(), strides(), new_sizes))
    return recorded<OpId::view>(*this, derived_view(*this, new_sizes, *new_strides, storage_offset()));
  // PyTorch copies exactly when no view is possible (_unsafe_view of the copy: not a view)
  Tensor copy = clone().view(new_sizes);
  copy.impl().is_view = false;
  return copy;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  dim0 = wrap_dim(dim0, dim(), "transpose");
  dim1 = wrap_dim(dim1, dim(), "transpose");
  if (dim() == 0) return derived_view(*this, sizes(), strides(), storage_offset());
  Shape s = sizes(), st = strides();
  std::swap(s[dim0], s[dim1]);
  std::swap(st[dim0], st[dim1]);
  return recorded<OpId::transpose>(*this, derived_view(*this, s, st, storage_offset()), {dim0, dim1});
}

Tensor Tensor::t() const {
  if (dim() > 2)
    throw std::invalid_argument(fmt::format("t: expects a tensor with <= 2 dimensions, got {}", describe(*this)));
  if (dim() < 2) return recorded<OpId::view>(*this, derived_view(*this, sizes(), strides(), storage_offset()));
  Shape s = sizes(), st = strides();
  std::swap(s[0], s[1]);
  std::swap(st[0], st[1]);
  return recorded<OpId::t>(*this, derived_view(*this, s, st, storage_offset()));
}

Tensor Tensor::permute(const Shape& order) const {
  if (static_cast<int64_t>(order.size()) != dim())
    throw std::invalid_argument(fmt::format("permute: order {} does not match {}", shape_str(order), describe(*this)));
  Shape s(order.size()), st(order.size()), wrapped(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = wrap_dim(order[i], dim(), "permute");
    if (seen[d]) throw std::invalid_argument(fmt::format("permute: dimension {} repeats in {}", d, shape_str(order)));
    seen[d] = true;
    wrapped[i] = d;
    s[i] = sizes()[d];
    st[i] = strides()[d];
  }
  return recorded<OpId::permute>(*this, derived_view(*this, s, st, storage_offset()), {wrapped});
}

// wrap_dim accepts dimension 0 (and -1) of a 0-d tensor, as PyTorch's does; the views that index a size
// along that dimension refuse a 0-d tensor first, with PyTorch's words.
static void require_dimensions(const Tensor& t, const char* message) {
  if (t.dim() == 0) throw std::invalid_argument(fmt::format("{} ({})", message, describe(t)));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  if (dim() == 0) throw std::invalid_argument("select: cannot index a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = sizes()[d];
  if (index < -n || index >= n)
    throw std::out_of_range(fmt::format("select: index {} is out of bounds for dimension {} with size {} of {}", index,
                                        d, n, describe(*this)));
  if (index < 0) index += n;
  Shape s = sizes(), st = strides();
  int64_t offset = storage_offset() + index * st[d];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return recorded<OpId::select>(*this, derived_view(*this, s, st, offset), {d, index});
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  require_dimensions(*this, "slice() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) throw std::invalid_argument(fmt::format("slice: step must be positive, got {}", step));
  int64_t n = sizes()[d];
  auto clamp_index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  int64_t lo = start ? clamp_index(*start) : 0;
  int64_t hi = end ? clamp_index(*end) : n;
  hi = std::max(hi, lo);
  Shape s = sizes(), st = strides();
  int64_t offset = storage_offset() + lo * st[d];
  s[d] = (hi - lo + step - 1) / step;
  st[d] *= step;
  return recorded<OpId::slice>(*this, derived_view(*this, s, st, offset), {d, lo, hi, step});
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  require_dimensions(*this, "narrow() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = sizes()[d];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    throw std::out_of_range(
        fmt::format("narrow: start {} + length {} exceeds dimension {} of size {}", start, length, d, n));
  return slice(d, start, start + length);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  require_dimensions(*this, "split expects at least a 1-dimensional tensor");
  d = wrap_dim(d, dim(), "split");
  const int64_t n = sizes()[d];
  // As PyTorch: 0 only for a dimension of size 0 (one empty part).
  if (split_size < 0 || (split_size == 0 && n != 0))
    throw std::invalid_argument(
        fmt::format("split: split_size must be positive (0 only for a dimension of size 0), "
                    "got {} for a dimension of size {}",
                    split_size, n));
  std::vector<Tensor> parts;
  // Views made directly (as unbind's): the graph gets one SplitBackward0 for all of them, as PyTorch's,
  // whose backward concatenates the parts' gradients into one block.
  for (int64_t start = 0; start < n || (n == 0 && parts.empty()); start += split_size) {
    Shape s = sizes();
    s[d] = std::min(start + split_size, n) - start;
    parts.push_back(derived_view(*this, s, strides(), storage_offset() + start * strides()[d]));
  }
  record_for_autograd({*this}, [&] { return make_record<OpId::split>({*this}, parts, {split_size, d}); });
  return parts;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  require_dimensions(*this, "chunk expects at least a 1-dimensional tensor");
  d = wrap_dim(d, dim(), "chunk");
  if (chunks <= 0) throw std::invalid_argument(fmt::format("chunk: chunks must be positive, got {}", chunks));
  int64_t n = sizes()[d];
  return split(std::max<int64_t>((n + chunks - 1) / chunks, 1), d);
}

std::vector<Tensor> Tensor::unbind(int64_t d) const {
  if (dim() == 0)  // an IndexError in PyTorch
    throw std::out_of_range(
        fmt::format("unbind: Dimension specified as {} but tensor has no dimensions ({})", d, describe(*this)));
  d = wrap_dim(d, dim(), "unbind");
  std::vector<Tensor> parts;
  Shape s = sizes(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  for (int64_t i = 0; i < sizes()[d]; ++i)
    parts.push_back(derived_view(*this, s, st, storage_offset() + i * strides()[d]));
  record_for_autograd({*this}, [&] { return make_record<OpId::unbind>({*this}, parts, {d}); });
  return parts;
}

Tensor Tensor::expand(const Shape& shape) const {
  if (static_cast<int64_t>(shape.size()) < dim())
    throw std::invalid_argument(
        fmt::format("expand: the target shape {} has fewer dimensions than {}", shape_str(shape), describe(*this)));
  const int64_t lead = static_cast<int64_t>(shape.size()) - dim();
  Shape s(shape.size()), st(shape.size());
  // Right to left, as PyTorch's inferExpandGeometry: a new leading dimension of size 1 gets the stride
  // that would make it contiguous with the next one (this decides later contiguity checks); any
  // dimension that grows gets stride 0.
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    const int64_t d = i - lead;
    int64_t size = d >= 0 ? sizes()[d] : 1;
    int64_t stride = d >= 0 ? strides()[d] : (i + 1 < static_cast<int64_t>(shape.size()) ? s[i + 1] * st[i + 1] : 1);
    int64_t want = shape[i];
    if (want == -1) {
      if (d < 0)
        throw std::invalid_argument(
            fmt::format("expand: -1 is not allowed in a new leading dimension ({})", shape_str(shape)));
      want = size;
    }
    if (size != want) {
      if (size != 1)
        throw std::invalid_argument(
            fmt::format("expand: the size {} of dimension {} of {} cannot be expanded to {} (target {})", size, d,
                        describe(*this), want, shape_str(shape)));
      size = want;
      stride = 0;
    }
    s[i] = size;
    st[i] = stride;
  }
  check_shape("expand", s);
  return recorded<OpId::expand>(*this, derived_view(*this, s, st, storage_offset()));
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (sizes()[i] != 1) s.push_back(sizes()[i]), st.push_back(strides()[i]);
  return recorded<OpId::squeeze>(*this, derived_view(*this, s, st, storage_offset()));
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");  // first: a 0-d tensor takes 0 and -1 only, as in PyTorch
  if (dim() == 0) return recorded<OpId::view>(*this, alias());
  if (sizes()[d] != 1) return recorded<OpId::view>(*this, alias());
  Shape s = sizes(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return recorded<OpId::squeeze>(*this, derived_view(*this, s, st, storage_offset()));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = sizes(), st = strides();
  int64_t new_stride = d < dim() ? sizes()[d] * strides()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return recorded<OpId::unsqueeze>(*this, derived_view(*this, s, st, storage_offset()), {d});
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  if (start_dim > end_dim) throw std::invalid_argument("flatten: start_dim cannot come after end_dim");
  if (start_dim == end_dim) return recorded<OpId::view>(*this, alias());
  Shape s(sizes().begin(), sizes().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) merged *= sizes()[i];
  s.push_back(merged);
  s.insert(s.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(s);
}

// -------------------------------------------------------------------------------------------- copies

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out;
  {
    AllocationScope scope("clone");
    out = empty(sizes(), TensorOptions{dtype(), device()});
  }
  backend_for(device()).copy(out.view_for_kernels(), view_for_kernels());
  return recorded<OpId::clone>(*this, out);
}

void Tensor::record_stream(const Stream& stream) const {
  if (stream.device() != device())
    throw std::invalid_argument("record_stream: " + describe(*this) + " is on " + device().str() + ", the stream on " +
                                stream.device().str());
  if (StorageImpl* s = storage().get(); s && s->allocator() && s->data())
    s->allocator()->record_stream(s->data(), stream.id());
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_in_place_for_autograd(OpId::copy, {*this, src});
  // As PyTorch's copy_impl: a source that is this very data (same storage, offset, sizes, strides and dtype)
  // is nothing to copy; no kernel runs.
  if (src.defined() && shares_storage_with(src) && storage_offset() == src.storage_offset() && sizes() == src.sizes() &&
      strides() == src.strides() && dtype() == src.dtype()) {
    bump_version();
    record_for_autograd({*this, src}, [&] { return make_in_place_record<OpId::copy>({*this, src}); });
    return *this;
  }
  if (src.device() != device() && !is_meta() && !src.is_meta() && is_contiguous() && src.sizes() == sizes() &&
      src.dtype() == dtype()) {
    // The common cross-device case moves bytes through a host buffer straight into place.
    std::vector<char> host(src.nbytes());
    backend_for(src.device()).copy_to_host(std::as_writable_bytes(std::span(host)), src.view_for_kernels());
    backend_for(device()).copy_from_host(view_for_kernels(), std::as_bytes(std::span(host)));
    // A copy between host and device waits for the device's current stream, as PyTorch's blocking copy does.
    for (Device d : {src.device(), device()})
      if (d.uses_caching_allocator()) current_stream(d).synchronize();
    bump_version();
    return *this;
  }
  if (is_meta()) {              // no values to move; the copy only counts as a write
    (void)src.expand(sizes());  // but the source must broadcast to the destination, from any device
    // The meta backend moves nothing, but a copy PyTorch would run as a kernel is noted (device_backend.h).
    if (src.device() == device())
      backend_for(device()).copy(view_for_kernels(), src.expand(sizes()).view_for_kernels());
    bump_version();
    record_for_autograd({*this, src}, [&] { return make_in_place_record<OpId::copy>({*this, src}); });
    return *this;
  }
  if (src.is_meta())
    throw std::invalid_argument("copy_: " + describe(src) + " is a meta tensor: it has no values to copy into " +
                                describe(*this));
  // TensorIterator's overlap rules (a copy into meta is ignored before them, as PyTorch's), then the shape:
  // both before the cross-device staging allocates.
  ops_detail::check_write_overlap("copy_", *this, {&src});
  Tensor broadcast_source = src.expand(sizes());
  if (src.device() != device()) {
    // Cross-device into a non-contiguous target or with a dtype change: stage through the host in src's
    // dtype (a host buffer), then a device temporary in src's dtype, then the converting copy.
    std::vector<char> host(src.nbytes());
    backend_for(src.device()).copy_to_host(std::as_writable_bytes(std::span(host)), src.view_for_kernels());
    Tensor staged = empty(src.sizes(), TensorOptions{src.dtype(), device()});
    backend_for(device()).copy_from_host(staged.view_for_kernels(), std::as_bytes(std::span(host)));
    broadcast_source = staged.expand(sizes());
  }
  backend_for(device()).copy(view_for_kernels(), broadcast_source.view_for_kernels());
  bump_version();
  record_for_autograd({*this, src}, [&] { return make_in_place_record<OpId::copy>({*this, src}); });
  return *this;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = without_recording([&] {
    AllocationScope scope("to");
    Tensor moved = empty(sizes(), TensorOptions{dtype(), target});
    moved.copy_(*this);
    return moved;
  });
  return recorded<OpId::to_device>(*this, out);
}

namespace {

// Whether the cast of `self` into `out` is a float16 or bfloat16 gradient widened to float32 whose one reader,
// offered now, takes it deferred (tensor/gradient_reader.h); takes the offer when it is.
bool reader_takes_cast_deferred(const Tensor& self, const Tensor& out) {
  const bool widening = out.dtype() == ScalarType::float32 &&
                        (self.dtype() == ScalarType::bfloat16 || self.dtype() == ScalarType::float16);
  if (!widening || !self.is_contiguous() || !out.is_contiguous() || !defers_gradients_on(self.device())) return false;
  const std::optional<SoleReader> reader = take_sole_reader();
  return reader && reader->takes_deferred && reader->dtype == out.dtype() && reader->sizes == self.sizes();
}

}  // namespace

Tensor Tensor::to(ScalarType target) const {
  if (target == dtype()) return *this;
  // A gradient handed on packed (gradient_reader.h) is cast from what its first bytes hold: its own elements
  // were never written.
  const std::optional<PackedGradient> packed =
      defined() && is_contiguous() ? take_packed_gradient(storage().get()) : std::nullopt;
  // A deferred one (softmax's gradient) is cast as a step of its chain: handed on again where this cast's
  // reader takes it too, else written from the chain here.
  std::optional<DeferredGradient> deferred =
      defined() && !packed ? take_deferred_gradient(storage().get()) : std::nullopt;
  return ops_detail::to_dtype_written_by(*this, target, [&](const Tensor& out) {
    KernelBackend& backend = backend_for(device());
    if (deferred) {
      const std::optional<SoleReader> reader = take_sole_reader();
      if (reader && reader->takes_deferred && reader->dtype == target && reader->sizes == sizes() &&
          out.is_contiguous()) {
        backend.note_deferred_copy(out.view_for_kernels(), view_for_kernels());
        deferred->steps.push_back({out.view_for_kernels()});
        hand_deferred_gradient(out.storage().get(), std::move(*deferred));
      } else {
        write_deferred_gradient(*deferred, out.view_for_kernels(), std::nullopt, 0.0, std::nullopt, backend);
      }
    } else if (packed == PackedGradient::nll_rows) {
      backend.cast_nll_rows(out.view_for_kernels(), view_for_kernels());
    } else if (packed == PackedGradient::cast_values) {
      StridedView values = view_for_kernels();  // contiguous: the same strides, read as the target's elements
      values.dtype = target;
      // Where the cast's one reader takes a deferred gradient (a masked_fill's backward), the copy is left
      // to it (gradient_reader.h).
      const std::optional<SoleReader> reader = take_sole_reader();
      if (reader && reader->takes_deferred && reader->dtype == target && reader->sizes == sizes() &&
          out.is_contiguous() && defers_gradients_on(device())) {
        backend.note_deferred_copy(out.view_for_kernels(), view_for_kernels());
        hand_deferred_gradient(out.storage().get(), DeferredGradient{values, {{out.view_for_kernels()}}});
      } else {
        backend.copy(out.view_for_kernels(), values);
      }
    } else if (reader_takes_cast_deferred(*this, out)) {
      // A 16-bit gradient widened for a reader that takes it deferred (SoftmaxBackward0: autocast's copy of
      // softmax's output for a product, on its way back): out is left unwritten, and softmax's gradient reads
      // these elements as they are (gradient_reader.h); other readers write the cast out first.
      backend.note_deferred_copy(out.view_for_kernels(), view_for_kernels());
      hand_deferred_gradient(out.storage().get(), DeferredGradient{view_for_kernels(), {{out.view_for_kernels()}}});
    } else if (pending_scores_exist() && out.is_contiguous() &&
               write_pending_scores_with_copy(view_for_kernels(), out.view_for_kernels())) {
      // softmax's pending output (tensor/pending_scores.h: slow attention's probabilities under autocast)
      // and this copy, written by one kernel.
      backend.note_deferred_copy(out.view_for_kernels(), view_for_kernels());
    } else {
      backend.copy(out.view_for_kernels(), view_for_kernels());
    }
  });
}

namespace ops_detail {

Tensor to_dtype_written_by(const Tensor& self, ScalarType target, const std::function<void(const Tensor&)>& write) {
  // PyTorch's _to_copy keeps the layout of a dense tensor (preserve_format) and makes others contiguous.
  Tensor out;
  {
    AllocationScope scope("to");
    out = is_non_overlapping_and_dense(self)
              ? empty_strided(self.sizes(), self.strides(), TensorOptions{target, self.device()})
              : empty(self.sizes(), TensorOptions{target, self.device()});
  }
  write(out);
  return recorded<OpId::to_dtype>(self, out);
}

}  // namespace ops_detail

}  // namespace bytegrad
