// The autograd hook: when grad mode is on and an op's operand requires grad, build the op's node.
#include <fmt/format.h>

#include <stdexcept>
#include <array>

#include "autograd/autograd_meta.h"
#include "autograd/functions/formulas.h"
#include "autograd/grad_mode.h"

namespace bytegrad {

namespace {

// The op table's formula column as a dispatch table: a `grad` row calls its formula with its typed
// arguments; a `no_grad` row has none.
using Formula = void (*)(const OpRecord&);

#define BYTEGRAD_DISPATCH_grad(op) \
  [](const OpRecord& r) { formulas::op(r, r.args_of<OpId::op>()); },
#define BYTEGRAD_DISPATCH_no_grad(op) nullptr,
#define BYTEGRAD_DISPATCH_UNARY(op, dtypes, grad, node) BYTEGRAD_DISPATCH_##grad(op)
#define BYTEGRAD_DISPATCH_BINARY(op, dtypes, args, grad, node) BYTEGRAD_DISPATCH_##grad(op)
#define BYTEGRAD_DISPATCH_SCALAR(op, kernel, order, dtypes, grad, node) BYTEGRAD_DISPATCH_##grad(op)
#define BYTEGRAD_DISPATCH_STRUCTURED(op, kernel, dtypes, args, grad, node) BYTEGRAD_DISPATCH_##grad(op)
constexpr std::array<Formula, kOpCount> kFormulas = {
    BYTEGRAD_UNARY_OPS(BYTEGRAD_DISPATCH_UNARY) BYTEGRAD_BINARY_OPS(BYTEGRAD_DISPATCH_BINARY)
        BYTEGRAD_SCALAR_OPS(BYTEGRAD_DISPATCH_SCALAR) BYTEGRAD_STRUCTURED_OPS(BYTEGRAD_DISPATCH_STRUCTURED)};
#undef BYTEGRAD_DISPATCH_UNARY
#undef BYTEGRAD_DISPATCH_BINARY
#undef BYTEGRAD_DISPATCH_SCALAR
#undef BYTEGRAD_DISPATCH_STRUCTURED
#undef BYTEGRAD_DISPATCH_grad
#undef BYTEGRAD_DISPATCH_no_grad

class GraphRecorder final : public AutogradHook {
 public:
  bool needs_graph(const std::vector<Tensor>& inputs) const override {
    if (!grad_mode_enabled()) return false;
    for (const Tensor& t : inputs)
      if (t.defined() && requires_grad(t)) return true;
    return false;
  }

  bool requires_grad(const Tensor& t) const override { return bytegrad::requires_grad(t); }

  void record(OpRecord record) override {
    const std::string_view name = op_name(record.op);
    if (record.in_place) {
      const Tensor& self = record.outputs.at(0);
      const AutogradMeta* meta = autograd_meta(self);
      if (meta && meta->requires_grad && !meta->grad_fn)
        throw std::runtime_error(fmt::format("a leaf tensor that requires grad ({}) is being used in an in-place "
                                             "operation ({}_); do it inside a NoGradGuard or on a clone",
                                             describe(self), name));
    }
    const Formula formula = kFormulas[static_cast<size_t>(record.op)];
    if (!formula)
      throw std::logic_error(fmt::format("autograd: {}{} is not differentiable in bytegrad (marked no_grad in "
                                         "core/op_table.h); call it under a NoGradGuard or on detached tensors",
                                         name, record.in_place ? "_" : ""));
    formula(record);
  }
};

// Installed when the autograd library is linked: its object file is always pulled in because
// tensor_autograd.cpp (which Tensor's autograd members live in) references install_graph_recorder.
GraphRecorder recorder;

}  // namespace

void install_graph_recorder() {
  static const bool installed = (install_autograd_hook(&recorder), true);
  (void)installed;
}

}  // namespace bytegrad
