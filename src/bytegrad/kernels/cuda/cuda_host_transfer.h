// Moving bytes between host memory and a cuda tensor (see cuda_host_transfer.cpp).
#pragma once

#include "bytegrad/kernels/backend.h"

namespace bytegrad::cuda {

void copy_from_host(const StridedView& dst, const void* host);
void copy_to_host(void* host, const StridedView& src);

}  // namespace bytegrad::cuda
