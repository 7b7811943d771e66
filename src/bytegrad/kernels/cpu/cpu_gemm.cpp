// Batched matrix products on the host, from the op layer's column-major description (GemmArgs). Every
// stored matrix has a unit stride, so each operand is an Eigen::Map of its memory, never a copy: a stored
// (column-major) matrix with its leading dimension as OuterStride, or its transpose as a row-major map.
// Eigen computes C^T = op(B)^T op(A)^T into a row-major map: the op layer describes a row-major result as
// C^T, so this is the result in its own orientation.
// float32/float64 go to Eigen's GEMM; float16/bfloat16 are multiplied in float through host copies;
// integers use a plain int64-accumulating loop (rare, and Eigen's integer GEMM would cost compile time for
// nothing).
// Threads (kernels/parallel.h): a large product is cut into blocks of the result's rows, each computed by
// its own single-threaded Eigen call. Eigen's own OpenMP GEMM is switched off (setNbThreads(1)): its
// threads spin while waiting for one another, which on a busy machine costs whole scheduler time slices
// (a first MLP forward took 98 ms instead of 3.4), and its depth blocking depends on the thread count. Here each
// element's sum is Eigen's single-threaded one whatever the thread count (Eigen's blocking over the depth depends only
// on the depth, and row blocks start at multiples of 16, so every element keeps its place in Eigen's register tiles);
// tests/tensor/cpu_threads.cpp checks it bit by bit.
#include <Eigen/Dense>

#include <cstring>

#include "bytegrad/kernels/cpu/cpu_kernels.h"
#include "bytegrad/kernels/parallel.h"

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

// The rows [first, first + count) of a matrix as Eigen multiplies it.
template <typename S>
MatrixRef<S> row_block(const MatrixRef<S>& x, int64_t first, int64_t count) {
  MatrixRef<S> block = x;
  block.data += x.transposed ? first * x.ld : first;
  block.rows = count;
  return block;
}

// A grain of a product: about 2^21 floating-point operations (a fraction of a millisecond on one core), so
// waking a helper costs little beside it. Blocks of rows start at multiples of 16 (Eigen's register tiles
// are 4 to 16 rows or columns at a time), and a product with a depth below 16 stays whole.
constexpr int64_t kGemmGrainFlops = int64_t{1} << 21;
constexpr int64_t kGemmRowAlign = 16;
constexpr int64_t kGemmMinDepth = 16;

// gemm_eigen over blocks of p's (and d's) rows, on the kernel threads when the product is large enough.
template <typename S>
void gemm_eigen_parallel(S* d, int64_t ldd, const MatrixRef<S>& p, const MatrixRef<S>& q, S alpha, S beta) {
  const int64_t flops_per_row = 2 * p.cols * q.cols;
  if (p.cols < kGemmMinDepth || flops_per_row == 0) return gemm_eigen<S>(d, ldd, p, q, alpha, beta);
  const int64_t grain_rows = std::max(kGemmRowAlign, (kGemmGrainFlops + flops_per_row - 1) / flops_per_row);
  parallel::parallel_for(0, p.rows, grain_rows, kGemmRowAlign, [&](int64_t first, int64_t last) {
    gemm_eigen<S>(d + first * ldd, ldd, row_block(p, first, last - first), q, alpha, beta);
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
  const MatrixRef<float> float_p{fp.data(), p.rows, p.cols, p.cols, true},
      float_q{fq.data(), q.rows, q.cols, q.cols, true};
  gemm_eigen_parallel<float>(product.data(), q.cols, float_p, float_q, static_cast<float>(alpha), 0.0F);
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
  // Once, before any product: Eigen's setting is a plain static, read by every later product.
  static const bool eigen_single_threaded = [] {
    Eigen::setNbThreads(1);
    return true;
  }();
  (void)eigen_single_threaded;
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
      const auto multiply_batch = [&](int64_t t) {
        // d = p @ q: C^T = op(B)^T (n x k) @ op(A)^T (k x m).
        const MatrixRef<T> p{static_cast<const T*>(g.b) + t * g.stride_b, g.n, g.k, g.ldb, !g.transb};
        const MatrixRef<T> q{static_cast<const T*>(g.a) + t * g.stride_a, g.k, g.m, g.lda, !g.transa};
        T* d = static_cast<T*>(g.c) + t * g.stride_c;
        if constexpr (std::is_floating_point_v<T>)
          gemm_eigen_parallel<T>(d, g.ldc, p, q, static_cast<T>(g.alpha), static_cast<T>(g.beta));
        else if constexpr (is_reduced_float_v<T>) gemm_reduced_float(d, g.ldc, p, q, g.alpha, g.beta);
        else gemm_integer(d, g.ldc, p, q, g.alpha, g.beta);
      };
      // Many small products (attention's batched ones): whole products to each thread, when their outputs
      // are apart. A batch's own rows are then never split (a parallel_for inside a chunk runs whole).
      const int64_t flops_per_batch = std::max<int64_t>(1, 2 * g.m * g.n * g.k);
      const bool outputs_apart = g.stride_c >= g.n * g.ldc;
      if (g.batches > 1 && outputs_apart && flops_per_batch < kGemmGrainFlops) {
        parallel::parallel_for(0, g.batches, (kGemmGrainFlops + flops_per_batch - 1) / flops_per_batch, 1,
                               [&](int64_t first, int64_t last) {
                                 for (int64_t t = first; t < last; ++t) multiply_batch(t);
                               });
      } else {
        for (int64_t t = 0; t < g.batches; ++t) multiply_batch(t);
      }
    }
  });
}

}  // namespace bytegrad::cpu
