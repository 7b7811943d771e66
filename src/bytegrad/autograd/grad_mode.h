// Whether ops record autograd graphs on this thread (PyTorch's grad mode).
#pragma once

#include "bytegrad/core/scoped_value.h"

namespace bytegrad {

bool grad_mode_enabled();
void set_grad_mode_enabled(bool enabled);

// Whether backward on a GPU-like device (cuda, sim, meta) runs as on PyTorch's autograd device thread
// (the default) or on the calling thread (torch.autograd.set_multithreading_enabled(False)). It decides
// whose cuBLAS workspaces backward's matrix products use: the device thread has its own (32 MiB).
bool autograd_multithreading_enabled();
void set_autograd_multithreading_enabled(bool enabled);

// Sets grad mode for its lifetime and restores the previous mode after.
class GradModeGuard : public ScopedSetting<bool, &grad_mode_enabled, &set_grad_mode_enabled> {
 public:
  explicit GradModeGuard(bool enabled) : ScopedSetting(enabled) {}
};

// Ops inside its lifetime record nothing: outputs do not require grad and nothing is saved.
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

// libtorch's InferenceMode guard (torch.inference_mode()): records nothing, as NoGradGuard; on the device
// it allocates exactly what no_grad does (inference tensors differ from no_grad ones only in skipping
// version counters and views' metadata, which live on the host). InferenceMode(false) leaves grad mode as
// it is.
class InferenceMode : public GradModeGuard {
 public:
  explicit InferenceMode(bool enabled = true) : GradModeGuard(!enabled && grad_mode_enabled()) {}
};

// Turns recording back on inside a NoGradGuard.
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

}  // namespace bytegrad
