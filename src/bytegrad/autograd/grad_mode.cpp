#include "bytegrad/autograd/grad_mode.h"

namespace bytegrad {

namespace {
thread_local bool grad_mode = true;
thread_local bool multithreading = true;
}  // namespace

bool grad_mode_enabled() { return grad_mode; }
void set_grad_mode_enabled(bool enabled) { grad_mode = enabled; }
bool autograd_multithreading_enabled() { return multithreading; }
void set_autograd_multithreading_enabled(bool enabled) { multithreading = enabled; }

}  // namespace bytegrad
