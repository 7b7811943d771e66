// The derivatives: for every `grad` row of the op table (core/op_table.h) one function
//   std::shared_ptr<FormulaNode> formulas::<op>(const OpRecord& record, const ArgsOf<OpId::<op>>& args)
// that builds the op's node (make_node) and says what its backward needs, as PyTorch's derivatives.yaml
// states it (what a node saves decides what stays allocated until backward), and returns the node. It runs
// before the op's kernel (OpRecording, tensor/autograd_hook.h), with the record's inputs only: inputs are
// saved at once (node->save), outputs when the op finishes (node->save_output), as PyTorch's generated code
// saves them. The declarations come from the table; the definitions live by family in
// autograd/functions/*.cpp, and a `grad` row without one fails the link naming formulas::<op>.
#pragma once

#include "bytegrad/autograd/formula_node.h"

namespace bytegrad::formulas {

#define BYTEGRAD_FORMULA_grad(op) std::shared_ptr<FormulaNode> op(const OpRecord&, const ArgsOf<OpId::op>&);
#define BYTEGRAD_FORMULA_no_grad(op)
#define BYTEGRAD_FORMULA_UNARY(op, dtypes, grad, ...) BYTEGRAD_FORMULA_##grad(op)
#define BYTEGRAD_FORMULA_BINARY(op, dtypes, args, grad, ...) BYTEGRAD_FORMULA_##grad(op)
#define BYTEGRAD_FORMULA_SCALAR(op, kernel, order, dtypes, grad, ...) BYTEGRAD_FORMULA_##grad(op)
#define BYTEGRAD_FORMULA_STRUCTURED(op, kernel, dtypes, args, grad, node) BYTEGRAD_FORMULA_##grad(op)
BYTEGRAD_UNARY_OPS(BYTEGRAD_FORMULA_UNARY)
BYTEGRAD_BINARY_OPS(BYTEGRAD_FORMULA_BINARY)
BYTEGRAD_SCALAR_OPS(BYTEGRAD_FORMULA_SCALAR)
BYTEGRAD_STRUCTURED_OPS(BYTEGRAD_FORMULA_STRUCTURED)
#undef BYTEGRAD_FORMULA_UNARY
#undef BYTEGRAD_FORMULA_BINARY
#undef BYTEGRAD_FORMULA_SCALAR
#undef BYTEGRAD_FORMULA_STRUCTURED
#undef BYTEGRAD_FORMULA_grad
#undef BYTEGRAD_FORMULA_no_grad

// The product rule of self * other (derivatives.yaml's mul and dot): self's gradient is grad * other, other's
// grad * self, in that order; each operand is saved only when the other needs a gradient, self first.
// `other_name` is what the node calls the second operand ("other" for mul, "tensor" for dot).
std::shared_ptr<FormulaNode> product_rule(const OpRecord& r, const char* other_name);

}  // namespace bytegrad::formulas
