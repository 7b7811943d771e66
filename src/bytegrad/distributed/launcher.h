// Starting N ranks in one process: one thread per rank, each with its own process group on its own device:
// the `threads` backend on sim:r, meta:r or cpu, or the `nccl` backend on cuda:r (one GPU per rank, made
// the thread's current CUDA device), as torchrun starts one process per GPU. Ranks as processes:
// init.h (init_process_group) and the bytegrad-launch program.
//
//   distributed::run_ranks(4, DeviceType::sim, [](distributed::ProcessGroup& pg) {
//     auto x = full({1024}, pg.rank(), device(pg.device()));
//     pg.all_reduce(x);                                  // every rank: 0 + 1 + 2 + 3
//   });
//
// Per-thread state starts fresh on every rank thread, as on a new thread in PyTorch: grad mode on, autocast
// off, the default stream current on every device. Process-wide state is shared by the ranks:
// default_device() (name pg.device() explicitly) and the random generator (one seeded stream of draws for
// the whole process, taken by the ranks in whatever order their threads run). docs/distributed.md lists
// what this means.
#pragma once

#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/process_group.h"

namespace bytegrad::distributed {

// A rank's function threw: the message names the rank and what it threw; original() is the exception itself.
class RankFailure : public std::runtime_error {
 public:
  RankFailure(int rank, const std::string& message, std::exception_ptr original)
      : std::runtime_error(message), rank_(rank), original_(std::move(original)) {}
  int rank() const { return rank_; }
  std::exception_ptr original() const { return original_; }

 private:
  int rank_;
  std::exception_ptr original_;
};

// Runs body(group) on `world_size` threads, rank r's group on threads_rank_device(type, r) (cuda:r for
// cuda, std::runtime_error when fewer GPUs than ranks or no NCCL in the build), and joins
// them. When a rank throws, its group is aborted, so ranks waiting for it in a collective fail at once
// instead of hanging; once all have finished, the first exception thrown (by time) is rethrown as a
// RankFailure naming its rank. A rank whose function returns shuts its group down: a peer still waiting
// for it fails at once. A rank stuck outside collectives (an endless loop) cannot be stopped: run_ranks
// waits for it. On cuda, threads of one process share CUDA's locks: a rank's cudaMalloc or lazy kernel load
// can wait behind a sibling's NCCL kernel that waits for it (NCCL issues #37, #613), so train with one
// process per GPU (init.h, bytegrad-launch); run_ranks on cuda is for tests.
void run_ranks(int world_size, DeviceType type, const std::function<void(ProcessGroup&)>& body,
               ProcessGroupOptions options = {});

}  // namespace bytegrad::distributed
