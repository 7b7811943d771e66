// One function per differentiable op: builds the op's graph node from its OpRecord. The record each op
// sends (inputs, scalars, ints) is documented beside its formula. recorder.cpp maps op names to these.
#pragma once

#include "autograd/formula_node.h"

namespace bytegrad::formulas {

// pointwise.cpp
void add(const OpRecord&);
void add_scalar(const OpRecord&);
void sub(const OpRecord&);
void sub_scalar(const OpRecord&);
void rsub_scalar(const OpRecord&);
void mul(const OpRecord&);
void mul_scalar(const OpRecord&);
void div(const OpRecord&);
void div_scalar(const OpRecord&);
void neg(const OpRecord&);
void relu(const OpRecord&);
void sigmoid(const OpRecord&);
void tanh(const OpRecord&);
void gelu(const OpRecord&);
void exp(const OpRecord&);
void log(const OpRecord&);
void sqrt(const OpRecord&);
void pow_scalar(const OpRecord&);
// reductions.cpp
void sum(const OpRecord&);
void sum_dims(const OpRecord&);
void mean(const OpRecord&);
void mean_dims(const OpRecord&);
void norm(const OpRecord&);
void var(const OpRecord&);
void std(const OpRecord&);
// linear_algebra.cpp
void mm(const OpRecord&);
void addmm(const OpRecord&);
void bmm(const OpRecord&);
// views.cpp
void view(const OpRecord&);
void t(const OpRecord&);
void transpose(const OpRecord&);
void permute(const OpRecord&);
void expand(const OpRecord&);
void unsqueeze(const OpRecord&);
void squeeze(const OpRecord&);
void select(const OpRecord&);
void slice(const OpRecord&);
void unbind(const OpRecord&);
void split(const OpRecord&);
void stack(const OpRecord&);
void cat(const OpRecord&);
void clone(const OpRecord&);
void to_dtype(const OpRecord&);
void to_device(const OpRecord&);
// nn.cpp
void softmax(const OpRecord&);
void log_softmax(const OpRecord&);
void masked_fill(const OpRecord&);
void where(const OpRecord&);
void dropout(const OpRecord&);
void index_select(const OpRecord&);
void embedding(const OpRecord&);
void triu(const OpRecord&);
void tril(const OpRecord&);
// normalization.cpp
void native_layer_norm(const OpRecord&);
// loss.cpp
void nll_loss(const OpRecord&);
void mse_loss(const OpRecord&);

}  // namespace bytegrad::formulas
