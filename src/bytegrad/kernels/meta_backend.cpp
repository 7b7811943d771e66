// meta tensors have shapes and allocations but no data: every kernel is a no-op.
#include "bytegrad/kernels/backend.h"

namespace bytegrad {

namespace {

class MetaBackend final : public KernelBackend {
 public:
  void fill(const StridedView&, double) override {}
  void arange(const StridedView&, double, double) override {}
  void copy(const StridedView&, const StridedView&) override {}
  void copy_from_host_unchecked(const StridedView&, const void*) override {}
  void copy_to_host_unchecked(void*, const StridedView&) override {}
  void unary(UnaryOp, const StridedView&, const StridedView&) override {}
  void binary(BinaryOp, const StridedView&, const StridedView&, const StridedView&, double,
              std::optional<ScalarType>) override {}
  void binary_scalar(BinaryOp, const StridedView&, const StridedView&, double, bool) override {}
  void where(const StridedView&, const StridedView&, const StridedView&, const StridedView&) override {}
  void masked_fill(const StridedView&, const StridedView&, const StridedView&, double) override {}
  void reduce(ReduceOp, const StridedView&, const StridedView&) override {}
  void reduce_variance(const StridedView&, const StridedView&, double, bool) override {}
  void reduce_with_indices(ReduceOp, const StridedView&, const StridedView&, const StridedView&, int64_t) override {}
  void softmax(const StridedView&, const StridedView&, int64_t, bool) override {}
  void softmax_backward(const StridedView&, const StridedView&, const StridedView&, int64_t, bool) override {}
  void gemm(const GemmArgs&) override {}
  void index_select(const StridedView&, const StridedView&, int64_t, const StridedView&) override {}
  void index_add(const StridedView&, int64_t, const StridedView&, const StridedView&) override {}
  void gather(const StridedView&, const StridedView&, int64_t, const StridedView&) override {}
  void scatter_add(const StridedView&, int64_t, const StridedView&, const StridedView&) override {}
  void scatter_fill(const StridedView&, int64_t, const StridedView&, double) override {}
  void cumsum(const StridedView&, const StridedView&, int64_t) override {}
  void sort(const StridedView&, const StridedView&, const StridedView&, int64_t, bool) override {}
  void masked_select(const StridedView&, const StridedView&, const StridedView&) override {}
  void masked_scatter(const StridedView&, const StridedView&, const StridedView&) override {}
  void ternary(TernaryOp, const StridedView&, const StridedView&, const StridedView&, const StridedView&, double,
               std::optional<ScalarType>) override {}
  void layer_norm(const StridedView&, const StridedView&, const StridedView&, const StridedView&, const StridedView*,
                  const StridedView*, double) override {}
  void layer_norm_backward(const StridedView*, const StridedView*, const StridedView*, const StridedView&,
                           const StridedView&, const StridedView&, const StridedView&, const StridedView*,
                           DeviceScratch) override {}
  void triangle(const StridedView&, const StridedView&, int64_t, bool) override {}
  void nll_loss(const StridedView&, const StridedView&, const StridedView&, const StridedView&, Reduction, int64_t,
                const StridedView*) override {}
  void nll_loss_backward(const StridedView&, const StridedView&, const StridedView&, const StridedView&, Reduction,
                         int64_t, const StridedView*) override {}
  void attention_forward(const StridedView&, const StridedView*, const StridedView&, const StridedView&,
                         const StridedView&, double, bool, const AttentionExtras&) override {}
  void attention_backward(const StridedView&, const StridedView&, const StridedView&, const StridedView&,
                          const StridedView&, const StridedView&, const StridedView&, const StridedView&,
                          const StridedView&, double, bool, DeviceScratch, const AttentionExtras&) override {}
};

}  // namespace

KernelBackend& meta_backend() {
  static MetaBackend backend;
  return backend;
}

}  // namespace bytegrad
