// The order sort and topk give a slice, shared by the cpu kernel (a stable sort) and the cuda kernel (each
// element ranks itself by counting the elements ordered before it): one comparison, so both agree.
#pragma once

#include "bytegrad/kernels/host_device.h"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::pointwise {

// x goes before y in the sorted slice: NaN above every number, as PyTorch orders it. Neither goes before
// the other when they are equal (or both NaN): the callers break those ties by position.
template <typename M>
BYTEGRAD_HOST_DEVICE bool ordered_before(M x, M y, bool descending) {
  const bool x_nan = is_nan(x), y_nan = is_nan(y);
  if (descending) return x_nan ? !y_nan : (!y_nan && x > y);
  return y_nan ? !x_nan : (!x_nan && x < y);
}

}  // namespace bytegrad::pointwise
