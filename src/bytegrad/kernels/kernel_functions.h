// The kernel functions the cpu and cuda backends both implement, with one signature each: cpu/cpu_kernels.h
// and cuda/cuda_kernels.h include this list inside their own namespace (bytegrad::cpu, bytegrad::cuda), so
// it has no include guard on purpose. A function only one backend has (or whose signature differs, as the
// cuda attention backward's scratch, or layer_norm_backward's) stays in that backend's header.

void fill(const StridedView& out, double value);
void arange(const StridedView& out, double start, double step);
void copy(const StridedView& dst, const StridedView& src);
void unary(UnaryOp op, const StridedView& out, const StridedView& in);
// a and b in any dtypes, each converted to `common` (PyTorch's common dtype, backend.h) before the op; out in
// common's dtype, bool for comparisons, or (in place) any dtype common can be cast to.
void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha,
            ScalarType common);
void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar, bool scalar_first);
void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b);
void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value);
void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a, const StridedView& b,
             double value, std::optional<ScalarType> common = std::nullopt);

void reduce(ReduceOp op, const StridedView& out, const StridedView& in);
// out = sum((x - mean)^2) / max(0, n - correction) over the reduced dims (sqrt when take_sqrt); floats only.
void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt);
void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                         int64_t dim);

void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log);
void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim,
                      bool log);

void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index);
void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source);
void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index);
void scatter_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source);
void scatter_fill(const StridedView& out, int64_t dim, const StridedView& index, double value);

void cumsum(const StridedView& out, const StridedView& in, int64_t dim);
void sort(const StridedView& values, const StridedView& indices, const StridedView& in, int64_t dim, bool descending);

void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask);
void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source);

// Optional operands are nullptr where absent.
void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                const StridedView* weight, const StridedView* bias, double eps);

void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper);

void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
              const StridedView& target, Reduction reduction, int64_t ignore_index, const StridedView* weight);
void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                       const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                       const StridedView* weight);
// backend.h's nll_loss_backward_rows and cast_nll_rows (packed rows for a gradient only a cast reads).
void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                            const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                            const StridedView* weight);
void cast_nll_rows(const StridedView& out, const StridedView& packed);

// See backend.h's attention_forward.
void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                       const StridedView& v, double scale, bool is_causal, const AttentionExtras& extras);
