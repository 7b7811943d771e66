#include "bytegrad/distributed/init.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "bytegrad/distributed/store.h"
#include "bytegrad/distributed/store_backend.h"
#include "bytegrad/memory/device_allocators.h"

namespace bytegrad::distributed {

namespace {

int parse_int(const char* name, const char* text) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || value < -2147483647L || value > 2147483647L)
    throw std::invalid_argument(std::string("init_process_group: ") + name + "='" + text + "' is not an integer");
  return static_cast<int>(value);
}

std::string rank_keys_missing(TcpStore& store, const std::string& prefix, int world_size) {
  std::string missing;
  for (int r = 0; r < world_size; ++r)
    if (!store.check({prefix + std::to_string(r)})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  return missing;
}

}  // namespace

RankEnvironment read_rank_environment(const std::function<const char*(const char*)>& lookup) {
  auto get = [&](const char* name) -> const char* {
    const char* value = lookup ? lookup(name) : std::getenv(name);
    return value != nullptr && value[0] != '\0' ? value : nullptr;
  };
  auto require = [&](const char* name, const char* launcher) {
    const char* value = get(name);
    if (value == nullptr)
      throw std::invalid_argument(std::string("init_process_group: ") + name + " is not set (" + launcher +
                                  " sets it for every rank)");
    return parse_int(name, value);
  };
  RankEnvironment env;
  if (get("RANK") != nullptr) {
    env.source = "torchrun";
    env.rank = require("RANK", "bytegrad-launch or torchrun");
    env.world_size = require("WORLD_SIZE", "bytegrad-launch or torchrun");
    env.local_rank = require("LOCAL_RANK", "bytegrad-launch or torchrun");
  } else if (get("OMPI_COMM_WORLD_RANK") != nullptr) {
    env.source = "mpirun";
    env.rank = require("OMPI_COMM_WORLD_RANK", "mpirun");
    env.world_size = require("OMPI_COMM_WORLD_SIZE", "mpirun");
    env.local_rank = require("OMPI_COMM_WORLD_LOCAL_RANK", "mpirun");
  } else {
    throw std::invalid_argument(
        "init_process_group: RANK is not set: start the ranks with bytegrad-launch or torchrun (RANK, WORLD_SIZE, "
        "LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or with Open MPI's mpirun (OMPI_COMM_WORLD_RANK, ...)");
  }
  if (const char* addr = get("MASTER_ADDR")) env.master_addr = addr;
  if (const char* port = get("MASTER_PORT")) env.master_port = parse_int("MASTER_PORT", port);

  const std::string prefix = env.source == "torchrun" ? "" : "OMPI_COMM_WORLD_";
  if (env.world_size < 1)
    throw std::invalid_argument("init_process_group: " + prefix + (prefix.empty() ? "WORLD_SIZE" : "SIZE") + "=" +
                                std::to_string(env.world_size) + " must be at least 1");
  if (env.rank < 0 || env.rank >= env.world_size)
    throw std::invalid_argument("init_process_group: " + prefix + "RANK=" + std::to_string(env.rank) +
                                " is not a rank of a world of " + std::to_string(env.world_size) + " (0 to " +
                                std::to_string(env.world_size - 1) + ")");
  if (env.local_rank < 0)
    throw std::invalid_argument("init_process_group: " + prefix + "LOCAL_RANK=" + std::to_string(env.local_rank) +
                                " must not be negative");
  if (env.master_port < 1 || env.master_port > 65535)
    throw std::invalid_argument("init_process_group: MASTER_PORT=" + std::to_string(env.master_port) +
                                " is not a TCP port (1 to 65535)");
  return env;
}

std::unique_ptr<ProcessGroup> init_process_group(std::string_view backend, const InitOptions& options) {
  return init_process_group(backend, read_rank_environment(), options);
}

std::unique_ptr<ProcessGroup> init_process_group(std::string_view backend, const RankEnvironment& env,
                                                 const InitOptions& options) {
  Device device;
  if (backend == "nccl") {
    if (!nccl_available()) make_nccl_process_groups(1);  // throws the build's explanation
    set_current_cuda_device(env.local_rank);
    device = Device{DeviceType::cuda, env.local_rank};
  } else if (backend == "store") {
    if (options.device_type == DeviceType::cuda)
      throw std::invalid_argument("init_process_group: the store backend runs on cpu, sim or meta; use nccl for cuda");
    device = options.device_type == DeviceType::cpu ? kCpu : Device{options.device_type, env.local_rank};
  } else {
    throw std::invalid_argument("init_process_group: unknown backend '" + std::string(backend) +
                                "' (one process per rank: nccl or store; threads of one process: run_ranks)");
  }
  set_default_device(device);

  const std::string where = "init_process_group on rank " + std::to_string(env.rank) + " of " +
                            std::to_string(env.world_size) + " (" + env.master_addr + ":" +
                            std::to_string(env.master_port) + ")";
  std::shared_ptr<TcpStore> store;
  try {
    store = std::make_shared<TcpStore>(env.master_addr, env.master_port, env.rank == 0, options.group.timeout);
  } catch (const StoreTimeout& e) {
    throw CollectiveTimeout(where + ": rank 0 never came: " + e.what());
  } catch (const StoreError& e) {
    throw CollectiveError(where + ": " + e.what());
  }
  // Every rank checks in before any collective, so a rank that never starts is named here.
  const std::string joined = "init/joined/";
  store->set(joined + std::to_string(env.rank), "1");
  std::vector<std::string> keys;
  keys.reserve(env.world_size);
  for (int r = 0; r < env.world_size; ++r) keys.push_back(joined + std::to_string(r));
  try {
    store->wait(keys);
  } catch (const StoreTimeout&) {
    throw CollectiveTimeout(where + ": timed out after " + std::to_string(options.group.timeout.count()) +
                            " ms waiting for rank(s) " + rank_keys_missing(*store, joined, env.world_size) +
                            " to join");
  }

  if (backend == "store")
    return make_store_process_group(store, env.rank, env.world_size, device, options.group, "default_pg/");
  // Rank 0 of a group makes its id and puts it in the store; the others read it there.
  auto shared_id = [store](const std::string& key, int rank) {
    NcclUniqueId id{};
    if (rank == 0) {
      id = make_nccl_unique_id();
      store->set(key, TcpStore::Bytes(id.begin(), id.end()));
    } else {
      const TcpStore::Bytes bytes = store->get(key);
      if (bytes.size() != id.size())
        throw std::runtime_error("the store's NCCL unique id has " + std::to_string(bytes.size()) + " bytes, not " +
                                 std::to_string(id.size()));
      std::copy(bytes.begin(), bytes.end(), id.begin());
    }
    return id;
  };
  NcclUniqueIdSource unique_id = [shared_id, rank = env.rank] { return shared_id("default_pg/nccl_unique_id", rank); };
  NcclSubgroupIdSource subgroup_ids = [shared_id](const std::string& key, int group_rank) {
    return shared_id("default_pg/sub/" + key + "/nccl_unique_id", group_rank);
  };
  return make_nccl_process_group(env.rank, env.world_size, device, unique_id, options.group, options.nccl,
                                 subgroup_ids);
}

}  // namespace bytegrad::distributed
