// Three-operand pointwise updates (lerp, addcmul, addcdiv) used in place by the optimizers: one strided
// grid-stride pass, no scratch memory. Arithmetic in opmath (float for the 16-bit floats); lerp uses
// PyTorch's two-sided form, exact at both ends.
#include <cuda_runtime.h>

#include <array>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

template <typename T>
struct TernaryFunctor {
  using Acc = opmath_t<T>;
  TernaryOp op;
  T* out;
  const T* self;
  const T* a;
  const T* b;
  Acc value;
  StridedIndexer<4> idx;

  __device__ void operator()(int64_t i) const {
    int64_t o[4];
    idx.offsets(i, o);
    const Acc x = convert<Acc>(self[o[1]]), y = convert<Acc>(a[o[2]]), z = convert<Acc>(b[o[3]]);
    out[o[0]] = convert<T>(ternary_value<Acc>(op, x, y, z, value));
  }
};

}  // namespace

void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a, const StridedView& b,
             double value) {
  require_same_sizes(out, self, "ternary");
  require_same_sizes(out, a, "ternary");
  require_same_sizes(out, b, "ternary");
  if (self.dtype != out.dtype || a.dtype != out.dtype || b.dtype != out.dtype)
    throw std::invalid_argument("cuda backend: ternary: operands must share the output's dtype");
  dispatch_floating(out.dtype, "ternary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TernaryFunctor<T> f{op,
                        static_cast<T*>(out.data),
                        static_cast<const T*>(self.data),
                        static_cast<const T*>(a.data),
                        static_cast<const T*>(b.data),
                        static_cast<opmath_t<T>>(value),
                        make_indexer<4>(out.sizes, {out.strides, self.strides, a.strides, b.strides})};
    for_each_index(out.numel(), f, "ternary kernel");
  });
}

}  // namespace bytegrad::cuda
