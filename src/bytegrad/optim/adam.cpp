// torch.optim.Adam / AdamW's eager steps (capturable=False): the single-tensor path (_single_tensor_adam)
// and the multi-tensor one (_multi_tensor_adam, foreach=True); the state and temporaries of both are
// listed in adam.h. The bias corrections are host doubles, as Python computes them from step.item().
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/kernels/kernel_profile.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

namespace {

// The one group of the constructors that take a parameter list.
std::vector<AdamParamGroup> one_group(std::vector<Tensor> params, const AdamOptions& options) {
  return {AdamParamGroup{std::move(params), options, std::nullopt}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
           bool amsgrad)
    : Adam(std::move(params), AdamOptions{lr, betas, eps, weight_decay, amsgrad, false}) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(one_group(std::move(params), options)) {}

Adam::Adam(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), false) {}

// NOLINTNEXTLINE(performance-unnecessary-value-param): every caller moves its groups in; nothing is copied
Adam::Adam(std::vector<AdamParamGroup> groups, bool decoupled_weight_decay)
    : GroupedOptimizer(std::move(groups)), decoupled_weight_decay_(decoupled_weight_decay), state_(params_.size()) {
  size_t begin = 0;
  std::vector<size_t> group_ends;
  for (size_t k = 0; k < param_groups_.size(); ++k) {
    begin = resolved(k, begin).end;
    group_ends.push_back(begin);
  }
  check_groups_disjoint(group_ends);
}

Adam::Group Adam::resolved(size_t group_index, size_t begin) const {
  const AdamParamGroup& group = param_groups_[group_index];
  return resolved(group.options, begin, begin + group.params.size());
}

Adam::Group Adam::resolved(const AdamOptions& o, size_t begin, size_t end) const {
  const char* name = decoupled_weight_decay_ ? "AdamW" : "Adam";
  Group g{begin,
          end,
          o.lr,
          o.betas.first,
          o.betas.second,
          o.eps,
          o.weight_decay.value_or(decoupled_weight_decay_ ? 1e-2 : 0.0),
          o.amsgrad,
          o.foreach};
  check_at_least_zero(name, "learning rate", g.lr);
  check_at_least_zero(name, "epsilon value", g.eps);
  check_beta(name, 0, g.beta1);
  check_beta(name, 1, g.beta2);
  check_at_least_zero(name, "weight_decay value", g.weight_decay);
  return g;
}

// A param group's dict as PyTorch 2.11's Adam and AdamW write it (without "params"), the options bytegrad
// does not have at their defaults; "initial_lr" once a scheduler has set it.
json::Value Adam::group_options(size_t group) const {
  const AdamParamGroup& pg = param_groups_.at(group);
  const Group g = resolved(group, 0);
  json::Value out = json::object();
  out.add("lr", json_number(g.lr));
  json::Value betas = json::array();
  betas.push_back(json_number(g.beta1));
  betas.push_back(json_number(g.beta2));
  out.add("betas", betas);
  out.add("eps", json_number(g.eps));
  out.add("weight_decay", json_number(g.weight_decay));
  out.add("amsgrad", json::boolean(g.amsgrad));
  add_flag_options(out, g.foreach, /*has_capturable=*/true);
  out.add("decoupled_weight_decay", json::boolean(decoupled_weight_decay_));
  if (pg.initial_lr) out.add("initial_lr", json_number(*pg.initial_lr));
  return out;
}

AdamOptions Adam::options_from_json(const json::Value& options, size_t group) const {
  AdamOptions o;
  o.lr = option_number(options, group, "lr");
  const json::Value* betas = options.find("betas");
  if (!betas || betas->kind != json::Value::Kind::array || betas->size() != 2 || !(*betas)[0].is_number() ||
      !(*betas)[1].is_number())
    throw std::invalid_argument(fmt::format("param group {}: the option \"betas\" must be two numbers", group));
  o.betas = {(*betas)[0].number(), (*betas)[1].number()};
  o.eps = option_number(options, group, "eps");
  o.weight_decay = option_number(options, group, "weight_decay");
  o.amsgrad = option_bool(options, group, "amsgrad", false);
  o.foreach = option_bool(options, group, "foreach", false);
  for (const char* key : {"maximize", "capturable", "differentiable", "fused"}) refuse_true_option(options, group, key);
  // A state dict of Adam loads into AdamW only when it says which weight decay it used, and then only as
  // the same kind: the two read weight_decay differently.
  if (options.has("decoupled_weight_decay") &&
      option_bool(options, group, "decoupled_weight_decay", false) != decoupled_weight_decay_)
    throw std::invalid_argument(
        fmt::format("param group {}: the state dict is {}'s (decoupled_weight_decay {}), this optimizer is {}", group,
                    decoupled_weight_decay_ ? "Adam" : "AdamW", decoupled_weight_decay_ ? "false" : "true",
                    decoupled_weight_decay_ ? "AdamW" : "Adam"));
  return o;
}

std::optional<ParamState> Adam::param_state(size_t param_index) const {
  const State& s = state_.at(param_index);
  if (!s.exp_avg.defined()) return std::nullopt;
  ParamState out{s.step, {}};
  out.tensors.insert_or_assign("exp_avg", s.exp_avg);
  out.tensors.insert_or_assign("exp_avg_sq", s.exp_avg_sq);
  if (s.max_exp_avg_sq.defined()) out.tensors.insert_or_assign("max_exp_avg_sq", s.max_exp_avg_sq);
  return out;
}

Optimizer::StateKeys Adam::state_keys(const json::Value& options) const {
  StateKeys keys{true, {"exp_avg", "exp_avg_sq"}};
  if (option_bool(options, 0, "amsgrad", false)) keys.tensors.emplace_back("max_exp_avg_sq");
  return keys;
}

void Adam::check_group_options(const std::vector<json::Value>& options) const {
  for (size_t g = 0; g < options.size(); ++g) {
    try {
      resolved(options_from_json(options[g], g), 0, 0);
      option_initial_lr(options[g], g);
    } catch (const std::invalid_argument& e) {
      if (std::string(e.what()).starts_with("param group")) throw;
      throw std::invalid_argument(fmt::format("param group {}: {}", g, e.what()));
    }
  }
}

void Adam::replace_state(const std::vector<json::Value>& options, std::vector<std::optional<ParamState>> state) {
  for (size_t g = 0; g < options.size(); ++g) {
    param_groups_[g].options = options_from_json(options[g], g);
    param_groups_[g].initial_lr = option_initial_lr(options[g], g);
  }
  std::vector<State> fresh(params_.size());
  for (size_t i = 0; i < state.size(); ++i) {
    if (!state[i]) continue;
    fresh[i].step = *state[i]->step;
    fresh[i].exp_avg = state[i]->tensors.at("exp_avg");
    fresh[i].exp_avg_sq = state[i]->tensors.at("exp_avg_sq");
    if (const Tensor* m = state[i]->tensors.find("max_exp_avg_sq")) fresh[i].max_exp_avg_sq = *m;
  }
  state.clear();  // the new state's only handles are in `fresh` now
  state_.swap(fresh);
  // The old state goes as PyTorch's dict of dicts does: parameter by parameter, each in its key order.
  for (State& old : fresh) {
    old.exp_avg = Tensor();
    old.exp_avg_sq = Tensor();
    old.max_exp_avg_sq = Tensor();
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
             bool amsgrad)
    : AdamW(std::move(params), AdamOptions{lr, betas, eps, weight_decay, amsgrad, false}) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options) : AdamW(one_group(std::move(params), options)) {}

AdamW::AdamW(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), true) {}

void Adam::step() {
  NoGradGuard no_grad;
  AllocationScope scope(decoupled_weight_decay_ ? "AdamW.step" : "Adam.step");
  PhaseScope phase(MemoryPhase::optimizer_step);
  KernelProfileLabel profile_label(decoupled_weight_decay_ ? "AdamW.step" : "Adam.step");
  // Adam.step: per group, _init_group (state for that group's parameters) then the update, with the
  // group's options as they are now (a scheduler or the user may have changed them).
  check_groups_unchanged();
  size_t begin = 0;
  for (size_t k = 0; k < param_groups_.size(); ++k) {
    const Group g = resolved(k, begin);
    begin = g.end;
    init_state(g);
    if (g.foreach) multi_tensor_step(g);
    else single_tensor_step(g);
  }
}

// _init_group: lazy state for every parameter with a gradient, in parameter order, before any update.
void Adam::init_state(const Group& g) {
  for (size_t i = g.begin; i < g.end; ++i) {
    const Tensor& param = params_[i];
    State& s = state_[i];
    if (!param.grad().defined() || s.exp_avg.defined()) continue;
    AllocationScope state_scope("Adam state");
    CategoryScope state_category(MemoryCategory::optimizer_state);
    s.exp_avg = named(state_name(i, "exp_avg"), [&] { return zeros_like(param); });
    s.exp_avg_sq = named(state_name(i, "exp_avg_sq"), [&] { return zeros_like(param); });
    if (g.amsgrad) s.max_exp_avg_sq = named(state_name(i, "max_exp_avg_sq"), [&] { return zeros_like(param); });
  }
}

void Adam::single_tensor_step(const Group& g) {
  const double lr = g.lr, beta1 = g.beta1, beta2 = g.beta2, eps = g.eps, weight_decay = g.weight_decay;
  const bool amsgrad = g.amsgrad;
  // Python's loop locals: `grad` (a weight-decay temporary) and `denom` stay alive until reassigned in the
  // next parameter's turn, and are freed in that order (grad first) when the function returns.
  Tensor grad, denom;
  for (size_t i = g.begin; i < g.end; ++i) {
    const Tensor& param = params_[i];
    grad = param.grad();
    if (!grad.defined()) continue;
    State& s = state_[i];
    s.step += 1;
    if (weight_decay != 0) {
      if (decoupled_weight_decay_) param.mul_(1.0 - lr * weight_decay);
      else grad = grad.add(param, weight_decay);
    }
    lerp_(s.exp_avg, grad, 1.0 - beta1);
    s.exp_avg_sq.mul_(beta2);
    addcmul_(s.exp_avg_sq, grad, grad, 1.0 - beta2);

    const double step = static_cast<double>(s.step);
    const double bias_correction1 = 1.0 - std::pow(beta1, step);
    const double bias_correction2 = 1.0 - std::pow(beta2, step);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    if (amsgrad) maximum_(s.max_exp_avg_sq, s.exp_avg_sq);
    {
      // (v.sqrt() / bias_correction2_sqrt).add_(eps): the sqrt is freed once the quotient exists, then the
      // previous denom when the name is rebound.
      Tensor root = sqrt(amsgrad ? s.max_exp_avg_sq : s.exp_avg_sq);
      Tensor quotient = div(root, bias_correction2_sqrt);
      root = Tensor();
      quotient.add_(eps);
      denom = std::move(quotient);
    }
    addcdiv_(param, s.exp_avg, denom, -step_size);
  }
  grad = Tensor();
  denom = Tensor();
}

namespace {

// Drops a Python list of temporaries the way CPython frees one: last element first.
void drop_list(std::vector<Tensor>& list) {
  while (!list.empty()) list.pop_back();
}

}  // namespace

void Adam::multi_tensor_step(const Group& g) {
  const double lr = g.lr, beta1 = g.beta1, beta2 = g.beta2, eps = g.eps, weight_decay = g.weight_decay;
  const bool amsgrad = g.amsgrad;
  std::vector<size_t> with_grad;
  for (size_t i = g.begin; i < g.end; ++i)
    if (params_[i].grad().defined()) with_grad.push_back(i);
  if (with_grad.empty()) return;
  // Each torch._foreach_* call below is one loop over the tensors inside a ForeachBatch: the backend may
  // run the loop's per-tensor updates as multi-tensor launches (on cuda, as PyTorch's multi_tensor_apply).
  // No loop frees memory, so what a batch holds back stays valid until it runs.
  const Device device = params_[with_grad.front()].device();
  // Where nothing is freed until the update is done (no weight-decayed copies of the gradients), one batch
  // holds every op back, so the backend may run them as one pass over each parameter (on cuda, one load
  // and store of each tensor instead of one per op; the values are the same). Adam's copies are freed
  // midway, so there each op is its own batch.
  std::optional<ForeachBatch> whole_update;
  if (weight_decay == 0 || decoupled_weight_decay_) whole_update.emplace(device);
  std::vector<Tensor> grads;  // the .grad tensors, or their weight-decayed copies
  for (size_t i : with_grad) {
    state_[i].step += 1;
    grads.push_back(params_[i].grad());
  }
  if (weight_decay != 0) {
    if (decoupled_weight_decay_) {
      ForeachBatch batch(device);
      for (size_t i : with_grad) params_[i].mul_(1.0 - lr * weight_decay);
    } else {
      std::vector<Tensor> decayed;  // torch._foreach_add(grads, params, alpha=wd): a new list
      for (size_t k = 0; k < with_grad.size(); ++k)
        decayed.push_back(grads[k].add(params_[with_grad[k]], weight_decay));
      grads.swap(decayed);
      decayed.clear();  // the .grad references: nothing is freed
    }
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k) lerp_(state_[with_grad[k]].exp_avg, grads[k], 1.0 - beta1);
  }
  {
    ForeachBatch batch(device);
    for (size_t i : with_grad) state_[i].exp_avg_sq.mul_(beta2);
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k)
      addcmul_(state_[with_grad[k]].exp_avg_sq, grads[k], grads[k], 1.0 - beta2);
  }
  drop_list(grads);  // `del device_grads`: the weight-decay copies go here, last first
  if (amsgrad)
    for (size_t i : with_grad) maximum_(state_[i].max_exp_avg_sq, state_[i].exp_avg_sq);
  std::vector<Tensor> denoms;  // torch._foreach_sqrt(exp_avg_sqs), then divided and shifted in place
  {
    ForeachBatch batch(device);
    for (size_t i : with_grad) denoms.push_back(sqrt(amsgrad ? state_[i].max_exp_avg_sq : state_[i].exp_avg_sq));
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k) {
      const double step = static_cast<double>(state_[with_grad[k]].step);
      denoms[k].div_(std::sqrt(1.0 - std::pow(beta2, step)));
    }
  }
  {
    ForeachBatch batch(device);
    for (Tensor& d : denoms) d.add_(eps);
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k) {
      const size_t i = with_grad[k];
      const double step_size = lr / (1.0 - std::pow(beta1, static_cast<double>(state_[i].step)));
      addcdiv_(params_[i], state_[i].exp_avg, denoms[k], -step_size);
    }
  }
  whole_update.reset();  // launches what it held back, before its temporaries go
  drop_list(denoms);     // freed when the function returns, last parameter first
}

}  // namespace bytegrad::optim
