// Host <-> cuda tensor transfers with copies on the current stream, waited for (which orders them after earlier
// kernels, and returns once the host buffer may be reused).
//
// copy_to_host of a non-contiguous view never allocates device memory (a device-side gather would need a
// temporary that PyTorch's allocator history would not show at this point):
//   - rows of contiguous bytes at a fixed pitch (e.g. a column slice) travel with one cudaMemcpy2D;
//   - anything else copies the whole storage range the view covers into a host buffer and gathers there.
//     The range can be much larger than the view (x[::1000] moves all of x) but is always bounded by the
//     memory the view addresses.
#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_host_transfer.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/kernels/cuda/cuda_kernels.h"

namespace bytegrad::cuda {

namespace {

// Rows of at least this many contiguous bytes go through cudaMemcpy2D; narrower ones are faster to move
// as one block and gather on the host.
constexpr int64_t kMinPitchedRowBytes = 64;

struct Layout {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

Layout coalesced(const StridedView& v) {
  Layout layout{v.sizes, {}};
  std::vector<std::vector<int64_t>> strides{v.strides};
  coalesce_dims(layout.sizes, strides);
  layout.strides = strides[0];
  return layout;
}

// A blocking copy on the launch stream, as PyTorch's non_blocking=False copy: queued on the current stream,
// then waited for (plain cudaMemcpy would run on the legacy stream, which does not wait for side streams).
cudaError_t copy_and_wait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t status = cudaMemcpyAsync(dst, src, bytes, kind, launch_stream());
  return status != cudaSuccess ? status : cudaStreamSynchronize(launch_stream());
}

cudaError_t copy_2d_and_wait(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                             cudaMemcpyKind kind) {
  const cudaError_t status = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, launch_stream());
  return status != cudaSuccess ? status : cudaStreamSynchronize(launch_stream());
}

// Whether the view is `rows` runs of `row_elements` contiguous elements `pitch` elements apart.
bool is_pitched_rows(const Layout& l) { return l.sizes.size() == 2 && l.strides[1] == 1 && l.strides[0] >= l.sizes[1]; }

}  // namespace

void copy_from_host(const StridedView& dst, const void* host) {
  const size_t es = element_size(dst.dtype);
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.is_contiguous()) {
    BYTEGRAD_CUDA_CHECK(copy_and_wait(dst.data, host, static_cast<size_t>(n) * es, cudaMemcpyHostToDevice));
    return;
  }
  const Layout l = coalesced(dst);
  if (!is_pitched_rows(l))
    throw std::invalid_argument("cuda backend: copy_from_host needs a contiguous destination (or rows at a pitch)");
  BYTEGRAD_CUDA_CHECK(copy_2d_and_wait(dst.data, static_cast<size_t>(l.strides[0]) * es, host,
                                       static_cast<size_t>(l.sizes[1]) * es, static_cast<size_t>(l.sizes[1]) * es,
                                       static_cast<size_t>(l.sizes[0]), cudaMemcpyHostToDevice));
}

void copy_to_host(void* host, const StridedView& src) {
  const size_t es = element_size(src.dtype);
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.is_contiguous()) {
    BYTEGRAD_CUDA_CHECK(copy_and_wait(host, src.data, static_cast<size_t>(n) * es, cudaMemcpyDeviceToHost));
    return;
  }
  const Layout l = coalesced(src);
  if (is_pitched_rows(l) && l.sizes[1] * static_cast<int64_t>(es) >= kMinPitchedRowBytes) {
    BYTEGRAD_CUDA_CHECK(copy_2d_and_wait(host, static_cast<size_t>(l.sizes[1]) * es, src.data,
                                         static_cast<size_t>(l.strides[0]) * es, static_cast<size_t>(l.sizes[1]) * es,
                                         static_cast<size_t>(l.sizes[0]), cudaMemcpyDeviceToHost));
    return;
  }

  // The covering range [lowest, highest] element offset, relative to element 0 (strides may be negative).
  int64_t lowest = 0, highest = 0;
  for (size_t d = 0; d < l.sizes.size(); ++d) {
    const int64_t extent = (l.sizes[d] - 1) * l.strides[d];
    (extent < 0 ? lowest : highest) += extent;
  }
  std::vector<char> staging(static_cast<size_t>(highest - lowest + 1) * es);
  BYTEGRAD_CUDA_CHECK(copy_and_wait(staging.data(),
                                    static_cast<const char*>(src.data) + lowest * static_cast<int64_t>(es),
                                    staging.size(), cudaMemcpyDeviceToHost));

  // Gather in row-major order with an odometer over the coalesced dimensions.
  const size_t ndim = l.sizes.size();
  std::vector<int64_t> coord(ndim, 0);
  const char* base = staging.data() - lowest * static_cast<int64_t>(es);
  char* dst = static_cast<char*>(host);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * static_cast<int64_t>(es), base + offset * static_cast<int64_t>(es), es);
    for (size_t d = ndim; d-- > 0;) {
      if (++coord[d] < l.sizes[d]) {
        offset += l.strides[d];
        break;
      }
      offset -= (l.sizes[d] - 1) * l.strides[d];
      coord[d] = 0;
    }
  }
}

}  // namespace bytegrad::cuda
