// Bad-input rows: values that must fit their dtype; integer and bool arithmetic PyTorch refuses;
// host buffers read only within their bounds. Messages and outcomes follow PyTorch 2.11
// (tests/data/pytorch_probes/bad_inputs/pytorch_2_11.txt).
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/nn/init.h"
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

namespace {

TensorOptions on_sim(ScalarType dtype) { return TensorOptions{dtype, kSim}; }
// Tensors a row makes itself live on the cpu, so that making them changes none of the sim figures checked.
Tensor cpu_zeros(ScalarType dtype) { return zeros({4}, TensorOptions{dtype, kCpu}); }
Tensor cpu_mask() { return ones({4}, TensorOptions{ScalarType::bool_, kCpu}); }
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<Row> scalar_rows() {
  using E = Expect;
  using S = ScalarType;
  return {
      // -------------------------------------------------------- values that do not fit the dtype
      {"full(1e39) into float32", E::invalid_argument,
       "value 1e+39 cannot be converted to type float32 without overflow",
       [](Fixture&) { full({2}, 1e39, on_sim(S::float32)); }},
      {"full(65520) into float16", E::invalid_argument, "value 65520 cannot be converted to type float16",
       [](Fixture&) { full({2}, 65520.0, on_sim(S::float16)); }},
      {"full(1e6) into float16", E::invalid_argument, "value 1000000 cannot be converted to type float16",
       [](Fixture&) { full({2}, 1e6, on_sim(S::float16)); }},
      {"full(1e39) into bfloat16", E::invalid_argument, "value 1e+39 cannot be converted to type bfloat16",
       [](Fixture&) { full({2}, 1e39, on_sim(S::bfloat16)); }},
      {"full(300) into uint8", E::invalid_argument, "value 300 cannot be converted to type uint8 without overflow",
       [](Fixture&) { full({2}, 300, on_sim(S::uint8)); }},
      {"full(-256) into uint8", E::invalid_argument, "value -256 cannot be converted to type uint8",
       [](Fixture&) { full({2}, -256, on_sim(S::uint8)); }},
      {"full(-0.5) into uint8", E::invalid_argument, "value -0.5 cannot be converted to type uint8",
       [](Fixture&) { full({2}, -0.5, on_sim(S::uint8)); }},
      {"full(NaN) into int64", E::invalid_argument, "value nan cannot be converted to type int64",
       [](Fixture&) { full({2}, kNan, on_sim(S::int64)); }},
      {"full(inf) into int32", E::invalid_argument, "value inf cannot be converted to type int32",
       [](Fixture&) { full({2}, kInf, on_sim(S::int32)); }},
      {"full(3e9) into int32", E::invalid_argument, "value 3000000000 cannot be converted to type int32",
       [](Fixture&) { full({2}, 3e9, on_sim(S::int32)); }},
      {"full(2^63) into int64", E::invalid_argument, "cannot be converted to type int64",
       [](Fixture&) { full({2}, 0x1p63, on_sim(S::int64)); }},
      {"full_like(300) of a uint8 tensor", E::invalid_argument, "value 300 cannot be converted to type uint8",
       [](Fixture&) { full_like(cpu_zeros(S::uint8), 300); }},
      {"fill_(1e6) on float16", E::invalid_argument, "fill_: value 1000000 cannot be converted to type float16",
       [](Fixture&) { cpu_zeros(S::float16).fill_(1e6); }},
      {"fill_(300) on uint8", E::invalid_argument, "fill_: value 300 cannot be converted to type uint8",
       [](Fixture&) { cpu_zeros(S::uint8).fill_(300); }},
      {"fill_(1e39) on float32 (the fixture's own tensor)", E::invalid_argument, "fill_: value 1e+39",
       [](Fixture& f) { f.a.fill_(1e39); }},
      {"fill_(NaN) on int64 (the fixture's own tensor)", E::invalid_argument,
       "fill_: value nan cannot be converted to type int64", [](Fixture& f) { f.ints.fill_(kNan); }},
      {"masked_fill_(300) on uint8", E::invalid_argument, "masked_fill_: value 300 cannot be converted to type uint8",
       [](Fixture&) { cpu_zeros(S::uint8).masked_fill_(cpu_mask(), 300); }},
      {"masked_fill_(3e9) on int32", E::invalid_argument, "masked_fill_: value 3000000000",
       [](Fixture&) { cpu_zeros(S::int32).masked_fill_(cpu_mask(), 3e9); }},
      {"masked_fill_(NaN) on the fixture's int64 tensor", E::invalid_argument, "masked_fill_: value nan",
       [](Fixture& f) { f.ints.slice(0, 0, 4).masked_fill_(f.flags, kNan); }},
      {"masked_fill(1e39) on float32", E::invalid_argument,
       "masked_fill: value 1e+39 cannot be converted to type float32",
       [](Fixture& f) { masked_fill(f.a.slice(1, 0, 4).select(0, 0), f.flags, 1e39); }},
      {"constant_pad_nd with a value beyond uint8", E::invalid_argument, "constant_pad_nd: value 256",
       [](Fixture&) {
         constant_pad_nd(cpu_zeros(S::uint8), {1, 1}, 256);
       }},
      {"tensor([300]) as uint8", E::invalid_argument, "tensor: value 300 cannot be converted to type uint8",
       [](Fixture&) {
         tensor({1.0, 300.0}, on_sim(S::uint8));
       }},
      {"tensor([NaN]) as int64", E::invalid_argument, "tensor: value nan cannot be converted to type int64",
       [](Fixture&) {
         tensor({{1.0, kNan}}, on_sim(S::int64));
       }},
      {"from_vector of 2^31 into int32", E::invalid_argument, "value 2147483648 cannot be converted to type int32",
       [](Fixture&) { from_vector({0x1p31}, {1}, on_sim(S::int32)); }},
      {"scalar_tensor(-1e3) as uint8", E::invalid_argument, "value -1000 cannot be converted to type uint8",
       [](Fixture&) { scalar_tensor(-1000, on_sim(S::uint8)); }},
      {"fill_from_host of a value beyond int32", E::invalid_argument,
       "value 10000000000 cannot be converted to type int32",
       [](Fixture&) {
         fill_from_host(cpu_zeros(S::int32).slice(0, 0, 2), std::vector<double>{1.0, 1e10});
       }},
      {"arange past uint8", E::invalid_argument, "arange: value 299 cannot be converted to type uint8",
       [](Fixture&) { arange(0.0, 300.0, 1.0, on_sim(S::uint8)); }},
      {"arange of negative values into uint8", E::invalid_argument,
       "arange: value -3 cannot be converted to type uint8",
       [](Fixture&) { arange(-3.0, 3.0, 1.0, on_sim(S::uint8)); }},
      {"arange past float16", E::invalid_argument, "arange: value 69999 cannot be converted to type float16",
       [](Fixture&) { arange(0.0, 70000.0, 1.0, on_sim(S::float16)); }},
      {"arange with a NaN end", E::invalid_argument, "unsupported range: 0 -> nan",
       [](Fixture&) { arange(0.0, kNan, 1.0, on_sim(S::float32)); }},
      {"arange with a step of 0.5 into int64 (truncated to 0)", E::invalid_argument, "step must be nonzero",
       [](Fixture&) { arange(0.0, 5.0, 0.5, on_sim(S::int64)); }},
      // ------------------------------------------------------------------- random factories
      {"randint with high = 2^40 for int32", E::invalid_argument, "to - 1 = 1099511627775 is out of bounds for int32",
       [](Fixture&) { randint(0, int64_t{1} << 40, {3}, on_sim(S::int32)); }},
      {"randint with low = -5 for uint8", E::invalid_argument, "from = -5 is out of bounds for uint8",
       [](Fixture&) { randint(-5, 10, {3}, on_sim(S::uint8)); }},
      {"randint with high = 257 for uint8", E::invalid_argument, "to - 1 = 256 is out of bounds for uint8",
       [](Fixture&) { randint(0, 257, {3}, on_sim(S::uint8)); }},
      {"randint with high = 3 for bool", E::invalid_argument, "to - 1 = 2 is out of bounds for bool",
       [](Fixture&) { randint(0, 3, {3}, on_sim(S::bool_)); }},
      {"randint with low = -1 for bool", E::invalid_argument, "from = -1 is out of bounds for bool",
       [](Fixture&) { randint(-1, 1, {3}, on_sim(S::bool_)); }},
      {"rand into int64", E::invalid_argument, "rand: not implemented for 'Long' (int64)",
       [](Fixture&) { rand({3}, on_sim(S::int64)); }},
      {"rand into bool", E::invalid_argument, "rand: not implemented for 'Bool'",
       [](Fixture&) { rand({3}, on_sim(S::bool_)); }},
      {"randn into int32", E::invalid_argument, "randn: not implemented for 'Int' (int32)",
       [](Fixture&) { randn({3}, on_sim(S::int32)); }},
      {"randn_like of an int64 tensor", E::invalid_argument, "randn: not implemented for 'Long'",
       [](Fixture& f) { randn_like(f.ints); }},
      {"nn::init::normal_ of the fixture's int64 tensor", E::invalid_argument, "normal_: not implemented for 'Long'",
       [](Fixture& f) { nn::init::normal_(f.ints); }},
      {"nn::init::uniform_ of the fixture's bool tensor", E::invalid_argument, "uniform_: not implemented for 'Bool'",
       [](Fixture& f) { nn::init::uniform_(f.flags, 1.0); }},
      // ------------------------------------------------- integer and bool arithmetic PyTorch refuses
      {"int64 to the power -1", E::invalid_argument, "Integers to negative integer powers are not allowed",
       [](Fixture& f) { pow(f.ints, -1.0); }},
      {"int32 to the power -2 (member)", E::invalid_argument, "Integers to negative integer powers are not allowed",
       [](Fixture&) { cpu_zeros(S::int32).pow(-2.0); }},
      {"bool - bool", E::invalid_argument, "with two bool tensors is not supported. Use logical_xor()",
       [](Fixture& f) { f.flags - f.flags; }},
      {"bool -= bool on the fixture's tensor", E::invalid_argument, "with two bool tensors is not supported",
       [](Fixture& f) { f.flags -= f.flags; }},
      {"bool - int64", E::invalid_argument, "with a bool tensor is not supported",
       [](Fixture& f) { f.flags - f.ints.slice(0, 0, 4); }},
      {"bool - scalar", E::invalid_argument, "with a bool tensor is not supported. If you are trying to invert a mask",
       [](Fixture& f) { f.flags - 1.0; }},
      {"scalar - bool (rsub)", E::invalid_argument, "with a bool tensor is not supported",
       [](Fixture& f) { 1.0 - f.flags; }},
      {"bool.sub_(scalar) on the fixture's tensor", E::invalid_argument, "with a bool tensor is not supported",
       [](Fixture& f) { f.flags.sub_(1.0); }},
      {"int64 add with alpha 0.5", E::invalid_argument,
       "For integral input tensors, argument alpha must not be a floating point number",
       [](Fixture& f) { add(f.ints, f.ints, 0.5); }},
      {"int64 sub with alpha 0.5", E::invalid_argument,
       "argument alpha must not be a floating point number (alpha = 0.5", [](Fixture& f) { sub(f.ints, f.ints, 0.5); }},
      {"int64 add_ with alpha 1.5 on the fixture's tensor", E::invalid_argument,
       "argument alpha must not be a floating point number", [](Fixture& f) { f.ints.add_(f.ints, 1.5); }},
      {"int64 add of a scalar with alpha 0.5", E::invalid_argument,
       "argument alpha must not be a floating point number", [](Fixture& f) { f.ints.add(2.0, 0.5); }},
      {"bool add with alpha 0.5", E::invalid_argument, "argument alpha must not be a floating point number",
       [](Fixture& f) { add(f.flags, f.flags, 0.5); }},
      {"int64 add_ of 2.5 on the fixture's tensor", E::invalid_argument,
       "result type Float can't be cast to the desired output type Long", [](Fixture& f) { f.ints.add_(2.5); }},
      {"int64 mul_ by NaN on the fixture's tensor", E::invalid_argument,
       "result type Float can't be cast to the desired output type Long", [](Fixture& f) { f.ints.mul_(kNan); }},
      // (int64 + 2.5, int64 * inf, int64 ** 0.5 and bool + 2 compute in float32 / int64 as in PyTorch: valid
      // inputs, tested with values in tests/fuzz/regressions.cpp.)
      {"bool.mul_(2) on the fixture's tensor (result type int64)", E::invalid_argument,
       "result type Long can't be cast to the desired output type Bool", [](Fixture& f) { f.flags.mul_(2.0); }},
      // ----------------------------------------------------------------- host buffers, bounded
      {"fill_from_host of 2 values into 3x4", E::invalid_argument, "2 host values for the 12 elements",
       [](Fixture& f) {
         fill_from_host(f.a, std::vector<double>{1.0, 2.0});
       }},
      {"fill_from_host of 13 values into 3x4", E::invalid_argument, "13 host values for the 12 elements",
       [](Fixture& f) { fill_from_host(f.a, std::vector<double>(13, 1.0)); }},
      {"fill_from_host of 2 values into a transposed 3x4", E::invalid_argument, "2 host values for the 12 elements",
       [](Fixture& f) {
         fill_from_host(f.a.t(), std::vector<double>{1.0, 2.0});
       }},
      {"fill_from_host from a pointer and a short count", E::invalid_argument, "3 host values for the 12 elements",
       [](Fixture& f) {
         const double values[12] = {};
         fill_from_host(f.c, std::span<const double>(values, 3));
       }},
      {"fill_from_host of no values into a meta tensor", E::invalid_argument, "0 host values for the 6 elements",
       [](Fixture&) {
         fill_from_host(empty({2, 3}, device("meta")), std::span<const double>());
       }},
      {"from_vector with too many values", E::invalid_argument, "4 values do not fill shape [3]",
       [](Fixture&) {
         from_vector({1, 2, 3, 4}, {3}, on_sim(S::float32));
       }},
      {"copy_from_host with a short buffer", E::invalid_argument,
       "a host buffer of 8 bytes (2 float32 values) for 12 elements",
       [](Fixture& f) {
         const float two[2] = {1.0f, 2.0f};
         backend_for(kSim).copy_from_host(f.a.view_for_kernels(), std::as_bytes(std::span(two)));
       }},
      {"copy_to_host into a short buffer", E::invalid_argument,
       "a host buffer of 16 bytes (4 float32 values) for 12 elements",
       [](Fixture& f) {
         float four[4] = {};
         backend_for(kCpu).copy_to_host(std::as_writable_bytes(std::span(four)), f.c.view_for_kernels());
       }},
      // ------------------------------------------------------------------- probabilities
      {"dropout with p = NaN", E::invalid_argument, "probability has to be between 0 and 1, but got nan",
       [](Fixture& f) { dropout(f.a, kNan); }},
      {"dropout with p = NaN in eval", E::invalid_argument, "but got nan",
       [](Fixture& f) { dropout(f.a, kNan, false); }},
      {"an nn::Dropout(NaN) refuses at the call (PyTorch accepts the module)", E::invalid_argument, "but got nan",
       [](Fixture& f) {
         nn::Dropout module(kNan);
         module.forward(f.a);
       }},
  };
}

}  // namespace bytegrad::bad_inputs
