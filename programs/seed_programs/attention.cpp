// seed004: where does attention's memory go, and why does it matter whether the code runs in a function?
// The Python (shared/golden/scenarios.py) is transcribed statement by statement.
#include "programs/seed_programs.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::programs {

namespace {

constexpr int64_t B = 64, L = 32, C = 512, H = 8, D = C / H;

// _attn_tensors(): drawn on the host with seed 0 (torch.randn without device=), then moved: four
// tensors of 64*8*32*64 floats = 4 MiB each on the device, nothing else (the host copies are freed).
struct AttentionInputs {
  Tensor q, k, v, x;
  explicit AttentionInputs(Device target) {
    const TensorOptions host = device("cpu");
    manual_seed(0);
    q = randn({B, H, L, D}, host).to(target);
    k = randn({B, H, D, L}, host).to(target);
    v = randn({B, H, L, D}, host).to(target);
    x = randn({B, L, C}, host).to(target);
  }
};

}  // namespace

void run_seed004_attention_function(ScenarioRecorder& r) {
  auto [q, k, v, x] = AttentionInputs(r.device());
  r.mark("initial");

  // Python's def fa(x): its locals (attn, the rebound x) die when it returns. A C++ local dies at its
  // scope's closing brace, so a lambda (or any { } block) gives the same lifetimes; the parameter is a
  // handle copy, so rebinding it inside leaves the caller's x alive, as in Python. (q, k and v are captured
  // by name: clang before 16 rejects a lambda that names a structured binding of the enclosing function.)
  auto fa = [&, &q = q, &k = k, &v = v](Tensor x) {
    const Tensor attn = matmul(q, k) * 0.125;
    r.mark("in_fn_after_matmul");
    x = matmul(attn, v).transpose(1, 2).reshape({B, L, C});  // reshape of a non-contiguous view: a copy
    r.mark("in_fn_after_final");
  };  // each call ends at this brace: attn and the rebound x are freed, back to the four inputs
  fa(x);
  r.mark("after_fn");
}

void run_seed004_attention_global(ScenarioRecorder& r) {
  auto [q, k, v, x] = AttentionInputs(r.device());
  r.mark("initial");
  // The same statements at the program's own scope: attn stays alive to the end, and the old x is freed
  // only when the new one is assigned over it (the new one exists first).
  const Tensor attn = matmul(q, k) * 0.125;
  r.mark("after_matmul");
  x = matmul(attn, v).transpose(1, 2).reshape({B, L, C});
  r.mark("after_final");
}

void run_seed004_x_plus_1(ScenarioRecorder& r) {
  auto [q, k, v, x] = AttentionInputs(r.device());
  r.mark("initial");

  auto fa = [&, &q = q, &k = k, &v = v](Tensor x) {
    (void)(x + 1);  // the result is a temporary, freed at the semicolon: only the peak remembers it
    r.mark("in_fn_x_plus_1_unassigned");
    const Tensor attn = matmul(q, k) * 0.125;
    r.mark("in_fn_after_matmul");
    x = matmul(attn, v).transpose(1, 2).reshape({B, L, C});
    r.mark("in_fn_after_final");
  };
  fa(x);
  r.mark("after_fn");

  auto fb = [&, &q = q, &k = k, &v = v](Tensor x) {
    x = x + 1;  // a new 4 MiB tensor; the caller's x is still alive through its own handle
    r.mark("fb_x_eq_x_plus_1");
    const Tensor attn = matmul(q, k) * 0.125;
    r.mark("fb_after_matmul");
    x = matmul(attn, v).transpose(1, 2).reshape({B, L, C});  // frees x + 1 once the result exists
    r.mark("fb_after_final");
  };
  fb(x);
  r.mark("after_fb");
}

}  // namespace bytegrad::programs
