// backend_for (device_backend.h): each device's kernels wrapped by a backend that notes, before every call,
// the allocations PyTorch's kernel for it makes the CUDA driver do.
#include <stdexcept>
#include <vector>

#include "bytegrad/core/view_bytes.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/pending_scores.h"

namespace bytegrad {

namespace {

// What the first launch of PyTorch's kernel for each call makes the driver allocate, as measured on the
// H100 (tools/probes/driver_first_launch_probe.py: each op as the first kernel of a fresh process):
//  - module globals only: arange, softmax and log_softmax (and log_softmax's gradient), tril/triu, the
//    foreach kernels, the attention kernels, the random fills;
//  - and the launch heap: elementwise ops, fills, converting or strided copies, where, masked_fill, layer
//    norm and its gradient, softmax's gradient;
//  - and kernel stack: reductions (sum, mean, var, max, argmax), index_select/index_add/gather/scatter_add,
//    nll_loss and its gradient;
//  - nothing: copies PyTorch makes with cudaMemcpy (same dtype, both contiguous), host transfers, and
//    matrix products (their cuBLAS handle is noted where it is created, tensor/blas_workspace.cpp).
constexpr uint32_t kGlobals = kModuleGlobals;
constexpr uint32_t kElementwise = kModuleGlobals | kLaunchHeap;
constexpr uint32_t kWithStack = kModuleGlobals | kLaunchHeap | kKernelStack;

// The bytes of a host buffer holding a view's elements contiguously (already checked by the caller).
size_t host_bytes(const StridedView& view) { return static_cast<size_t>(view.numel()) * element_size(view.dtype); }

// Foreach batches launch PyTorch's multi-tensor kernels, which make no launch heap.
thread_local int foreach_depth = 0;

class DriverAllocationsBackend final : public KernelBackend {
 public:
  explicit DriverAllocationsBackend(KernelBackend& inner) : inner_(inner) {}

  void begin_foreach() override {
    ++foreach_depth;
    inner_.begin_foreach();
  }
  void end_foreach() override {
    --foreach_depth;
    inner_.end_foreach();
  }
  void fill(const StridedView& out, double value) override {
    note_then_run(out, kElementwise, &KernelBackend::fill, out, value);
  }
  void arange(const StridedView& out, double start, double step) override {
    note_then_run(out, kGlobals, &KernelBackend::arange, out, start, step);
  }
  // GradScaler's kernels: PyTorch's are a multi-tensor kernel and a one-thread kernel, module globals only.
  void amp_non_finite_check_and_unscale(const StridedView& grad, const StridedView& found_inf,
                                        const StridedView& inv_scale) override {
    note_then_run(grad, kGlobals, &KernelBackend::amp_non_finite_check_and_unscale, grad, found_inf, inv_scale);
  }
  void amp_update_scale(const StridedView& scale, const StridedView& growth_tracker, const StridedView& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) override {
    note_then_run(scale, kGlobals, &KernelBackend::amp_update_scale, scale, growth_tracker, found_inf, growth_factor,
                  backoff_factor, growth_interval);
  }
  void copy(const StridedView& dst, const StridedView& src) override {
    note_then_run(dst, copy_allocations(dst, src), &KernelBackend::copy, dst, src);
  }
  // Stands in for the converting copy it replaces: that copy's first-launch allocations.
  void cast_target_elements(const StridedView& out, const StridedView& in, const StridedView& target,
                            int64_t ignore_index) override {
    note_then_run(out, kElementwise, &KernelBackend::cast_target_elements, out, in, target, ignore_index);
  }
  bool packs_nll_rows() const override { return inner_.packs_nll_rows(); }
  // Stand in for the kernels they replace: the zero fill and nll_loss_backward's, then the converting copy.
  void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                              const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                              const StridedView* weight) override {
    note(grad_input, kElementwise);
    note_then_run(grad_input, kWithStack, &KernelBackend::nll_loss_backward_rows, grad_input, grad_output, target,
                  total_weight, reduction, ignore_index, weight);
  }
  void cast_nll_rows(const StridedView& out, const StridedView& packed) override {
    note_then_run(out, kElementwise, &KernelBackend::cast_nll_rows, out, packed);
  }
  void copy_from_host_unchecked(const StridedView& dst, const void* host) override {
    settle(dst);
    if (dst.numel() != 0) note_launch(dst.device);
    inner_.copy_from_host(dst, {static_cast<const std::byte*>(host), host_bytes(dst)});
  }
  void copy_to_host_unchecked(void* host, const StridedView& src) override {
    settle(src);
    if (src.numel() != 0) note_launch(src.device);
    inner_.copy_to_host({static_cast<std::byte*>(host), host_bytes(src)}, src);
  }
  void unary(UnaryOp op, const StridedView& out, const StridedView& in) override {
    note_then_run(out, pointwise(), &KernelBackend::unary, op, out, in);
  }
  void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha,
              std::optional<ScalarType> common) override {
    note_then_run(out, pointwise(), &KernelBackend::binary, op, out, a, b, alpha, common);
  }
  void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                     bool scalar_first) override {
    note_then_run(out, pointwise(), &KernelBackend::binary_scalar, op, out, a, scalar, scalar_first);
  }
  void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) override {
    note_then_run(out, kElementwise, &KernelBackend::where, out, cond, a, b);
  }
  // Out of place, PyTorch clones (a copy, noted as copy() notes it) and then fills in place.
  void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value) override {
    settle(out, src, mask);
    note_deferred_masked_fill(out, src);
    inner_.masked_fill(out, src, mask, value);
  }
  void note_deferred_masked_fill(const StridedView& out, const StridedView& src) override {
    if (!same_view(out, src)) note(out, copy_allocations(out, src));
    note(out, kElementwise);
  }
  void note_deferred_copy(const StridedView& dst, const StridedView& src) override {
    note(dst, copy_allocations(dst, src));
  }
  void note_deferred_softmax_backward(const StridedView& grad_in) override { note(grad_in, kElementwise); }
  void note_deferred_softmax(const StridedView& out) override { note(out, kGlobals); }
  void note_deferred_binary_scalar(const StridedView& out) override { note(out, pointwise()); }
  // Every step was noted by the caller (gradient_reader.cpp), the last node's own too.
  void softmax_backward_then(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                             int64_t dim, const StridedView* mask, double value, const ScalarStep* then) override {
    settle(out, grad_out, output, mask);
    inner_.softmax_backward_then(out, grad_out, output, dim, mask, value, then);
  }
  // The masked_fill was noted when it was deferred: this call stands in for the binary_scalar.
  void masked_fill_then_scalar(BinaryOp op, const StridedView& out, const StridedView& src, const StridedView& mask,
                               double value, double scalar) override {
    note_then_run(out, pointwise(), &KernelBackend::masked_fill_then_scalar, op, out, src, mask, value, scalar);
  }
  void wait_for_device() override { inner_.wait_for_device(); }
  void reduce(ReduceOp op, const StridedView& out, const StridedView& in) override {
    note_then_run(out, kWithStack, &KernelBackend::reduce, op, out, in);
  }
  void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) override {
    note_then_run(out, kWithStack, &KernelBackend::reduce_variance, out, in, correction, take_sqrt);
  }
  void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                           int64_t dim) override {
    note_then_run(values, kWithStack, &KernelBackend::reduce_with_indices, op, values, indices, in, dim);
  }
  void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) override {
    note_then_run(out, kGlobals, &KernelBackend::softmax, out, in, dim, log);
  }
  // Stands in for softmax (the chain's launches were noted when it was deferred); notes nothing when the
  // backend does not take it.
  bool softmax_of_scaled(const StridedView& out, const StridedView& source, ScalarStep scale, const StridedView* mask,
                         double value, int64_t dim, bool log, const StridedView* copy) override {
    settle(out, source, mask, copy);
    if (!inner_.softmax_of_scaled(out, source, scale, mask, value, dim, log, copy)) return false;
    note(out, kGlobals);
    if (copy != nullptr) note(*copy, copy_allocations(*copy, out));
    return true;
  }
  void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim,
                        bool log) override {
    note_then_run(grad_in, log ? kGlobals : kElementwise, &KernelBackend::softmax_backward, grad_in, grad_out, output,
                  dim, log);
  }
  void gemm(const GemmArgs& args) override {
    write_out_pending_scores(args.device);  // its operands are raw pointers: every chain on the device
    if (args.m != 0 && args.n != 0 && args.batches != 0) note_launch(args.device);
    inner_.gemm(args);
  }
  void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    note_then_run(out, kWithStack, &KernelBackend::index_select, out, in, dim, index);
  }
  void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    note_then_run(out, kWithStack, &KernelBackend::index_add, out, dim, index, source);
  }
  void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) override {
    note_then_run(out, kWithStack, &KernelBackend::gather, out, in, dim, index);
  }
  void scatter_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) override {
    note_then_run(out, kWithStack, &KernelBackend::scatter_add, out, dim, index, source);
  }
  // Not measured by the first-launch probe yet: taken as the indexing kernels' (scatter_fill) and the
  // reductions' (cumsum's scan, sort's in-slice sort), which make a kernel stack too.
  void scatter_fill(const StridedView& out, int64_t dim, const StridedView& index, double value) override {
    note_then_run(out, kWithStack, &KernelBackend::scatter_fill, out, dim, index, value);
  }
  void cumsum(const StridedView& out, const StridedView& in, int64_t dim) override {
    note_then_run(out, kWithStack, &KernelBackend::cumsum, out, in, dim);
  }
  void sort(const StridedView& values, const StridedView& indices, const StridedView& in, int64_t dim,
            bool descending) override {
    note_then_run(values, kWithStack, &KernelBackend::sort, values, indices, in, dim, descending);
  }
  void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask) override {
    note_then_run(in, kWithStack, &KernelBackend::masked_select, out, in, mask);
  }
  void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source) override {
    note_then_run(out, kWithStack, &KernelBackend::masked_scatter, out, mask, source);
  }
  void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
               const StridedView& b, double value, std::optional<ScalarType> common) override {
    note_then_run(out, pointwise(), &KernelBackend::ternary, op, out, self, a, b, value, common);
  }
  void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                  const StridedView* weight, const StridedView* bias, double eps) override {
    note_then_run(y, kElementwise, &KernelBackend::layer_norm, y, mean, rstd, x, weight, bias, eps);
  }
  void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials,
                           const StridedView* dbias_partials, const StridedView& dy, const StridedView& x,
                           const StridedView& mean, const StridedView& rstd, const StridedView* weight,
                           DeviceScratch scratch) override {
    note_then_run(dy, kElementwise, &KernelBackend::layer_norm_backward, dx, dweight_partials, dbias_partials, dy, x,
                  mean, rstd, weight, scratch);
  }
  void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) override {
    note_then_run(out, kGlobals, &KernelBackend::triangle, out, in, diagonal, upper);
  }
  void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
                const StridedView& target, Reduction reduction, int64_t ignore_index,
                const StridedView* weight) override {
    note_then_run(output, kWithStack, &KernelBackend::nll_loss, output, total_weight, log_probs, target, reduction,
                  ignore_index, weight);
  }
  void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                         const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                         const StridedView* weight) override {
    note_then_run(grad_input, kWithStack, &KernelBackend::nll_loss_backward, grad_input, grad_output, target,
                  total_weight, reduction, ignore_index, weight);
  }
  void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                         const StridedView& v, double scale, bool is_causal, const AttentionExtras& extras) override {
    write_out_pending_scores(out.device);  // masks, workspaces and dropout state besides the views
    note_then_run(out, kGlobals, &KernelBackend::attention_forward, out, lse, q, k, v, scale, is_causal, extras);
  }
  void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                          const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                          const StridedView& lse, double scale, bool is_causal, DeviceScratch scratch,
                          const AttentionExtras& extras) override {
    write_out_pending_scores(dq.device);
    note_then_run(dq, kGlobals, &KernelBackend::attention_backward, dq, dk, dv, dout, q, k, v, out, lse, scale,
                  is_causal, scratch, extras);
  }

 private:
  static uint32_t pointwise() { return foreach_depth > 0 ? kGlobals : kElementwise; }
  // PyTorch copies with cudaMemcpy (no kernel of its own) when both sides share a dtype and are contiguous.
  static uint32_t copy_allocations(const StridedView& dst, const StridedView& src) {
    const bool memcpy = dst.dtype == src.dtype && dst.is_contiguous() && src.is_contiguous();
    return memcpy ? 0 : kElementwise;
  }
  // A launch on the device's current stream: the driver's allocations it makes, and work for the stream
  // timeline (streams.h). PyTorch launches nothing for no elements.
  static void note(const StridedView& view, uint32_t what) {
    if (view.numel() == 0) return;
    note_driver_allocations(view.device, what);
    note_launch(view.device);
  }
  // Notes `what` for `view`'s device, then runs the wrapped backend's `kernel` with the call's arguments
  // (pending scores its views overlap written out first).
  template <typename Kernel, typename... Args>
  void note_then_run(const StridedView& view, uint32_t what, Kernel kernel, const Args&... args) {
    settle(args...);
    note(view, what);
    (inner_.*kernel)(args...);
  }
  // The pending scores (tensor/pending_scores.h) a call's views overlap, written out before it runs.
  template <typename... Args>
  static void settle(const Args&... args) {
    if (!pending_scores_exist()) return;
    std::vector<const StridedView*> views;
    (collect(views, args), ...);
    settle_pending_scores(views);
  }
  static void collect(std::vector<const StridedView*>& views, const StridedView& view) { views.push_back(&view); }
  static void collect(std::vector<const StridedView*>& views, const StridedView* view) {
    if (view != nullptr) views.push_back(view);
  }
  template <typename Other>
  static void collect(std::vector<const StridedView*>& /*views*/, const Other& /*not a view*/) {}

  KernelBackend& inner_;
};

// Never freed: backends live as long as the process.
KernelBackend& with_driver_allocations(KernelBackend& inner) { return *new DriverAllocationsBackend(inner); }

}  // namespace

KernelBackend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::cpu: return kernel_backend(device);
    case DeviceType::sim: {
      static KernelBackend& sim = with_driver_allocations(kernel_backend(device));
      return sim;
    }
    case DeviceType::meta: {
      static KernelBackend& meta = with_driver_allocations(kernel_backend(device));
      return meta;
    }
    case DeviceType::cuda: {
      static KernelBackend& cuda = with_driver_allocations(kernel_backend(device));
      return cuda;
    }
  }
  throw std::logic_error("backend_for: unknown device type");
}

}  // namespace bytegrad
