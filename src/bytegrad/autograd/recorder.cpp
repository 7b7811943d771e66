// The autograd hook: when grad mode is on and an op's operand requires grad, build the op's node.
#include <fmt/format.h>

#include <array>
#include <memory>
#include <stdexcept>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/autograd/grad_mode.h"

namespace bytegrad {

namespace {

// The op table's formula column as a dispatch table: a `grad` row calls its formula with its typed
// arguments; a `no_grad` row has none.
using Formula = std::shared_ptr<FormulaNode> (*)(const OpRecord&);

#define BYTEGRAD_DISPATCH_grad(op) [](const OpRecord& r) { return formulas::op(r, r.args_of<OpId::op>()); },
#define BYTEGRAD_DISPATCH_no_grad(op) nullptr,
#define BYTEGRAD_DISPATCH_UNARY(op, dtypes, grad, ...) BYTEGRAD_DISPATCH_##grad(op)
#define BYTEGRAD_DISPATCH_BINARY(op, dtypes, args, grad, ...) BYTEGRAD_DISPATCH_##grad(op)
#define BYTEGRAD_DISPATCH_SCALAR(op, kernel, order, dtypes, grad, ...) BYTEGRAD_DISPATCH_##grad(op)
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
  bool saved_tensors_hooked() const override { return current_saved_tensor_hooks() != nullptr; }
  bool needs_graph(std::span<const Tensor> inputs) const override {
    if (!grad_mode_enabled()) return false;
    for (const Tensor& t : inputs)
      if (t.defined() && requires_grad(t)) return true;
    return false;
  }

  bool requires_grad(const Tensor& t) const override { return bytegrad::requires_grad(t); }
  bool is_leaf(const Tensor& t) const override { return t.is_leaf(); }

  std::string grad_fn_name(const Tensor& t) const override {
    const AutogradMeta* meta = autograd_meta(t);
    return meta && meta->grad_fn ? meta->grad_fn->name() : "";
  }

  std::unique_ptr<OpInProgress> begin(OpRecord record) override {
    std::shared_ptr<FormulaNode> node = make(record);
    return std::make_unique<NodeInProgress>(std::move(node), std::move(record));
  }

  void record(OpRecord record) override {
    std::vector<Tensor> outputs = std::move(record.outputs);
    std::shared_ptr<FormulaNode> node = make(record);
    // An out-of-place op that saves an input must save it before its output exists (begin_recording).
    if (!record.in_place && node->saves_inputs())
      throw std::logic_error(
          fmt::format("autograd: {} saves an input, so it must be recorded with "
                      "begin_recording before it computes (tensor/autograd_hook.h)",
                      op_name(record.op)));
    NodeInProgress(std::move(node), std::move(record)).finish(outputs);
  }

  void check_in_place(OpId op, std::span<const Tensor> inputs) const override {
    if (!grad_mode_enabled() || inputs.empty() || !inputs[0].defined()) return;
    const Tensor& self = inputs[0];
    const std::string_view name = op_name(op);
    const AutogradMeta* meta = autograd_meta(self);
    if (meta && meta->requires_grad && !meta->grad_fn)
      throw std::runtime_error(
          fmt::format("a leaf tensor that requires grad ({}) is being used in an in-place "
                      "operation ({}_); do it inside a NoGradGuard or on a clone",
                      describe(self), name));
    // PyTorch's check_inplace: a view (with history) of a leaf that requires grad may not be modified
    // in place either, as that would change the leaf behind autograd's back.
    if (meta && meta->grad_fn) {
      const Tensor base = view_base(self);
      const AutogradMeta* base_meta = autograd_meta(base);
      if (base_meta && base_meta->requires_grad && !base_meta->grad_fn)
        throw std::runtime_error(
            fmt::format("a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation. ({}_ on {}, a view of the leaf {}; do it inside a "
                        "NoGradGuard or on a clone)",
                        name, describe(self), describe(base)));
    }
    if (needs_graph(inputs) && !kFormulas[static_cast<size_t>(op)]) throw no_formula(op, true);
  }

 private:
  // The op's node, its inputs saved (a formula sees the record's inputs only: outputs are saved at finish).
  std::shared_ptr<FormulaNode> make(OpRecord& record) const {
    if (record.in_place) check_in_place(record.op, record.inputs);  // in-place ops also checked before writing
    const Formula formula = kFormulas[static_cast<size_t>(record.op)];
    if (!formula) throw no_formula(record.op, record.in_place);
    record.outputs.clear();
    return formula(record);
  }

  static std::logic_error no_formula(OpId op, bool in_place) {
    return std::logic_error(
        fmt::format("autograd: {}{} is not differentiable in bytegrad (marked no_grad in "
                    "core/op_table.h); call it under a NoGradGuard or on detached tensors",
                    op_name(op), in_place ? "_" : ""));
  }

  // Between begin and finish: the node, and the record (its inputs) for a view's base.
  class NodeInProgress final : public OpInProgress {
   public:
    NodeInProgress(std::shared_ptr<FormulaNode> node, OpRecord record)
        : node_(std::move(node)), record_(std::move(record)) {}
    void finish(const std::vector<Tensor>& outputs) override {
      node_->finish(node_, outputs);
      if (!record_.in_place && op_info(record_.op).kernel == "none") remember_view_base(record_.inputs, outputs);
    }

   private:
    std::shared_ptr<FormulaNode> node_;
    OpRecord record_;
  };

  // A view op's outputs remember the tensor they view (its own base when it is itself a view).
  static void remember_view_base(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
    const Tensor& input = inputs.at(0);
    const Tensor input_base = view_base(input);
    const std::shared_ptr<TensorImpl>& base = input_base.defined() ? input_base.impl_ptr() : input.impl_ptr();
    for (const Tensor& out : outputs) ensure_autograd_meta(out).view_base = base;
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
