// Three-operand pointwise updates (lerp, addcmul, addcdiv) used in place by the optimizers: one strided
// grid-stride pass, no scratch memory. Arithmetic in opmath (float for the 16-bit floats); lerp uses
// PyTorch's two-sided form, exact at both ends.
#include <cuda_runtime.h>

#include <array>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

// out = op(self, a, b) in opmath_t<C> at each of the indexer's positions (operands in that order).
// Operands reads and writes the elements as C.
template <typename C, typename Operands>
struct TernaryFunctor {
  using Acc = opmath_t<C>;
  TernaryOp op;
  Operands operands;
  Acc value;
  StridedIndexer<4> idx;

  __device__ void operator()(int64_t i) const {
    int64_t o[4];
    idx.offsets(i, o);
    const Acc x = convert<Acc>(operands.load(0, o[1]));
    const Acc y = convert<Acc>(operands.load(1, o[2]));
    const Acc z = convert<Acc>(operands.load(2, o[3]));
    operands.store(o[0], convert<C>(ternary_value<Acc>(op, x, y, z, value)));
  }
};

// Every operand of dtype T.
template <typename T>
struct TypedOperands {
  T* out;
  const T* in[3];  // self, a, b
  __device__ __forceinline__ T load(int k, int64_t offset) const { return in[k][offset]; }
  __device__ __forceinline__ void store(int64_t offset, T value) const { out[offset] = value; }
};

// Operands of several dtypes (PyTorch's TensorIterator with a common dtype C): each read in its own dtype
// and converted to C, the result stored in out's dtype.
template <typename C>
struct MixedOperands {
  void* out;
  const void* in[3];  // self, a, b
  ScalarType out_type;
  ScalarType in_type[3];
  __device__ __forceinline__ C load(int k, int64_t offset) const { return load_as<C>(in[k], in_type[k], offset); }
  __device__ __forceinline__ void store(int64_t offset, C value) const { store_as<C>(out, out_type, offset, value); }
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
      const MixedOperands<C> operands{out.data, {self.data, a.data, b.data}, out.dtype, {self.dtype, a.dtype, b.dtype}};
      for_each_index(out.numel(),
                     TernaryFunctor<C, MixedOperands<C>>{
                         op, operands, static_cast<opmath_t<C>>(value),
                         make_indexer<4>(out.sizes, {out.strides, self.strides, a.strides, b.strides})},
                     "ternary kernel (mixed dtypes)");
    });
    return;
  }
  if (self.dtype != out.dtype || a.dtype != out.dtype || b.dtype != out.dtype)
    throw std::invalid_argument("cuda backend: ternary: operands must share the output's dtype");
  dispatch_floating(out.dtype, "ternary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const TypedOperands<T> operands{
        static_cast<T*>(out.data),
        {static_cast<const T*>(self.data), static_cast<const T*>(a.data), static_cast<const T*>(b.data)}};
    TernaryFunctor<T, TypedOperands<T>> f{
        op, operands, static_cast<opmath_t<T>>(value),
        make_indexer<4>(out.sizes, {out.strides, self.strides, a.strides, b.strides})};
    for_each_index(out.numel(), f, "ternary kernel");
  });
}

}  // namespace bytegrad::cuda
