// One rank per process, as torch.distributed.init_process_group: the rank, the world size and the
// rendezvous address come from the environment a launcher set (bytegrad-launch or torchrun: RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; or Open MPI's mpirun: OMPI_COMM_WORLD_RANK,
// OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, with MASTER_ADDR and MASTER_PORT still from the
// environment, 127.0.0.1:29500 by default). Rank 0 serves a TCP store (store.h) there; every rank connects.
//
//   auto pg = distributed::init_process_group("nccl");   // rank r on cuda:LOCAL_RANK
//   auto grad = ones({1024}, device(pg->device()));
//   pg->all_reduce(grad);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/nccl.h"
#include "bytegrad/distributed/process_group.h"

namespace bytegrad::distributed {

struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun" (RANK, ...) or "mpirun" (OMPI_COMM_WORLD_...)
};

// Reads the variables through `lookup` (getenv when not given). Throws std::invalid_argument naming the
// variable that is missing or malformed.
RankEnvironment read_rank_environment(const std::function<const char*(const char*)>& lookup = {});

struct InitOptions {
  ProcessGroupOptions group;                 // the collectives' timeout is also the rendezvous's
  DeviceType device_type = DeviceType::sim;  // the store backend's device (cpu, sim or meta)
  NcclOptions nccl;
};

// This process's rank of a group of every process started: backend "nccl" (rank on cuda:LOCAL_RANK, made
// the thread's current CUDA device and the default device) or "store" (collectives through the TCP store
// on options.device_type: sim:LOCAL_RANK, meta:LOCAL_RANK or cpu, also made the default device). Returns
// once every rank has connected (a rank missing after the timeout: CollectiveTimeout naming it).
std::unique_ptr<ProcessGroup> init_process_group(std::string_view backend, const InitOptions& options = {});
std::unique_ptr<ProcessGroup> init_process_group(std::string_view backend, const RankEnvironment& environment,
                                                 const InitOptions& options = {});

}  // namespace bytegrad::distributed
