// "Will it fit?": a training run's peak device memory, from running it on meta (every allocation PyTorch
// 2.11's caching allocator makes on an H100, no arithmetic), and the largest batch under a limit.
// bytegrad-estimate's library calls: GPT-2 (gpt2_programs.h) and an MLP (the seed001 kind of question).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/block_categories.h"
#include "bytegrad/memory/caching_allocator.h"
#include "programs/scenario.h"

namespace bytegrad::programs {

struct TrainingPeak {
  int64_t peak_allocated = 0;          // max_memory_allocated()
  int64_t peak_reserved = 0;           // max_memory_reserved()
  bool out_of_memory = false;          // the run failed under the limit (the peaks are those reached before)
  std::string message;                 // the out-of-memory error's text, when it failed
  std::string explanation;             // OutOfMemoryError::report() as text, when it failed
  bool fragmentation_caused = false;   // it failed, yet allocated + the request fit under the room (a cap or the card)
  PeakRecord at_peak;                  // bytes per category, phase and largest blocks at max_memory_allocated
  int64_t placement_ties = 0;          // requests best fit served with equal free blocks (decided by address)
  bool early_regions_decided = false;  // regions reserved before the first launch met the stretch (EarlyRegions)
};

// Runs `run(kMeta)` as a fresh process: PyTorch's default cuBLAS workspaces unless default_workspace is
// false (CUBLAS_WORKSPACE_CONFIG=:0:0); allocator settings from BYTEGRAD_ALLOC_CONF (as PyTorch reads
// PYTORCH_CUDA_ALLOC_CONF: e.g. expandable_segments:True); limit_bytes > 0 caps the allocator's reserved memory as
// torch.cuda.set_per_process_memory_fraction(limit / total) does. `ties`: which of equal free blocks best fit
// takes (PyTorch: the lowest address); the other order gives the other outcome where figures turn on a tie.
// `early`: where the regions reserved before the first kernel launch go (EarlyRegions, raw_memory.h), the
// second placement outcome; the default is the model's.
TrainingPeak estimate_on_meta(const std::function<void(Device)>& run, bool default_workspace, int64_t limit_bytes,
                              CachingAllocator::TieOrder ties = CachingAllocator::TieOrder::lowest_address,
                              CachingAllocator::EarlyRegions early = CachingAllocator::EarlyRegions::as_host_map);

// How a batch's run ended: it fit; it ran out of memory through fragmentation (the live blocks and the
// request fit under the room, no free piece was long enough); or live memory alone exceeded the room.
enum class BatchOutcome { fits, fragmented, over };
BatchOutcome batch_outcome(const TrainingPeak& peak);
// The worse of two ranks' outcomes (over, then fragmented, then fits).
BatchOutcome worse(BatchOutcome a, BatchOutcome b);

// The largest batch that fits and the batches just below it that do not. Near a cap fitting is not monotone
// in the batch: GPT-2 small under FSDP2 on four ranks with 6 GiB fits 12 and 14 but not 13, in PyTorch on
// four H100s as here (tests/data/pytorch_probes/fsdp_max_batch.json), because the allocator's flush at the
// cap leaves a different layout. Live memory is monotone, so the search bounds the answer by the smallest
// batch whose live memory alone exceeds the room (`over`: doubling, then bisection), walks down from there
// to the first batch that fits (largest, 0 when none), then on down past the batches that do not
// (not_fitting_below, largest first; empty where the batch below fits).
struct BatchSearch {
  int64_t largest = 0;
  std::vector<int64_t> not_fitting_below;
};
BatchSearch largest_fitting_batch(const std::function<BatchOutcome(int64_t)>& run);

// An MLP classifier's training (seed001's kind): Linear layers of `sizes` with ReLU between (in place or
// not), built on the device; x = randn(batch, sizes[0]), y = randint(0, sizes.back(), (batch,)); `steps`
// steps of forward, cross_entropy, backward, optimizer step (none: no optimizer) and
// zero_grad(set_to_none=True), the output and loss dropped after each.
enum class MLPOptimizer { none, sgd, adam, adamw };
struct MLPTraining {
  std::vector<int64_t> sizes = {784, 1024, 1024, 10};
  int64_t batch = 256;
  bool inplace_relu = false;
  MLPOptimizer optimizer = MLPOptimizer::adam;
  bool foreach = true;  // PyTorch's default on CUDA
  int steps = 2;
};
void train_mlp(const MLPTraining& training, ScenarioRecorder* r, Device on);
TrainingPeak estimate_mlp_training(const MLPTraining& training, bool default_workspace = true, int64_t limit_bytes = 0,
                                   ScenarioRecorder* marks = nullptr);
BatchSearch max_mlp_batch(MLPTraining training, int64_t limit_bytes, bool default_workspace = true);

}  // namespace bytegrad::programs
