#include "bytegrad/tensor/autograd_hook.h"

#include <atomic>

namespace bytegrad {

namespace {
std::atomic<AutogradHook*> installed_hook{nullptr};
std::atomic<RequiresGradSetter> installed_setter{nullptr};
thread_local bool recording_paused = false;
}  // namespace

bool autograd_recording_paused() { return recording_paused; }
AutogradRecordingPause::AutogradRecordingPause() : scope_(recording_paused, true) {}

void install_autograd_hook(AutogradHook* hook) { installed_hook.store(hook); }
AutogradHook* autograd_hook() { return installed_hook.load(std::memory_order_relaxed); }

void install_requires_grad_setter(RequiresGradSetter setter) { installed_setter.store(setter); }
RequiresGradSetter requires_grad_setter() { return installed_setter.load(); }

}  // namespace bytegrad
