// Whether ops record autograd graphs on this thread (PyTorch's grad mode).
#pragma once

namespace bytegrad {

bool grad_mode_enabled();
void set_grad_mode_enabled(bool enabled);

// Whether backward on a GPU-like device (cuda, sim, meta) runs as on PyTorch's autograd device thread
// (the default) or on the calling thread (torch.autograd.set_multithreading_enabled(False)). It decides
// whose cuBLAS workspaces backward's matrix products use: the device thread has its own (32 MiB).
bool autograd_multithreading_enabled();
void set_autograd_multithreading_enabled(bool enabled);

// Ops inside its lifetime record nothing: outputs do not require grad and nothing is saved.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_mode_enabled()) { set_grad_mode_enabled(false); }
  ~NoGradGuard() { set_grad_mode_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording back on inside a NoGradGuard.
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(grad_mode_enabled()) { set_grad_mode_enabled(true); }
  ~EnableGradGuard() { set_grad_mode_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace bytegrad
