// nn::utils::clip_grad_norm_ and clip_grad_value_ against PyTorch 2.11 on the H100
// (tests/data/pytorch_probes/clip_grad.jsonl, recorded by tools/probes/training_loop_probe.py): for each
// recorded call, the allocator's events on sim and meta equal PyTorch's event for event, and the returned
// norm and the first gradient's first values equal PyTorch's on sim and cpu. Then the edges: parameters
// without gradients, an empty list, error_if_nonfinite, the refused orders and foreach=true on cpu.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/nn/clip_grad.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/fresh_device.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;
using bytegrad::nn::utils::clip_grad_norm_;
using bytegrad::nn::utils::clip_grad_value_;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

std::vector<json::Value> recorded_calls() {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/clip_grad.jsonl");
  REQUIRE(in.good());
  std::vector<json::Value> calls;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) calls.push_back(json::parse(line));
  return calls;
}

// The probe's parameters: shapes (1000, 300), (300,), (10, 300), (10,), float32, each gradient
// (arange(n) % 7 - 3) * (0.01 * (i + 1)) computed in float32 as PyTorch's kernels compute it.
std::vector<Tensor> probe_parameters(Device d) {
  const std::vector<Shape> shapes = {{1000, 300}, {300}, {10, 300}, {10}};
  std::vector<Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t s : shapes[i]) n *= s;
    const TensorOptions f32{ScalarType::float32, d};
    Tensor p = zeros(shapes[i], f32).requires_grad_();
    if (d.type == DeviceType::meta) {
      p.set_grad(zeros(shapes[i], f32));
    } else {
      const auto scale = static_cast<float>(0.01 * static_cast<double>(i + 1));
      std::vector<double> values(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) values[k] = static_cast<float>(static_cast<float>(k % 7) - 3.0F) * scale;
      p.set_grad(from_vector(values, shapes[i], f32));
    }
    params.push_back(p);
  }
  return params;
}

// The recorded call, by its name in the probe.
Tensor run_call(const std::string& call, const std::vector<Tensor>& params) {
  if (call == "clip_grad_norm_(max_norm=1.0)") return clip_grad_norm_(params, 1.0);
  if (call == "clip_grad_norm_(max_norm=1e6)") return clip_grad_norm_(params, 1e6);
  if (call == "clip_grad_norm_(1.0, norm_type=inf)") return clip_grad_norm_(params, 1.0, kInf);
  if (call == "clip_grad_norm_(1.0, foreach=False)") return clip_grad_norm_(params, 1.0, 2.0, false, false);
  if (call == "clip_grad_value_(0.01)") {
    clip_grad_value_(params, 0.01);
    return {};
  }
  FAIL("no bytegrad call for the recorded " << call);
  return {};
}

// PyTorch's trace names a free "free_requested"; allocation_events says "free".
AllocationEvents recorded_events(const json::Value& list) {
  AllocationEvents out;
  for (const json::Value& e : list.items) {
    const std::string action = e[0].string();
    out.emplace_back(action == "free_requested" ? "free" : action, static_cast<int64_t>(e[1].number()));
  }
  return out;
}

std::string show(const AllocationEvents& events) {
  std::string out;
  for (const auto& [what, bytes] : events) out += (out.empty() ? "" : ", ") + what + " " + std::to_string(bytes);
  return "[" + out + "]";
}

Tensor grad_norm_params(Device d, double value) {
  Tensor p = zeros({3}, TensorOptions{ScalarType::float32, d}).requires_grad_();
  p.set_grad(from_vector({value, 1.0, -2.0}, {3}, TensorOptions{ScalarType::float32, d}));
  return p;
}

}  // namespace

TEST_CASE("clip_grad: every recorded call allocates as PyTorch's on sim and meta, event for event") {
  const std::vector<json::Value> calls = recorded_calls();
  REQUIRE(calls.size() == 5);
  for (const json::Value& row : calls) {
    const std::string call = row["call"].string();
    for (Device d : {kSim, kMeta}) {
      CAPTURE(call);
      CAPTURE(d.str());
      FreshDevice fresh(d);
      const std::vector<Tensor> params = probe_parameters(d);
      Tensor norm;
      const AllocationEvents got = allocation_events(d, [&] { norm = run_call(call, params); });
      const AllocationEvents want = recorded_events(row["events"]);
      CHECK_MESSAGE(got == want, "got " << show(got) << ", want " << show(want));
    }
  }
}

TEST_CASE("clip_grad: the returned norm and the clipped gradients equal PyTorch's (sim and cpu)") {
  for (const json::Value& row : recorded_calls()) {
    const std::string call = row["call"].string();
    for (Device d : {kSim, kCpu}) {
      CAPTURE(call);
      CAPTURE(d.str());
      const std::vector<Tensor> params = probe_parameters(d);
      const Tensor norm = run_call(call, params);
      if (row["norm"].is_number()) {
        REQUIRE(norm.defined());
        CHECK(norm.dim() == 0);
        CHECK(norm.device() == d);
        const double want = row["norm"].number();
        CHECK(std::fabs(norm.item() - want) <= 1e-6 * want);
      } else {
        CHECK(!norm.defined());
      }
      const std::vector<double> grad0 = params[0].grad().tolist();
      const json::Value& want = row["grad0_first5"];
      REQUIRE(want.size() == 5);
      for (size_t k = 0; k < 5; ++k) {
        CAPTURE(k);
        CHECK(std::fabs(grad0[k] - want[k].number()) <= 1e-6 * std::fabs(want[k].number()) + 1e-12);
      }
    }
  }
}

TEST_CASE("clip_grad_norm_: the 1-norm, by hand; parameters without gradients are skipped") {
  FreshDevice fresh(kSim);
  Tensor a = grad_norm_params(kSim, 3.0);                                            // |3| + |1| + |-2| = 6
  Tensor b = zeros({2}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();  // no gradient
  const Tensor norm = clip_grad_norm_({a, b}, 3.0, 1.0);
  CHECK(norm.item() == doctest::Approx(6.0));
  // clip_coef = 3 / (6 + 1e-6)
  const double coef = 3.0 / (6.0 + 1e-6);
  const std::vector<double> g = a.grad().tolist();
  CHECK(g[0] == doctest::Approx(3.0 * coef));
  CHECK(g[2] == doctest::Approx(-2.0 * coef));
  CHECK(!b.grad().defined());
  // The single-tensor overload, and a norm below max_norm leaves the gradient as it is.
  Tensor c = grad_norm_params(kSim, 2.0);  // sqrt(4 + 1 + 4) = 3
  CHECK(clip_grad_norm_(c, 10.0).item() == doctest::Approx(3.0));
  CHECK(c.grad().tolist() == std::vector<double>{2.0, 1.0, -2.0});
}

TEST_CASE("clip_grad: no gradients at all: a cpu 0 and nothing allocated on the device") {
  FreshDevice fresh(kSim);
  Tensor p = zeros({4}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
  AllocationEvents events = allocation_events(kSim, [&] {
    const Tensor norm = clip_grad_norm_({p}, 1.0);
    CHECK(norm.device() == kCpu);
    CHECK(norm.dtype() == ScalarType::float32);
    CHECK(norm.item() == 0.0);
    CHECK(clip_grad_norm_(std::vector<Tensor>{}, 1.0).item() == 0.0);
    clip_grad_value_({p}, 0.5);
    clip_grad_value_(std::vector<Tensor>{}, 0.5);
  });
  CHECK(events.empty());
}

TEST_CASE("clip_grad_norm_: error_if_nonfinite refuses a NaN or infinite norm and leaves the gradients") {
  for (double bad : {std::nan(""), kInf}) {
    Tensor p = grad_norm_params(kSim, bad);
    CHECK_THROWS_WITH_AS(clip_grad_norm_({p}, 1.0, 2.0, true),
                         doctest::Contains("The total norm of order 2 for gradients from `parameters` is non-finite"),
                         std::runtime_error);
    CHECK(p.grad().tolist()[1] == 1.0);
    // Without the flag the gradients are scaled by the non-finite norm (NaN, or 1 / inf = 0), as PyTorch's.
    const Tensor norm = clip_grad_norm_({p}, 1.0);
    CHECK(!std::isfinite(norm.item()));
  }
  Tensor p = grad_norm_params(kSim, 3.0);
  CHECK(clip_grad_norm_({p}, 1.0, kInf, true).item() == 3.0);  // finite: no error
}

TEST_CASE("clip_grad: refused orders and foreach=true on cpu name the problem") {
  Tensor p = grad_norm_params(kSim, 3.0);
  CHECK_THROWS_WITH_AS(clip_grad_norm_({p}, 1.0, 3.0), doctest::Contains("norm_type=3 is not supported"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(clip_grad_norm_({p}, 1.0, -kInf), doctest::Contains("norm_type=-inf"), std::invalid_argument);
  Tensor q = grad_norm_params(kCpu, 3.0);
  CHECK_THROWS_WITH_AS(clip_grad_norm_({q}, 1.0, 2.0, false, true),
                       doctest::Contains("can't use the foreach API on cpu tensors"), std::runtime_error);
  CHECK_THROWS_WITH_AS(clip_grad_value_({q}, 1.0, true), doctest::Contains("foreach API on cpu"), std::runtime_error);
  // foreach=false on sim: the per-gradient path, same values.
  Tensor r = grad_norm_params(kSim, 3.0);
  CHECK(clip_grad_norm_({r}, 1.0, 2.0, false, false).item() == doctest::Approx(std::sqrt(14.0)));
}

TEST_CASE("clip_grad_value_: both bounds, in place, on sim and cpu, foreach or not") {
  for (Device d : {kSim, kCpu}) {
    for (std::optional<bool> foreach : {std::optional<bool>{}, std::optional<bool>{false}}) {
      Tensor p = grad_norm_params(d, 3.0);
      const Tensor before = p.grad();
      clip_grad_value_({p}, 1.5, foreach);
      CHECK(p.grad().tolist() == std::vector<double>{1.5, 1.0, -1.5});
      CHECK(p.grad().data_ptr() == before.data_ptr());  // in place
    }
  }
}
