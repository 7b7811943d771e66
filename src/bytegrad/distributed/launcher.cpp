#include "bytegrad/distributed/launcher.h"

#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "bytegrad/distributed/nccl.h"
#include "bytegrad/distributed/threads.h"

namespace bytegrad::distributed {

namespace {

// What the exception in flight says (called inside a catch block).
std::string current_exception_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

void run_ranks(int world_size, DeviceType type, const std::function<void(ProcessGroup&)>& body,
               ProcessGroupOptions options) {
  if (!body) throw std::invalid_argument("run_ranks: no function to run");
  // cuda: one GPU and one NCCL communicator per rank (refused when fewer GPUs than ranks); else threads.
  std::vector<std::unique_ptr<ProcessGroup>> groups = type == DeviceType::cuda
                                                          ? make_nccl_process_groups(world_size, options)
                                                          : make_threads_process_groups(world_size, type, options);

  struct Failure {
    int rank;
    std::string message;
    std::exception_ptr original;
  };
  std::mutex failure_mutex;
  std::optional<Failure> first_failure;

  auto run_one = [&](int rank) {
    ProcessGroup& group = *groups[rank];
    try {
      if (type == DeviceType::cuda) set_current_cuda_device(group.device().index);  // as torch.cuda.set_device
      body(group);
      group.shutdown();
    } catch (...) {
      const std::string message = current_exception_message();
      {
        std::lock_guard lock(failure_mutex);
        if (!first_failure) first_failure = Failure{rank, message, std::current_exception()};
      }
      group.abort("rank " + std::to_string(rank) + " failed: " + message);
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(groups.size());
  try {
    for (int rank = 0; rank < world_size; ++rank) threads.emplace_back(run_one, rank);
  } catch (...) {
    // A thread could not start: the started ranks must not wait for it.
    const std::string message = current_exception_message();
    for (auto& group : groups) group->abort("run_ranks could not start every rank's thread: " + message);
    for (auto& thread : threads) thread.join();
    throw;
  }
  for (auto& thread : threads) thread.join();

  if (first_failure)
    throw RankFailure(first_failure->rank,
                      "rank " + std::to_string(first_failure->rank) + " of " + std::to_string(world_size) +
                          " failed: " + first_failure->message,
                      first_failure->original);
}

}  // namespace bytegrad::distributed
