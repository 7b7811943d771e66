// torch.optim.lr_scheduler's schedulers, value for value: each computes the next learning rate of every
// param group the way PyTorch 2.11 does (its recursive "chainable" form from the groups' current lr, and
// the closed form where PyTorch uses one), in doubles as Python's floats, so a schedule equals PyTorch's to
// the last bit (tests/optim/lr_scheduler.cpp against tests/data/pytorch_probes/lr_schedulers.json). The
// classes follow lr_scheduler.py's order.
//
//   optim::AdamW opt(model.parameters(), 1e-3);
//   optim::LinearLR warmup(opt, 0.1, 1.0, 5);
//   optim::CosineAnnealingLR cosine(opt, 95);
//   optim::SequentialLR schedule(opt, {warmup, cosine}, {5});
//   for (...) { ...; opt.step(); schedule.step(); }
//
// Making a scheduler sets each group's initial_lr (unless an earlier scheduler did) and takes its first
// step at once, which may change the groups' lr (LinearLR, LambdaLR), as PyTorch's constructors do.
// Schedulers keep a reference to their optimizer: it must outlive them. To resume, make the optimizer and
// the schedulers as before, then load the optimizer's state (its groups' lr and initial_lr) and each
// scheduler's state_dict (PyTorch's order and keys); constructing with last_epoch is not supported.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "bytegrad/optim/optimizer.h"

namespace bytegrad::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // One epoch (or iteration) on: every group's lr becomes the schedule's next value. Call it after the
  // optimizer's step.
  virtual void step();
  // The learning rates the last step set, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // PyTorch's state_dict: {"last_epoch", "_step_count", "base_lrs", "_last_lr"} (SequentialLR adds its
  // schedulers' under "_schedulers"); a schedule's fixed arguments are the constructor's. load_state_dict
  // refuses a missing key, a wrong kind or a list of another length than the groups (std::invalid_argument),
  // changing nothing; it does not touch the groups' lr (the optimizer's state holds them).
  virtual json::Value state_dict() const;
  virtual void load_state_dict(const json::Value& state);

 protected:
  // Throws what load_state_dict would throw, changing nothing.
  virtual void check_state(const json::Value& state) const;
  explicit LRScheduler(Optimizer& optimizer);
  // The first step, made by each scheduler's constructor once its own fields are set (Python's base
  // __init__ runs after the subclass has set them; a C++ base constructor cannot call get_lr).
  void initial_step();
  // The next values from the groups' current lr (PyTorch's get_lr).
  virtual std::vector<double> get_lr() = 0;
  // The values as a function of last_epoch alone (PyTorch's _get_closed_form_lr), where there is one.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // PyTorch's _update_lr: one on (no epoch), or to `epoch` by the closed form where there is one.
  void update_lr(std::optional<int64_t> epoch = std::nullopt);
  std::vector<double> current_lrs() const;  // every group's lr now

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  bool is_initial_ = false;  // during the constructor's first step
  std::vector<double> last_lr_;

  friend class SequentialLR;
};

// lr = initial_lr * lr_lambda(epoch), one function for every group or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, const Lambda& lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);  // one per param group

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<Lambda> lr_lambdas_;
};

// A schedule PyTorch also writes in closed form (its _get_closed_form_lr, used by step(epoch) and by
// SequentialLR at a milestone): a subclass gives both formulas for one param group, this class applies
// them to every group.
class ClosedFormLRScheduler : public LRScheduler {
 protected:
  using LRScheduler::LRScheduler;
  // A group's next lr from its current lr (PyTorch's get_lr, the recursive form); base_lr is its initial_lr.
  virtual double next_lr(double lr, double base_lr) const = 0;
  // A group's lr at last_epoch from its initial_lr alone (the closed form).
  virtual double lr_at_epoch(double base_lr) const = 0;

 private:
  std::vector<double> get_lr() final;
  std::optional<std::vector<double>> closed_form_lr() const final;
};

// lr times gamma every step_size epochs.
class StepLR : public ClosedFormLRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 private:
  double next_lr(double lr, double base_lr) const override;
  double lr_at_epoch(double base_lr) const override;
  int64_t step_size_;
  double gamma_;
};

// lr times gamma at each milestone (a milestone given twice multiplies by gamma twice, as PyTorch's Counter).
class MultiStepLR : public ClosedFormLRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, const std::vector<int64_t>& milestones, double gamma = 0.1);

 private:
  double next_lr(double lr, double base_lr) const override;
  double lr_at_epoch(double base_lr) const override;
  std::map<int64_t, int> milestones_;  // epoch -> how many times it was given
  double gamma_;
};

// lr from start_factor * initial_lr to end_factor * initial_lr over total_iters epochs, linearly.
class LinearLR : public ClosedFormLRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 private:
  double next_lr(double lr, double base_lr) const override;
  double lr_at_epoch(double base_lr) const override;
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// lr times gamma every epoch.
class ExponentialLR : public ClosedFormLRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 private:
  double next_lr(double lr, double base_lr) const override;
  double lr_at_epoch(double base_lr) const override;
  double gamma_;
};

// Runs `schedulers` one after the other, switching at each milestone (epochs), as PyTorch's SequentialLR:
// the schedulers must belong to `optimizer` and outlive this one.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  json::Value state_dict() const override;
  void load_state_dict(const json::Value& state) override;

 protected:
  void check_state(const json::Value& state) const override;
  std::vector<double> get_lr() override;  // not used: each step delegates to one of the schedulers

 private:
  static void undo_one_epoch(LRScheduler& scheduler);
  std::vector<std::reference_wrapper<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Half a cosine from initial_lr down to eta_min over T_max epochs, then back up, and so on (SGDR without
// restarts): step() follows PyTorch's recursive form, step(epoch) its closed form.
class CosineAnnealingLR : public ClosedFormLRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 private:
  // 1 + cos(pi * epoch / T_max): both forms are made of it.
  double one_plus_cosine(int64_t epoch) const;
  double next_lr(double lr, double base_lr) const override;
  double lr_at_epoch(double base_lr) const override;
  int64_t T_max_;
  double eta_min_;
};

}  // namespace bytegrad::optim
