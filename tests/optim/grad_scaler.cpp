// optim::GradScaler against arithmetic: the scale's values through skipped and successful steps, the
// unscaled gradients, state_dict, the errors; its allocation events on sim from the sequence
// grad_scaler.h lists (every tensor 0-d: 4 or 8 bytes, a 512-byte block); and, once recorded on the H100
// (tools/probes/training_loop_probe.py), PyTorch's own events.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <ostream>
#include <limits>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/core/json.h"
#include "bytegrad/optim/grad_scaler.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;
using optim::GradScaler;

// Events read in a failing check's message.
namespace doctest {
template <>
struct StringMaker<bytegrad::testing::AllocationEvents> {
  static String convert(const bytegrad::testing::AllocationEvents& events) {
    std::string out;
    for (const auto& [action, size] : events) out += action + " " + std::to_string(size) + "; ";
    return out.c_str();
  }
};
}  // namespace doctest

namespace {

const TensorOptions kSimF32{ScalarType::float32, kSim};

// p (4 floats) with loss = sum(p * w): its gradient is w times the loss's scale.
struct Setup {
  Tensor p = from_vector({1.0, 2.0, 3.0, 4.0}, {4}, kSimF32).requires_grad_();
  Tensor w = from_vector({0.5, -1.0, 0.25, 2.0}, {4}, kSimF32);
  Tensor loss() const { return (p * w).sum(); }
};

}  // namespace

TEST_CASE("GradScaler: scale, unscale, skip on inf, back off, grow every growth_interval steps") {
  fresh(kSim);
  Setup s;
  optim::SGD opt({s.p}, 0.1);
  GradScaler scaler(DeviceType::sim, 1024.0, 2.0, 0.5, /*growth_interval=*/2);
  CHECK(scaler.get_scale() == 1024.0);
  auto iteration = [&](bool poison) {
    opt.zero_grad();
    Tensor scaled = scaler.scale(s.loss());
    scaled.backward();
    if (poison) {
      NoGradGuard no_grad;
      s.p.grad().fill_(std::numeric_limits<double>::infinity());
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  // 1: the gradient is w * 1024, unscaled to w exactly (powers of two); p -= 0.1 * w.
  CHECK(iteration(false));
  CHECK(s.p.grad().tolist() == std::vector<double>{0.5, -1.0, 0.25, 2.0});
  CHECK(scaler.get_scale() == 1024.0);  // one successful step of two
  // 2: second success: the scale doubles, the tracker restarts.
  CHECK(iteration(false));
  CHECK(scaler.get_scale() == 2048.0);
  CHECK(scaler.state_dict()["_growth_tracker"].integer() == 0);
  const std::vector<double> before = s.p.tolist();
  // 3: an inf gradient: no step, the scale halves.
  CHECK_FALSE(iteration(true));
  CHECK(s.p.tolist() == before);
  CHECK(scaler.get_scale() == 1024.0);
  CHECK(iteration(false));
  CHECK(scaler.state_dict()["_growth_tracker"].integer() == 1);
  // update(new_scale) sets it.
  opt.zero_grad();
  scaler.scale(s.loss()).backward();
  scaler.step(opt);
  scaler.update(8.0);
  CHECK(scaler.get_scale() == 8.0);
}

TEST_CASE("GradScaler: allocation events on sim, as torch.amp.GradScaler makes them") {
  fresh(kSim);
  Setup s;
  optim::SGD opt({s.p}, 0.1);
  GradScaler scaler(DeviceType::sim);
  Tensor loss = s.loss();
  Tensor scaled;
  // The scale (float32) and growth tracker (int32), then loss * scale: three 0-d tensors.
  // (Events give the bytes asked for: 4 for a float32 or int32 scalar, 8 for a float64 one.)
  CHECK(allocation_events(kSim, [&] { scaled = scaler.scale(loss); }) ==
        AllocationEvents{{"alloc", 4}, {"alloc", 4}, {"alloc", 4}});
  scaled.backward();
  // scale.double() (8 bytes), its reciprocal, the double freed, .float(), the reciprocal freed; found_inf;
  // the found_inf and inv_scale copies for sim; the inv_scale copy freed, then inv_scale, then found_inf.
  const AllocationEvents unscale = {{"alloc", 8}, {"alloc", 8}, {"free", 8}, {"alloc", 4}, {"free", 8}, {"alloc", 4},
                                    {"alloc", 4}, {"alloc", 4}, {"free", 4}, {"free", 4},  {"free", 4}};
  {
    MemoryProbe probe(kSim);
    CHECK(allocation_events(kSim, [&] { scaler.unscale_(opt); }) == unscale);
    CHECK(probe.allocated_delta_is(512));           // found_inf's copy stays until update()
    CHECK(probe.peak_allocated_delta_is(4 * 512));  // inv_scale, found_inf and both copies
  }
  CHECK(allocation_events(kSim, [&] { scaler.step(opt); }).empty());  // SGD without momentum: in place
  CHECK(allocation_events(kSim, [&] { scaler.update(); }) == AllocationEvents{{"free", 4}});
  // A later iteration: no lazy init; step() unscales itself.
  opt.zero_grad();
  loss = s.loss();
  // loss * scale, then the previous scaled loss freed as `scaled` is rebound.
  CHECK(allocation_events(kSim, [&] { scaled = scaler.scale(loss); }) == AllocationEvents{{"alloc", 4}, {"free", 4}});
  scaled.backward();
  CHECK(allocation_events(kSim, [&] { scaler.step(opt); }) == unscale);
  CHECK(allocation_events(kSim, [&] { scaler.update(); }) == AllocationEvents{{"free", 4}});
}

TEST_CASE("GradScaler: state_dict round trip, disabled pass-through, PyTorch's errors") {
  fresh(kSim);
  Setup s;
  optim::SGD opt({s.p}, 0.1);
  GradScaler scaler(DeviceType::sim, 256.0, 4.0, 0.25, 3);
  scaler.scale(s.loss()).backward();
  scaler.step(opt);
  scaler.update();
  const json::Value state = scaler.state_dict();
  CHECK(json::dump(state) ==
        R"({"scale": 256, "growth_factor": 4, "backoff_factor": 0.25, "growth_interval": 3, "_growth_tracker": 1})");
  GradScaler other(DeviceType::sim);
  other.load_state_dict(state);
  CHECK(other.get_scale() == 256.0);
  CHECK(other.get_growth_interval() == 3);
  CHECK(json::dump(other.state_dict()) == json::dump(state));
  CHECK_THROWS_WITH_AS(other.load_state_dict(json::object()), doctest::Contains("The source state dict is empty"),
                       std::runtime_error);

  GradScaler off(DeviceType::sim, 65536.0, 2.0, 0.5, 2000, /*enabled=*/false);
  const Tensor loss = s.loss();
  CHECK(off.scale(loss).storage() == loss.storage());
  CHECK(off.get_scale() == 1.0);
  CHECK(off.state_dict().size() == 0);

  GradScaler fresh_scaler(DeviceType::sim);
  CHECK_THROWS_WITH_AS(fresh_scaler.unscale_(opt), doctest::Contains("_scale is None"), std::runtime_error);
  opt.zero_grad();
  fresh_scaler.scale(s.loss()).backward();
  fresh_scaler.unscale_(opt);
  CHECK_THROWS_WITH_AS(fresh_scaler.unscale_(opt), doctest::Contains("unscale_() has already been called"),
                       std::runtime_error);
  fresh_scaler.step(opt);
  CHECK_THROWS_WITH_AS(fresh_scaler.step(opt), doctest::Contains("step() has already been called"), std::runtime_error);
  CHECK_THROWS_WITH_AS(fresh_scaler.unscale_(opt), doctest::Contains("after step()"), std::runtime_error);
  fresh_scaler.update();
  CHECK_THROWS_WITH_AS(GradScaler(DeviceType::sim, 1.0, 1.0), doctest::Contains("growth factor must be > 1.0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(GradScaler(DeviceType::sim, 1.0, 2.0, 1.0), doctest::Contains("backoff factor must be < 1.0"),
                       std::invalid_argument);
  // float16 gradients are refused before anything is allocated.
  Tensor h = zeros({4}, TensorOptions{ScalarType::float16, kSim}).requires_grad_();
  h.set_grad(zeros({4}, TensorOptions{ScalarType::float16, kSim}));
  optim::SGD half_opt({h}, 0.1);
  MemoryProbe probe(kSim);
  CHECK_THROWS_WITH_AS(fresh_scaler.unscale_(half_opt), doctest::Contains("Attempting to unscale FP16 gradients."),
                       std::invalid_argument);
  CHECK(probe.peak_allocated_delta_is(0));
}

TEST_CASE("amp ops: the check reads values before scaling; update keeps the scale finite") {
  fresh(kSim);
  const Tensor found = zeros({}, kSimF32);
  const Tensor inv = full({}, 1e-30, kSimF32);
  const Tensor big = from_vector({1e30, 2.0}, {2}, kSimF32);
  amp_foreach_non_finite_check_and_unscale_({big}, found, inv);
  CHECK(found.item() == 0.0);
  const Tensor inv_big = full({}, 1e30, kSimF32);
  amp_foreach_non_finite_check_and_unscale_({big}, found, inv_big);  // 1 * 1e30 is finite; no flag
  CHECK(found.item() == 0.0);
  const Tensor nan = from_vector({std::nan(""), 1.0}, {2}, kSimF32);
  amp_foreach_non_finite_check_and_unscale_({nan}, found, inv);
  CHECK(found.item() == 1.0);
  const Tensor scale = full({}, 3e38, kSimF32);
  const Tensor tracker = zeros({}, TensorOptions{ScalarType::int32, kSim});
  const Tensor none = zeros({}, kSimF32);
  amp_update_scale_(scale, tracker, none, 2.0, 0.5, 1);  // 6e38 is past float32: the scale stays
  CHECK(scale.item() == static_cast<double>(3e38F));
  CHECK(tracker.item() == 0.0);
}

TEST_CASE("GradScaler: events equal PyTorch's recording (tests/data/pytorch_probes/grad_scaler.json)") {
  const std::string path = std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/grad_scaler.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path << " (python3 tools/probes/training_loop_probe.py OUT writes it)");
  const json::Value recording = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  // The probe's loop: p (64 x 32 float32) and loss = (x @ p).float().pow(2).mean() under float16 autocast;
  // only the scaler's own calls are compared, which depend on the loss being 0-d and one gradient dtype.
  fresh(kSim);
  Tensor p = zeros({64, 32}, kSimF32).requires_grad_();
  optim::SGD opt({p}, 0.01);
  GradScaler scaler(DeviceType::sim);
  for (const json::Value& it : recording["iterations"].items) {
    opt.zero_grad();
    p.set_grad(zeros({64, 32}, kSimF32));
    if (it["poisoned"].boolean) {
      NoGradGuard no_grad;
      p.grad().fill_(std::numeric_limits<double>::infinity());
    }
    const Tensor loss = zeros({}, kSimF32);
    auto events_of = [](const json::Value& list) {
      AllocationEvents out;
      for (const json::Value& e : list.items)
        out.emplace_back(e[0].string() == "alloc" ? "alloc" : "free", e[1].integer());
      return out;
    };
    Tensor scaled;
    CHECK(allocation_events(kSim, [&] { scaled = scaler.scale(loss); }) == events_of(it["scale"]));
    CHECK(allocation_events(kSim, [&] { scaler.step(opt); }) == events_of(it["step"]));
    CHECK(allocation_events(kSim, [&] { scaler.update(); }) == events_of(it["update"]));
    CHECK(scaler.get_scale() == it["scale_after"].number());
  }
}
