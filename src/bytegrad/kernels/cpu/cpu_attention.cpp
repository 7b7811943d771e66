// Scaled dot-product attention on the CPU (cpu and sim): the straightforward reference of what the fused
// backends compute (backend.h's attention_forward / attention_backward). Per (b, h) and query row: the
// scores against every key the row may see, a numerically stable softmax (the row's maximum subtracted),
// the weighted sum of values, and the row's logsumexp. Backward recomputes the probabilities from the saved
// logsumexp (as the fused kernels do) instead of keeping them. Everything is accumulated in double and
// written once in the tensors' dtypes. Host scratch only (a row of scores; dk, dv accumulators per (b, h)).
// An additive bias (the mask) joins the scaled scores; dropout (attention_dropout.h) scales each kept
// probability by 1 / (1 - p) where it meets v, and backward redraws the same elements.
// Grouped-query attention (k and v with Hk heads dividing q's H, as cuDNN takes them): query head h reads
// key/value head h / (H / Hk), and the gradients of a key/value head sum over the query heads of its group.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/kernels/attention_dropout.h"
#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

// Element (b, h, i, d) of a 4-d view of T (d's stride honoured, though the op layer gives 1).
template <typename T>
struct Rows {
  const StridedView& v;
  T* at(int64_t b, int64_t h, int64_t i) const {
    return static_cast<T*>(v.data) + b * v.strides[0] + h * v.strides[1] + i * v.strides[2];
  }
  int64_t step() const { return v.strides[3]; }
};

// lse element (b, h, i) of a 3-d view (float32 or float64).
inline char* lse_at(const StridedView& lse, int64_t b, int64_t h, int64_t i) {
  return static_cast<char*>(lse.data) +
         (b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]) * static_cast<int64_t>(element_size(lse.dtype));
}

// The number of keys query row i may see.
inline int64_t visible_keys(int64_t i, int64_t keys, bool is_causal) {
  return is_causal ? std::min(i + 1, keys) : keys;
}

template <typename T>
double dot(const T* a, int64_t a_step, const T* b, int64_t b_step, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; ++d) s += convert<double>(a[d * a_step]) * convert<double>(b[d * b_step]);
  return s;
}

// Element (b, h, i, j) of a 4-d view of any floating dtype (the bias and its gradient).
inline char* element_at(const StridedView& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  return static_cast<char*>(t.data) + (b * t.strides[0] + h * t.strides[1] + i * t.strides[2] + j * t.strides[3]) *
                                          static_cast<int64_t>(element_size(t.dtype));
}

// The dropout factor z_ij of element (b, h, i, j): 1 / (1 - p) when kept, 0 when dropped, 1 without dropout.
struct DropoutFactor {
  DropoutDraw draw;
  int64_t H = 0, Sq = 0, Sk = 0;
  double at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!draw.active) return 1.0;
    const uint64_t index = static_cast<uint64_t>(((b * H + h) * Sq + i) * Sk + j);
    return draw.kept(index) ? draw.kept_scale : 0.0;
  }
};

// One (i, j) term of the gradients: dv_j += pz dout_i, dq_i += scale ds k_j, dk_j += scale ds q_i.
template <typename T>
void accumulate_row(std::vector<double>& dv_acc, std::vector<double>& dk_acc, std::vector<double>& dq_acc, double pz,
                    double ds, double scale, const T* doi, int64_t do_step, const T* qi, int64_t q_step, const T* kj,
                    int64_t k_step, int64_t j, int64_t D, int64_t Dv) {
  for (int64_t d = 0; d < Dv; ++d) dv_acc[j * Dv + d] += pz * convert<double>(doi[d * do_step]);
  for (int64_t d = 0; d < D; ++d) {
    dq_acc[d] += scale * ds * convert<double>(kj[d * k_step]);
    dk_acc[j * D + d] += scale * ds * convert<double>(qi[d * q_step]);
  }
}

// Query row i's score against key j: scale (q_i . k_j), plus the bias at (b, h, i, j) when there is one.
template <typename T>
double score(double scale, const T* qi, int64_t q_step, const T* kj, int64_t k_step, int64_t D, const StridedView* bias,
             int64_t b, int64_t h, int64_t i, int64_t j) {
  double s = scale * dot(qi, q_step, kj, k_step, D);
  if (bias) s += load_as_double(element_at(*bias, b, h, i, j), bias->dtype);
  return s;
}

// What both passes read off q (B, H, Sq, D), k (Sk keys) and v (Dv wide), and the dropout they draw.
struct AttentionSizes {
  int64_t B = 0, H = 0, Sq = 0, D = 0, Sk = 0, Dv = 0;
  DropoutFactor z;
  int64_t Hk = 0;  // key/value heads; query head h reads head h / (H / Hk)
  int64_t group() const { return H / Hk; }
};

// Calls body(TypeTag<T>, sizes) with q's element type T, which must be floating (`op` names the call).
template <typename Body>
void dispatch_attention(const StridedView& q, const StridedView& k, const StridedView& v, const AttentionExtras& extras,
                        const char* op, Body&& body) {
  const int64_t B = q.sizes[0], H = q.sizes[1], Sq = q.sizes[2], D = q.sizes[3];
  const int64_t Sk = k.sizes[2], Dv = v.sizes[3], Hk = k.sizes[1];
  if (v.sizes[1] != Hk || (Hk != H && (Hk <= 0 || H % Hk != 0)))
    throw std::invalid_argument(std::string("cpu backend: ") + op +
                                ": key and value must have one number of heads dividing query's");
  const AttentionSizes sizes{
      B, H, Sq, D, Sk, Dv, {dropout_draw(extras.dropout_p, extras.philox_seed, extras.philox_offset), H, Sq, Sk}, Hk};
  dispatch_floating(q.dtype, op, [&](auto tag) { body(tag, sizes); });
}

void check_rank(const StridedView& v, size_t rank, const char* what) {
  if (v.sizes.size() != rank)
    throw std::invalid_argument(std::string("cpu backend: attention: ") + what + " must have " + std::to_string(rank) +
                                " dimensions");
}

}  // namespace

void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                       const StridedView& v, double scale, bool is_causal, const AttentionExtras& extras) {
  for (const StridedView* t : {&out, &q, &k, &v}) check_rank(*t, 4, "q, k, v and out");
  if (lse) check_rank(*lse, 3, "logsumexp");
  if (extras.bias) check_rank(*extras.bias, 4, "the bias");
  dispatch_attention(q, k, v, extras, "attention", [&](auto tag, const AttentionSizes& sizes) {
    using T = typename decltype(tag)::type;
    const auto& [B, H, Sq, D, Sk, Dv, z, Hk] = sizes;
    const int64_t G = sizes.group();
    const Rows<T> Q{q}, K{k}, V{v}, O{out};
    std::vector<double> p(static_cast<size_t>(Sk)), acc(static_cast<size_t>(Dv));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Sq; ++i) {
          const int64_t n = visible_keys(i, Sk, is_causal);
          const T* qi = Q.at(b, h, i);
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            p[j] = score(scale, qi, Q.step(), K.at(b, h / G, j), K.step(), D, extras.bias, b, h, i, j);
            m = std::max(m, p[j]);
          }
          // A row whose every score is -inf (no key visible, or all masked) gives 0 and a logsumexp of -inf.
          const bool any = m > -std::numeric_limits<double>::infinity();
          double sum = 0;
          for (int64_t j = 0; any && j < n; ++j) sum += std::exp(p[j] - m);
          const double row_lse = any ? m + std::log(sum) : -std::numeric_limits<double>::infinity();
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; any && j < n; ++j) {
            const double w = std::exp(p[j] - row_lse) * z.at(b, h, i, j);
            const T* vj = V.at(b, h / G, j);
            for (int64_t d = 0; d < Dv; ++d) acc[d] += w * convert<double>(vj[d * V.step()]);
          }
          T* oi = O.at(b, h, i);
          for (int64_t d = 0; d < Dv; ++d) oi[d * O.step()] = convert<T>(acc[d]);
          if (lse) store_from_double(lse_at(*lse, b, h, i), lse->dtype, row_lse);
        }
  });
}

void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                        const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                        const StridedView& lse, double scale, bool is_causal, const AttentionExtras& extras) {
  for (const StridedView* t : {&dq, &dk, &dv, &dout, &q, &k, &v, &out}) check_rank(*t, 4, "every operand but lse");
  check_rank(lse, 3, "logsumexp");
  if (extras.bias) check_rank(*extras.bias, 4, "the bias");
  if (extras.grad_bias) check_rank(*extras.grad_bias, 4, "the bias gradient");
  dispatch_attention(q, k, v, extras, "attention_backward", [&](auto tag, const AttentionSizes& sizes) {
    using T = typename decltype(tag)::type;
    const auto& [B, H, Sq, D, Sk, Dv, z, Hk] = sizes;
    const int64_t G = sizes.group();
    const Rows<T> Q{q}, K{k}, V{v}, O{out}, dO{dout}, dQ{dq}, dK{dk}, dV{dv};
    std::vector<double> dk_acc(static_cast<size_t>(Sk * D)), dv_acc(static_cast<size_t>(Sk * Dv));
    std::vector<double> dq_acc(static_cast<size_t>(D));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hk = 0; hk < Hk; ++hk) {
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
        for (int64_t h = hk * G; h < (hk + 1) * G; ++h)  // the query heads reading this key/value head
          for (int64_t i = 0; i < Sq; ++i) {
            const int64_t n = visible_keys(i, Sk, is_causal);
            const T* qi = Q.at(b, h, i);
            const T* doi = dO.at(b, h, i);
            const double row_lse = load_as_double(lse_at(lse, b, h, i), lse.dtype);
            const double delta = dot(doi, dO.step(), O.at(b, h, i), O.step(), Dv);
            // a row that saw no key (logsumexp -inf) has no probabilities
            const bool any = row_lse > -std::numeric_limits<double>::infinity();
            std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
            for (int64_t j = 0; j < Sk; ++j) {
              double ds = 0;
              if (any && j < n) {
                const T* kj = K.at(b, hk, j);
                const T* vj = V.at(b, hk, j);
                const double p =
                    std::exp(score(scale, qi, Q.step(), kj, K.step(), D, extras.bias, b, h, i, j) - row_lse);
                const double dp = dot(doi, dO.step(), vj, V.step(), Dv);
                const double zij = z.at(b, h, i, j);
                ds = p * (zij * dp - delta);
                accumulate_row(dv_acc, dk_acc, dq_acc, p * zij, ds, scale, doi, dO.step(), qi, Q.step(), kj, K.step(),
                               j, D, Dv);
              }
              if (extras.grad_bias)
                store_from_double(element_at(*extras.grad_bias, b, h, i, j), extras.grad_bias->dtype, ds);
            }
            T* dqi = dQ.at(b, h, i);
            for (int64_t d = 0; d < D; ++d) dqi[d * dQ.step()] = convert<T>(dq_acc[d]);
          }
        for (int64_t j = 0; j < Sk; ++j) {
          T* dkj = dK.at(b, hk, j);
          T* dvj = dV.at(b, hk, j);
          for (int64_t d = 0; d < D; ++d) dkj[d * dK.step()] = convert<T>(dk_acc[j * D + d]);
          for (int64_t d = 0; d < Dv; ++d) dvj[d * dV.step()] = convert<T>(dv_acc[j * Dv + d]);
        }
      }
  });
}

}  // namespace bytegrad::cpu
