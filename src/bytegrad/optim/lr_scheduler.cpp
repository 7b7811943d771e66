// The schedulers of lr_scheduler.h, formula for formula as torch/optim/lr_scheduler.py (PyTorch 2.11).
#include "bytegrad/optim/lr_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace bytegrad::optim {

namespace {

// A scheduler's period argument (StepLR's step_size, CosineAnnealingLR's T_max), checked: `what` names it.
int64_t require_positive(int64_t value, const char* what) {
  if (value <= 0) throw std::invalid_argument(fmt::format("{} must be positive, got {}", what, value));
  return value;
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  // group.setdefault("initial_lr", group["lr"]): the first scheduler on an optimizer fixes it.
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    std::optional<double>& initial = optimizer_.initial_lr(g);
    if (!initial) initial = optimizer_.lr(g);
    base_lrs_.push_back(*initial);
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  is_initial_ = true;
  step();
  is_initial_ = false;
}

void LRScheduler::step() {
  ++step_count_;
  update_lr();
}

void LRScheduler::update_lr(std::optional<int64_t> epoch) {
  std::vector<double> values;
  if (!epoch) {
    ++last_epoch_;
    values = get_lr();
  } else {
    last_epoch_ = *epoch;
    std::optional<std::vector<double>> closed = closed_form_lr();
    values = closed ? std::move(*closed) : get_lr();
  }
  for (size_t g = 0; g < values.size(); ++g) optimizer_.set_lr(g, values[g]);
  last_lr_ = current_lrs();
}

namespace {

json::Value number_list(const std::vector<double>& values) {
  json::Value out = json::array();
  for (double v : values) out.push_back(json_number(v));
  return out;
}

std::vector<double> read_number_list(const json::Value& state, const char* key, size_t expected) {
  const json::Value* v = state.find(key);
  if (!v || v->kind != json::Value::Kind::array)
    throw std::invalid_argument(fmt::format("scheduler state: \"{}\" is missing or not a list", key));
  if (v->size() != expected)
    throw std::invalid_argument(fmt::format("scheduler state: \"{}\" has {} values for the optimizer's {} param groups",
                                            key, v->size(), expected));
  std::vector<double> out;
  for (const json::Value& item : v->items) {
    if (!item.is_number())
      throw std::invalid_argument(fmt::format("scheduler state: \"{}\" holds {}, not a number", key, json::dump(item)));
    out.push_back(item.number());
  }
  return out;
}

int64_t read_integer(const json::Value& state, const char* key) {
  const json::Value* v = state.find(key);
  if (!v || !v->is_integer())
    throw std::invalid_argument(fmt::format("scheduler state: \"{}\" is missing or not an integer", key));
  return v->integer();
}

}  // namespace

json::Value LRScheduler::state_dict() const {
  json::Value out = json::object();
  out.add("last_epoch", json::integer(last_epoch_));
  out.add("_step_count", json::integer(step_count_));
  out.add("base_lrs", number_list(base_lrs_));
  out.add("_last_lr", number_list(last_lr_));
  return out;
}

void LRScheduler::check_state(const json::Value& state) const {
  if (state.kind != json::Value::Kind::object) throw std::invalid_argument("scheduler state: not a JSON object");
  read_integer(state, "last_epoch");
  read_integer(state, "_step_count");
  read_number_list(state, "base_lrs", optimizer_.num_param_groups());
  read_number_list(state, "_last_lr", optimizer_.num_param_groups());
}

void LRScheduler::load_state_dict(const json::Value& state) {
  check_state(state);
  if (state.kind != json::Value::Kind::object) throw std::invalid_argument("scheduler state: not a JSON object");
  const size_t groups = optimizer_.num_param_groups();
  const int64_t last_epoch = read_integer(state, "last_epoch");
  const int64_t step_count = read_integer(state, "_step_count");
  std::vector<double> base_lrs = read_number_list(state, "base_lrs", groups);
  std::vector<double> last_lr = read_number_list(state, "_last_lr", groups);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

// ----------------------------------------------------------------------------------------------- LambdaLR

LambdaLR::LambdaLR(Optimizer& optimizer, const Lambda& lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_param_groups(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lr_lambdas_(std::move(lr_lambdas)) {
  if (lr_lambdas_.size() != optimizer.num_param_groups())
    throw std::invalid_argument(
        fmt::format("LambdaLR: Expected {} lr_lambdas, but got {}", optimizer.num_param_groups(), lr_lambdas_.size()));
  for (const Lambda& f : lr_lambdas_)
    if (!f) throw std::invalid_argument("LambdaLR: an lr_lambda is empty");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(base_lrs_[g] * lr_lambdas_[g](last_epoch_));
  return out;
}

// ---------------------------------------------------------------------------------- ClosedFormLRScheduler

std::vector<double> ClosedFormLRScheduler::get_lr() {
  std::vector<double> out = current_lrs();
  for (size_t g = 0; g < out.size(); ++g) out[g] = next_lr(out[g], base_lrs_[g]);
  return out;
}

std::optional<std::vector<double>> ClosedFormLRScheduler::closed_form_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(lr_at_epoch(base));
  return out;
}

// ------------------------------------------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : ClosedFormLRScheduler(optimizer), step_size_(require_positive(step_size, "StepLR: step_size")), gamma_(gamma) {
  initial_step();
}

double StepLR::next_lr(double lr, double /*base_lr*/) const {
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lr;
  return lr * gamma_;
}

double StepLR::lr_at_epoch(double base_lr) const {
  const int64_t decays = last_epoch_ / step_size_;  // Python's last_epoch // step_size
  return base_lr * std::pow(gamma_, static_cast<double>(decays));
}

// -------------------------------------------------------------------------------------------- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, const std::vector<int64_t>& milestones, double gamma)
    : ClosedFormLRScheduler(optimizer), gamma_(gamma) {
  for (int64_t m : milestones) ++milestones_[m];
  initial_step();
}

double MultiStepLR::next_lr(double lr, double /*base_lr*/) const {
  auto it = milestones_.find(last_epoch_);
  if (it == milestones_.end()) return lr;
  return lr * std::pow(gamma_, static_cast<double>(it->second));
}

double MultiStepLR::lr_at_epoch(double base_lr) const {
  // bisect_right over the sorted milestones, each as many times as it was given.
  int64_t passed = 0;
  for (const auto& [epoch, count] : milestones_)
    if (epoch <= last_epoch_) passed += count;
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

// ----------------------------------------------------------------------------------------------- LinearLR

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : ClosedFormLRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  if (start_factor > 1.0 || start_factor <= 0)
    throw std::invalid_argument(
        "LinearLR: Starting multiplicative factor expected to be greater than 0 and less or equal to 1.");
  if (end_factor > 1.0 || end_factor < 0)
    throw std::invalid_argument("LinearLR: Ending multiplicative factor expected to be between 0 and 1.");
  initial_step();
}

double LinearLR::next_lr(double lr, double /*base_lr*/) const {
  if (last_epoch_ == 0) return lr * start_factor_;
  if (is_initial_ || last_epoch_ > total_iters_) return lr;
  const double delta = end_factor_ - start_factor_;
  const double factor =
      1.0 + delta / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * delta);
  return lr * factor;
}

double LinearLR::lr_at_epoch(double base_lr) const {
  const auto done = static_cast<double>(std::min(total_iters_, last_epoch_));
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_));
}

// ------------------------------------------------------------------------------------------ ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : ClosedFormLRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

double ExponentialLR::next_lr(double lr, double /*base_lr*/) const { return is_initial_ ? lr : lr * gamma_; }

double ExponentialLR::lr_at_epoch(double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(last_epoch_));
}

// ------------------------------------------------------------------------------------------- SequentialLR

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  if (schedulers_.empty())
    throw std::invalid_argument("SequentialLR expects at least one scheduler, but got no scheduler.");
  for (size_t i = 0; i < schedulers_.size(); ++i)
    if (&schedulers_[i].get().optimizer() != &optimizer)
      throw std::invalid_argument(fmt::format(
          "SequentialLR expects all schedulers to belong to the same optimizer, but got scheduler at index {} with "
          "another optimizer",
          i));
  if (milestones_.size() != schedulers_.size() - 1)
    throw std::invalid_argument(fmt::format(
        "Sequential Schedulers expects number of schedulers provided to be one more than the number of milestone "
        "points, but got number of schedulers {} and the number of milestones to be equal to {}",
        schedulers_.size(), milestones_.size()));
  // Python's SequentialLR does not run the base constructor's first step: it resets the groups to their
  // initial lr, takes one epoch back from every scheduler (the ones inside included) and re-runs the first
  // scheduler's first step.
  last_epoch_ = 0;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) optimizer.set_lr(g, *optimizer.initial_lr(g));
  for (LRScheduler& s : schedulers_) undo_one_epoch(s);
  schedulers_.front().get().initial_step();
  last_lr_ = schedulers_.front().get().get_last_lr();
}

void SequentialLR::undo_one_epoch(LRScheduler& scheduler) {
  if (auto* sequential = dynamic_cast<SequentialLR*>(&scheduler)) {
    for (LRScheduler& s : sequential->schedulers_) undo_one_epoch(s);
  } else {
    --scheduler.last_epoch_;
  }
}

void SequentialLR::step() {
  ++last_epoch_;
  const auto idx =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
  LRScheduler& scheduler = schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) scheduler.update_lr(0);
  else scheduler.step();
  last_lr_ = scheduler.get_last_lr();
}

std::vector<double> SequentialLR::get_lr() { return current_lrs(); }

json::Value SequentialLR::state_dict() const {
  json::Value out = LRScheduler::state_dict();
  json::Value children = json::array();
  for (const LRScheduler& s : schedulers_) children.push_back(s.state_dict());
  out.add("_schedulers", children);
  return out;
}

void SequentialLR::check_state(const json::Value& state) const {
  LRScheduler::check_state(state);
  const json::Value* children = state.find("_schedulers");
  if (!children || children->kind != json::Value::Kind::array || children->size() != schedulers_.size())
    throw std::invalid_argument(
        fmt::format("scheduler state: \"_schedulers\" must list the states of {} schedulers", schedulers_.size()));
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i].get().check_state((*children)[i]);
}

void SequentialLR::load_state_dict(const json::Value& state) {
  check_state(state);  // the whole tree first: nothing changes on an error
  LRScheduler::load_state_dict(state);
  const json::Value& children = state["_schedulers"];
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i].get().load_state_dict(children[i]);
}

// -------------------------------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : ClosedFormLRScheduler(optimizer), T_max_(require_positive(T_max, "CosineAnnealingLR: T_max")), eta_min_(eta_min) {
  initial_step();
}

double CosineAnnealingLR::one_plus_cosine(int64_t epoch) const {
  return 1 + std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(T_max_));
}

double CosineAnnealingLR::next_lr(double lr, double base_lr) const {
  if (is_initial_) return lr;
  if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)
    return lr + (base_lr - eta_min_) * (1 - std::cos(std::numbers::pi / static_cast<double>(T_max_))) / 2;
  return one_plus_cosine(last_epoch_) / one_plus_cosine(last_epoch_ - 1) * (lr - eta_min_) + eta_min_;
}

double CosineAnnealingLR::lr_at_epoch(double base_lr) const {
  return eta_min_ + (base_lr - eta_min_) * one_plus_cosine(last_epoch_) / 2;
}

}  // namespace bytegrad::optim
