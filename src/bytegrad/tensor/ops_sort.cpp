// Ops along one dimension: cumsum, flip, sort, topk, and one_hot (composite: zeros and a scatter of 1); and
// the scan-based masked ops, masked_select and its backward (masked_scatter_). Each allocates what
// PyTorch's CUDA op allocates, in its order (ops.h lists them).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
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

// CUB's temporary storage, parts rounded up to 256 bytes then 255 bytes of alignment slack (AliasTemporaries).
int64_t cub_parts_bytes(std::initializer_list<int64_t> parts) {
  int64_t total = 0;
  for (int64_t part : parts) total += (part + 255) / 256 * 256;
  return total + 255;
}

// nonzero's count, cub::DeviceReduce::Sum of a bool-to-int iterator into an int: one tile (256 threads of 16
// items, Policy600's int accumulator) needs no storage and CUB asks for 1 byte; more items take one int per
// block of the even-share grid (SM occupancy of 8 blocks of 256 threads, times the SMs, times CUB's
// subscription factor 5), as the masked_select recordings show.
int64_t cub_count_temporary_bytes(int64_t count, const DeviceLaunchLimits& limits) {
  constexpr int64_t kTile = int64_t{256} * 16;
  if (count <= kTile) return 1;
  const int64_t occupancy = std::max<int64_t>(1, limits.max_threads_per_multiprocessor / 256);
  const int64_t max_blocks = occupancy * limits.multiprocessor_count * 5;
  return cub_parts_bytes({max_blocks * 4});
}

// nonzero's cub::DeviceSelect::Flagged of int64 positions with 32-bit offsets: one tile-status word (the
// offset and its status, 8 bytes) per tile, plus 32 of padding, laid out as the scan's
// (cub_scan_temporary_bytes: one more 256-byte part). A tile is CUB's sm90 tuning for a flagged select of
// 8-byte primitives with 4-byte offsets: 384 threads of 11 items (checked by the masked_select recordings:
// 64000 and 2^20 mask elements).
int64_t cub_select_temporary_bytes(int64_t count) {
  constexpr int64_t kTile = int64_t{384} * 11;
  const int64_t tiles = (count + kTile - 1) / kTile;
  return cub_parts_bytes({(tiles + 32) * 8, 256});
}

// The launch limits CUB's grid sizes come from: the card's on cuda, the modelled one's on sim and meta, an
// H100's on cpu (which makes the same scratch, as cumsum's does on every device).
DeviceLaunchLimits launch_limits_or_h100(Device device) {
  if (device.type == DeviceType::cpu) return DeviceLaunchLimits{132, 2048};
  const DeviceLaunchLimits limits = device_launch_limits(device);
  return limits.multiprocessor_count > 0 ? limits : DeviceLaunchLimits{132, 2048};
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

// ------------------------------------------------------------------------------------- masked_select

namespace {

// PyTorch's masked_select on CUDA: both operands (a 0-d one as 1-d) expanded to their common shape, then
// index(self, [mask]), whose bool index becomes mask.nonzero() (nonzero_cuda_out_impl: the mask made
// contiguous, a 4-byte count, CUB's count then select scratch, the (count, dims) int64 positions), then the
// output of count elements, then the positions freed when the index op returns.
Tensor masked_select_compute(const Tensor& input, const Tensor& mask, const Shape& shape) {
  AllocationScope scope("masked_select");
  const Shape common = shape.empty() ? Shape{1} : shape;
  const Tensor in = (input.dim() == 0 ? input.view({1}) : input).expand(common);
  const Tensor selector = (mask.dim() == 0 ? mask.view({1}) : mask).expand(common);
  const int64_t n = shape_numel(common);
  const DeviceLaunchLimits limits = launch_limits_or_h100(input.device());
  int64_t count = 0;
  Tensor positions;
  {
    const Tensor mask_contiguous = selector.contiguous();  // nonzero's self.contiguous()
    std::vector<uint8_t> flags(static_cast<size_t>(n));
    backend_of(mask_contiguous).copy_to_host(std::as_writable_bytes(std::span(flags)), kv(mask_contiguous));
    for (uint8_t flag : flags) count += flag != 0 ? 1 : 0;
    // Chunks of at most 2^30 elements once numel reaches INT_MAX, each with its own count and scratch.
    const int64_t chunk = n < std::numeric_limits<int32_t>::max() ? n : (int64_t{1} << 30);
    const int64_t chunks = chunk == 0 ? 1 : (n + chunk - 1) / chunk;
    const TensorOptions bytes{ScalarType::uint8, input.device()};
    const Tensor counts = empty({4 * chunks}, bytes);  // one int per chunk
    for (int64_t c = 0; c < chunks; ++c) {
      const Tensor scratch = empty({cub_count_temporary_bytes(std::min(chunk, n - c * chunk), limits)}, bytes);
    }
    positions = empty({static_cast<int64_t>(common.size()), count}, TensorOptions{ScalarType::int64, input.device()});
    for (int64_t c = 0; c < chunks; ++c) {
      const Tensor scratch = empty({cub_select_temporary_bytes(std::min(chunk, n - c * chunk))}, bytes);
    }
  }  // the count, then the contiguous mask (when it was a copy), freed as nonzero returns
  Tensor out = empty({count}, TensorOptions{input.dtype(), input.device()});
  if (count > 0) backend_of(input).masked_select(kv(out), kv(in), kv(selector));
  return out;
}

}  // namespace

Tensor masked_select(const Tensor& input, const Tensor& mask) {
  check_defined("masked_select", input);
  check_defined("masked_select", mask);
  check_same_device("masked_select", input, mask);
  if (mask.dtype() != ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("masked_select: the mask {} must be bool (PyTorch: expected BoolTensor for mask)", describe(mask)));
  const Shape shape = broadcast_shapes("masked_select", input, mask);
  if (input.is_meta())
    throw std::invalid_argument(fmt::format(
        "masked_select: the output's size is the number of true values of the mask {}, which a meta tensor does "
        "not have (PyTorch's meta kernel refuses it too); run it on sim for the figures",
        describe(mask)));
  return compute_recorded<OpId::masked_select>({input, mask}, {},
                                               [&] { return masked_select_compute(input, mask, shape); });
}

Tensor masked_select_backward(const Tensor& grad, const Tensor& input, const Tensor& mask) {
  AllocationScope scope("masked_select_backward");
  // FunctionsManual's masked_select_backward: zeros_like(input expanded to the common shape), then
  // masked_scatter_(mask, grad) into it.
  const Shape shape = broadcast_shapes("masked_select_backward", input, mask);
  Tensor result = zeros(shape, TensorOptions{input.dtype(), input.device()});
  if (result.numel() == 0) return result;
  // masked_scatter__cuda: the mask expanded to self (expand_inplace), an int64 prefix sum of self's shape,
  // then (launch_masked_scatter_kernel) the mask made contiguous, CUB's exclusive scan scratch, the source
  // made contiguous; the kernel; the locals freed in reverse, the prefix sums last.
  const Tensor selector = mask.expand(shape);
  const Tensor prefix_sums = empty(shape, TensorOptions{ScalarType::int64, input.device()});
  {
    const Tensor mask_contiguous = selector.contiguous();
    {
      const Tensor scratch = empty({cub_scan_temporary_bytes(result.numel(), ScalarType::int64)},
                                   TensorOptions{ScalarType::uint8, input.device()});
    }
    const Tensor source = grad.contiguous();
    backend_of(result).masked_scatter(kv(result), kv(selector), kv(source.reshape({source.numel()})));
  }
  return result;
}

}  // namespace bytegrad
