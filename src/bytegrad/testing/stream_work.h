// Work that keeps a stream busy, for tests of what the caching allocator does while another stream still
// uses a block (Tensor::record_stream): on cuda a kernel that spins for about a second of GPU time (as
// PyTorch's torch.cuda._sleep in its tests); on sim and meta one work item of the modelled timeline, which
// stays pending until the program waits for it (memory/stream_timeline.h).
#pragma once

#include "bytegrad/memory/streams.h"

namespace bytegrad::testing {

void queue_busy_work(const Stream& stream);

}  // namespace bytegrad::testing
