// The CPU backend: cpu tensors and sim tensors (whose "device" memory is host memory) run these kernels.
// Each method forwards to the kernel family that implements it (one file per family, cpu_kernels.h).
// No kernel allocates device memory; the few host scratch buffers are documented beside their kernel.
#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad {

namespace {

class CpuBackend final : public KernelBackend {
 public:
  void fill(const StridedView& out, double value) override { cpu::fill(out, value); }
  void arange(const StridedView& out, double start, double step) override { cpu::arange(out, start, step); }
  void copy(const StridedView& dst, const StridedView& src) override { cpu::copy(dst, src); }
  void copy_from_host_unchecked(const StridedView& dst, const void* host) override { cpu::copy_from_host(dst, host); }
  void copy_to_host_unchecked(void* host, const StridedView& src) override { cpu::copy_to_host(host, src); }

  void unary(UnaryOp op, const StridedView& out, const StridedView& in) override { cpu::unary(op, out, in); }
  void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha,
              std::optional<ScalarType> common) override {
    cpu::binary(op, out, a, b, alpha, common.value_or(promote_types(a.dtype, b.dtype)));
  }
  void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                     bool scalar_first) override {
    cpu::binary_scalar(op, out, a, scalar, scalar_first);
  }
  void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) override {
    cpu::where(out, cond, a, b);
  }
  void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value) override {
    cpu::masked_fill(out, src, mask, value);
  }

  void reduce(ReduceOp op, const StridedView& out, const StridedView& in) override { cpu::reduce(op, out, in); }
  void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) override {
    cpu::reduce_variance(out, in, correction, take_sqrt);
  }
  void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                           int64_t dim) override {
    cpu::reduce_with_indices(op, values, indices, in, dim);
  }

  void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) override {
    cpu::softmax(out, in, dim, log);
  }
  void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim,
                        bool log) override {
    cpu::softmax_backward(grad_in, grad_out, output, dim, log);
  }

  void gemm(const GemmArgs& args) override { cpu::gemm(args); }

  void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    cpu::index_select(out, in, dim, index);
  }
  void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    cpu::index_add(out, dim, index, source);
  }
  void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    cpu::gather(out, in, dim, index);
  }
  void scatter_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    cpu::scatter_add(out, dim, index, source);
  }
  void scatter_fill(const StridedView& out, int64_t dim, const StridedView& index, double value) override {
    cpu::scatter_fill(out, dim, index, value);
  }
  void cumsum(const StridedView& out, const StridedView& in, int64_t dim) override { cpu::cumsum(out, in, dim); }
  void sort(const StridedView& values, const StridedView& indices, const StridedView& in, int64_t dim,
            bool descending) override {
    cpu::sort(values, indices, in, dim, descending);
  }
  void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask) override {
    cpu::masked_select(out, in, mask);
  }
  void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source) override {
    cpu::masked_scatter(out, mask, source);
  }

  void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
               const StridedView& b, double value, std::optional<ScalarType> common) override {
    cpu::ternary(op, out, self, a, b, value, common);
  }

  void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                  const StridedView* weight, const StridedView* bias, double eps) override {
    cpu::layer_norm(y, mean, rstd, x, weight, bias, eps);
  }
  void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials,
                           const StridedView* dbias_partials, const StridedView& dy, const StridedView& x,
                           const StridedView& mean, const StridedView& rstd, const StridedView* weight,
                           DeviceScratch /*scratch*/) override {
    cpu::layer_norm_backward(dx, dweight_partials, dbias_partials, dy, x, mean, rstd, weight);
  }
  void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) override {
    cpu::triangle(out, in, diagonal, upper);
  }
  void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
                const StridedView& target, Reduction reduction, int64_t ignore_index,
                const StridedView* weight) override {
    cpu::nll_loss(output, total_weight, log_probs, target, reduction, ignore_index, weight);
  }
  void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                         const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                         const StridedView* weight) override {
    cpu::nll_loss_backward(grad_input, grad_output, target, total_weight, reduction, ignore_index, weight);
  }
  bool packs_nll_rows() const override { return true; }
  void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                              const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                              const StridedView* weight) override {
    cpu::nll_loss_backward_rows(grad_input, grad_output, target, total_weight, reduction, ignore_index, weight);
  }
  void cast_nll_rows(const StridedView& out, const StridedView& packed) override { cpu::cast_nll_rows(out, packed); }
  void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                         const StridedView& v, double scale, bool is_causal, const AttentionExtras& extras) override {
    cpu::attention_forward(out, lse, q, k, v, scale, is_causal, extras);
  }
  void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                          const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                          const StridedView& lse, double scale, bool is_causal, DeviceScratch,
                          const AttentionExtras& extras) override {
    cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale, is_causal, extras);
  }
};

}  // namespace

KernelBackend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace bytegrad
