#include "programs/training_estimates.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/reports/memory_ledger.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "programs/checks.h"

namespace bytegrad::programs {

TrainingPeak estimate_on_meta(const std::function<void(Device)>& run, bool default_workspace, int64_t limit_bytes,
                              CachingAllocator::TieOrder ties, CachingAllocator::EarlyRegions early) {
  GoldenConditions conditions(kMeta, default_workspace ? Workspaces::pytorch_default : Workspaces::none);
  caching_allocator(kMeta).set_tie_order(ties);
  caching_allocator(kMeta).set_early_regions(early);
  if (limit_bytes > 0) {
    const double total = static_cast<double>(mem_get_info(kMeta).second);
    set_per_process_memory_fraction(std::min(1.0, static_cast<double>(limit_bytes) / total), kMeta);
  }
  TrainingPeak peak;
  try {
    run(kMeta);
  } catch (const OutOfMemoryError& e) {
    peak.out_of_memory = true;
    peak.message = e.what();
    if (e.has_report()) {
      peak.explanation = e.report().str();
      peak.fragmentation_caused = e.report().fragmentation_caused();
    }
  }
  peak.at_peak = peak_report(kMeta).record;
  peak.peak_allocated = max_memory_allocated(kMeta);
  peak.peak_reserved = max_memory_reserved(kMeta);
  peak.placement_ties = caching_allocator(kMeta).placement_ties();
  peak.early_regions_decided = caching_allocator(kMeta).early_regions_decided();
  return peak;
}

BatchOutcome batch_outcome(const TrainingPeak& peak) {
  if (!peak.out_of_memory) return BatchOutcome::fits;
  return peak.fragmentation_caused ? BatchOutcome::fragmented : BatchOutcome::over;
}

BatchOutcome worse(BatchOutcome a, BatchOutcome b) { return std::max(a, b); }

BatchSearch largest_fitting_batch(const std::function<BatchOutcome(int64_t)>& run) {
  std::map<int64_t, BatchOutcome> seen;  // each batch runs once
  auto at = [&](int64_t batch) {
    auto it = seen.find(batch);
    return it != seen.end() ? it->second : seen.emplace(batch, run(batch)).first->second;
  };
  // The smallest batch whose live memory exceeds the room: every larger one does too.
  constexpr int64_t kLargestTried = int64_t{1} << 40;
  int64_t under = 0, over = 1;
  while (at(over) != BatchOutcome::over) {
    if (over >= kLargestTried)
      throw std::runtime_error("largest_fitting_batch: batch " + std::to_string(over) + " still fits its live memory");
    under = over;
    over *= 2;
  }
  while (over - under > 1) {
    const int64_t mid = under + (over - under) / 2;
    (at(mid) == BatchOutcome::over ? over : under) = mid;
  }
  BatchSearch found;
  found.largest = over - 1;
  while (found.largest >= 1 && at(found.largest) != BatchOutcome::fits) --found.largest;
  for (int64_t b = found.largest - 1; found.largest > 0 && b >= 1 && at(b) != BatchOutcome::fits; --b)
    found.not_fitting_below.push_back(b);
  return found;
}

void train_mlp(const MLPTraining& t, ScenarioRecorder* r, Device on) {
  auto mark = [&](const std::string& label) {
    if (r) r->mark(label);
  };
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < t.sizes.size(); ++i) {
    model->push_back(std::make_shared<nn::Linear>(t.sizes[i], t.sizes[i + 1], true, device(on)));
    if (i + 2 < t.sizes.size()) model->push_back(std::make_shared<nn::ReLU>(t.inplace_relu));
  }
  mark("model");
  std::unique_ptr<optim::Optimizer> opt;
  if (t.optimizer == MLPOptimizer::sgd)
    opt = std::make_unique<optim::SGD>(model->parameters(),
                                       optim::SGDOptions{.lr = 1e-2, .momentum = 0.9, .foreach = t.foreach});
  else if (t.optimizer == MLPOptimizer::adam)
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3, .foreach = t.foreach});
  else if (t.optimizer == MLPOptimizer::adamw)
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamOptions{.lr = 1e-3, .foreach = t.foreach});
  Tensor x = randn({t.batch, t.sizes.front()}, device(on));
  Tensor y = randint(0, t.sizes.back(), {t.batch}, TensorOptions{ScalarType::int64, on});
  mark("data");
  for (int i = 0; i < t.steps; ++i) {
    const std::string s = "s" + std::to_string(i);
    Tensor out = (*model)(x);
    Tensor loss = cross_entropy(out, y);
    mark(s + "_forward");
    loss.backward();
    mark(s + "_backward");
    if (opt) opt->step();
    mark(s + "_step");
    if (opt) opt->zero_grad(/*set_to_none=*/true);
    else model->zero_grad(/*set_to_none=*/true);
    out = Tensor();  // del out, loss
    loss = Tensor();
    mark(s + "_zero_grad");
  }
}

TrainingPeak estimate_mlp_training(const MLPTraining& t, bool default_workspace, int64_t limit_bytes,
                                   ScenarioRecorder* marks) {
  return estimate_on_meta([&](Device on) { train_mlp(t, marks, on); }, default_workspace, limit_bytes);
}

BatchSearch max_mlp_batch(MLPTraining t, int64_t limit_bytes, bool default_workspace) {
  return largest_fitting_batch([&](int64_t batch) {
    t.batch = batch;
    return batch_outcome(estimate_mlp_training(t, default_workspace, limit_bytes));
  });
}

}  // namespace bytegrad::programs
