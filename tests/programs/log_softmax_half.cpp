// log_softmax's and softmax's half_to_float path against PyTorch's allocator events, event by event on sim and
// meta: tests/data/pytorch_probes/log_softmax_half.json, recorded on the H100 by
// tools/probes/log_softmax_half_probe.py (PyTorch 2.11). A float16 x with dtype=float32, or under float16
// autocast with no dtype: the float32 output only (no copy of x); backward: log_softmax's float16 grad_input
// alone, softmax's float16 grad_input and its float32 grad * output, freed. The controls: bfloat16 (the copy),
// float16 without a dtype, and a transposed input (a contiguous float16 copy in the forward; in backward the
// leaf's .grad made contiguous by AccumulateGrad).
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "programs/checks.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/json.h"
#include "tests/support/pytorch_probes.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

std::string show(const AllocationEvents& events) {
  std::string out;
  for (const auto& [what, bytes] : events) out += (out.empty() ? "" : ", ") + what + " " + std::to_string(bytes);
  return "[" + out + "]";
}

struct HalfCase {
  Shape leaf_shape;
  ScalarType leaf_dtype;
  bool transpose;  // the op reads leaf.t()
  std::function<Tensor(const Tensor&)> op;
};

Tensor under_fp16_autocast(const Tensor& x, const std::function<Tensor(const Tensor&)>& op) {
  AutocastGuard autocast(x.device().type, ScalarType::float16);
  return op(x);
}

constexpr ScalarType f16 = ScalarType::float16, bf16 = ScalarType::bfloat16, f32 = ScalarType::float32;

const std::map<std::string, HalfCase>& cases() {
  static const std::map<std::string, HalfCase> all = {
      {"log_softmax f16 dim-1 dtype=f32",
       {{64, 1000}, f16, false, [](const Tensor& x) { return log_softmax(x, -1, f32); }}},
      {"log_softmax f16 dim-1 autocast_f16",
       {{64, 1000},
        f16,
        false,
        [](const Tensor& x) { return under_fp16_autocast(x, [](const Tensor& v) { return log_softmax(v, -1); }); }}},
      {"log_softmax f16 dim0 dtype=f32",
       {{64, 1000}, f16, false, [](const Tensor& x) { return log_softmax(x, 0, f32); }}},
      {"log_softmax f16.t() dim-1 dtype=f32",
       {{1000, 64}, f16, true, [](const Tensor& x) { return log_softmax(x, -1, f32); }}},
      {"log_softmax bf16 dim-1 dtype=f32",
       {{64, 1000}, bf16, false, [](const Tensor& x) { return log_softmax(x, -1, f32); }}},
      {"log_softmax f16 dim-1", {{64, 1000}, f16, false, [](const Tensor& x) { return log_softmax(x, -1); }}},
      {"softmax f16 dim-1 dtype=f32", {{64, 1000}, f16, false, [](const Tensor& x) { return softmax(x, -1, f32); }}},
      {"softmax f16 dim-1 autocast_f16",
       {{64, 1000},
        f16,
        false,
        [](const Tensor& x) { return under_fp16_autocast(x, [](const Tensor& v) { return softmax(v, -1); }); }}},
  };
  return all;
}

}  // namespace

TEST_CASE("log_softmax and softmax of float16 with a float32 result: PyTorch's events (log_softmax_half.json)") {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/log_softmax_half.json");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const Json recorded = parse_json(text.str());
  for (Device d : {Device{DeviceType::sim, 0}, Device{DeviceType::meta, 0}}) {
    int compared = 0;
    for (const auto& [name, want] : recorded.members) {
      if (name == "_device") continue;
      CAPTURE(d.str());
      CAPTURE(name);
      REQUIRE(cases().count(name) == 1);
      const HalfCase& c = cases().at(name);
      GoldenConditions conditions(d);
      const Tensor leaf = randn(c.leaf_shape, TensorOptions{ScalarType::float32, d}).to(c.leaf_dtype).requires_grad_();
      const Tensor x = c.transpose ? leaf.t() : leaf;
      Tensor y;
      const AllocationEvents forward = allocation_events(d, [&] { y = c.op(x); });
      const Tensor g = randn(y.sizes(), TensorOptions{y.dtype(), d});
      const AllocationEvents backward = allocation_events(d, [&] { y.backward(g); });
      const AllocationEvents want_forward = events_of(*want.find("forward"));
      const AllocationEvents want_backward = events_of(*want.find("backward"));
      CHECK_MESSAGE(forward == want_forward, "forward: got " << show(forward) << ", want " << show(want_forward));
      CHECK_MESSAGE(backward == want_backward, "backward: got " << show(backward) << ", want " << show(want_backward));
      CHECK(std::string(scalar_type_name(y.dtype())) == want.find("output_dtype")->string());
      CHECK(std::string(scalar_type_name(leaf.grad().dtype())) == want.find("grad_dtype")->string());
      ++compared;
    }
    CHECK(compared == 8);
  }
}
