#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/kernels/backend.h"
#include "bytegrad/kernels/driver_allocations.h"

namespace bytegrad {

namespace {

// A host buffer of `bytes` must hold exactly the view's elements: reading past a short one (or leaving
// part of a long one unread) would silently move bytes of whatever lies beside it.
void check_host_buffer(const char* op, const StridedView& view, size_t bytes) {
  const size_t width = element_size(view.dtype);
  const auto wanted = static_cast<size_t>(view.numel());
  if (bytes != wanted * width)
    throw std::invalid_argument(fmt::format("{}: a host buffer of {} bytes ({} {} values) for {} elements", op, bytes,
                                            static_cast<double>(bytes) / static_cast<double>(width),
                                            scalar_type_name(view.dtype), wanted));
}

}  // namespace

void KernelBackend::copy_from_host(const StridedView& dst, std::span<const std::byte> host) {
  check_host_buffer("copy_from_host", dst, host.size());
  copy_from_host_unchecked(dst, host.data());
}

void KernelBackend::copy_to_host(std::span<std::byte> host, const StridedView& src) {
  check_host_buffer("copy_to_host", src, host.size());
  copy_to_host_unchecked(host.data(), src);
}

KernelBackend& cpu_backend();
KernelBackend& meta_backend();
#ifdef BYTEGRAD_HAVE_CUDA
KernelBackend& cuda_backend();
#endif

KernelBackend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::cpu: return cpu_backend();
    // The simulated cards and the GPU report the CUDA driver's allocations at kernel launches to their
    // placement model (driver_allocations.h).
    case DeviceType::sim: {
      static KernelBackend& sim = with_driver_allocations(cpu_backend());
      return sim;
    }
    case DeviceType::meta: {
      static KernelBackend& meta = with_driver_allocations(meta_backend());
      return meta;
    }
    case DeviceType::cuda: {
#ifdef BYTEGRAD_HAVE_CUDA
      static KernelBackend& cuda = with_driver_allocations(cuda_backend());
      return cuda;
#else
      throw std::runtime_error(device.str() + ": bytegrad was built without CUDA");
#endif
    }
  }
  throw std::logic_error("backend_for: unknown device type");
}

}  // namespace bytegrad
