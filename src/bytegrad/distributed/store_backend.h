// The `store` backend: ranks in separate processes (or hosts) whose collectives go through the TCP store
// (store.h), for cpu, sim and meta tensors, so the multi-process path runs with no GPU. Simple and slow:
// each rank puts its call and its bytes under a key of the collective's sequence number, waits for every
// rank's, checks that the calls agree and computes its own result, reducing in rank order exactly as the
// threads backend does (bit-identical results). meta moves no bytes.
//
// Nothing hangs: a rank waiting longer than the group's timeout fails with CollectiveTimeout naming the
// ranks missing, and marks the group aborted in the store, so the other ranks fail at once; a rank that
// aborts or shuts down (its group destroyed) is seen by the others as "will never arrive".
#pragma once

#include <memory>
#include <string>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/process_group.h"
#include "bytegrad/distributed/store.h"

namespace bytegrad::distributed {

// Rank `rank` of `world_size` on `device` (cpu, sim or meta), meeting the others in `store` under keys
// starting with `key_prefix`. The group shuts down (shutdown()) when destroyed.
std::unique_ptr<ProcessGroup> make_store_process_group(std::shared_ptr<TcpStore> store, int rank, int world_size,
                                                       Device device, ProcessGroupOptions options = {},
                                                       std::string key_prefix = "store_pg/");

}  // namespace bytegrad::distributed
