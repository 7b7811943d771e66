// The process's random generator: Philox4x32-10 (kernels/philox.h), counter-based as PyTorch's CUDA generator,
// with PyTorch's kind of state, a seed and an offset. Each draw takes the next range of counter blocks, so
// element i of a call is a function of (seed, the call's offset, i) only: the values are drawn on the host,
// in parallel chunks straight into the tensor's dtype (kernels/random_fill.h), and copied to the device, so one
// seed gives the same tensor on cpu, sim and cuda, at any thread count. (They are not PyTorch's values: the
// goldens depend on shapes, never on values.)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>

#include "bytegrad/core/checked_convert.h"
#include "bytegrad/kernels/parallel.h"
#include "bytegrad/kernels/random_fill.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops_support.h"
#include "bytegrad/tensor/random.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default seed

struct ProcessGenerator {
  std::mutex mutex;
  uint64_t seed = kDefaultSeed;
  uint64_t offset = 0;  // counter blocks drawn since the seed was set
};

ProcessGenerator& generator() {
  static ProcessGenerator instance;
  return instance;
}

// A draw of n elements from the process generator: its key and the next n / per_block counter blocks.
random_fill::Draw reserve(random_fill::Kind kind, ScalarType dtype, int64_t n) {
  random_fill::Draw draw;
  draw.kind = kind;
  draw.dtype = dtype;
  std::lock_guard lock(generator().mutex);
  draw.seed = generator().seed;
  draw.offset = generator().offset;
  generator().offset += random_fill::draw_blocks(kind, dtype, n);
  return draw;
}

// One value of a draw of one float64 element (its own block).
double draw_scalar(random_fill::Kind kind) {
  const random_fill::Draw draw = reserve(kind, ScalarType::float64, 1);
  double value = 0.0;
  random_fill::fill(draw, 0, 1, &value);
  return value;
}

// The text of a state: the engine's name, the seed and the offset. parse_state refuses anything else (a
// state saved by the mt19937_64 generator bytegrad had before, too) with a message naming `op`.
constexpr const char* kStateName = "philox4x32_10";

std::string state_text(uint64_t seed, uint64_t offset) { return fmt::format("{} {} {}", kStateName, seed, offset); }

std::pair<uint64_t, uint64_t> parse_state(const std::string& text, const char* op) {
  std::istringstream in(text);
  std::string name;
  uint64_t seed = 0, offset = 0;
  in >> name >> seed >> offset;
  std::string rest;
  if (name != kStateName || in.fail() || (in >> rest))
    throw std::invalid_argument(fmt::format(
        "{}: the state is not one get_state returned: expected '{} SEED OFFSET', got '{}'{}", op, kStateName,
        text.size() > 60 ? text.substr(0, 60) + "..." : text,
        name == kStateName ? ""
                           : " (states saved before bytegrad's generator became Philox4x32-10, a mt19937_64 "
                             "dump, cannot be restored)"));
  return {seed, offset};
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
  generator().seed = seed;
  generator().offset = 0;
}

RngState get_rng_state() {
  std::lock_guard lock(generator().mutex);
  return RngState{state_text(generator().seed, generator().offset)};
}

void set_rng_state(const RngState& state) {
  const auto [seed, offset] = parse_state(state.engine, "set_rng_state");
  std::lock_guard lock(generator().mutex);
  generator().seed = seed;
  generator().offset = offset;
}

double random_uniform() { return draw_scalar(random_fill::Kind::uniform); }

double random_normal() { return draw_scalar(random_fill::Kind::normal); }

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

// Writes a draw's values into t, in parallel (kernels/parallel.h), straight in t's dtype. On cpu and sim
// (the cpu backend's host memory) each thread writes its part of t itself; on cuda, chunks of a million
// elements go through a host staging buffer, each copied to the device, so a 960 MB randn needs no gigabytes
// of staging. A strided t is written through a contiguous temporary, as fill_from_host writes it.
void write_draw(const Tensor& t, const random_fill::Draw& draw) {
  Tensor target = t.is_contiguous() ? t : empty(t.sizes(), TensorOptions{t.dtype(), t.device()});
  const int64_t n = t.numel();
  const size_t width = element_size(t.dtype());
  // A grain of 64 Ki elements is some tens of microseconds of drawing; chunk boundaries on whole batches of
  // counter blocks (random_fill.cpp draws 256 at a time), so no block is drawn twice.
  constexpr int64_t kGrain = 1 << 16, kAlign = 1024;
  const auto draw_into = [&](std::byte* dst, int64_t start, int64_t count) {
    parallel::parallel_for(0, count, kGrain, kAlign, [&](int64_t first, int64_t last) {
      random_fill::fill(draw, start + first, last - first, dst + static_cast<size_t>(first) * width);
    });
  };
  if (t.device().type == DeviceType::cpu || t.device().type == DeviceType::sim) {
    draw_into(static_cast<std::byte*>(target.view_for_kernels().data), 0, n);
  } else {
    constexpr int64_t kChunk = 1 << 20;
    const Tensor flat = target.view({-1});
    std::vector<std::byte> staging(static_cast<size_t>(std::min(n, kChunk)) * width);
    for (int64_t start = 0; start < n; start += kChunk) {
      const int64_t count = std::min(kChunk, n - start);
      draw_into(staging.data(), start, count);
      backend_for(t.device())
          .copy_from_host(flat.slice(0, start, start + count).view_for_kernels(),
                          std::span<const std::byte>(staging.data(), static_cast<size_t>(count) * width));
    }
  }
  if (!t.is_contiguous()) t.copy_(target);
}

// Fills t (not meta) with a draw of `kind` from the process generator.
void fill_random(const Tensor& t, random_fill::Kind kind, double a, double b) {
  if (t.is_meta() || t.numel() == 0) return;  // no values, and none drawn
  random_fill::Draw draw = reserve(kind, t.dtype(), t.numel());
  draw.a = a;
  draw.b = b;
  write_draw(t, draw);
}

template <typename Fill>
Tensor random_tensor(const Shape& sizes, TensorOptions options, Fill fill) {
  // requires_grad is set once the values are in (the chunks are views, which autograd would record on a
  // tensor that requires grad); checked first, so a refused request allocates nothing.
  const RequiresGradSetter set_requires_grad = ops_detail::requires_grad_setter_for(options);
  options.requires_grad = false;
  Tensor out = empty(sizes, options);
  // PyTorch draws on the device, with curand's kernels, whose module globals the driver allocates.
  if (out.numel() != 0) note_driver_allocations(out.device(), kModuleGlobals);
  fill(out);
  if (set_requires_grad) set_requires_grad(out);
  return out;
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
  return random_tensor(sizes, options, [](const Tensor& t) { fill_random(t, random_fill::Kind::uniform, 0.0, 1.0); });
}
Tensor randn(const Shape& sizes, TensorOptions options) {
  check_random_floating("randn", options.resolved_dtype());
  AllocationScope scope("randn");
  return random_tensor(sizes, options, [](const Tensor& t) { fill_random(t, random_fill::Kind::normal, 0.0, 1.0); });
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
  return random_tensor(sizes, options, [&](const Tensor& t) {
    if (t.is_meta() || t.numel() == 0) return;
    random_fill::Draw draw = reserve(random_fill::Kind::integers, t.dtype(), t.numel());
    draw.ilow = low;
    draw.ihigh = high;
    write_draw(t, draw);
  });
}

void uniform_fill_(const Tensor& t, double low, double high) {
  check_random_floating("uniform_", t.dtype());
  fill_random(t, random_fill::Kind::uniform, low, high);
}

void normal_fill_(const Tensor& t, double mean, double std) {
  check_random_floating("normal_", t.dtype());
  fill_random(t, random_fill::Kind::normal, mean, std);
}

void bernoulli_fill_(const Tensor& t, double p) {
  if (!(p >= 0.0 && p <= 1.0)) throw std::invalid_argument(fmt::format("bernoulli_: p must be in [0, 1], got {}", p));
  fill_random(t, random_fill::Kind::bernoulli, p, 0.0);
}

// A Generator draws 64-bit values: value k is words 2j and 2j + 1 (j = k % 2) of counter block k / 2 of its
// seed; its offset counts the values drawn.
struct Generator::Impl {
  std::mutex mutex;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

namespace {

uint64_t random64_at(uint64_t seed, uint64_t index) {
  uint32_t words[4];
  random_fill::block_words(seed, index / 2, words);
  const size_t j = 2 * static_cast<size_t>(index % 2);
  return (static_cast<uint64_t>(words[j + 1]) << 32) | words[j];
}

}  // namespace

Generator::Generator(uint64_t seed) : impl_(std::make_shared<Impl>()) { manual_seed(seed); }

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(impl_->mutex);
  impl_->seed = seed;
  impl_->offset = 0;
}

uint64_t Generator::initial_seed() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seed;
}

std::string Generator::get_state() const {
  std::lock_guard lock(impl_->mutex);
  return state_text(impl_->seed, impl_->offset);
}

void Generator::set_state(const std::string& state) {
  const auto [seed, offset] = parse_state(state, "Generator::set_state");
  std::lock_guard lock(impl_->mutex);
  impl_->seed = seed;
  impl_->offset = offset;
}

uint64_t Generator::random64() {
  std::lock_guard lock(impl_->mutex);
  return random64_at(impl_->seed, impl_->offset++);
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
  } else if (n > 1) {
    // The process generator's next blocks: n - 1 values of 64 bits, two a block.
    const random_fill::Draw blocks = reserve(random_fill::Kind::integers, ScalarType::int64, n - 1);
    uint64_t index = 0;
    draw([&] { return random64_at(blocks.seed, 2 * blocks.offset + index++); });
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
