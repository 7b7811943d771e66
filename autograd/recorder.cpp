// The autograd hook: when grad mode is on and an op's operand requires grad, build the op's node.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "autograd/autograd_meta.h"
#include "autograd/functions/formulas.h"
#include "autograd/grad_mode.h"

namespace bytegrad {

namespace {

const std::unordered_map<std::string_view, FormulaMaker>& formula_table() {
  static const std::unordered_map<std::string_view, FormulaMaker> table = {
      {"add", formulas::add}, {"add_scalar", formulas::add_scalar}, {"sub", formulas::sub},
      {"sub_scalar", formulas::sub_scalar}, {"rsub_scalar", formulas::rsub_scalar}, {"mul", formulas::mul},
      {"mul_scalar", formulas::mul_scalar}, {"div", formulas::div}, {"div_scalar", formulas::div_scalar},
      {"neg", formulas::neg}, {"relu", formulas::relu}, {"sigmoid", formulas::sigmoid}, {"tanh", formulas::tanh},
      {"gelu", formulas::gelu}, {"exp", formulas::exp}, {"log", formulas::log}, {"sqrt", formulas::sqrt},
      {"pow_scalar", formulas::pow_scalar}, {"sum", formulas::sum}, {"sum_dims", formulas::sum_dims},
      {"mean", formulas::mean}, {"mean_dims", formulas::mean_dims},
      {"norm", formulas::norm}, {"var", formulas::var}, {"std", formulas::std}, {"mm", formulas::mm},
      {"addmm", formulas::addmm}, {"bmm", formulas::bmm}, {"view", formulas::view}, {"t", formulas::t},
      {"transpose", formulas::transpose}, {"permute", formulas::permute}, {"expand", formulas::expand},
      {"unsqueeze", formulas::unsqueeze}, {"squeeze", formulas::squeeze}, {"select", formulas::select},
      {"slice", formulas::slice}, {"unbind", formulas::unbind}, {"split", formulas::split}, {"stack", formulas::stack}, {"cat", formulas::cat},
      {"clone", formulas::clone}, {"to_dtype", formulas::to_dtype}, {"to_device", formulas::to_device}, {"softmax", formulas::softmax},
      {"log_softmax", formulas::log_softmax}, {"masked_fill", formulas::masked_fill}, {"where", formulas::where},
      {"dropout", formulas::dropout}, {"index_select", formulas::index_select}, {"embedding", formulas::embedding},
      {"nll_loss", formulas::nll_loss}, {"mse_loss", formulas::mse_loss},
      {"native_layer_norm", formulas::native_layer_norm}, {"triu", formulas::triu}, {"tril", formulas::tril},
  };
  return table;
}

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
    std::string_view name = record.name;
    const bool in_place = !name.empty() && name.back() == '_';
    if (in_place) {
      name.remove_suffix(1);
      const Tensor& self = record.outputs.at(0);
      const AutogradMeta* meta = autograd_meta(self);
      if (meta && meta->requires_grad && !meta->grad_fn)
        throw std::runtime_error(fmt::format("a leaf tensor that requires grad ({}) is being used in an in-place "
                                             "operation ({}_); do it inside a NoGradGuard or on a clone",
                                             describe(self), name));
    }
    auto it = formula_table().find(name);
    if (it == formula_table().end())
      throw std::logic_error(fmt::format("autograd: no derivative is defined for op '{}'", name));
    it->second(record);
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
