#include "bytegrad/distributed/host_reduce.h"

#include <cstring>
#include <type_traits>

#include "bytegrad/kernels/cpu/cpu_kernels.h"  // dispatch_dtype, is_reduced_float_v

namespace bytegrad::distributed {

namespace {

// a (op) b for one element. bool follows NCCL's mapping (sum: or, product: and); 16-bit floats compute in
// float and round at each step; signed integers wrap on overflow instead of being undefined.
template <typename T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return (op == ReduceOp::product || op == ReduceOp::min) ? (a && b) : (a || b);
  } else if constexpr (cpu::is_reduced_float_v<T>) {
    return T(combine(static_cast<float>(a), static_cast<float>(b), op));
  } else {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
        } else {
          return a + b;
        }
      case ReduceOp::product:
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
        } else {
          return a * b;
        }
      case ReduceOp::min: return b < a ? b : a;
      case ReduceOp::max: return a < b ? b : a;
    }
    return a;
  }
}

template <typename T>
T divide_by(T value, int world_size) {
  if constexpr (std::is_same_v<T, bool>) {
    return value;  // refused before (Cannot use ReduceOp.AVG with boolean inputs)
  } else if constexpr (cpu::is_reduced_float_v<T>) {
    return T(static_cast<float>(value) / static_cast<float>(world_size));
  } else {
    return static_cast<T>(value / static_cast<T>(world_size));  // integers: truncated
  }
}

}  // namespace

void reduce_in_rank_order(const std::vector<const std::byte*>& sources, ScalarType dtype, int64_t count, ReduceOp op,
                          std::vector<std::byte>& result) {
  const size_t bytes = static_cast<size_t>(count) * element_size(dtype);
  result.resize(bytes);
  if (bytes == 0) return;
  std::memcpy(result.data(), sources[0], bytes);
  cpu::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* acc = reinterpret_cast<T*>(result.data());
    for (size_t r = 1; r < sources.size(); ++r) {
      const T* in = reinterpret_cast<const T*>(sources[r]);
      for (int64_t i = 0; i < count; ++i) acc[i] = combine(acc[i], in[i], op);
    }
    if (op == ReduceOp::avg)
      for (int64_t i = 0; i < count; ++i) acc[i] = divide_by(acc[i], static_cast<int>(sources.size()));
  });
}

}  // namespace bytegrad::distributed
