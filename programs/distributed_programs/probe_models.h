// What ddp_programs.cpp and fsdp_programs.cpp share, as the two probes share it (tools/probes/
// probe_common.py, ddp_probe.py's MLP): the MLP, the iteration count, where a rank builds its model, and
// the runner's marks and program names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/process_group.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/module.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::programs {

// in -> hidden1 -> hidden2 -> 10 with ReLUs: the probes' MLP (1024, 4096, 4096: 20.8M parameters) and
// fsdp_probe.py's UnevenMLP (1000, 3001, 1001, first dimensions no world size of 2 or 4 divides); with
// `unused`, a Linear(256, 256) that forward never uses (ddp_probe.py's find_unused_parameters programs).
class ProbeMLP : public nn::Module {
 public:
  ProbeMLP(int64_t in, int64_t hidden1, int64_t hidden2, Device on, bool unused = false) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden1, on));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden1, hidden2, on));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden2, 10, on));
    if (unused) register_module("unused", std::make_shared<nn::Linear>(256, 256, on));
  }
  // fc3(relu(fc2(relu(fc1(x))))), one statement per layer so each layer's output is freed as Python frees
  // it (C++ would keep a nested expression's temporaries to its end).
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*fc1)(x));
    h = relu((*fc2)(h));
    return (*fc3)(h);
  }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

inline constexpr int kProbeIterations = 3;  // the probes' ITERATIONS

// Where a rank builds its model before moving it: the CPU, or on meta a meta device no rank uses (no
// arithmetic, and nothing lands in another rank's allocator).
inline Device build_device(const distributed::ProcessGroup& pg) {
  return pg.device().type == DeviceType::meta ? Device{DeviceType::meta, 100 + pg.rank()} : kCpu;
}

// The names of a probe's programs (entries with a `name`), in table order.
template <typename Entry>
std::vector<std::string> program_names(const std::vector<Entry>& entries) {
  std::vector<std::string> names;
  names.reserve(entries.size());
  for (const Entry& e : entries) names.push_back(e.name);
  return names;
}

// As the probes' runner: every mark synchronizes the device first (so a figure does not depend on how far
// the GPU got), and "start" and "process_group" come before the program. Returns the mark the program takes.
inline std::function<void(const std::string&)> start_probe_marks(const distributed::ProcessGroup& pg,
                                                                 std::function<void(const std::string&)> mark) {
  std::function<void(const std::string&)> synchronized_mark = [device = pg.device(),
                                                               mark = std::move(mark)](const std::string& label) {
    synchronize(device);
    mark(label);
  };
  synchronized_mark("start");
  synchronized_mark("process_group");
  return synchronized_mark;
}

}  // namespace bytegrad::programs
