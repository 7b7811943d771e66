// The cuda KernelBackend: every method makes the tensor's GPU current and hands its views and op to the
// kernel launchers (cuda_kernels.h), which run on the current stream. Kernels live in cuda_elementwise.cu,
// cuda_reduce.cu, cuda_softmax.cu, cuda_index.cu, cuda_ternary.cu, cuda_loss.cu, cuda_layer_norm.cu,
// cuda_triangle.cu and cuda_attention.cu; matrix products in cuda_gemm.cpp; host transfers in
// cuda_host_transfer.cpp. Nothing here allocates device memory (gemm's copies and workspace come from the op
// layer); no method synchronises but the host transfers, which wait for the stream.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "bytegrad/core/enum_name.h"
#include "bytegrad/kernels/backend.h"
#include "bytegrad/kernels/cuda/cuda_gemm.h"
#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/kernels/cuda/cuda_host_transfer.h"
#include "bytegrad/kernels/cuda/cuda_kernels.h"
#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/kernels/cuda/cuda_profile.h"

namespace bytegrad {

namespace {

using cuda::CudaCallTimer;

// Makes `device` current for its lifetime and restores the previous device after (as PyTorch's
// CUDAGuard), so kernels, cuBLAS and copies all address the tensor's GPU, and runs them on the device's
// current stream (launch_stream()).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(Device device) : stream_(checked_stream(device)) {
    BYTEGRAD_CUDA_CHECK(cudaGetDevice(&previous_));
    target_ = device.index;
    if (previous_ != target_) BYTEGRAD_CUDA_CHECK(cudaSetDevice(target_));
  }
  ~CudaDeviceGuard() {
    if (previous_ != target_) (void)cudaSetDevice(previous_);  // a destructor must not throw
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  static cudaStream_t checked_stream(Device device) {
    if (device.type != DeviceType::cuda)
      throw std::invalid_argument("cuda backend: given a " + device.str() + " tensor");
    return static_cast<cudaStream_t>(current_stream(device).native_handle());
  }
  cuda::LaunchStreamScope stream_;
  int previous_ = 0;
  int target_ = 0;
};

thread_local cudaStream_t current_launch_stream = nullptr;

}  // namespace

namespace cuda {

cudaStream_t launch_stream() { return current_launch_stream; }

LaunchStreamScope::LaunchStreamScope(cudaStream_t stream) : previous_(current_launch_stream) {
  current_launch_stream = stream;
}

LaunchStreamScope::~LaunchStreamScope() { current_launch_stream = previous_; }

}  // namespace cuda

namespace {

// The names in the enums' order (kernels/backend.h).
const char* reduce_op_name(ReduceOp op) {
  static constexpr const char* kNames[] = {"sum",    "mean",   "prod", "max", "min",
                                           "argmax", "argmin", "norm", "var", "std"};
  return enum_name(op, kNames, "?");
}

const char* ternary_op_name(TernaryOp op) {
  static constexpr const char* kNames[] = {"lerp", "addcmul", "addcdiv"};
  return enum_name(op, kNames, "?");
}

// "copy memcpy float32" (contiguous, one dtype: the copy engine), else "copy strided float32<-int64".
std::string copy_key(const StridedView& dst, const StridedView& src) {
  const bool memcpy = dst.dtype == src.dtype && dst.is_contiguous() && src.is_contiguous();
  std::string key = memcpy ? "copy memcpy " : "copy strided ";
  key += scalar_type_name(dst.dtype);
  if (dst.dtype != src.dtype) {
    key += "<-";
    key += scalar_type_name(src.dtype);
  }
  return key;
}

// "gemm TN float32 m768 n1024 k3072" (+ " x48" batches): one row per product shape.
std::string gemm_key(const GemmArgs& g) {
  std::string key = "gemm ";
  key += g.transa ? 'T' : 'N';
  key += g.transb ? 'T' : 'N';
  key += ' ';
  key += scalar_type_name(g.dtype);
  key += " m" + std::to_string(g.m) + " n" + std::to_string(g.n) + " k" + std::to_string(g.k);
  if (g.batches != 1) key += " x" + std::to_string(g.batches);
  return key;
}

// Launches the calls a foreach batch held back, so that every other call runs after them.
inline void flush_foreach() {
  if (cuda::foreach_pending()) cuda::foreach_flush();
}

// What a launching method holds for the length of its call: the tensor's GPU made current and the foreach
// batch held back launched (this call runs after it), then the call's timer.
class CudaCall {
 public:
  CudaCall(Device device, const char* method, std::string_view op, ScalarType dtype)
      : guard_(device), timer_(method, op, dtype) {}
  template <typename F>
  CudaCall(Device device, F&& make_key) : guard_(device), timer_(std::forward<F>(make_key)) {}

 private:
  struct FlushingGuard : CudaDeviceGuard {
    explicit FlushingGuard(Device device) : CudaDeviceGuard(device) { flush_foreach(); }
  };
  FlushingGuard guard_;
  CudaCallTimer timer_;
};

class CudaBackend final : public KernelBackend {
 public:
  void begin_foreach() override { cuda::foreach_begin(); }
  void end_foreach() override { cuda::foreach_end(); }
  void fill(const StridedView& out, double value) override {
    CudaCall call(out.device, "fill", "", out.dtype);
    cuda::fill(out, value);
  }
  void arange(const StridedView& out, double start, double step) override {
    CudaCall call(out.device, "arange", "", out.dtype);
    cuda::arange(out, start, step);
  }
  void copy(const StridedView& dst, const StridedView& src) override {
    CudaCall call(dst.device, [&] { return copy_key(dst, src); });
    cuda::copy(dst, src);
  }
  void copy_from_host_unchecked(const StridedView& dst, const void* host) override {
    CudaCall call(dst.device, "copy_from_host", "", dst.dtype);
    cuda::copy_from_host(dst, host);
  }
  void copy_to_host_unchecked(void* host, const StridedView& src) override {
    CudaCall call(src.device, "copy_to_host", "", src.dtype);
    cuda::copy_to_host(host, src);
  }
  void unary(UnaryOp op, const StridedView& out, const StridedView& in) override {
    CudaDeviceGuard guard(out.device);
    if (cuda::foreach_enqueue_unary(op, out, in)) return;
    flush_foreach();
    CudaCallTimer timer("unary", op_name(op_id(op)), in.dtype);
    cuda::unary(op, out, in);
  }
  void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha,
              std::optional<ScalarType> common) override {
    CudaCall call(out.device, "binary", op_name(op_id(op)), a.dtype);
    cuda::binary(op, out, a, b, alpha, common.value_or(promote_types(a.dtype, b.dtype)));
  }
  void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                     bool scalar_first) override {
    CudaDeviceGuard guard(out.device);
    if (cuda::foreach_enqueue_binary_scalar(op, out, a, scalar, scalar_first)) return;
    flush_foreach();
    CudaCallTimer timer("binary_scalar", op_name(op_id(op)), a.dtype);
    cuda::binary_scalar(op, out, a, scalar, scalar_first);
  }
  void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) override {
    CudaCall call(out.device, "where", "", out.dtype);
    cuda::where(out, cond, a, b);
  }
  void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value) override {
    CudaCall call(out.device, "masked_fill", "", out.dtype);
    cuda::masked_fill(out, src, mask, value);
  }
  void masked_fill_then_scalar(BinaryOp op, const StridedView& out, const StridedView& src, const StridedView& mask,
                               double value, double scalar) override {
    CudaCall call(out.device, "masked_fill_then_scalar", op_name(op_id(op)), out.dtype);
    cuda::masked_fill_then_scalar(op, out, src, mask, value, scalar);
  }
  void softmax_backward_then(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                             int64_t dim, const StridedView* mask, double value, const ScalarStep* then) override {
    if (!cuda::softmax_backward_chain_fits(out, grad_out, output, dim, then)) {
      KernelBackend::softmax_backward_then(out, grad_out, output, dim, mask, value, then);
      return;
    }
    CudaCall call(out.device, "softmax_backward_then", then ? op_name(op_id(then->op)) : (mask ? "masked" : ""),
                  out.dtype);
    cuda::softmax_backward_then(out, grad_out, output, dim, mask, value, then);
  }
  void wait_for_device() override { BYTEGRAD_CUDA_CHECK(cudaDeviceSynchronize()); }
  void amp_non_finite_check_and_unscale(const StridedView& grad, const StridedView& found_inf,
                                        const StridedView& inv_scale) override {
    CudaCall call(grad.device, "amp_non_finite_check_and_unscale", "", grad.dtype);
    cuda::amp_non_finite_check_and_unscale(grad, found_inf, inv_scale);
  }
  void amp_update_scale(const StridedView& scale, const StridedView& growth_tracker, const StridedView& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) override {
    CudaCall call(scale.device, "amp_update_scale", "", scale.dtype);
    cuda::amp_update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
  }
  void reduce(ReduceOp op, const StridedView& out, const StridedView& in) override {
    CudaCall call(out.device, "reduce", reduce_op_name(op), in.dtype);
    cuda::reduce(op, out, in);
  }
  void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) override {
    CudaCall call(out.device, "reduce_variance", take_sqrt ? "std" : "var", in.dtype);
    cuda::reduce_variance(out, in, correction, take_sqrt);
  }
  void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                           int64_t dim) override {
    CudaCall call(in.device, "reduce_with_indices", reduce_op_name(op), in.dtype);
    cuda::reduce_with_indices(op, values, indices, in, dim);
  }
  void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) override {
    CudaCall call(out.device, "softmax", log ? "log" : "", in.dtype);
    cuda::softmax(out, in, dim, log);
  }
  bool softmax_of_scaled(const StridedView& out, const StridedView& source, ScalarStep scale, const StridedView* mask,
                         double value, int64_t dim, bool log, const StridedView* copy) override {
    if (!cuda::softmax_of_scaled_fits(out, source, scale, mask, dim, copy)) return false;
    CudaCall call(out.device, "softmax_of_scaled", copy ? (mask ? "masked copy" : "copy") : (mask ? "masked" : ""),
                  source.dtype);
    cuda::softmax_of_scaled(out, source, scale, mask, value, dim, log, copy);
    return true;
  }
  void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim,
                        bool log) override {
    CudaCall call(grad_in.device, "softmax_backward", log ? "log" : "", grad_in.dtype);
    cuda::softmax_backward(grad_in, grad_out, output, dim, log);
  }
  void gemm(const GemmArgs& args) override {
    CudaCall call(args.device, [&] { return gemm_key(args); });
    cuda::gemm(args);
  }
  // Reads of `in` at `index` along dim, then their backward: sums of `source` into out at `index`.
  void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    CudaCall call(out.device, "index_select", "", in.dtype);
    cuda::index_select(out, in, dim, index);
  }
  void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    CudaCall call(out.device, "gather", "", in.dtype);
    cuda::gather(out, in, dim, index);
  }
  void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    CudaCall call(out.device, "index_add", "", out.dtype);
    cuda::index_add(out, dim, index, source);
  }
  void scatter_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    CudaCall call(out.device, "scatter_add", "", out.dtype);
    cuda::scatter_add(out, dim, index, source);
  }
  void scatter_fill(const StridedView& out, int64_t dim, const StridedView& index, double value) override {
    CudaCall call(out.device, "scatter_fill", "", out.dtype);
    cuda::scatter_fill(out, dim, index, value);
  }
  void cumsum(const StridedView& out, const StridedView& in, int64_t dim) override {
    CudaCall call(out.device, "cumsum", "", out.dtype);
    cuda::cumsum(out, in, dim);
  }
  void sort(const StridedView& values, const StridedView& indices, const StridedView& in, int64_t dim,
            bool descending) override {
    CudaCall call(values.device, "sort", descending ? "descending" : "", in.dtype);
    cuda::sort(values, indices, in, dim, descending);
  }
  void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask) override {
    CudaCall call(out.device, "masked_select", "", in.dtype);
    cuda::masked_select(out, in, mask);
  }
  void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source) override {
    CudaCall call(out.device, "masked_scatter", "", out.dtype);
    cuda::masked_scatter(out, mask, source);
  }
  void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
               const StridedView& b, double value, std::optional<ScalarType> common) override {
    CudaDeviceGuard guard(out.device);
    if ((!common || *common == out.dtype) && cuda::foreach_enqueue_ternary(op, out, self, a, b, value)) return;
    flush_foreach();
    CudaCallTimer timer("ternary", ternary_op_name(op), out.dtype);
    cuda::ternary(op, out, self, a, b, value, common);
  }
  void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                  const StridedView* weight, const StridedView* bias, double eps) override {
    CudaCall call(y.device, "layer_norm", "", x.dtype);
    cuda::layer_norm(y, mean, rstd, x, weight, bias, eps);
  }
  void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials,
                           const StridedView* dbias_partials, const StridedView& dy, const StridedView& x,
                           const StridedView& mean, const StridedView& rstd, const StridedView* weight,
                           DeviceScratch scratch) override {
    CudaCall call(x.device, "layer_norm_backward", "", x.dtype);
    cuda::layer_norm_backward(dx, dweight_partials, dbias_partials, dy, x, mean, rstd, weight, scratch);
  }
  void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) override {
    CudaCall call(out.device, "triangle", "", out.dtype);
    cuda::triangle(out, in, diagonal, upper);
  }
  void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
                const StridedView& target, Reduction reduction, int64_t ignore_index,
                const StridedView* weight) override {
    CudaCall call(output.device, "nll_loss", "", log_probs.dtype);
    cuda::nll_loss(output, total_weight, log_probs, target, reduction, ignore_index, weight);
  }
  void cast_target_elements(const StridedView& out, const StridedView& in, const StridedView& target,
                            int64_t ignore_index) override {
    CudaCall call(out.device, "cast_target_elements", "", in.dtype);
    cuda::cast_target_elements(out, in, target, ignore_index);
  }
  void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                         const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                         const StridedView* weight) override {
    CudaCall call(grad_input.device, "nll_loss_backward", "", grad_input.dtype);
    cuda::nll_loss_backward(grad_input, grad_output, target, total_weight, reduction, ignore_index, weight);
  }
  bool packs_nll_rows() const override { return true; }
  void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                              const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                              const StridedView* weight) override {
    CudaCall call(grad_input.device, "nll_loss_backward_rows", "", grad_input.dtype);
    cuda::nll_loss_backward_rows(grad_input, grad_output, target, total_weight, reduction, ignore_index, weight);
  }
  void cast_nll_rows(const StridedView& out, const StridedView& packed) override {
    CudaCall call(out.device, "cast_nll_rows", "", packed.dtype);
    cuda::cast_nll_rows(out, packed);
  }
  void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                         const StridedView& v, double scale, bool is_causal, const AttentionExtras& extras) override {
    CudaCall call(out.device, "attention_forward", is_causal ? "causal" : "", q.dtype);
    cuda::attention_forward(out, lse, q, k, v, scale, is_causal, extras);
  }
  void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                          const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                          const StridedView& lse, double scale, bool is_causal, DeviceScratch scratch,
                          const AttentionExtras& extras) override {
    CudaCall call(dq.device, "attention_backward", is_causal ? "causal" : "", q.dtype);
    cuda::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale, is_causal, scratch, extras);
  }
};

}  // namespace

KernelBackend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace bytegrad
