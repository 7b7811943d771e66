// Negative log-likelihood, forward and backward (PyTorch's nll_loss_forward / nll_loss_backward), with or
// without class weights. Sums are accumulated in double; the total weight is the sum of the non-ignored
// targets' weights (their count without weights).
#include <cstring>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/kernels/cpu/cpu_kernels.h"
#include "bytegrad/kernels/operand_checks.h"

namespace bytegrad::cpu {

namespace {

int64_t checked_target(const StridedView& target, const NllGeometry& g, int64_t i, int64_t ignore_index) {
  const int64_t t = static_cast<const int64_t*>(target.data)[i * g.target_stride];
  if (t != ignore_index && (t < 0 || t >= g.classes))
    throw std::out_of_range(fmt::format("nll_loss: target {} is out of bounds for {} classes", t, g.classes));
  return t;
}

// The class weight of target t (1 without weights).
double class_weight(const StridedView* weight, int64_t t) {
  if (!weight) return 1.0;
  const int64_t stride = weight->strides.empty() ? 0 : weight->strides[0];
  return load_as_double(
      static_cast<const char*>(weight->data) + t * stride * static_cast<int64_t>(element_size(weight->dtype)),
      weight->dtype);
}

}  // namespace

void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
              const StridedView& target, Reduction reduction, int64_t ignore_index, const StridedView* weight) {
  const NllGeometry g = nll_geometry(log_probs, target, "cpu");
  const size_t element = element_size(log_probs.dtype);
  auto input_at = [&](int64_t i, int64_t t) {
    return load_as_double(static_cast<const char*>(log_probs.data) +
                              (i * g.row_stride + t * g.class_stride) * static_cast<int64_t>(element),
                          log_probs.dtype);
  };
  if (reduction == Reduction::none && log_probs.sizes.size() == 2) {
    const int64_t out_stride = output.strides.empty() ? 0 : output.strides[0];
    const size_t out_element = element_size(output.dtype);
    for (int64_t i = 0; i < g.batch; ++i) {
      const int64_t t = checked_target(target, g, i, ignore_index);
      const double value = t == ignore_index ? 0.0 : -class_weight(weight, t) * input_at(i, t);
      store_from_double(static_cast<char*>(output.data) + i * out_stride * static_cast<int64_t>(out_element),
                        output.dtype, value);
    }
    store_from_double(total_weight.data, total_weight.dtype, 0.0);
    return;
  }
  double total = 0, weight_sum = 0;
  for (int64_t i = 0; i < g.batch; ++i) {
    const int64_t t = checked_target(target, g, i, ignore_index);
    if (t == ignore_index) continue;
    const double w = class_weight(weight, t);
    total -= w * input_at(i, t);
    weight_sum += w;
  }
  // mean with every target ignored is 0 / 0 = NaN, as PyTorch's.
  const double result = reduction == Reduction::mean ? total / weight_sum : total;
  store_from_double(output.data, output.dtype, result);
  store_from_double(total_weight.data, total_weight.dtype, weight_sum);
}

namespace {

// nll_loss_backward's element of each row (row_value(i, t)) for every row whose target t is not ignored
// (write(i, t, value)); ignored rows get skip(i).
template <typename Write, typename Skip>
void for_each_nll_gradient_row(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                               const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                               const StridedView* weight, Write&& write, Skip&& skip) {
  const NllGeometry g = nll_geometry(grad_input, target, "cpu");
  const bool per_row = reduction == Reduction::none && grad_input.sizes.size() == 2;
  double grad = 0;
  if (!per_row) {
    grad = load_as_double(grad_output.data, grad_output.dtype);
    if (reduction == Reduction::mean) grad /= load_as_double(total_weight.data, total_weight.dtype);
  }
  const int64_t grad_out_stride = grad_output.strides.empty() ? 0 : grad_output.strides[0];
  const size_t grad_out_element = element_size(grad_output.dtype);
  for (int64_t i = 0; i < g.batch; ++i) {
    const int64_t t = checked_target(target, g, i, ignore_index);
    if (t == ignore_index) {
      skip(i);
      continue;
    }
    const double row_grad = per_row ? load_as_double(static_cast<const char*>(grad_output.data) +
                                                         i * grad_out_stride * static_cast<int64_t>(grad_out_element),
                                                     grad_output.dtype)
                                    : grad;
    write(i, t, -class_weight(weight, t) * row_grad);
  }
}

}  // namespace

void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                       const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                       const StridedView* weight) {
  const NllGeometry g = nll_geometry(grad_input, target, "cpu");
  const size_t element = element_size(grad_input.dtype);
  for_each_nll_gradient_row(
      grad_input, grad_output, target, total_weight, reduction, ignore_index, weight,
      [&](int64_t i, int64_t t, double value) {
        store_from_double(static_cast<char*>(grad_input.data) +
                              (i * g.row_stride + t * g.class_stride) * static_cast<int64_t>(element),
                          grad_input.dtype, value);
      },
      [](int64_t) {});
}

void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                            const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                            const StridedView* weight) {
  const int64_t rows = grad_input.sizes.at(0);
  auto* columns = static_cast<int64_t*>(grad_input.data);
  char* values = static_cast<char*>(grad_input.data) + rows * static_cast<int64_t>(sizeof(int64_t));
  const auto element = static_cast<int64_t>(element_size(grad_input.dtype));
  for_each_nll_gradient_row(
      grad_input, grad_output, target, total_weight, reduction, ignore_index, weight,
      [&](int64_t i, int64_t t, double value) {
        columns[i] = t;
        store_from_double(values + i * element, grad_input.dtype, value);
      },
      [&](int64_t i) {
        columns[i] = -1;
        store_from_double(values + i * element, grad_input.dtype, 0.0);
      });
}

void cast_nll_rows(const StridedView& out, const StridedView& packed) {
  const int64_t rows = packed.sizes.at(0), classes = packed.sizes.at(1);
  const auto* columns = static_cast<const int64_t*>(packed.data);
  const char* values = static_cast<const char*>(packed.data) + rows * static_cast<int64_t>(sizeof(int64_t));
  const auto value_element = static_cast<int64_t>(element_size(packed.dtype));
  const auto out_element = static_cast<int64_t>(element_size(out.dtype));
  std::memset(out.data, 0, static_cast<size_t>(rows * classes * out_element));
  for (int64_t i = 0; i < rows; ++i)
    if (columns[i] >= 0)
      store_from_double(static_cast<char*>(out.data) + (i * classes + columns[i]) * out_element, out.dtype,
                        load_as_double(values + i * value_element, packed.dtype));
}

}  // namespace bytegrad::cpu
