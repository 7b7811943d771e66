// Reading values back (item, tolist) and PyTorch-shaped printing.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "bytegrad/kernels/backend.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

namespace {

double half_bits_to_double(uint16_t bits) {
  uint32_t sign = (bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t x;
  if (exponent == 0) {
    if (mantissa == 0) {
      x = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { ++e; mantissa <<= 1; } while (!(mantissa & 0x400u));
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else {
    x = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

double bfloat16_bits_to_double(uint16_t bits) {
  uint32_t x = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

template <typename T>
double load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return static_cast<double>(value);
}

double decode(const char* p, ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float32: return load<float>(p);
    case ScalarType::float64: return load<double>(p);
    case ScalarType::int64: return load<int64_t>(p);
    case ScalarType::int32: return load<int32_t>(p);
    case ScalarType::uint8: return load<uint8_t>(p);
    case ScalarType::bool_: return load<uint8_t>(p) != 0 ? 1.0 : 0.0;  // never read a byte as bool: any nonzero is true
    case ScalarType::float16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return half_bits_to_double(bits);
    }
    case ScalarType::bfloat16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return bfloat16_bits_to_double(bits);
    }
  }
  return 0.0;
}

}  // namespace

std::vector<double> Tensor::tolist() const {
  if (is_meta()) throw std::runtime_error("tolist: " + describe(*this) + " is a meta tensor: it has no values");
  std::vector<char> host(nbytes());
  if (!host.empty()) backend_for(device()).copy_to_host(std::as_writable_bytes(std::span(host)), view_for_kernels());
  std::vector<double> values(static_cast<size_t>(numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = decode(host.data() + i * element_size(), dtype());
  return values;
}

double Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item: " + describe(*this) + " has " + std::to_string(numel()) +
                                " elements; only one-element tensors can be converted to a number");
  return tolist()[0];
}

namespace {

struct ValueFormat {
  bool integral = true;  // print as "1." (floats) or "1" (integers)
  bool scientific = false;
  int width = 1;
};

std::string format_value(double v, ScalarType dtype, const ValueFormat& f) {
  std::string text;
  if (dtype == ScalarType::bool_) text = v != 0.0 ? "True" : "False";
  else if (!is_floating_point(dtype)) text = fmt::format("{}", static_cast<int64_t>(v));
  else if (std::isnan(v)) text = "nan";
  else if (std::isinf(v)) text = v > 0 ? "inf" : "-inf";
  else if (f.scientific) text = fmt::format("{:.4e}", v);
  else if (f.integral) text = fmt::format("{:.0f}.", v);
  else text = fmt::format("{:.4f}", v);
  return fmt::format("{:>{}}", text, f.width);
}

// Rows beyond 1000 elements are summarized with "..." (3 items at each edge), as PyTorch does.
void format_dim(std::string& out, const std::vector<double>& values, const Shape& sizes, size_t dim, int64_t offset,
                ScalarType dtype, const ValueFormat& f, bool summarize, int indent) {
  const int64_t n = sizes[dim];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  out += "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      out += dim + 1 == sizes.size() ? "..., " : fmt::format("...,\n{:{}}", "", indent + 1);
      i = n - 3;
    }
    if (dim + 1 == sizes.size()) out += format_value(values[static_cast<size_t>(offset + i)], dtype, f);
    else format_dim(out, values, sizes, dim + 1, offset + i * inner, dtype, f, summarize, indent + 1);
    if (i + 1 < n) {
      if (dim + 1 == sizes.size()) out += ", ";
      else out += std::string(",") + std::string(sizes.size() - dim - 1, '\n') + fmt::format("{:{}}", "", indent + 1);
    }
  }
  out += "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<std::string> suffix;
  if (device().type != DeviceType::cpu) suffix.push_back(fmt::format("device='{}'", device().str()));
  const bool default_dtype = dtype() == ScalarType::float32 || dtype() == ScalarType::int64 || dtype() == ScalarType::bool_;
  std::string body;
  if (is_meta()) {
    body = "...";
    suffix.insert(suffix.begin(), fmt::format("size={}", shape_str(sizes())));
  } else {
    std::vector<double> values = tolist();
    ValueFormat f;
    double max_abs = 0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) f.integral = false;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
    }
    if (is_floating_point(dtype()) && !f.integral && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY)))
      f.scientific = true;
    for (double v : values) f.width = std::max<int>(f.width, static_cast<int>(format_value(v, dtype(), {f.integral, f.scientific, 1}).size()));
    if (dim() == 0) body = format_value(values[0], dtype(), f);
    else if (numel() == 0) body = "[]";
    else format_dim(body, values, sizes(), 0, 0, dtype(), f, numel() > 1000, 7);
  }
  if (!default_dtype || (numel() == 0 && dtype() != ScalarType::float32))
    suffix.push_back(fmt::format("dtype={}", scalar_type_name(dtype())));
  // Last, as PyTorch's _str_intern: the node that made it, else requires_grad for a leaf that does.
  if (const AutogradHook* hook = autograd_hook()) {
    const std::string grad_fn = hook->grad_fn_name(*this);
    if (!grad_fn.empty()) suffix.push_back(fmt::format("grad_fn=<{}>", grad_fn));
    else if (hook->requires_grad(*this)) suffix.push_back("requires_grad=True");
  }
  std::string out = "tensor(" + body;
  for (const auto& s : suffix) out += ", " + s;
  return out + ")";
}

}  // namespace bytegrad
