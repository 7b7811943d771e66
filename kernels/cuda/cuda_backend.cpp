// The cuda KernelBackend: every method makes the tensor's GPU current, converts its views for the kernels
// (cuda_kernels.h) and launches on the default stream. Kernels live in cuda_elementwise.cu, cuda_reduce.cu,
// cuda_softmax.cu, cuda_index.cu, cuda_ternary.cu, cuda_loss.cu, cuda_layer_norm.cu and cuda_triangle.cu; matrix products in cuda_gemm.cpp; host
// transfers in cuda_host_transfer.cpp. Nothing here allocates device memory except gemm's layout copies (documented
// there); no method synchronises beyond what cudaMemcpy does.
#include <stdexcept>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_gemm.h"
#include "kernels/cuda/cuda_host_transfer.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_view_conversion.h"

namespace bytegrad {

namespace {

// backend.h's enums -> the kernels' mirrors. Switches without default, so -Wswitch flags a new op.
cuda::UnaryOp to_cuda(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return cuda::UnaryOp::neg;
    case UnaryOp::abs: return cuda::UnaryOp::abs;
    case UnaryOp::exp: return cuda::UnaryOp::exp;
    case UnaryOp::log: return cuda::UnaryOp::log;
    case UnaryOp::sqrt: return cuda::UnaryOp::sqrt;
    case UnaryOp::relu: return cuda::UnaryOp::relu;
    case UnaryOp::sigmoid: return cuda::UnaryOp::sigmoid;
    case UnaryOp::tanh: return cuda::UnaryOp::tanh;
    case UnaryOp::gelu: return cuda::UnaryOp::gelu;
    case UnaryOp::logical_not: return cuda::UnaryOp::logical_not;
  }
  throw std::invalid_argument("cuda backend: unknown unary op");
}

cuda::BinaryOp to_cuda(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return cuda::BinaryOp::add;
    case BinaryOp::sub: return cuda::BinaryOp::sub;
    case BinaryOp::mul: return cuda::BinaryOp::mul;
    case BinaryOp::div: return cuda::BinaryOp::div;
    case BinaryOp::pow: return cuda::BinaryOp::pow;
    case BinaryOp::maximum: return cuda::BinaryOp::maximum;
    case BinaryOp::minimum: return cuda::BinaryOp::minimum;
    case BinaryOp::eq: return cuda::BinaryOp::eq;
    case BinaryOp::ne: return cuda::BinaryOp::ne;
    case BinaryOp::lt: return cuda::BinaryOp::lt;
    case BinaryOp::le: return cuda::BinaryOp::le;
    case BinaryOp::gt: return cuda::BinaryOp::gt;
    case BinaryOp::ge: return cuda::BinaryOp::ge;
    case BinaryOp::logical_and: return cuda::BinaryOp::logical_and;
    case BinaryOp::logical_or: return cuda::BinaryOp::logical_or;
    case BinaryOp::relu_backward: return cuda::BinaryOp::relu_backward;
    case BinaryOp::sigmoid_backward: return cuda::BinaryOp::sigmoid_backward;
    case BinaryOp::tanh_backward: return cuda::BinaryOp::tanh_backward;
    case BinaryOp::gelu_backward: return cuda::BinaryOp::gelu_backward;
  }
  throw std::invalid_argument("cuda backend: unknown binary op");
}

cuda::ReduceOp to_cuda(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return cuda::ReduceOp::sum;
    case ReduceOp::mean: return cuda::ReduceOp::mean;
    case ReduceOp::prod: return cuda::ReduceOp::prod;
    case ReduceOp::max: return cuda::ReduceOp::max;
    case ReduceOp::min: return cuda::ReduceOp::min;
    case ReduceOp::argmax: return cuda::ReduceOp::argmax;
    case ReduceOp::argmin: return cuda::ReduceOp::argmin;
    case ReduceOp::norm: return cuda::ReduceOp::norm;
    case ReduceOp::var: return cuda::ReduceOp::var;
    case ReduceOp::std: return cuda::ReduceOp::std;
  }
  throw std::invalid_argument("cuda backend: unknown reduction");
}

cuda::Reduction to_cuda(Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return cuda::Reduction::none;
    case Reduction::mean: return cuda::Reduction::mean;
    case Reduction::sum: return cuda::Reduction::sum;
  }
  throw std::invalid_argument("cuda backend: unknown loss reduction");
}

cuda::TernaryOp to_cuda(TernaryOp op) {
  switch (op) {
    case TernaryOp::lerp: return cuda::TernaryOp::lerp;
    case TernaryOp::addcmul: return cuda::TernaryOp::addcmul;
    case TernaryOp::addcdiv: return cuda::TernaryOp::addcdiv;
  }
  throw std::invalid_argument("cuda backend: unknown ternary op");
}

using cuda::CudaDeviceGuard;
using cuda::to_cuda_view;

class CudaBackend final : public KernelBackend {
 public:
  void fill(const StridedView& out, double value) override {
    CudaDeviceGuard guard(out.device);
    cuda::fill(to_cuda_view(out), value);
  }
  void arange(const StridedView& out, double start, double step) override {
    CudaDeviceGuard guard(out.device);
    cuda::arange(to_cuda_view(out), start, step);
  }
  void copy(const StridedView& dst, const StridedView& src) override {
    CudaDeviceGuard guard(dst.device);
    cuda::copy(to_cuda_view(dst), to_cuda_view(src));
  }
  void copy_from_host(const StridedView& dst, const void* host) override {
    CudaDeviceGuard guard(dst.device);
    cuda::copy_from_host(dst, host);
  }
  void copy_to_host(void* host, const StridedView& src) override {
    CudaDeviceGuard guard(src.device);
    cuda::copy_to_host(host, src);
  }
  void unary(UnaryOp op, const StridedView& out, const StridedView& in) override {
    CudaDeviceGuard guard(out.device);
    cuda::unary(to_cuda(op), to_cuda_view(out), to_cuda_view(in));
  }
  void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha) override {
    CudaDeviceGuard guard(out.device);
    cuda::binary(to_cuda(op), to_cuda_view(out), to_cuda_view(a), to_cuda_view(b), alpha);
  }
  void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                     bool scalar_first) override {
    CudaDeviceGuard guard(out.device);
    cuda::binary_scalar(to_cuda(op), to_cuda_view(out), to_cuda_view(a), scalar, scalar_first);
  }
  void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) override {
    CudaDeviceGuard guard(out.device);
    cuda::where(to_cuda_view(out), to_cuda_view(cond), to_cuda_view(a), to_cuda_view(b));
  }
  void masked_fill(const StridedView& out, const StridedView& mask, double value) override {
    CudaDeviceGuard guard(out.device);
    cuda::masked_fill(to_cuda_view(out), to_cuda_view(mask), value);
  }
  void reduce(ReduceOp op, const StridedView& out, const StridedView& in) override {
    CudaDeviceGuard guard(out.device);
    cuda::reduce(to_cuda(op), to_cuda_view(out), to_cuda_view(in));
  }
  void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) override {
    CudaDeviceGuard guard(out.device);
    cuda::reduce_variance(to_cuda_view(out), to_cuda_view(in), correction, take_sqrt);
  }
  void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                           int64_t dim) override {
    CudaDeviceGuard guard(in.device);
    cuda::reduce_with_indices(to_cuda(op), to_cuda_view(values), to_cuda_view(indices), to_cuda_view(in), dim);
  }
  void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) override {
    CudaDeviceGuard guard(out.device);
    cuda::softmax(to_cuda_view(out), to_cuda_view(in), dim, log);
  }
  void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output,
                        int64_t dim, bool log) override {
    CudaDeviceGuard guard(grad_in.device);
    cuda::softmax_backward(to_cuda_view(grad_in), to_cuda_view(grad_out), to_cuda_view(output), dim, log);
  }
  void gemm(const StridedView& out, const StridedView& a, const StridedView& b, double alpha, double beta) override {
    CudaDeviceGuard guard(out.device);
    cuda::gemm(out, a, b, alpha, beta);
  }
  void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    CudaDeviceGuard guard(out.device);
    cuda::index_select(to_cuda_view(out), to_cuda_view(in), dim, to_cuda_view(index));
  }
  void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    CudaDeviceGuard guard(out.device);
    cuda::index_add(to_cuda_view(out), dim, to_cuda_view(index), to_cuda_view(source));
  }
  void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    CudaDeviceGuard guard(out.device);
    cuda::gather(to_cuda_view(out), to_cuda_view(in), dim, to_cuda_view(index));
  }
  void scatter_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    CudaDeviceGuard guard(out.device);
    cuda::scatter_add(to_cuda_view(out), dim, to_cuda_view(index), to_cuda_view(source));
  }
  void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
               const StridedView& b, double value) override {
    CudaDeviceGuard guard(out.device);
    cuda::ternary(to_cuda(op), to_cuda_view(out), to_cuda_view(self), to_cuda_view(a), to_cuda_view(b), value);
  }
  void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                  const StridedView* weight, const StridedView* bias, double eps) override {
    CudaDeviceGuard guard(y.device);
    const cuda::CudaView w = weight ? to_cuda_view(*weight) : cuda::CudaView{};
    const cuda::CudaView b = bias ? to_cuda_view(*bias) : cuda::CudaView{};
    cuda::layer_norm(to_cuda_view(y), to_cuda_view(mean), to_cuda_view(rstd), to_cuda_view(x), weight ? &w : nullptr,
                     bias ? &b : nullptr, eps);
  }
  void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials, const StridedView* dbias_partials,
                           const StridedView& dy, const StridedView& x, const StridedView& mean, const StridedView& rstd,
                           const StridedView* weight) override {
    CudaDeviceGuard guard(x.device);
    auto convert = [](const StridedView* v) { return v ? to_cuda_view(*v) : cuda::CudaView{}; };
    const cuda::CudaView gx = convert(dx), gw = convert(dweight_partials), gb = convert(dbias_partials),
                         w = convert(weight);
    cuda::layer_norm_backward(dx ? &gx : nullptr, dweight_partials ? &gw : nullptr, dbias_partials ? &gb : nullptr,
                              to_cuda_view(dy), to_cuda_view(x), to_cuda_view(mean), to_cuda_view(rstd),
                              weight ? &w : nullptr);
  }
  void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) override {
    CudaDeviceGuard guard(out.device);
    cuda::triangle(to_cuda_view(out), to_cuda_view(in), diagonal, upper);
  }
  void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
                const StridedView& target, Reduction reduction, int64_t ignore_index) override {
    CudaDeviceGuard guard(output.device);
    cuda::nll_loss(to_cuda_view(output), to_cuda_view(total_weight), to_cuda_view(log_probs), to_cuda_view(target),
                   to_cuda(reduction), ignore_index);
  }
  void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                         const StridedView& total_weight, Reduction reduction, int64_t ignore_index) override {
    CudaDeviceGuard guard(grad_input.device);
    cuda::nll_loss_backward(to_cuda_view(grad_input), to_cuda_view(grad_output), to_cuda_view(target),
                            to_cuda_view(total_weight), to_cuda(reduction), ignore_index);
  }
};

}  // namespace

KernelBackend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace bytegrad
