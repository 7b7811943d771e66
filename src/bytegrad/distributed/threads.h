// The `threads` backend: N ranks in one process, one thread each, rank r on device sim:r (or meta:r, or
// the shared cpu). Collectives are real: when the last rank arrives, it checks that every rank made the
// same call and moves the bytes in host memory (sim's memory is host memory; meta moves nothing), reducing
// in rank order so every rank gets bit-identical results. Every rank's call returns only after that, for
// async_op too: async_op decides the stream and the tensors' lifetimes (process_group.h), not when the
// host moves the bytes.
//
// Nothing hangs: a rank waiting longer than the timeout fails with CollectiveTimeout naming the ranks
// missing and the collective, and aborts the group, so the others fail too (the late rank when it
// arrives); a rank that aborts (run_ranks does it for a rank that throws) or shuts down makes its peers
// fail at once.
#pragma once

#include <memory>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/process_group.h"

namespace bytegrad::distributed {

// The device rank `rank` uses for `type`: sim:rank, meta:rank, or cpu. Throws std::invalid_argument for
// cuda (the threads backend has no GPU collectives: that is NCCL's).
Device threads_rank_device(DeviceType type, int rank);

// One process group per rank, sharing their rendezvous; group r is to be used by one thread at a time
// (rank r's). run_ranks (launcher.h) makes them, runs the threads and cleans up.
std::vector<std::unique_ptr<ProcessGroup>> make_threads_process_groups(int world_size, DeviceType type,
                                                                       ProcessGroupOptions options = {});

}  // namespace bytegrad::distributed
