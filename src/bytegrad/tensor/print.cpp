// Reading values back (item, tolist) and PyTorch-shaped printing.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <unistd.h>

#include "bytegrad/tensor/device_backend.h"
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
      do {
        ++e;
        mantissa <<= 1;
      } while (!(mantissa & 0x400u));
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
  // Refused before anything is allocated: the doubles and the bytes copied from the device must fit in
  // this machine's memory (an expanded view counts every element it shows, as PyTorch's tolist does).
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const double host_bytes =
      pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0;
  const double needed = static_cast<double>(numel()) * static_cast<double>(sizeof(double) + element_size());
  if (host_bytes > 0 && needed > host_bytes)
    throw std::length_error(
        fmt::format("tolist: {} has {} elements: {:.4g} GiB of host memory as doubles and "
                    "copied bytes, more than this machine's {:.4g} GiB",
                    describe(*this), numel(), needed / 1073741824.0, host_bytes / 1073741824.0));
  std::vector<char> host(nbytes());
  if (!host.empty()) {
    backend_for(device()).copy_to_host(std::as_writable_bytes(std::span(host)), view_for_kernels());
    // A blocking copy to the host waits for the stream (PyTorch's .tolist()).
    if (device().uses_caching_allocator()) current_stream(device()).synchronize();
  }
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

void Tensor::throw_item_out_of_range(double value, size_t bytes, bool is_signed) {
  throw std::invalid_argument(fmt::format("item: value {} cannot be converted to a {}-bit {} integer without overflow",
                                          value, bytes * 8, is_signed ? "signed" : "unsigned"));
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

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

// PyTorch's print options: more than kThreshold elements are summarized, each dimension longer than
// 2 * kEdgeItems showing its first and last kEdgeItems entries around "...".
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// The values shown, row-major over the grid of shown indices (`shown[d]` for dimension d), and that grid.
struct ShownValues {
  std::vector<std::vector<int64_t>> shown;
  std::vector<double> values;
};

// Reads only the shown elements (a summary of a 2^30-element tensor reads 36 of them), one at a time from
// the device; without a summary, every element in one copy.
ShownValues shown_values(const Tensor& t, bool summarize) {
  ShownValues out;
  const Shape& sizes = t.sizes();
  if (!summarize) {
    for (int64_t n : sizes) {
      std::vector<int64_t> all(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
      out.shown.push_back(std::move(all));
    }
    out.values = t.tolist();
    return out;
  }
  for (int64_t n : sizes) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < n; ++i) {
      if (n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
      indices.push_back(i);
    }
    out.shown.push_back(std::move(indices));
  }
  const StridedView whole = t.view_for_kernels();
  KernelBackend& backend = backend_for(t.device());
  if (t.device().uses_caching_allocator()) current_stream(t.device()).synchronize();  // printing reads the values
  std::vector<size_t> position(sizes.size(), 0);                                      // an odometer over the shown grid
  std::vector<char> element(t.element_size());
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d) offset += out.shown[d][position[d]] * whole.strides[d];
    StridedView one = whole;
    one.data = static_cast<char*>(whole.data) + offset * static_cast<int64_t>(t.element_size());
    one.sizes = {};
    one.strides = {};
    backend.copy_to_host(std::as_writable_bytes(std::span(element)), one);
    out.values.push_back(decode(element.data(), t.dtype()));
    size_t d = sizes.size();
    while (d > 0 && ++position[d - 1] == out.shown[d - 1].size()) position[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

// One dimension of the shown grid, as PyTorch's _tensor_str_with_formatter: " ..." among a row's values,
// "..." as a slice of its own between slices, each joined with "," and as many newlines as the slices have
// dimensions.
void format_dim(std::string& out, const ShownValues& v, const Shape& sizes, size_t dim, int64_t offset,
                ScalarType dtype, const ValueFormat& f, int indent) {
  const std::vector<int64_t>& shown = v.shown[dim];
  const bool last = dim + 1 == sizes.size();
  int64_t inner = 1;
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= static_cast<int64_t>(v.shown[d].size());
  const std::string separator =
      last ? ", " : std::string(",") + std::string(sizes.size() - dim - 1, '\n') + std::string(indent + 1, ' ');
  out += "[";
  for (size_t i = 0; i < shown.size(); ++i) {
    if (i > 0) {
      out += separator;
      if (shown[i] != shown[i - 1] + 1) out += (last ? " ..." : "...") + separator;  // the elided entries
    }
    const int64_t at = offset + static_cast<int64_t>(i) * inner;
    if (last) out += format_value(v.values[static_cast<size_t>(at)], dtype, f);
    else format_dim(out, v, sizes, dim + 1, at, dtype, f, indent + 1);
  }
  out += "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<std::string> suffix;
  if (device().type != DeviceType::cpu) suffix.push_back(fmt::format("device='{}'", device().str()));
  const bool default_dtype =
      dtype() == ScalarType::float32 || dtype() == ScalarType::int64 || dtype() == ScalarType::bool_;
  std::string body;
  if (is_meta()) {
    body = "...";
    suffix.insert(suffix.begin(), fmt::format("size={}", shape_str(sizes())));
  } else {
    // As PyTorch, the format (width, integral or scientific) comes from the values shown.
    const ShownValues shown = shown_values(*this, numel() > kThreshold);
    const std::vector<double>& values = shown.values;
    ValueFormat f;
    double max_abs = 0, min_abs = std::numeric_limits<double>::infinity();
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) f.integral = false;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
    }
    if (is_floating_point(dtype()) && !f.integral && (max_abs >= 1e8 || (min_abs < 1e-4 && std::isfinite(min_abs))))
      f.scientific = true;
    for (double v : values)
      f.width =
          std::max<int>(f.width, static_cast<int>(format_value(v, dtype(), {f.integral, f.scientific, 1}).size()));
    if (dim() == 0) body = format_value(values[0], dtype(), f);
    else if (numel() == 0) body = "[]";
    else format_dim(body, shown, sizes(), 0, 0, dtype(), f, 7);
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
