// The `fake` backend: rank `rank` of `world_size`, alone in the process (PyTorch's "fake" process group, for
// estimates at any world size in milliseconds). Its collectives check their arguments, take the same
// streams and allocate and hold exactly what the real one does on that rank (process_group.h), and move
// nothing: tensors keep their values. A barrier never waits for anyone.
//
// Unlike PyTorch's FakeProcessGroup, which allocates nothing and queues nothing, this one follows
// ProcessGroupNCCL's allocations and stream rules, so its figures are a real rank's.
#pragma once

#include <memory>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/process_group.h"

namespace bytegrad::distributed {

std::unique_ptr<ProcessGroup> make_fake_process_group(int rank, int world_size, Device device,
                                                      ProcessGroupOptions options = {});

}  // namespace bytegrad::distributed
