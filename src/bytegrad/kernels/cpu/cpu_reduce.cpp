// Reductions. The input's dimensions split into kept ones (walked once per output element) and reduced
// ones (walked, in row-major order, for each output element). Floating sums accumulate in double, integer
// sums in int64, so float32 results are exact to rounding whatever the length. The 2-norm keeps a scaled
// sum of squares (LAPACK's nrm2: no overflow or underflow in the squares); the 1- and inf-norms sum or take
// the largest |x| in double; variance is Welford's, in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "bytegrad/kernels/cpu/cpu_kernels.h"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cpu {

namespace {

// Where each output element starts in the input, and how to walk the elements it reduces.
struct ReductionLayout {
  StridedView kept_in;   // the input with reduced dimensions collapsed to size 1 (one position per output)
  StridedView kept_out;  // the output, same sizes as kept_in
  LoopPlan<1> reduced;   // the reduced dimensions of the input, row-major
  int64_t reduced_count = 1;
};

ReductionLayout layout_for(const StridedView& out, const StridedView& in, const std::vector<bool>& reduce_dim) {
  ReductionLayout layout;
  layout.kept_in = in;
  layout.kept_out = out;
  Shape reduced_sizes, reduced_strides;
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    if (!reduce_dim[d]) continue;
    reduced_sizes.push_back(in.sizes[d]);
    reduced_strides.push_back(in.strides[d]);
    layout.reduced_count *= in.sizes[d];
    layout.kept_in.sizes[d] = 1;
  }
  layout.reduced = plan_loop<1>(reduced_sizes, {&reduced_strides});
  return layout;
}

// Visits every reduced element of the output position whose input base is `base`: visit(value, flat_index).
template <typename T, typename Visit>
void walk_reduced(const ReductionLayout& layout, const char* base, Visit&& visit) {
  int64_t flat = 0;
  for_each_row<1>(layout.reduced, {const_cast<char*>(base)}, {sizeof(T)},
                  [&](std::array<char*, 1> p, const std::array<int64_t, 1>& s, int64_t n) {
                    const T* x = reinterpret_cast<const T*>(p[0]);
                    if (s[0] == 1) {
                      for (int64_t i = 0; i < n; ++i) visit(x[i], flat++);
                    } else {
                      for (int64_t i = 0; i < n; ++i) visit(x[i * s[0]], flat++);
                    }
                  });
}

template <typename T>
using accumulate_t = std::conditional_t<is_float_like_v<T>, double, int64_t>;

// Is `x` a better extreme than `best` (NaN wins, as in PyTorch; ties keep the first)?
template <typename A>
bool better(A x, A best, bool want_max) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(best)) return false;
    if (std::isnan(x)) return true;
  }
  return want_max ? x > best : x < best;
}

template <typename T>
void reduce_typed(ReduceOp op, const ReductionLayout& layout) {
  using A = accumulate_t<T>;
  const bool want_max = op == ReduceOp::max || op == ReduceOp::argmax;
  const int64_t count = layout.reduced_count;
  for_each_row<2>({&layout.kept_out, &layout.kept_in}, [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s,
                                                           int64_t n) {
    const size_t out_size = element_size(layout.kept_out.dtype);
    for (int64_t i = 0; i < n; ++i) {
      char* out = p[0] + i * s[0] * static_cast<int64_t>(out_size);
      const char* base = p[1] + i * s[1] * static_cast<int64_t>(sizeof(T));
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::mean: {
          A total = 0;
          walk_reduced<T>(layout, base, [&](T x, int64_t) { total = pointwise::wrapping_add(total, convert<A>(x)); });
          if (op == ReduceOp::mean)
            store_from_double(out, layout.kept_out.dtype, static_cast<double>(total) / static_cast<double>(count));
          else if constexpr (std::is_same_v<A, double>) store_from_double(out, layout.kept_out.dtype, total);
          else store_from_int64(out, layout.kept_out.dtype, total);
          break;
        }
        case ReduceOp::prod: {
          A total = 1;
          walk_reduced<T>(layout, base, [&](T x, int64_t) { total = pointwise::wrapping_mul(total, convert<A>(x)); });
          if constexpr (std::is_same_v<A, double>) store_from_double(out, layout.kept_out.dtype, total);
          else store_from_int64(out, layout.kept_out.dtype, total);
          break;
        }
        case ReduceOp::norm:
        case ReduceOp::norm_one:
        case ReduceOp::norm_inf: {
          if constexpr (std::is_same_v<A, double>) {
            if (op != ReduceOp::norm) {  // sum or max of |x|; NaN wins
              double total = 0.0;
              bool nan = false;
              walk_reduced<T>(layout, base, [&](T x, int64_t) {
                const double a = std::fabs(convert<double>(x));
                if (std::isnan(a)) nan = true;
                else total = op == ReduceOp::norm_one ? total + a : std::max(total, a);
              });
              store_from_double(out, layout.kept_out.dtype, nan ? std::numeric_limits<double>::quiet_NaN() : total);
              break;
            }
            // scale * sqrt(ssq) == sqrt(sum x^2), with every |x| / scale <= 1.
            double scale = 0.0, ssq = 1.0;
            bool nan = false, inf = false;
            walk_reduced<T>(layout, base, [&](T x, int64_t) {
              const double a = std::fabs(convert<double>(x));
              if (std::isnan(a)) nan = true;
              else if (std::isinf(a)) inf = true;
              else if (a > 0.0) {
                if (scale < a) {
                  ssq = 1.0 + ssq * (scale / a) * (scale / a);
                  scale = a;
                } else {
                  ssq += (a / scale) * (a / scale);
                }
              }
            });
            const double norm = nan   ? std::numeric_limits<double>::quiet_NaN()
                                : inf ? std::numeric_limits<double>::infinity()
                                      : scale * std::sqrt(ssq);
            store_from_double(out, layout.kept_out.dtype, norm);
          } else {
            throw std::invalid_argument("cpu reduce: norm needs a floating dtype");
          }
          break;
        }
        case ReduceOp::var:
        case ReduceOp::std: throw std::invalid_argument("cpu reduce: var/std go through reduce_variance");
        case ReduceOp::max:
        case ReduceOp::min:
        case ReduceOp::argmax:
        case ReduceOp::argmin: {
          if (count == 0) throw std::invalid_argument("cpu reduce: max/min of an empty dimension");
          A best{};
          int64_t best_index = -1;
          walk_reduced<T>(layout, base, [&](T x, int64_t index) {
            const A value = convert<A>(x);
            if (best_index < 0 || better(value, best, want_max)) best = value, best_index = index;
          });
          if (op == ReduceOp::argmax || op == ReduceOp::argmin)
            store_from_int64(out, layout.kept_out.dtype, best_index);
          else if constexpr (std::is_same_v<A, double>) store_from_double(out, layout.kept_out.dtype, best);
          else store_from_int64(out, layout.kept_out.dtype, best);
          break;
        }
      }
    }
  });
}

std::vector<bool> reduced_dims(const StridedView& out, const StridedView& in) {
  if (out.sizes.size() != in.sizes.size()) throw std::invalid_argument("cpu reduce: output rank must equal input rank");
  std::vector<bool> reduce(in.sizes.size());
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    if (out.sizes[d] != in.sizes[d] && out.sizes[d] != 1)
      throw std::invalid_argument("cpu reduce: output size must equal the input's or be 1 in every dimension");
    reduce[d] = out.sizes[d] == 1 && in.sizes[d] != 1;
  }
  return reduce;
}

}  // namespace

void reduce(ReduceOp op, const StridedView& out, const StridedView& in) {
  const ReductionLayout layout = layout_for(out, in, reduced_dims(out, in));
  dispatch_dtype(in.dtype, [&](auto tag) { reduce_typed<typename decltype(tag)::type>(op, layout); });
}

void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) {
  const ReductionLayout layout = layout_for(out, in, reduced_dims(out, in));
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_like_v<T>) {
      throw std::invalid_argument("cpu reduce_variance: needs a floating dtype");
    } else {
      const size_t out_size = element_size(layout.kept_out.dtype);
      for_each_row<2>({&layout.kept_out, &layout.kept_in},
                      [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
                        for (int64_t i = 0; i < n; ++i) {
                          char* o = p[0] + i * s[0] * static_cast<int64_t>(out_size);
                          const char* base = p[1] + i * s[1] * static_cast<int64_t>(sizeof(T));
                          double mean = 0.0, m2 = 0.0;  // Welford
                          int64_t count = 0;
                          walk_reduced<T>(layout, base, [&](T x, int64_t) {
                            const double v = convert<double>(x);
                            ++count;
                            const double delta = v - mean;
                            mean += delta / static_cast<double>(count);
                            m2 += delta * (v - mean);
                          });
                          const double dof = std::max(0.0, static_cast<double>(count) - correction);
                          const double var = m2 / dof;
                          store_from_double(o, layout.kept_out.dtype, take_sqrt ? std::sqrt(var) : var);
                        }
                      });
    }
  });
}

void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                         int64_t dim) {
  if (op != ReduceOp::max && op != ReduceOp::min)
    throw std::invalid_argument("cpu reduce_with_indices: only max and min");
  std::vector<bool> reduce(in.sizes.size(), false);
  reduce[static_cast<size_t>(dim)] = true;
  // Indices first (argmax/argmin along dim), then values gathered from the winning positions.
  const ReductionLayout index_layout = layout_for(indices, in, reduce);
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_typed<T>(op == ReduceOp::max ? ReduceOp::argmax : ReduceOp::argmin, index_layout);
    const int64_t in_stride = in.strides[static_cast<size_t>(dim)];
    StridedView kept_in = index_layout.kept_in;
    for_each_row<3>({&values, &indices, &kept_in},
                    [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
                      T* v = reinterpret_cast<T*>(p[0]);
                      const int64_t* idx = reinterpret_cast<const int64_t*>(p[1]);
                      const T* x = reinterpret_cast<const T*>(p[2]);
                      for (int64_t i = 0; i < n; ++i) v[i * s[0]] = x[i * s[2] + idx[i * s[1]] * in_stride];
                    });
  });
}

}  // namespace bytegrad::cpu
