// Layer normalization over contiguous (M, N) rows, forward and backward. Each row's statistics are
// computed in double (two passes: the mean, then the mean squared deviation, so a large common offset does
// not cancel), and stored in the accumulation dtype the caller allocated (float32 or float64). Without a
// mean (its data null) the rows are RMS-normalized: no mean is subtracted and rstd = 1 / sqrt(mean(x^2) + eps).
#include <cmath>
#include <vector>

#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

// x as M rows of N, M being the number of statistics (rstd's entries); without a mean (its data null) the
// rows are RMS-normalized.
struct RowLayout {
  int64_t rows, width;
  bool rms;
  RowLayout(const StridedView& x, const StridedView& mean, const StridedView& rstd)
      : rows(rstd.numel()), width(rows > 0 ? x.numel() / rows : 0), rms(mean.data == nullptr) {}
};

// Reads element i of an optional 1-d contiguous view as a double (default when absent).
template <typename T>
double optional_at(const StridedView* v, int64_t i, double absent) {
  return v ? convert<double>(static_cast<const T*>(v->data)[i]) : absent;
}

}  // namespace

void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                const StridedView* weight, const StridedView* bias, double eps) {
  const RowLayout layout(x, mean, rstd);
  const int64_t M = layout.rows, N = layout.width;
  dispatch_floating(x.dtype, "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data);
    T* out = static_cast<T*>(y.data);
    for (int64_t m = 0; m < M; ++m) {
      const T* row = in + m * N;
      double mu = 0;
      if (!layout.rms) {
        for (int64_t n = 0; n < N; ++n) mu += convert<double>(row[n]);
        mu = N > 0 ? mu / static_cast<double>(N) : 0.0;
      }
      double var = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double d = convert<double>(row[n]) - mu;
        var += d * d;
      }
      var = N > 0 ? var / static_cast<double>(N) : 0.0;
      const double r = 1.0 / std::sqrt(var + eps);
      if (!layout.rms) store_from_double(static_cast<char*>(mean.data) + m * element_size(mean.dtype), mean.dtype, mu);
      store_from_double(static_cast<char*>(rstd.data) + m * element_size(rstd.dtype), rstd.dtype, r);
      for (int64_t n = 0; n < N; ++n) {
        const double normalized = (convert<double>(row[n]) - mu) * r;
        out[m * N + n] = convert<T>(normalized * optional_at<T>(weight, n, 1.0) + optional_at<T>(bias, n, 0.0));
      }
    }
  });
}

void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials, const StridedView* dbias_partials,
                         const StridedView& dy, const StridedView& x, const StridedView& mean, const StridedView& rstd,
                         const StridedView* weight) {
  const RowLayout layout(x, mean, rstd);
  const int64_t M = layout.rows, N = layout.width;
  dispatch_floating(x.dtype, "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xs = static_cast<const T*>(x.data);
    const T* gs = static_cast<const T*>(dy.data);
    // Partial sums in double, written once at the end in the gradients' dtype.
    const int64_t rw = dweight_partials ? dweight_partials->sizes.at(0) : 0;
    const int64_t rb = dbias_partials ? dbias_partials->sizes.at(0) : 0;
    std::vector<double> dw(static_cast<size_t>(rw * N), 0.0), db(static_cast<size_t>(rb * N), 0.0);
    std::vector<double> g(static_cast<size_t>(N)), xhat(static_cast<size_t>(N));
    for (int64_t m = 0; m < M; ++m) {
      const double mu =
          layout.rms ? 0.0
                     : load_as_double(static_cast<const char*>(mean.data) + m * element_size(mean.dtype), mean.dtype);
      const double r = load_as_double(static_cast<const char*>(rstd.data) + m * element_size(rstd.dtype), rstd.dtype);
      double sum_g = 0, sum_g_xhat = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double grad = convert<double>(gs[m * N + n]);
        xhat[n] = (convert<double>(xs[m * N + n]) - mu) * r;
        g[n] = grad * optional_at<T>(weight, n, 1.0);
        sum_g += g[n];
        sum_g_xhat += g[n] * xhat[n];
        if (rw) dw[static_cast<size_t>((m % rw) * N + n)] += grad * xhat[n];
        if (rb) db[static_cast<size_t>((m % rb) * N + n)] += grad;
      }
      if (dx) {
        // d/dx of (x - mean) * rstd, contracted with g: rstd * (g - mean(g) - xhat * mean(g * xhat)); without
        // the mean there is no mean(g) term.
        T* out = static_cast<T*>(dx->data) + m * N;
        const double inv_n = 1.0 / static_cast<double>(N);
        const double mean_g = layout.rms ? 0.0 : sum_g * inv_n;
        for (int64_t n = 0; n < N; ++n) out[n] = convert<T>(r * (g[n] - mean_g - xhat[n] * sum_g_xhat * inv_n));
      }
    }
    if (dweight_partials)
      for (size_t i = 0; i < dw.size(); ++i) static_cast<T*>(dweight_partials->data)[i] = convert<T>(dw[i]);
    if (dbias_partials)
      for (size_t i = 0; i < db.size(); ++i) static_cast<T*>(dbias_partials->data)[i] = convert<T>(db[i]);
  });
}

}  // namespace bytegrad::cpu
