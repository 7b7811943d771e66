// What the cpu and cuda backends check and derive alike from their operands. The op layer checks shapes
// and dtypes first (tensor/ops_loss.cpp, tensor/ops_nn.cpp); these checks guard a direct backend call.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "bytegrad/core/strided_view.h"

namespace bytegrad {

// A 0-d view as 1-d of one element, so dimension 0 exists (PyTorch accepts dim 0 and -1 on a scalar for
// the ops along one dimension: cumsum, sort, gather and the like).
inline StridedView at_least_1d(const StridedView& v) {
  if (!v.sizes.empty()) return v;
  StridedView one = v;
  one.sizes = {1};
  one.strides = {1};
  return one;
}

// sort's (and topk's) outputs: values in the input's dtype, indices int64. `backend` names the caller in
// the message ("cpu", "cuda").
inline void check_sort_outputs(const StridedView& values, const StridedView& indices, const StridedView& in,
                               const char* backend) {
  if (values.dtype != in.dtype || indices.dtype != ScalarType::int64)
    throw std::invalid_argument(std::string(backend) +
                                " backend: sort: values must have the input's dtype and indices int64");
}

// Where nll_loss's kernels find their elements: the (batch, classes) geometry of an (N, C) or (C) input, in
// elements. Trivially copyable: the cuda kernels take it by value.
struct NllGeometry {
  int64_t batch = 1, classes = 0;
  int64_t row_stride = 0, class_stride = 1;
  int64_t target_stride = 0;
};

// `backend` names the caller in the messages ("cpu", "cuda").
inline NllGeometry nll_geometry(const StridedView& input, const StridedView& target, const char* backend) {
  NllGeometry g;
  if (input.sizes.size() == 2) {
    g.batch = input.sizes[0];
    g.classes = input.sizes[1];
    g.row_stride = input.strides[0];
    g.class_stride = input.strides[1];
  } else if (input.sizes.size() == 1) {
    g.classes = input.sizes[0];
    g.class_stride = input.strides[0];
  } else {
    throw std::invalid_argument(std::string(backend) + " backend: nll_loss: the input must be 1-d or 2-d");
  }
  if (target.dtype != ScalarType::int64)
    throw std::invalid_argument(std::string(backend) + " backend: nll_loss: the target must be int64");
  g.target_stride = target.sizes.empty() ? 0 : target.strides[0];
  return g;
}

// softmax's dtypes: out and in alike, or a float32 out from a float16 or bfloat16 in (each element converted
// exactly: the float32 input's softmax): then true.
inline bool softmax_reads_16_bit_input(const StridedView& out, const StridedView& in, const char* backend) {
  if (out.dtype == in.dtype) return false;
  if (out.dtype != ScalarType::float32 || (in.dtype != ScalarType::float16 && in.dtype != ScalarType::bfloat16))
    throw std::invalid_argument(std::string(backend) +
                                " backend: softmax: an output in another dtype than the input's must be float32 from "
                                "float16 or bfloat16");
  return true;
}

// softmax_backward's dtypes: the output's, T. grad_out is T, or a 16-bit float read as its float32 value where
// T is float32 (the float32 cast eager runs on the gradient first, left to the kernel: tensor/gradient_reader.h).
// grad_in is T, or a 16-bit float from float32 operands (log_softmax's half_to_float gradient, or a gradient
// its one reader casts; written by the kernel itself). Which of them is 16-bit where T is float32.
struct SoftmaxBackwardDtypes {
  bool half_grad_in = false;
  bool half_grad_out = false;
};
inline SoftmaxBackwardDtypes softmax_backward_dtypes(const StridedView& grad_in, const StridedView& grad_out,
                                                     const StridedView& output, const char* backend) {
  const auto half = [](ScalarType t) { return t == ScalarType::float16 || t == ScalarType::bfloat16; };
  const bool widened = output.dtype == ScalarType::float32;
  if (grad_out.dtype != output.dtype && !(widened && half(grad_out.dtype)))
    throw std::invalid_argument(std::string(backend) + " backend: softmax_backward: grad_out (" +
                                std::string(scalar_type_name(grad_out.dtype)) + ") must be the output's dtype (" +
                                std::string(scalar_type_name(output.dtype)) +
                                "), or float16 or bfloat16 for a float32 output");
  if (grad_in.dtype != output.dtype && !(widened && half(grad_in.dtype)))
    throw std::invalid_argument(std::string(backend) +
                                " backend: softmax_backward: a gradient in another dtype than its operands' must be "
                                "float16 or bfloat16 from float32");
  return {grad_in.dtype != output.dtype, grad_out.dtype != output.dtype};
}

}  // namespace bytegrad
