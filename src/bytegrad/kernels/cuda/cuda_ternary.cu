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

// Operands of several dtypes (PyTorch's TensorIterator with a common dtype C): each read in its own dtype
// and converted to C, the op in opmath_t<C>, the result converted to C and stored in out's dtype.
template <typename C>
struct MixedTernaryFunctor {
  using Acc = opmath_t<C>;
  TernaryOp op;
  void* out;
  const void* self;
  const void* a;
  const void* b;
  ScalarType out_type, self_type, a_type, b_type;
  Acc value;
  StridedIndexer<4> idx;

  __device__ void operator()(int64_t i) const {
    int64_t o[4];
    idx.offsets(i, o);
    const Acc x = convert<Acc>(load_as<C>(self, self_type, o[1]));
    const Acc y = convert<Acc>(load_as<C>(a, a_type, o[2]));
    const Acc z = convert<Acc>(load_as<C>(b, b_type, o[3]));
    store_as<C>(out, out_type, o[0], convert<C>(ternary_value<Acc>(op, x, y, z, value)));
  }
};

}  // namespace

void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a, const StridedView& b,
             double value, std::optional<ScalarType> common) {
  require_same_sizes(out, self, "ternary");
  require_same_sizes(out, a, "ternary");
  require_same_sizes(out, b, "ternary");
  if (common && (*common != out.dtype || self.dtype != out.dtype || a.dtype != out.dtype || b.dtype != out.dtype)) {
    dispatch_floating(*common, "ternary", [&](auto tag) {
      using C = typename decltype(tag)::type;
      for_each_index(out.numel(),
                     MixedTernaryFunctor<C>{op, out.data, self.data, a.data, b.data, out.dtype, self.dtype, a.dtype,
                                            b.dtype, static_cast<opmath_t<C>>(value),
                                            make_indexer<4>(out.sizes, {out.strides, self.strides, a.strides, b.strides})},
                     "ternary kernel (mixed dtypes)");
    });
    return;
  }
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
