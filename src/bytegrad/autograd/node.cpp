#include "bytegrad/autograd/node.h"

namespace bytegrad {

namespace {
// Per thread, like PyTorch's: creation order within the thread that ran the forward pass.
thread_local uint64_t next_sequence_nr = 0;
}

Node::Node() : sequence_nr_(next_sequence_nr++) {}

}  // namespace bytegrad
