// The process's random generator. Values are drawn on the host (a seeded mt19937_64) and copied to the
// device, so one seed gives the same tensor on cpu, sim and cuda. (They are not PyTorch's values: the
// goldens depend on shapes, never on values.)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numbers>
#include <random>
#include <sstream>

#include "bytegrad/core/checked_convert.h"
#include "bytegrad/kernels/parallel.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops_support.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

namespace {

struct ProcessGenerator {
  std::mutex mutex;
  std::mt19937_64 engine{0};
};

ProcessGenerator& generator() {
  static ProcessGenerator instance;
  return instance;
}

double uniform_locked(std::mt19937_64& engine) {
  return static_cast<double>(engine() >> 11) * 0x1.0p-53;  // 53 random bits in [0, 1)
}

// Host bytes of `values` converted to dtype, row-major. Values for an integer dtype are checked to fit
// (checked_convert, as torch.tensor checks them); floating dtypes round, beyond their range to inf, as
// torch.tensor([1e39]) gives inf.
std::vector<std::byte> encode(std::span<const double> values, ScalarType dtype, const char* op);

}  // namespace

void check_random_floating(const char* op, ScalarType dtype) {
  if (!is_floating_point(dtype))
    throw std::invalid_argument(
        fmt::format("{}: not implemented for '{}' ({}): it draws floating-point values; "
                    "randint draws integers",
                    op, pytorch_type_name(dtype), scalar_type_name(dtype)));
}

namespace {}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard lock(generator().mutex);
  generator().engine.seed(seed);
}

RngState get_rng_state() {
  std::lock_guard lock(generator().mutex);
  std::ostringstream out;
  out << generator().engine;
  return RngState{out.str()};
}

void set_rng_state(const RngState& state) {
  std::mt19937_64 engine;
  std::istringstream in(state.engine);
  in >> engine;
  if (!in) throw std::invalid_argument("set_rng_state: the state is not one get_rng_state returned");
  std::lock_guard lock(generator().mutex);
  generator().engine = engine;
}

double random_uniform() {
  std::lock_guard lock(generator().mutex);
  return uniform_locked(generator().engine);
}

double random_normal() {
  std::lock_guard lock(generator().mutex);
  // Box-Muller; 1 - u keeps the logarithm finite.
  double u1 = 1.0 - uniform_locked(generator().engine), u2 = uniform_locked(generator().engine);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void fill_from_host(const Tensor& t, std::span<const double> values) {
  // Checked before anything is allocated or written, meta included (its shape still says how many).
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw std::invalid_argument(
        fmt::format("fill_from_host: {} host values for the {} elements of {}", values.size(), t.numel(), describe(t)));
  if (t.is_meta()) return;  // no data to write
  const std::vector<std::byte> bytes = encode(values, t.dtype(), "fill_from_host");
  Tensor target = t.is_contiguous() ? t : empty(t.sizes(), TensorOptions{t.dtype(), t.device()});
  backend_for(t.device()).copy_from_host(target.view_for_kernels(), bytes);
  if (!t.is_contiguous()) t.copy_(target);
}

namespace {

// Draws in host chunks of at most a million values, so a 960 MB randn needs no gigabytes of staging.
template <typename Draw>
Tensor random_tensor(const Shape& sizes, TensorOptions options, Draw draw_chunk) {
  // requires_grad is set once the values are in (the chunks below are views, which autograd would record
  // on a tensor that requires grad); checked first, so a refused request allocates nothing.
  const RequiresGradSetter set_requires_grad = ops_detail::requires_grad_setter_for(options);
  options.requires_grad = false;
  Tensor out = empty(sizes, options);
  // PyTorch draws on the device, with curand's kernels, whose module globals the driver allocates.
  if (out.numel() != 0) note_driver_allocations(out.device(), kModuleGlobals);
  if (!out.is_meta() && out.numel() != 0) {
    constexpr int64_t kChunk = 1 << 20;
    Tensor flat = out.view({-1});
    std::vector<double> values;
    for (int64_t start = 0; start < out.numel(); start += kChunk) {
      const int64_t count = std::min(kChunk, out.numel() - start);
      values.resize(static_cast<size_t>(count));
      draw_chunk(values);
      fill_from_host(flat.slice(0, start, start + count), values);
    }
  }
  if (set_requires_grad) set_requires_grad(out);
  return out;
}

void uniform_chunk(std::vector<double>& values) {
  std::lock_guard lock(generator().mutex);
  for (double& v : values) v = uniform_locked(generator().engine);
}

// Box-Muller, both outputs of each pair used. The uniforms are drawn in the generator's order under its
// lock; the logarithms and sines, most of the time, then run on the kernel threads (each pair's values
// depend only on its own two uniforms, so they are the same whatever the thread count).
void normal_chunk(std::vector<double>& values) {
  const size_t pairs = (values.size() + 1) / 2;
  std::vector<double> uniforms(2 * pairs);
  {
    std::lock_guard lock(generator().mutex);
    for (double& u : uniforms) u = uniform_locked(generator().engine);
  }
  constexpr int64_t kPairsPerGrain = 1 << 14;  // about a third of a millisecond of logarithms and sines
  parallel::parallel_for(0, static_cast<int64_t>(pairs), kPairsPerGrain, 1, [&](int64_t first, int64_t last) {
    for (auto pair = static_cast<size_t>(first); pair < static_cast<size_t>(last); ++pair) {
      const size_t i = 2 * pair;
      const double radius = std::sqrt(-2.0 * std::log(1.0 - uniforms[i]));
      const double angle = 2.0 * std::numbers::pi * uniforms[i + 1];
      values[i] = radius * std::cos(angle);
      if (i + 1 < values.size()) values[i + 1] = radius * std::sin(angle);
    }
  });
}

template <typename T>
void store(char* dst, double value) {
  T typed = static_cast<T>(value);
  std::memcpy(dst, &typed, sizeof(T));
}

// IEEE half and bfloat16 from a double, rounding to nearest even.
uint16_t to_half_bits(double value) {
  float f = static_cast<float>(value);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exponent = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

uint16_t to_bfloat16_bits(double value) {
  float f = static_cast<float>(value);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN stays NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

std::vector<std::byte> encode(std::span<const double> values, ScalarType dtype, const char* op) {
  const bool checked = !is_floating_point(dtype);
  if (checked)
    for (double value : values) checked_convert(value, dtype, op);  // all before any byte is made
  const size_t width = element_size(dtype);
  std::vector<std::byte> bytes(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) {
    char* dst = reinterpret_cast<char*>(bytes.data()) + i * width;
    // The value the element holds (a negative whole number wrapped into uint8), safe to cast.
    const double value = checked ? checked_convert(values[i], dtype, op) : values[i];
    switch (dtype) {
      case ScalarType::float32: store<float>(dst, value); break;
      case ScalarType::float64: store<double>(dst, value); break;
      case ScalarType::int64: store<int64_t>(dst, value); break;
      case ScalarType::int32: store<int32_t>(dst, value); break;
      case ScalarType::uint8: store<uint8_t>(dst, value); break;
      case ScalarType::bool_: store<bool>(dst, values[i] != 0.0); break;
      case ScalarType::float16: {
        uint16_t bits = to_half_bits(values[i]);
        std::memcpy(dst, &bits, 2);
        break;
      }
      case ScalarType::bfloat16: {
        uint16_t bits = to_bfloat16_bits(values[i]);
        std::memcpy(dst, &bits, 2);
        break;
      }
    }
  }
  return bytes;
}

}  // namespace

Tensor rand(const Shape& sizes, TensorOptions options) {
  check_random_floating("rand", options.resolved_dtype());
  AllocationScope scope("rand");
  return random_tensor(sizes, options, uniform_chunk);
}
Tensor randn(const Shape& sizes, TensorOptions options) {
  check_random_floating("randn", options.resolved_dtype());
  AllocationScope scope("randn");
  return random_tensor(sizes, options, normal_chunk);
}
Tensor rand_like(const Tensor& t) { return rand(t.sizes(), TensorOptions{t.dtype(), t.device()}); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), TensorOptions{t.dtype(), t.device()}); }

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options) {
  if (high <= low)
    throw std::invalid_argument(
        fmt::format("randint: high must be greater than low, but got low={} >= high={}", low, high));
  options.dtype = options.resolved_dtype(ScalarType::int64);  // torch.randint's default dtype
  // PyTorch's check_from_to_in_range: for integer and bool dtypes both low and high - 1 must be values of the
  // dtype (floating dtypes take any int64 bounds, rounding the values drawn).
  const ScalarType dtype = *options.dtype;
  auto holds = [dtype](int64_t bound) {  // within [lowest, max]: no negative int wraps into uint8 here
    if (dtype == ScalarType::bool_) return bound == 0 || bound == 1;
    return bound >= (dtype == ScalarType::uint8 ? 0 : INT64_MIN) && !overflows(static_cast<double>(bound), dtype);
  };
  if (!is_floating_point(dtype) && !(holds(low) && holds(high - 1)))
    throw std::invalid_argument(
        fmt::format("randint: {} is out of bounds for {} (low = {}, high = {})",
                    holds(low) ? fmt::format("to - 1 = {}", high - 1) : fmt::format("from = {}", low),
                    scalar_type_name(dtype), low, high));
  AllocationScope scope("randint");
  const double span = static_cast<double>(high) - static_cast<double>(low);  // high - low may overflow int64
  return random_tensor(sizes, options, [&](std::vector<double>& values) {
    uniform_chunk(values);
    // min: for spans beyond 2^53 the product can round up to high itself.
    for (double& v : values)
      v = std::min(static_cast<double>(low) + std::floor(v * span), static_cast<double>(high - 1));
  });
}

struct Generator::Impl {
  std::mutex mutex;
  std::mt19937_64 engine;
  uint64_t seed = 0;
};

Generator::Generator(uint64_t seed) : impl_(std::make_shared<Impl>()) { manual_seed(seed); }

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(impl_->mutex);
  impl_->engine.seed(seed);
  impl_->seed = seed;
}

uint64_t Generator::initial_seed() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seed;
}

std::string Generator::get_state() const {
  std::lock_guard lock(impl_->mutex);
  std::ostringstream out;
  out << impl_->seed << ' ' << impl_->engine;
  return out.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream in(state);
  uint64_t seed = 0;
  std::mt19937_64 engine;
  in >> seed >> engine;
  if (!in) throw std::invalid_argument("Generator::set_state: the state is not one get_state returned");
  std::lock_guard lock(impl_->mutex);
  impl_->seed = seed;
  impl_->engine = engine;
}

uint64_t Generator::random64() {
  std::lock_guard lock(impl_->mutex);
  return impl_->engine();
}

namespace {

// The temporary storage of cub::DeviceRadixSort::SortPairs (not overwriting its inputs) on n pairs of
// key_bytes keys and value_bytes values sorted on `bits` bits, as PyTorch's radix_sort_pairs asks for it (int
// offsets): one tile (256 threads of 19 items) sorts in one block and CUB asks for 1 byte; more run the
// onesweep passes (8-bit digits; parts rounded up to 256 bytes then 255 bytes of alignment slack): per-pass
// digit bins, a lookback word per digit and tile, the keys' and values' second buffers when there is more
// than one pass, and a counter per pass. A tile is 384 threads of CUB's sm90 onesweep items per thread for
// the key size (4-byte keys: 23 with values under 8 bytes, else 30; 8-byte keys: 30, else 24), scaled to the
// larger of key and value as CUB scales them (x 4 / bytes, at most twice). Checked by the probe's randperm
// cases (op_table_events.jsonl: 4-byte keys with 8-byte values, and 8-byte keys).
int64_t cub_radix_sort_pairs_bytes(int64_t n, int64_t key_bytes, int64_t value_bytes, int64_t bits) {
  if (n <= int64_t{256} * 19) return 1;
  constexpr int64_t kDigits = 256, kThreads = 384;
  const int64_t nominal_items = key_bytes <= 4 ? (value_bytes < 8 ? 23 : 30) : (value_bytes < 8 ? 30 : 24);
  const int64_t dominant_bytes = std::max(key_bytes, value_bytes);
  const int64_t items = std::max<int64_t>(1, std::min(nominal_items * 4 / dominant_bytes, nominal_items * 2));
  const int64_t tile = kThreads * items;
  const int64_t passes = (bits + 7) / 8;
  const int64_t tiles = (n + tile - 1) / tile;
  const auto rounded = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t second_buffers = passes <= 1 ? 0 : rounded(n * key_bytes) + rounded(n * value_bytes);
  return rounded(passes * kDigits * 8) + rounded(tiles * kDigits * 4) + second_buffers + rounded(passes * 4) + 255;
}

// PyTorch's CUDA randperm (Randperm.cu) allocates: the result, an arange(n) of its dtype, random keys (int32
// when ceil(log2(n - (6 n^2 + 1) / (12 ln 0.9))) bits fit 32, else int64) and their sorted copy, CUB's radix
// sort scratch (freed at once), then frees the sorted keys, the keys and the arange. The same on sim, meta and
// cuda; the permutation itself is drawn on the host (Fisher-Yates, another engine than PyTorch's sort of random
// keys: both uniform) and copied in, except on meta.
Tensor randperm_on_device(int64_t n, const TensorOptions& options, Generator* generator_handle);

}  // namespace

Tensor randperm(int64_t n, TensorOptions options, Generator* generator_handle) {
  if (n < 0) throw std::invalid_argument(fmt::format("randperm: n must be non-negative, got {}", n));
  options.dtype = options.resolved_dtype(ScalarType::int64);  // torch.randperm's default dtype
  const ScalarType dtype = *options.dtype;
  if (dtype == ScalarType::bool_ || (n > 0 && overflows(static_cast<double>(n - 1), dtype)) ||
      (is_floating_point(dtype) && n > (int64_t{1} << std::numeric_limits<float>::digits) &&
       dtype != ScalarType::float64) ||
      (dtype == ScalarType::float64 && n > (int64_t{1} << 53)))
    throw std::invalid_argument(
        fmt::format("randperm: n is too large for result tensor type: '{}' (n = {})", scalar_type_name(dtype), n));
  if (options.requires_grad) throw std::invalid_argument("randperm: an integer permutation cannot require grad");
  if (options.resolved_device().type != DeviceType::cpu) return randperm_on_device(n, options, generator_handle);
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = i;
  // Fisher-Yates from the front, as PyTorch's randperm_cpu: position i swaps with one of i .. n-1.
  auto draw = [&](auto next) {
    for (int64_t i = 0; i + 1 < n; ++i) {
      const auto z = static_cast<int64_t>(next() % static_cast<uint64_t>(n - i));
      std::swap(values[static_cast<size_t>(i)], values[static_cast<size_t>(i + z)]);
    }
  };
  if (generator_handle) {
    draw([&] { return generator_handle->random64(); });
  } else {
    std::lock_guard lock(generator().mutex);
    draw([&] { return generator().engine(); });
  }
  AllocationScope scope("randperm");
  return from_vector(values, {n}, options);
}

namespace {

Tensor randperm_on_device(int64_t n, const TensorOptions& options, Generator* generator_handle) {
  AllocationScope scope("randperm");
  const Device device = options.resolved_device();
  const ScalarType dtype = *options.dtype;
  Tensor result = empty({n}, TensorOptions{dtype, device});
  // check_supported_max_int_with_precision: n - 1 as a 0-d tensor of the result's dtype, made and dropped.
  (void)empty({}, TensorOptions{dtype, device});
  if (n == 0) return result;
  {
    const Tensor range = arange(n, TensorOptions{dtype, device});
    const auto nd = static_cast<double>(n);
    const int bits =
        std::min(64, static_cast<int>(std::ceil(std::log2(nd - (6 * nd * nd + 1) / (std::log(0.9) * 12)))));
    const ScalarType key_type = bits <= 32 ? ScalarType::int32 : ScalarType::int64;
    const Tensor keys = empty({n}, TensorOptions{key_type, device});
    const Tensor sorted_keys = empty({n}, TensorOptions{key_type, device});
    {
      const auto key_bytes = static_cast<int64_t>(element_size(key_type));
      const auto value_bytes = static_cast<int64_t>(element_size(dtype));
      const Tensor scratch = empty({cub_radix_sort_pairs_bytes(n, key_bytes, value_bytes, bits)},
                                   TensorOptions{ScalarType::uint8, device});
    }
  }  // sorted keys, keys, then the arange freed
  // The values: the cpu path's shuffle, copied in (no device allocation).
  if (device.type != DeviceType::meta) {
    const Tensor host = randperm(n, TensorOptions{dtype, kCpu}, generator_handle);
    result.copy_(host);
  }
  return result;
}

}  // namespace

}  // namespace bytegrad
