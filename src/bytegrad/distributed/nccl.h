// The `nccl` backend: collectives on cuda tensors through NVIDIA's NCCL, one communicator per group, made
// at the group's first collective (as ProcessGroupNCCL does) unless eager_init asks for it at once. Streams
// and tensor lifetimes are process_group.h's: a synchronous collective is launched on the caller's current
// stream, an async one on the group's stream after it waits for the current one, its tensors stashed until
// wait(). The only allocation through the caching allocator is barrier()'s 512 B.
//
// NCCL's own buffers live outside the allocator (channels, FIFOs, proxy buffers; made partly at the
// communicator's creation and partly at the first use of each algorithm): memory_outside_allocator and
// nccl_memory_figures read them from cudaMemGetInfo, for reports that say "outside the allocator: NCCL ...".
//
// Nothing hangs: the communicator is non-blocking; its creation and each launch are polled with the group's
// timeout, and a watchdog thread checks every 100 ms that the collectives launched have completed within
// the timeout and that NCCL reports no asynchronous error. On a timeout or an error it aborts the
// communicator (ncclCommAbort, which also ends its kernels still waiting) and the group's next collective
// throws CollectiveTimeout or CollectiveError naming the collective, the rank and NCCL's message.
//
// Built only when CMake finds CUDA and NCCL (nccl.h, libnccl); otherwise nccl_available() is false and
// making a group throws std::runtime_error saying so.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/process_group.h"

namespace bytegrad::distributed {

// Whether this build has the nccl backend.
bool nccl_available();
// The NCCL library's version ("2.28.9"), or "" without NCCL.
std::string nccl_version();

// ncclUniqueId's bytes: made once by rank 0 (make_nccl_unique_id), handed to every rank (the store).
using NcclUniqueId = std::array<char, 128>;
NcclUniqueId make_nccl_unique_id();
// Called when the communicator is made (lazily): returns the id rank 0 made, e.g. from the store.
using NcclUniqueIdSource = std::function<NcclUniqueId()>;

// A subgroup's id (ProcessGroup::new_group): `key` names the subgroup alike on its members, the one of
// group_rank 0 makes the id, the others get the same (PyTorch's new_group without a bound device: a new
// communicator from a new unique id shared through the store, made at the subgroup's first collective).
using NcclSubgroupIdSource = std::function<NcclUniqueId(const std::string& key, int group_rank)>;

struct NcclOptions {
  bool eager_init = false;  // make the communicator when the group is made (PyTorch's device_id= argument)
};

// Rank `rank` of `world_size` on `device` (a cuda device this process sees).
std::unique_ptr<ProcessGroup> make_nccl_process_group(int rank, int world_size, Device device,
                                                      const NcclUniqueIdSource& unique_id,
                                                      ProcessGroupOptions options = {}, NcclOptions nccl = {},
                                                      NcclSubgroupIdSource subgroup_ids = {});
// One group per GPU of this process (rank r on cuda:r), sharing one unique id, for run_ranks: each rank's
// thread makes its communicator at its first collective. When one group is aborted, the others abort too.
// Their subgroups (new_group) share ids in the process.
// Throws std::runtime_error when fewer than world_size GPUs are visible.
std::vector<std::unique_ptr<ProcessGroup>> make_nccl_process_groups(int world_size, ProcessGroupOptions options = {});

// Makes cuda:index the calling thread's current CUDA device (torch.cuda.set_device): what ranks do before
// touching a GPU, so no rank makes a CUDA context on GPU 0. Throws std::runtime_error without CUDA or when
// the device is not visible.
void set_current_cuda_device(int index);

// Device memory in use that the caching allocator did not reserve: cudaMemGetInfo's total - free - the
// allocator's reserved bytes (the CUDA context, NCCL's buffers, cuBLAS's workspaces outside the allocator).
// cuda only (std::invalid_argument otherwise).
int64_t memory_outside_allocator(Device device);

// What NCCL took outside the allocator on a rank's GPU, as memory_outside_allocator changed around the
// communicator's creation and around the first collective of each kind. Another thread or process using
// the same GPU at that moment would be counted too.
struct NcclMemoryFigures {
  int64_t before_communicator = 0;  // memory_outside_allocator just before ncclCommInitRank
  int64_t communicator_bytes = 0;   // its growth across ncclCommInitRank
  std::vector<std::pair<CollectiveKind, int64_t>> first_use_bytes;  // growth across each kind's first launch
};
// A nccl group's figures so far (nullopt for other backends).
std::optional<NcclMemoryFigures> nccl_memory_figures(const ProcessGroup& group);

}  // namespace bytegrad::distributed
