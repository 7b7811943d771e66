// nll_loss forward/backward (with and without class weights) and the ternary optimizer updates on cuda
// against cpu, including a transposed input, ignored targets, and updates in place (out aliasing self).
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

TEST_CASE("nll_loss forward and backward, every reduction, on cuda match cpu") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::float16}) {
    // (300, 37) log-probabilities seen through a transpose; targets with some -100 (ignored).
    Pair base = random_pair({37, 300}, dtype);
    Pair in = base.map([](const Tensor& t) { return t.t(); });
    std::vector<double> t(300);
    for (size_t i = 0; i < t.size(); ++i) t[i] = i % 11 == 0 ? -100.0 : static_cast<double>((i * 7) % 37);
    Pair target = from_values(t, {300}, ScalarType::int64);
    // class weights in [0.5, 1.5)
    std::vector<double> w(37);
    for (size_t c = 0; c < w.size(); ++c) w[c] = 0.5 + static_cast<double>((c * 5) % 37) / 37.0;
    const Pair class_weights = from_values(w, {37}, dtype);
    for (const bool weighted : {false, true}) {
      CAPTURE(weighted);
      const StridedView cpu_w = class_weights.cpu_view(), gpu_w = class_weights.gpu_view();
      const StridedView* cw = weighted ? &cpu_w : nullptr;
      const StridedView* gw = weighted ? &gpu_w : nullptr;
      for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
        Pair out = empty_pair(r == Reduction::none ? Shape{300} : Shape{}, dtype, 7.0);
        Pair weight = empty_pair({}, dtype, 7.0);
        cpu().nll_loss(out.cpu_view(), weight.cpu_view(), in.cpu_view(), target.cpu_view(), r, -100, cw);
        gpu().nll_loss(out.gpu_view(), weight.gpu_view(), in.gpu_view(), target.gpu_view(), r, -100, gw);
        check_close(out, default_rtol(dtype) * 4, default_rtol(dtype) * 4, "nll_loss output");
        check_close(weight, weighted ? default_rtol(dtype) * 4 : 0.0, weighted ? default_rtol(dtype) * 4 : 0.0,
                    "total_weight");

        Pair grad_out = r == Reduction::none ? random_pair({300}, dtype) : from_values({0.75}, {}, dtype);
        Pair grad_in = empty_pair({300, 37}, dtype, 0.0);
        cpu().nll_loss_backward(grad_in.cpu_view(), grad_out.cpu_view(), target.cpu_view(), weight.cpu_view(), r, -100,
                                cw);
        gpu().nll_loss_backward(grad_in.gpu_view(), grad_out.gpu_view(), target.gpu_view(), weight.gpu_view(), r, -100,
                                gw);
        check_close(grad_in, default_rtol(dtype) * 4, default_rtol(dtype), "nll_loss_backward");
      }
    }
  }
}

TEST_CASE("lerp, addcmul and addcdiv in place on cuda match cpu") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16}) {
    for (TernaryOp op : {TernaryOp::lerp, TernaryOp::addcmul, TernaryOp::addcdiv}) {
      for (double value : {0.1, 0.9, -0.5}) {
        Pair self = random_pair({64, 129}, dtype);
        Pair a = random_pair({64, 129}, dtype);
        Pair b = random_pair({129, 64}, dtype, 1.0).map([](const Tensor& t) { return t.t(); });
        cpu().ternary(op, self.cpu_view(), self.cpu_view(), a.cpu_view(), b.cpu_view(), value);
        gpu().ternary(op, self.gpu_view(), self.gpu_view(), a.gpu_view(), b.gpu_view(), value);
        // addcdiv divides by normals near zero: compare relative to the largest magnitude.
        const double scale = std::max(1.0, max_abs(self.cpu));
        check_close(self, default_rtol(dtype) * 2, default_rtol(dtype) * 2 * scale,
                    "ternary op " + std::to_string(static_cast<int>(op)));
      }
    }
  }
}

}  // namespace
}  // namespace bytegrad::testing
