// Batched matrix products on the host, from the op layer's column-major description (GemmArgs). Every
// stored matrix has a unit stride, so each operand is an Eigen::Map of its memory, never a copy: a stored
// (column-major) matrix with its leading dimension as OuterStride, or its transpose as a row-major map.
// Eigen computes C^T = op(B)^T op(A)^T into a row-major map: the op layer describes a row-major result as
// C^T, so this is the result in its own orientation.
// float32/float64 go to Eigen's GEMM; float16/bfloat16 are multiplied in float through host copies;
// integers use a plain int64-accumulating loop (rare, and Eigen's integer GEMM would cost compile time for
// nothing).
#include <Eigen/Dense>

#include <cstring>

#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

template <typename S>
using RowMajor = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using ColMajor = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <typename M>
using ConstMap = Eigen::Map<const M, 0, Eigen::OuterStride<>>;

// One batch's operand as Eigen multiplies it: the stored column-major matrix X (leading dimension ld), or
// X^T when transposed; rows x cols as read.
template <typename S>
struct MatrixRef {
  const S* data;
  int64_t rows, cols, ld;
  bool transposed;

  S at(int64_t i, int64_t j) const { return transposed ? data[j + i * ld] : data[i + j * ld]; }
};

// Calls f(map) with the operand as an Eigen map.
template <typename S, typename F>
void with_map(const MatrixRef<S>& x, F&& f) {
  if (x.transposed) f(ConstMap<RowMajor<S>>(x.data, x.rows, x.cols, Eigen::OuterStride<>(x.ld)));
  else f(ConstMap<ColMajor<S>>(x.data, x.rows, x.cols, Eigen::OuterStride<>(x.ld)));
}

// d = alpha * p @ q + beta * d, d (p.rows x q.cols) row-major with row stride ldd.
template <typename S>
void gemm_eigen(S* d, int64_t ldd, const MatrixRef<S>& p, const MatrixRef<S>& q, S alpha, S beta) {
  Eigen::Map<RowMajor<S>, 0, Eigen::OuterStride<>> dm(d, p.rows, q.cols, Eigen::OuterStride<>(ldd));
  with_map(p, [&](const auto& ep) {
    with_map(q, [&](const auto& eq) {
      if (beta == S(0)) {
        dm.noalias() = (alpha * ep) * eq;
      } else {
        if (beta != S(1)) dm *= beta;
        dm.noalias() += (alpha * ep) * eq;
      }
    });
  });
}

// 16-bit floats: convert the batch's operands to float, multiply, convert back.
template <typename T>
void gemm_reduced_float(T* d, int64_t ldd, const MatrixRef<T>& p, const MatrixRef<T>& q, double alpha, double beta) {
  auto to_float = [](const MatrixRef<T>& x) {
    RowMajor<float> f(x.rows, x.cols);
    for (int64_t i = 0; i < x.rows; ++i)
      for (int64_t j = 0; j < x.cols; ++j) f(i, j) = static_cast<float>(x.at(i, j));
    return f;
  };
  const RowMajor<float> fp = to_float(p), fq = to_float(q);
  RowMajor<float> product(p.rows, q.cols);
  product.noalias() = (static_cast<float>(alpha) * fp) * fq;
  for (int64_t i = 0; i < p.rows; ++i)
    for (int64_t j = 0; j < q.cols; ++j) {
      T& out = d[i * ldd + j];
      float value = product(i, j);
      if (beta != 0.0) value += static_cast<float>(beta) * static_cast<float>(out);
      out = T(value);
    }
}

template <typename T>
void gemm_integer(T* d, int64_t ldd, const MatrixRef<T>& p, const MatrixRef<T>& q, double alpha, double beta) {
  const auto int_alpha = static_cast<int64_t>(alpha), int_beta = static_cast<int64_t>(beta);
  for (int64_t i = 0; i < p.rows; ++i)
    for (int64_t j = 0; j < q.cols; ++j) {
      int64_t total = 0;
      for (int64_t k = 0; k < p.cols; ++k) total += static_cast<int64_t>(p.at(i, k)) * static_cast<int64_t>(q.at(k, j));
      total *= int_alpha;
      T& out = d[i * ldd + j];
      if (beta != 0.0) total += int_beta * static_cast<int64_t>(out);
      out = static_cast<T>(total);
    }
}

}  // namespace

void gemm(const GemmArgs& args) {
  // The bias epilogue as the unfused path computes it: C holds the bias in every column, then
  // C = alpha * op(A) op(B) + 1 * C.
  GemmArgs g = args;
  if (args.bias) {
    g.beta = 1.0;
    g.bias = nullptr;
    const size_t size = element_size(g.dtype);
    for (int64_t t = 0; t < g.batches; ++t)
      for (int64_t j = 0; j < g.n; ++j)
        std::memcpy(static_cast<char*>(g.c) + (t * g.stride_c + j * g.ldc) * static_cast<int64_t>(size), args.bias,
                    static_cast<size_t>(g.m) * size);
  }
  dispatch_dtype(g.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      throw std::invalid_argument("cpu gemm: bool matrices are not supported (as in PyTorch on cuda)");
    } else {
      for (int64_t t = 0; t < g.batches; ++t) {
        // d = p @ q: C^T = op(B)^T (n x k) @ op(A)^T (k x m).
        const MatrixRef<T> p{static_cast<const T*>(g.b) + t * g.stride_b, g.n, g.k, g.ldb, !g.transb};
        const MatrixRef<T> q{static_cast<const T*>(g.a) + t * g.stride_a, g.k, g.m, g.lda, !g.transa};
        T* d = static_cast<T*>(g.c) + t * g.stride_c;
        if constexpr (std::is_floating_point_v<T>)
          gemm_eigen<T>(d, g.ldc, p, q, static_cast<T>(g.alpha), static_cast<T>(g.beta));
        else if constexpr (is_reduced_float_v<T>) gemm_reduced_float(d, g.ldc, p, q, g.alpha, g.beta);
        else gemm_integer(d, g.ldc, p, q, g.alpha, g.beta);
      }
    }
  });
}

}  // namespace bytegrad::cpu
