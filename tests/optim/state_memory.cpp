// Optimizer state and per-step temporaries on sim, as PyTorch's single-tensor (foreach=False) paths
// allocate them. Two parameters, the small one first (order matters: the previous parameter's Adam denom
// is alive during the next one's step):
//   p1 (100) float32: 400 bytes -> one 512-byte block; p2 (300, 7) float32: 8400 bytes -> 8704 (17 * 512).
#include <doctest/doctest.h>

#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;
using bytegrad::optim::Adam;
using bytegrad::optim::AdamW;
using bytegrad::optim::SGD;

namespace {

constexpr int64_t kP1 = 512;   // block(100 * 4)
constexpr int64_t kP2 = 8704;  // block(300 * 7 * 4)

struct Params {
  Tensor p1, p2;
  Params() {
    p1 = randn({100}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    p2 = randn({300, 7}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    regrad();
  }
  // Fresh gradients (same blocks as before: the old ones are freed first).
  void regrad() const {
    p1.set_grad(Tensor());
    p2.set_grad(Tensor());
    p1.set_grad(randn({100}, TensorOptions{ScalarType::float32, kSim}));
    p2.set_grad(randn({300, 7}, TensorOptions{ScalarType::float32, kSim}));
  }
  std::vector<Tensor> list() const { return {p1, p2}; }
};

}  // namespace

TEST_CASE("SGD with momentum: one param-sized buffer per parameter at the first step, nothing later") {
  fresh(kSim);
  {
    Params ps;
    SGD sgd(ps.list(), 0.1, 0.9);
    CHECK(!sgd.momentum_buffer(0).defined());
    {
      MemoryProbe p(kSim);
      sgd.step();
      CHECK(p.allocated_delta_is(kP1 + kP2));       // buf = clone(grad) for each
      CHECK(p.peak_allocated_delta_is(kP1 + kP2));  // no temporaries
    }
    ps.regrad();
    {
      MemoryProbe p(kSim);
      sgd.step();
      CHECK(p.allocated_delta_is(0));
      CHECK(p.peak_allocated_delta_is(0));  // buf.mul_().add_(), param.add_(): in place
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("SGD weight decay: a param-sized temporary per parameter, freed as the next one starts") {
  fresh(kSim);
  {
    Params ps;
    SGD sgd(ps.list(), 0.1, 0.9, 0.0, 1e-2);
    {
      MemoryProbe p(kSim);
      sgd.step();
      CHECK(p.allocated_delta_is(kP1 + kP2));
      // p1: decay temp (512) then buf (512), `grad = buf` frees the temp; p2: buf1 + temp (8704) + buf (8704).
      CHECK(p.peak_allocated_delta_is(kP1 + kP2 + kP2));
    }
    ps.regrad();
    {
      MemoryProbe p(kSim);
      sgd.step();
      CHECK(p.allocated_delta_is(0));
      CHECK(p.peak_allocated_delta_is(kP2));  // one decay temporary at a time
    }
  }
  {
    Params ps;
    SGD nesterov(ps.list(), 0.1, 0.9, 0.0, 1e-2, true);
    MemoryProbe p(kSim);
    nesterov.step();
    // p1: temp, buf, nesterov grad (the temp freed); p2's turn frees p1's nesterov grad: buf1 + temp2 +
    // buf2 + nesterov2.
    CHECK(p.peak_allocated_delta_is(kP1 + 3 * kP2));
    CHECK(p.allocated_delta_is(kP1 + kP2));
  }
  CHECK(allocated() == 0);
}

TEST_CASE("Adam: exp_avg and exp_avg_sq per parameter; denom temporaries as _single_tensor_adam's") {
  fresh(kSim);
  {
    Params ps;
    Adam adam(ps.list(), 1e-3);
    const int64_t state = 2 * (kP1 + kP2);  // 18432
    {
      MemoryProbe p(kSim);
      adam.step();
      CHECK(p.allocated_delta_is(state));
      CHECK(p.blocks_delta() == 4);
      // p1: sqrt (512) + quotient (512); the sqrt is freed, denom1 (512) lives on. p2: denom1 + sqrt (8704)
      // + quotient (8704).
      CHECK(p.peak_allocated_delta_is(state + kP1 + 2 * kP2));
    }
    CHECK(adam.state(0).step == 1);
    ps.regrad();
    {
      MemoryProbe p(kSim);
      adam.step();
      CHECK(p.allocated_delta_is(0));
      CHECK(p.peak_allocated_delta_is(kP1 + 2 * kP2));
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("Adam with L2 weight decay adds a grad temporary; AdamW decays in place; amsgrad adds a state") {
  fresh(kSim);
  const int64_t state = 2 * (kP1 + kP2);
  {
    Params ps;
    Adam adam(ps.list(), 1e-3, {0.9, 0.999}, 1e-8, 1e-2);
    MemoryProbe p(kSim);
    adam.step();
    CHECK(p.allocated_delta_is(state));
    // p1 leaves its decay grad (512) and denom (512); p2's turn frees the grad first, then: denom1 +
    // grad2 + sqrt2 + quotient2.
    CHECK(p.peak_allocated_delta_is(state + kP1 + 3 * kP2));
  }
  {
    Params ps;
    AdamW adamw(ps.list(), 1e-3, {0.9, 0.999}, 1e-8, 1e-2);
    MemoryProbe p(kSim);
    adamw.step();
    CHECK(p.allocated_delta_is(state));
    CHECK(p.peak_allocated_delta_is(state + kP1 + 2 * kP2));  // param.mul_ in place: as Adam without decay
  }
  {
    Params ps;
    Adam amsgrad(ps.list(), 1e-3, {0.9, 0.999}, 1e-8, 0.0, true);
    MemoryProbe p(kSim);
    amsgrad.step();
    CHECK(p.allocated_delta_is(3 * (kP1 + kP2)));  // max_exp_avg_sq too
    CHECK(p.peak_allocated_delta_is(3 * (kP1 + kP2) + kP1 + 2 * kP2));
  }
  CHECK(allocated() == 0);
}

TEST_CASE("zero_grad(set_to_none) frees gradients; parameters without a gradient get no state") {
  fresh(kSim);
  {
    Params ps;
    Adam adam(ps.list());
    ps.p2.set_grad(Tensor());
    {
      MemoryProbe p(kSim);
      adam.step();
      CHECK(p.allocated_delta_is(2 * kP1));  // only p1 has a gradient
      CHECK(!adam.state(1).exp_avg.defined());
    }
    MemoryProbe p(kSim);
    adam.zero_grad();
    CHECK(p.allocated_delta_is(-kP1));  // p1's gradient
    CHECK(!ps.p1.grad().defined());
    ps.regrad();
    adam.zero_grad(false);
    CHECK(ps.p2.grad().defined());
    CHECK(sum(abs(ps.p2.grad())).item() == 0.0);
  }
  CHECK(allocated() == 0);
}
