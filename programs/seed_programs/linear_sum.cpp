// seed000: two bias-free Linear layers, a loss made with torch.sum or with Python's builtin sum, and
// repeated forward/backward. The Python (shared/golden/scenarios.py, _seed000) transcribed statement by
// statement.
#include "bytegrad/nn/linear.h"
#include "programs/seed_programs.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::programs {

namespace {

// Python's builtin sum(t) over a (1024, 1) tensor: iterate its rows (unbind: views) and add them one by
// one, 0 + t[0] + t[1] + ... Each addition makes a new (1,) tensor and frees the previous partial sum;
// the result has shape (1,), not ().
Tensor builtin_sum(const Tensor& t) {
  std::vector<Tensor> rows = t.unbind(0);
  Tensor acc = 0.0 + rows[0];
  for (size_t i = 1; i < rows.size(); ++i) acc = acc + rows[i];
  return acc;
}

void run_seed000(ScenarioRecorder& r, int64_t hidden, bool use_builtin_sum, int loops) {
  const TensorOptions on = device(r.device());
  nn::Linear linear1(1024, hidden, /*bias=*/false, on);
  r.mark("linear1");
  nn::Linear linear2(hidden, 1, /*bias=*/false, on);
  r.mark("linear2");
  // torch.tensor([[1.0] * 1024] * 1024).cuda(): built on the host, then one 4 MiB block on the device.
  Tensor inputs = ones({1024, 1024}, device(Device{DeviceType::cpu, 0})).to(r.device());
  r.mark("inputs");
  auto s = [&](const Tensor& t) { return use_builtin_sum ? builtin_sum(t) : sum(t); };
  Tensor loss = s(linear2(linear1(inputs)));
  r.mark("forward1");
  loss.backward();
  r.mark("backward1");
  loss = s(linear2(linear1(inputs)));  // the new loss (and its graph) exists before the old one is freed
  r.mark("forward2");
  loss.backward();
  r.mark("backward2");
  for (int i = 0; i < loops; ++i) {
    loss = s(linear2(linear1(inputs)));
    loss.backward();
  }
  r.mark("loop_end");
}

}  // namespace

void run_seed000_builtin_sum(ScenarioRecorder& r) { run_seed000(r, 1024, true, 20); }
void run_seed000_torch_sum(ScenarioRecorder& r) { run_seed000(r, 1024, false, 200); }
void run_seed000_wide_builtin_sum(ScenarioRecorder& r) { run_seed000(r, 2048, true, 20); }
void run_seed000_wide_torch_sum(ScenarioRecorder& r) { run_seed000(r, 2048, false, 200); }

}  // namespace bytegrad::programs
