// Three-operand pointwise updates (lerp, addcmul, addcdiv) for the optimizers' in-place steps: one pass,
// no scratch, so an update such as exp_avg_sq.addcmul_(grad, grad, value) allocates nothing. Arithmetic in
// opmath (float for the 16-bit floats); lerp uses PyTorch's two-sided form, exact at both ends.
#include <stdexcept>
#include <string>

#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

template <typename Acc>
Acc apply_ternary(TernaryOp op, Acc self, Acc a, Acc b, Acc value) {
  switch (op) {
    case TernaryOp::lerp:  // PyTorch's lerp: from the nearer end, so weight 0 and 1 are exact
      return std::abs(value) < Acc(0.5) ? self + value * (a - self) : a - (a - self) * (Acc(1) - value);
    case TernaryOp::addcmul: return self + value * a * b;
    case TernaryOp::addcdiv: return self + value * (a / b);
  }
  return self;
}

}  // namespace

void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a, const StridedView& b,
             double value, std::optional<ScalarType> common) {
  if (self.sizes != out.sizes || a.sizes != out.sizes || b.sizes != out.sizes)
    throw std::invalid_argument("cpu backend: ternary: operand sizes differ from the output's");
  if (common && (*common != out.dtype || self.dtype != out.dtype || a.dtype != out.dtype || b.dtype != out.dtype)) {
    // Operands of several dtypes (PyTorch's TensorIterator with a common dtype C): each read in its own
    // dtype and converted to C, the op in opmath_t<C>, the result converted to C and stored in out's dtype.
    // Element by element, so out may alias self exactly.
    dispatch_dtype(*common, [&](auto tag) {
      using C = typename decltype(tag)::type;
      if constexpr (!is_float_like_v<C>) {
        throw std::invalid_argument("cpu backend: ternary needs a floating common dtype, got " +
                                    std::string(scalar_type_name(*common)));
      } else {
        using Acc = opmath_t<C>;
        const Acc v = static_cast<Acc>(value);
        const std::array<int64_t, 4> sizes = {
            static_cast<int64_t>(element_size(out.dtype)), static_cast<int64_t>(element_size(self.dtype)),
            static_cast<int64_t>(element_size(a.dtype)), static_cast<int64_t>(element_size(b.dtype))};
        const std::array<ScalarType, 4> types = {out.dtype, self.dtype, a.dtype, b.dtype};
        for_each_row<4>({&out, &self, &a, &b}, [&](std::array<char*, 4> p, const std::array<int64_t, 4>& s, int64_t n) {
          auto load = [&](int k, int64_t i) {
            return convert<Acc>(convert<C>(load_as_double(p[k] + i * s[k] * sizes[k], types[k])));
          };
          for (int64_t i = 0; i < n; ++i) {
            const Acc r = apply_ternary<Acc>(op, load(1, i), load(2, i), load(3, i), v);
            store_from_double(p[0] + i * s[0] * sizes[0], out.dtype, convert<double>(convert<C>(r)));
          }
        });
      }
    });
    return;
  }
  if (self.dtype != out.dtype || a.dtype != out.dtype || b.dtype != out.dtype)
    throw std::invalid_argument("cpu backend: ternary: operands must share the output's dtype");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_like_v<T>) {
      throw std::invalid_argument("cpu backend: ternary needs a floating dtype, got " +
                                  std::string(scalar_type_name(out.dtype)));
    } else {
      using Acc = opmath_t<T>;
      const Acc v = static_cast<Acc>(value);
      for_each_row<4>({&out, &self, &a, &b}, [&](std::array<char*, 4> p, const std::array<int64_t, 4>& s, int64_t n) {
        T* o = reinterpret_cast<T*>(p[0]);
        const T* x = reinterpret_cast<const T*>(p[1]);
        const T* y = reinterpret_cast<const T*>(p[2]);
        const T* z = reinterpret_cast<const T*>(p[3]);
        for (int64_t i = 0; i < n; ++i)
          o[i * s[0]] = convert<T>(apply_ternary<Acc>(op, convert<Acc>(x[i * s[1]]), convert<Acc>(y[i * s[2]]),
                                                      convert<Acc>(z[i * s[3]]), v));
      });
    }
  });
}

}  // namespace bytegrad::cpu
