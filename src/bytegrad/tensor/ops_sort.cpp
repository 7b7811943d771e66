// Ops along one dimension: cumsum, flip, sort, topk, and one_hot (composite: zeros and a scatter of 1).
// Each allocates what PyTorch's CUDA op allocates, in its order (ops.h lists them).
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <vector>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

bool is_integral_or_bool(ScalarType t) { return is_integral(t, true); }

// The temporary storage CUB's DeviceScan::InclusiveScan asks for, which PyTorch's scan_dim takes from the
// caching allocator when every element lies along the scanned dimension (aten's cub::inclusive_scan). CUB
// sizes it as one tile-status word per tile plus 32 of padding, rounded up to 256 bytes, plus 255 bytes of
// alignment slack (AliasTemporaries). A tile is 128 threads times 15 items scaled by the element size
// (Policy600's memory-bound scaling; at most 30). The recording (H200, PyTorch 2.11: 1023 B for 7 floats,
// 5375 B for 2^20) shows one more 256-byte-aligned part beside the tile states.
int64_t cub_scan_temporary_bytes(int64_t count, ScalarType dtype) {
  const auto element = static_cast<int64_t>(element_size(dtype));
  const int64_t items_per_thread = std::max<int64_t>(1, std::min<int64_t>(int64_t{15} * 4 / element, 30));
  const int64_t tile = 128 * items_per_thread;
  const int64_t tiles = (count + tile - 1) / tile;
  const int64_t status_word = element <= 2 ? 4 : element == 4 ? 8 : 16;  // the value and its status, together
  const int64_t status_bytes = (tiles + 32) * status_word;
  return (status_bytes + 255) / 256 * 256 + 256 + 255;
}

Tensor cumsum_compute(const Tensor& x, int64_t dim) {
  AllocationScope scope("cumsum");
  const ScalarType dtype = is_integral_or_bool(x.dtype()) ? ScalarType::int64 : x.dtype();
  Tensor out = empty(x.sizes(), TensorOptions{dtype, x.device()});
  if (x.dim() == 0) {  // PyTorch: result.fill_(self)
    backend_of(x).copy(kv(out), kv(x));
    return out;
  }
  if (x.numel() == 0) return out;
  const Tensor input = x.to(dtype);  // impl_func_cum_ops: self.to(result's dtype), a copy for integers
  if (x.numel() == x.sizes()[dim]) {
    // CUB's scan and its temporary storage, freed when it returns.
    const Tensor scratch =
        empty({cub_scan_temporary_bytes(x.numel(), dtype)}, TensorOptions{ScalarType::uint8, x.device()});
    backend_of(x).cumsum(kv(out), kv(input), dim);
    return out;
  }
  backend_of(x).cumsum(kv(out), kv(input), dim);
  return out;
}

void check_sortable(const char* op, const Tensor& x, OpId id) {
  check_defined(op, x);
  check_dtype_rule(op, id, x);
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_defined("cumsum", x);
  const int64_t wrapped = wrap_dim(dim, x.dim(), "cumsum");
  return compute_recorded<OpId::cumsum>({x}, {wrapped}, [&] { return cumsum_compute(x, wrapped); });
}

Tensor flip(const Tensor& x, int64_t dim) {
  check_defined("flip", x);
  const int64_t wrapped = wrap_dim(dim, x.dim(), "flip");
  Tensor out = without_recording([&] {
    AllocationScope scope("flip");
    Tensor result = empty(x.sizes(), TensorOptions{x.dtype(), x.device()});
    StridedView reversed = kv(x);
    if (x.dim() > 0 && x.sizes()[wrapped] > 1) {
      const auto d = static_cast<size_t>(wrapped);
      // The last element along dim first, walking backwards: the view PyTorch's flip kernel reads.
      reversed.data = static_cast<char*>(reversed.data) +
                      (reversed.sizes[d] - 1) * reversed.strides[d] * static_cast<int64_t>(element_size(x.dtype()));
      reversed.strides[d] = -reversed.strides[d];
    }
    backend_of(x).copy(kv(result), reversed);
    return result;
  });
  record_for_autograd({x}, [&] { return make_record<OpId::flip>({x}, {out}, {wrapped}); });
  return out;
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  check_sortable("sort", x, OpId::sort);
  const int64_t wrapped = wrap_dim(dim, x.dim(), "sort");
  OpRecording recording = begin_recording<OpId::sort>({x}, {wrapped, descending});
  auto [values, indices] = without_recording([&] {
    AllocationScope scope("sort");
    Tensor v = empty(x.sizes(), TensorOptions{x.dtype(), x.device()});
    Tensor i = empty(x.sizes(), TensorOptions{ScalarType::int64, x.device()});
    if (x.numel() > 0) {
      // PyTorch fills the indices from an int64 arange of the sorted dimension's length, copied in and
      // freed before the sort returns (recorded on the H200: [1024, 1000] along 1: 1000 * 8 = 8000 B).
      if (x.dim() > 0) {
        const Tensor positions = empty({x.sizes()[wrapped]}, TensorOptions{ScalarType::int64, x.device()});
      }
      backend_of(x).sort(kv(v), kv(i), kv(x), wrapped, descending);
    }
    return std::pair<Tensor, Tensor>{v, i};
  });
  recording.finish({values, indices});
  return {values, indices};
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_sortable("topk", x, OpId::topk);
  const int64_t wrapped = wrap_dim(dim, x.dim(), "topk");
  const int64_t length = x.dim() == 0 ? 1 : x.sizes()[wrapped];
  if (k < 0 || k > length)
    throw std::invalid_argument(fmt::format("topk: k ({}) must be between 0 and the size of dimension {} of {} ({})", k,
                                            wrapped, describe(x), length));
  OpRecording recording = begin_recording<OpId::topk>({x}, {k, wrapped, largest, sorted});
  auto [values, indices] = without_recording([&] {
    AllocationScope scope("topk");
    Shape shape = x.sizes();
    if (x.dim() > 0) shape[wrapped] = k;
    Tensor v = empty(shape, TensorOptions{x.dtype(), x.device()});
    Tensor i = empty(shape, TensorOptions{ScalarType::int64, x.device()});
    if (v.numel() > 0) backend_of(x).sort(kv(v), kv(i), kv(x), wrapped, largest);
    return std::pair<Tensor, Tensor>{v, i};
  });
  recording.finish({values, indices});
  return {values, indices};
}

Tensor value_selecting_backward(const Tensor& grad, int64_t dim, const Tensor& indices, const Shape& sizes) {
  AllocationScope scope("value_selecting_backward");
  Tensor grad_in = zeros(sizes, TensorOptions{grad.dtype(), grad.device()});
  // scatter_: each slice's indices are distinct, so adding into the zeros writes each value once.
  if (grad.numel() > 0) backend_of(grad).scatter_add(kv(grad_in), dim, kv(indices), kv(grad));
  return grad_in;
}

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  check_defined("one_hot", x);
  if (x.dtype() != ScalarType::int64)
    throw std::invalid_argument(
        fmt::format("one_hot: the input {} must be int64 (class indices), as PyTorch's", describe(x)));
  if (num_classes < -1)
    throw std::invalid_argument(
        fmt::format("one_hot: num_classes must be -1 (inferred) or positive, got {}", num_classes));
  AllocationScope scope("one_hot");
  Shape shape = x.sizes();
  if (x.numel() == 0) {
    if (num_classes <= 0)
      throw std::invalid_argument("one_hot: cannot infer the number of classes from an empty tensor");
    shape.push_back(num_classes);
    return empty(shape, TensorOptions{ScalarType::int64, x.device()});
  }
  // The values, read on the host without a device allocation (PyTorch's CUDA op leaves this to a device
  // assert in scatter_), for a clear error.
  std::vector<int64_t> values;
  if (!x.is_meta()) {
    values.resize(static_cast<size_t>(x.numel()));
    backend_of(x).copy_to_host(std::as_writable_bytes(std::span(values)), kv(x));
    for (int64_t v : values)
      if (v < 0) throw std::invalid_argument(fmt::format("one_hot: class values must be non-negative, got {}", v));
  }
  if (num_classes == -1) {
    if (x.is_meta())
      throw std::invalid_argument("one_hot: num_classes=-1 reads the values, which a meta tensor does not have");
    num_classes = max(x).item<int64_t>() + 1;  // the 0-d max is allocated and freed here, as PyTorch's
  } else if (num_classes == 0) {
    throw std::invalid_argument("one_hot: num_classes should be positive, got 0");
  }
  for (int64_t v : values)
    if (v >= num_classes)
      throw std::invalid_argument(
          fmt::format("one_hot: class value {} is not smaller than num_classes ({})", v, num_classes));
  shape.push_back(num_classes);
  Tensor out = zeros(shape, TensorOptions{ScalarType::int64, x.device()});
  backend_of(out).scatter_fill(kv(out), out.dim() - 1, kv(x.unsqueeze(-1)), 1.0);
  return out;
}

}  // namespace bytegrad
