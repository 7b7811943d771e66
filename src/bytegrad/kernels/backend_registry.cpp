#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/kernels/backend.h"

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

void KernelBackend::amp_non_finite_check_and_unscale(const StridedView&, const StridedView&, const StridedView&) {
  throw std::logic_error(
      "amp_non_finite_check_and_unscale: this backend keeps no device values (the op layer checks cpu and sim "
      "gradients on the host)");
}

void KernelBackend::amp_update_scale(const StridedView&, const StridedView&, const StridedView&, double, double,
                                     int64_t) {
  throw std::logic_error(
      "amp_update_scale: this backend keeps no device values (the op layer updates cpu and sim scales on the host)");
}

KernelBackend& cpu_backend();
KernelBackend& meta_backend();
#ifdef BYTEGRAD_HAVE_CUDA
KernelBackend& cuda_backend();
#endif

KernelBackend& kernel_backend(Device device) {
  switch (device.type) {
    case DeviceType::cpu:
    case DeviceType::sim: return cpu_backend();
    case DeviceType::meta: return meta_backend();
    case DeviceType::cuda:
#ifdef BYTEGRAD_HAVE_CUDA
      return cuda_backend();
#else
      throw std::runtime_error(device.str() + ": bytegrad was built without CUDA");
#endif
  }
  throw std::logic_error("kernel_backend: unknown device type");
}

}  // namespace bytegrad
