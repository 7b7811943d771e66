// One sample call per row of the op table (core/op_table.h), as PyTorch's OpInfo samples: the inputs it
// takes on a device and the call that exercises the row (the result's grad_fn is the row's node when the op
// is differentiable). Tests iterate the table and look each row up here, so a row without a sample fails.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bytegrad/tensor/ops.h"

namespace bytegrad::testing {

struct OpSample {
  // The inputs on `device`; the first `differentiable_inputs` are float64 and gradchecked.
  std::function<std::vector<Tensor>(Device device)> inputs;
  size_t differentiable_inputs = 1;
  std::function<Tensor(const std::vector<Tensor>&)> call;
  // Finite differences through a float32 round trip (to_dtype) need a looser tolerance.
  double gradcheck_tolerance = 1e-6;
};

namespace op_samples_detail {

inline TensorOptions f64(Device d) { return TensorOptions{ScalarType::float64, d}; }
inline Tensor r(const Shape& s, Device d) { return randn(s, f64(d)); }
inline Tensor positive(const Shape& s, Device d) { return rand(s, f64(d)) + 0.5; }
inline Tensor indices(std::vector<double> values, Device d) {
  const int64_t n = static_cast<int64_t>(values.size());
  return from_vector(values, {n}, TensorOptions{ScalarType::int64, d});
}
inline Tensor mask(const Shape& s, Device d) { return rand(s, f64(d)) > 0.5; }
// Another device for to(device): cpu <-> sim, cuda -> cpu; meta stays (a no-op move).
inline Device other_device(Device d) {
  if (d.type == DeviceType::cpu) return Device{DeviceType::sim, 0};
  if (d.type == DeviceType::meta) return d;
  return Device{DeviceType::cpu, 0};
}

using Inputs = std::function<std::vector<Tensor>(Device)>;
using Call = std::function<Tensor(const std::vector<Tensor>&)>;

inline Inputs one(Shape s) {
  return [s](Device d) { return std::vector<Tensor>{r(s, d)}; };
}
inline Inputs one_positive(Shape s) {
  return [s](Device d) { return std::vector<Tensor>{positive(s, d)}; };
}
inline Inputs two(Shape a, Shape b) {
  return [a, b](Device d) { return std::vector<Tensor>{r(a, d), r(b, d)}; };
}
// An activation row's sample column: the forward's input, and the backward's (grad, saved) pair.
inline Tensor in_domain(const std::string& domain, const Shape& s, Device d) {
  return domain == "positive" ? positive(s, d) : r(s, d);
}
inline Inputs one_in(std::string domain, Shape s) {
  return [domain, s](Device d) { return std::vector<Tensor>{in_domain(domain, s, d)}; };
}
inline Inputs grad_and_saved(std::string domain, Shape s) {
  return [domain, s](Device d) { return std::vector<Tensor>{r(s, d), in_domain(domain, s, d)}; };
}

}  // namespace op_samples_detail

inline const std::map<OpId, OpSample>& op_samples() {
  using namespace op_samples_detail;
  static const std::map<OpId, OpSample> samples = [] {
    std::map<OpId, OpSample> m;
    auto row = [&m](OpId op, Inputs in, Call call, size_t differentiable = 1, double tolerance = 1e-6) {
      m[op] = OpSample{std::move(in), differentiable, std::move(call), tolerance};
    };
    // ---- unary
    row(OpId::neg, one({3, 4}), [](auto& v) { return neg(v[0]); });
    row(OpId::abs, one({3, 4}), [](auto& v) { return abs(v[0]); });
    row(OpId::exp, one({3, 4}), [](auto& v) { return exp(v[0]); });
    row(OpId::expm1, one({3, 4}), [](auto& v) { return expm1(v[0]); });
    row(OpId::log, one_positive({3, 4}), [](auto& v) { return log(v[0]); });
    row(OpId::sqrt, one_positive({3, 4}), [](auto& v) { return sqrt(v[0]); });
    row(OpId::reciprocal, one_positive({3, 4}), [](auto& v) { return reciprocal(v[0]); });
    row(OpId::rsqrt, one_positive({3, 4}), [](auto& v) { return rsqrt(v[0]); });
    row(OpId::cos, one({3, 4}), [](auto& v) { return cos(v[0]); });
    row(OpId::sin, one({3, 4}), [](auto& v) { return sin(v[0]); });
    row(
        OpId::log_sigmoid, one({3, 4}), [](auto& v) { return log_sigmoid(v[0]); }, 0);
    row(OpId::leaky_relu, one({3, 4}), [](auto& v) { return leaky_relu(v[0], 0.2); });
    row(
        OpId::leaky_relu_backward, two({3, 4}, {3, 4}), [](auto& v) { return leaky_relu_backward(v[0], v[1], 0.2); },
        0);
    row(
        OpId::binary_cross_entropy_with_logits,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), rand({3, 4}, f64(d))};
        },
        [](auto& v) { return binary_cross_entropy_with_logits(v[0], v[1]); }, 2);
    row(OpId::logical_not, one({3, 4}), [](auto& v) { return logical_not(v[0]); });
    // ---- activations: built from the table's rows (sample column), forward and fused backward
#define BYTEGRAD_ACTIVATION_SAMPLE(op, dtypes, saves, node, autocast, cuda, module, sample) \
  row(OpId::op, one_in(#sample, {3, 4}), [](auto& v) { return op(v[0]); });                 \
  row(                                                                                      \
      OpId::op##_backward, grad_and_saved(#sample, {3, 4}), [](auto& v) { return op##_backward(v[0], v[1]); }, 2);
    BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_ACTIVATION_SAMPLE)
#undef BYTEGRAD_ACTIVATION_SAMPLE
    // ---- binary (broadcasting where the op allows it)
    row(
        OpId::add, two({3, 4}, {4}), [](auto& v) { return add(v[0], v[1], 0.5); }, 2);
    row(
        OpId::sub, two({3, 4}, {3, 1}), [](auto& v) { return sub(v[0], v[1], 2.0); }, 2);
    row(
        OpId::mul, two({3, 4}, {3, 4}), [](auto& v) { return v[0] * v[1]; }, 2);
    row(
        OpId::div,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), positive({3, 4}, d)};
        },
        [](auto& v) { return v[0] / v[1]; }, 2);
    row(
        OpId::pow,
        [](Device d) {
          return std::vector<Tensor>{positive({3, 4}, d), r({3, 4}, d)};
        },
        [](auto& v) { return pow(v[0], v[1]); }, 2);
    row(
        OpId::maximum, two({3, 4}, {3, 4}), [](auto& v) { return maximum(v[0], v[1]); }, 2);
    row(
        OpId::minimum, two({3, 4}, {3, 4}), [](auto& v) { return minimum(v[0], v[1]); }, 2);
    row(
        OpId::eq, two({3, 4}, {3, 4}), [](auto& v) { return eq(v[0], v[0] * 1.0); }, 2);
    row(
        OpId::ne, two({3, 4}, {3, 4}), [](auto& v) { return ne(v[0], v[1]); }, 2);
    row(
        OpId::lt, two({3, 4}, {3, 4}), [](auto& v) { return lt(v[0], v[1]); }, 2);
    row(
        OpId::le, two({3, 4}, {3, 4}), [](auto& v) { return le(v[0], v[1]); }, 2);
    row(
        OpId::gt, two({3, 4}, {3, 4}), [](auto& v) { return gt(v[0], v[1]); }, 2);
    row(
        OpId::ge, two({3, 4}, {3, 4}), [](auto& v) { return ge(v[0], v[1]); }, 2);
    row(
        OpId::logical_and,
        [](Device d) {
          return std::vector<Tensor>{mask({3, 4}, d), mask({3, 4}, d)};
        },
        [](auto& v) { return logical_and(v[0], v[1]); }, 0);
    row(
        OpId::logical_or,
        [](Device d) {
          return std::vector<Tensor>{mask({3, 4}, d), mask({3, 4}, d)};
        },
        [](auto& v) { return logical_or(v[0], v[1]); }, 0);
    // ---- with a Python-number operand
    row(OpId::add_scalar, one({3, 4}), [](auto& v) { return v[0] + 2.0; });
    row(OpId::sub_scalar, one({3, 4}), [](auto& v) { return v[0] - 2.0; });
    row(OpId::rsub_scalar, one({3, 4}), [](auto& v) { return 2.0 - v[0]; });
    row(OpId::mul_scalar, one({3, 4}), [](auto& v) { return v[0] * 3.0; });
    row(OpId::div_scalar, one({3, 4}), [](auto& v) { return v[0] / 3.0; });
    row(OpId::rdiv_scalar, one_positive({3, 4}), [](auto& v) { return 2.0 / v[0]; });
    row(OpId::pow_scalar, one({3, 4}), [](auto& v) { return pow(v[0], 3.0); });
    row(OpId::rpow_scalar, one({3, 4}), [](auto& v) { return pow(2.0, v[0]); });
    row(OpId::eq_scalar, one({3, 4}), [](auto& v) { return v[0] == 0.5; });
    row(OpId::ne_scalar, one({3, 4}), [](auto& v) { return v[0] != 0.5; });
    row(OpId::lt_scalar, one({3, 4}), [](auto& v) { return v[0] < 0.5; });
    row(OpId::le_scalar, one({3, 4}), [](auto& v) { return v[0] <= 0.5; });
    row(OpId::gt_scalar, one({3, 4}), [](auto& v) { return v[0] > 0.5; });
    row(OpId::ge_scalar, one({3, 4}), [](auto& v) { return v[0] >= 0.5; });
    // Bounds inside randn's range, so that both sides of each are sampled (never within gradcheck's step).
    row(OpId::clamp_min, one({3, 4}), [](auto& v) { return clamp_min(v[0], -0.25); });
    row(OpId::clamp_max, one({3, 4}), [](auto& v) { return clamp_max(v[0], 0.25); });
    // ---- reductions
    row(OpId::sum, one({3, 4}), [](auto& v) { return sum(v[0]); });
    row(OpId::sum_dims, one({3, 4, 2}), [](auto& v) { return sum(v[0], {0, 2}); });
    row(OpId::mean, one({3, 4}), [](auto& v) { return mean(v[0]); });
    row(OpId::mean_dims, one({3, 4, 2}), [](auto& v) { return mean(v[0], {1}, true); });
    row(OpId::prod, one({3, 4}), [](auto& v) { return prod(v[0]); });
    row(OpId::max, one({3, 4}), [](auto& v) { return max(v[0]); });
    row(OpId::min, one({3, 4}), [](auto& v) { return min(v[0]); });
    row(OpId::amax, one({3, 4}), [](auto& v) { return amax(v[0], {1}); });
    row(OpId::amin, one({3, 4}), [](auto& v) { return amin(v[0], {1}); });
    row(OpId::norm, one({3, 4}), [](auto& v) { return norm(v[0], {1}); });
    row(OpId::var, one({3, 4}), [](auto& v) { return var(v[0], {1}); });
    row(OpId::std, one({3, 4}), [](auto& v) { return std(v[0], {0}, true); });
    // ---- matrix products
    row(
        OpId::mm, two({3, 4}, {4, 2}), [](auto& v) { return mm(v[0], v[1]); }, 2);
    row(
        OpId::bmm, two({2, 3, 4}, {2, 4, 5}), [](auto& v) { return bmm(v[0], v[1]); }, 2);
    row(
        OpId::addmm,
        [](Device d) {
          return std::vector<Tensor>{r({2}, d), r({3, 4}, d), r({4, 2}, d)};
        },
        [](auto& v) { return addmm(v[0], v[1], v[2], 0.5, 2.0); }, 3);
    row(
        OpId::dot, two({5}, {5}), [](auto& v) { return matmul(v[0], v[1]); }, 2);
    row(
        OpId::mv, two({3, 4}, {4}), [](auto& v) { return matmul(v[0], v[1]); }, 2);
    // ---- views
    row(OpId::view, one({3, 4}), [](auto& v) { return v[0].view({2, 6}); });
    row(OpId::t, one({3, 4}), [](auto& v) { return v[0].t(); });
    row(OpId::transpose, one({2, 3, 4}), [](auto& v) { return v[0].transpose(0, 2); });
    row(OpId::permute, one({2, 3, 4}), [](auto& v) { return v[0].permute({1, 2, 0}); });
    row(OpId::expand, one({3, 1}), [](auto& v) { return v[0].expand({2, 3, 4}); });
    row(OpId::unsqueeze, one({3, 4}), [](auto& v) { return v[0].unsqueeze(1); });
    row(OpId::squeeze, one({3, 1, 4}), [](auto& v) { return v[0].squeeze(1); });
    row(OpId::select, one({3, 4}), [](auto& v) { return v[0].select(1, 2); });
    row(OpId::slice, one({5, 4}), [](auto& v) { return v[0].slice(0, 1, 5, 2); });
    row(OpId::unbind, one({3, 4}), [](auto& v) { return v[0].unbind(0)[1]; });
    row(OpId::split, one({5, 4}), [](auto& v) { return v[0].split(2, 0)[1]; });
    // ---- copies and joins
    row(OpId::clone, one({3, 4}), [](auto& v) { return v[0].clone(); });
    row(
        OpId::to_dtype, one({3, 4}), [](auto& v) { return v[0].to(ScalarType::float32); }, 1, 0.1);
    row(OpId::to_device, one({3, 4}), [](auto& v) { return v[0].to(other_device(v[0].device())); });
    row(OpId::copy, one({3, 4}), [](auto& v) {
      Tensor out = zeros({3, 4}, TensorOptions{ScalarType::float64, v[0].device()});
      out.copy_(v[0]);
      return out;
    });
    row(
        OpId::cat, two({2, 4}, {3, 4}),
        [](auto& v) {
          return cat({v[0], v[1]}, 0);
        },
        2);
    row(
        OpId::stack, two({3, 4}, {3, 4}),
        [](auto& v) {
          return stack({v[0], v[1]}, 1);
        },
        2);
    row(OpId::constant_pad_nd, one({2, 3, 5}), [](auto& v) { return constant_pad_nd(v[0], {1, 2, -1, 0}, 0.5); });
    // ---- indexing and nn
    row(
        OpId::index_select,
        [](Device d) {
          return std::vector<Tensor>{r({4, 3}, d), indices({2, 0, 2}, d)};
        },
        [](auto& v) { return v[0].index_select(0, v[1]); });
    row(
        OpId::gather,
        [](Device d) {
          return std::vector<Tensor>{r({2, 3}, d), indices({2, 0, 1, 1}, d).view({2, 2})};
        },
        [](auto& v) { return v[0].gather(1, v[1]); });
    // ---- along one dimension (sort and topk: randn values are distinct, so the order is stable under gradcheck)
    row(OpId::cumsum, one({3, 4}), [](auto& v) { return cumsum(v[0], 1); });
    row(
        OpId::flip, one({3, 4}), [](auto& v) { return flip(v[0], 0); }, 0);
    row(OpId::sort, one({3, 5}), [](auto& v) { return sort(v[0], 1, true).first; });
    row(OpId::topk, one({4, 5}), [](auto& v) { return topk(v[0], 2, 0).first; });
    row(
        OpId::embedding,
        [](Device d) {
          return std::vector<Tensor>{r({5, 3}, d), indices({4, 0, 4, 1}, d)};
        },
        [](auto& v) { return embedding(v[0], v[1]); });
    row(OpId::softmax, one({3, 4}), [](auto& v) { return softmax(v[0], 1); });
    row(OpId::log_softmax, one({3, 4}), [](auto& v) { return log_softmax(v[0], 0); });
    row(
        OpId::masked_fill,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), mask({4}, d)};
        },
        [](auto& v) { return masked_fill(v[0], v[1], 0.5); });
    row(
        OpId::masked_select,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), mask({4}, d)};
        },
        [](auto& v) { return masked_select(v[0], v[1]); });
    row(
        OpId::where,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), r({3, 4}, d), mask({3, 4}, d)};
        },
        [](auto& v) { return where(v[2], v[0], v[1]); }, 2);
    // The same mask every call (finite differences call it again), so reseed first.
    row(OpId::dropout, one({3, 4}), [](auto& v) {
      manual_seed(7);
      return dropout(v[0], 0.5);
    });
    row(
        OpId::native_layer_norm,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), r({4}, d), r({4}, d)};
        },
        [](auto& v) { return layer_norm(v[0], {4}, v[1], v[2]); }, 3);
    row(
        OpId::fused_rms_norm,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), r({4}, d)};
        },
        [](auto& v) { return rms_norm(v[0], {4}, v[1], 1e-6); }, 2);
    // scaled_dot_product_attention's fused backends, called as ops (float64 would take the math path through
    // scaled_dot_product_attention): causal with Sq < Sk (top-left aligned) and Dv != D; a scale given.
    auto attention_inputs = [](Device d) {
      return std::vector<Tensor>{r({2, 2, 3, 4}, d), r({2, 2, 5, 4}, d), r({2, 2, 5, 3}, d)};
    };
    row(
        OpId::scaled_dot_product_cudnn_attention, attention_inputs,
        [](auto& v) { return scaled_dot_product_cudnn_attention(v[0], v[1], v[2], true, true).output; }, 3);
    row(
        OpId::scaled_dot_product_efficient_attention, attention_inputs,
        [](auto& v) { return scaled_dot_product_efficient_attention(v[0], v[1], v[2], true, false, 0.7).output; }, 3);
    row(
        OpId::scaled_dot_product_flash_attention,
        [](Device d) {
          return std::vector<Tensor>{r({2, 2, 3, 8}, d), r({2, 2, 5, 8}, d), r({2, 2, 5, 8}, d)};
        },
        [](auto& v) { return scaled_dot_product_flash_attention(v[0], v[1], v[2], false, 0.6).output; }, 3);
    row(OpId::triu, one({3, 4}), [](auto& v) { return triu(v[0], 1); });
    row(OpId::tril, one({3, 4}), [](auto& v) { return tril(v[0], -1); });
    row(OpId::clamp, one({3, 4}), [](auto& v) { return clamp(v[0], -0.5, 0.5); });
    // ---- losses
    row(
        OpId::nll_loss,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), indices({1, 3, 0}, d)};
        },
        [](auto& v) { return nll_loss(log_softmax(v[0], 1), v[1]); });
    row(
        OpId::mse_loss, two({3, 4}, {3, 4}), [](auto& v) { return mse_loss(v[0], v[1]); }, 2);
    // ---- in-place updates (on a copy, so inputs stay as made)
    row(OpId::fill, one({3, 4}), [](auto& v) {
      Tensor out = v[0].clone();
      out.fill_(1.5);
      return out;
    });
    row(OpId::zero, one({3, 4}), [](auto& v) {
      Tensor out = v[0].clone();
      out.zero_();
      return out;
    });
    row(
        OpId::lerp, two({3, 4}, {3, 4}),
        [](auto& v) {
          Tensor out = v[0].clone();
          lerp_(out, v[1], 0.25);
          return out;
        },
        2);
    row(
        OpId::addcmul,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), r({3, 4}, d), r({4}, d)};
        },
        [](auto& v) {
          Tensor out = v[0].clone();
          addcmul_(out, v[1], v[2], 0.5);
          return out;
        },
        3);
    row(
        OpId::addcdiv,
        [](Device d) {
          return std::vector<Tensor>{r({3, 4}, d), r({3, 4}, d), positive({3, 4}, d)};
        },
        [](auto& v) {
          Tensor out = v[0].clone();
          addcdiv_(out, v[1], v[2], 0.5);
          return out;
        },
        3);
    return m;
  }();
  return samples;
}

// A sample's inputs on `device`: the same values on every device (one seeded generator).
inline std::vector<Tensor> sample_inputs(const OpSample& sample, Device device) {
  manual_seed(11);
  return sample.inputs(device);
}

}  // namespace bytegrad::testing
