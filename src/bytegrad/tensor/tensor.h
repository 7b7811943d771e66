// Tensor: a reference-counted handle to (storage, sizes, strides, offset, dtype, version counter).
// Copying a Tensor copies the handle; views share storage and version counter and allocate nothing.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/core/op_table.h"
#include "bytegrad/core/recycling_allocator.h"
#include "bytegrad/core/removable_handle.h"
#include "bytegrad/core/scalar_type.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/storage.h"

namespace bytegrad {

// What a factory makes: dtype, device and whether the new tensor requires grad, as torch's keyword
// arguments (dtype=, device=, requires_grad=). Build it field by field, `{.device = kSim, .requires_grad =
// true}`, or by chaining, `device(kSim).with_requires_grad()`.
struct TensorOptions {
  std::optional<ScalarType> dtype;  // unset: the factory's default (float32; int64 for randint, as torch's)
  std::optional<Device> device;     // unset: default_device()
  // The new tensor is a leaf that requires grad (floating point dtypes only). Needs the autograd layer
  // linked (bytegrad_autograd), as everything about gradients does.
  bool requires_grad = false;

  TensorOptions& with_dtype(ScalarType t) {
    dtype = t;
    return *this;
  }
  TensorOptions& with_device(Device d) {
    device = d;
    return *this;
  }
  TensorOptions& with_requires_grad(bool on = true) {
    requires_grad = on;
    return *this;
  }
  ScalarType resolved_dtype(ScalarType fallback = ScalarType::float32) const { return dtype.value_or(fallback); }
  Device resolved_device() const;
};
inline TensorOptions dtype(ScalarType t) { return TensorOptions{}.with_dtype(t); }
inline TensorOptions device(Device d) { return TensorOptions{}.with_device(d); }
inline TensorOptions device(const char* d) { return TensorOptions{}.with_device(Device::parse(d)); }

// Bumped by every in-place op on any tensor sharing it (a tensor and its views share one).
struct VersionCounter {
  std::atomic<uint64_t> value{0};
};

// Defined by the autograd layer; the tensor layer only carries it.
struct AutogradMeta;
class Tensor;

// A dimension given as a plain integer (x.sum(1), max(x, 1)): any integral type but bool. A template
// parameter constrained by it takes no braced list, so sum(x, {}) and sum(x, {0, 1}) still mean dims.
template <typename T>
concept DimIndex = std::integral<T> && !std::same_as<std::remove_cv_t<T>, bool>;
template <typename T>
concept Arithmetic = std::is_arithmetic_v<T>;
template <typename T>
concept RealNumber = Arithmetic<T> && !std::same_as<std::remove_cv_t<T>, bool>;  // a number, not a flag

struct ValuesIndices;  // below

// A gradient hook (Tensor::register_hook): called with the gradient flowing to the tensor; a defined
// result replaces it.
using GradientHook = std::function<Tensor(const Tensor&)>;

struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t storage_offset = 0;
  ScalarType dtype = ScalarType::float32;
  std::shared_ptr<VersionCounter> version = make_shared_recycled<VersionCounter>();
  std::shared_ptr<AutogradMeta> autograd;
  // Made by a view op (view, transpose, expand, slice, ...). PyTorch's differentiable views keep their base
  // tensor alive, so their storage is never referenced once only: the engine cannot add a later gradient
  // into a buffered view in place (InputBuffer's can_accumulate_inplace). detach() and copies are not views.
  bool is_view = false;
};

class Tensor {
 public:
  Tensor() = default;  // undefined
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t numel() const;
  ScalarType dtype() const { return impl().dtype; }
  size_t element_size() const { return bytegrad::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  Device device() const { return impl().storage->device(); }
  int64_t storage_offset() const { return impl().storage_offset; }
  const Storage& storage() const { return impl().storage; }
  // Address of element 0 (nullptr on meta).
  void* data_ptr() const;
  bool is_contiguous() const;
  bool is_meta() const { return device().type == DeviceType::meta; }
  // Whether both tensors draw on the same allocation.
  bool shares_storage_with(const Tensor& other) const { return storage() == other.storage(); }
  // The memory is used on `stream` too (torch.Tensor.record_stream): when the last tensor on it goes, the
  // caching allocator reuses the block only once the work queued on `stream` by then has completed.
  void record_stream(const Stream& stream) const;
  uint64_t version() const { return impl().version->value.load(); }
  void bump_version() const { impl().version->value.fetch_add(1); }
  StridedView view_for_kernels() const;
  TensorImpl& impl() const {  // inline: every accessor goes through it
    if (!impl_) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // Number of handles to this TensorImpl (as PyTorch's use_count, for gradient stealing).
  long use_count() const { return impl_.use_count(); }

  // ---- views: share storage, allocate nothing
  Tensor view(const Shape& shape) const;     // throws if strides cannot express it (use reshape)
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose (0-D and 1-D unchanged)
  Tensor permute(const Shape& order) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t storage_offset) const;
  // Shares storage and version but not autograd history.
  Tensor alias() const;

  // ---- copies
  Tensor contiguous() const;                     // itself when already contiguous
  Tensor clone() const;                          // a new contiguous tensor
  const Tensor& copy_(const Tensor& src) const;  // in place, broadcasting src; converts dtype
  Tensor to(Device device) const;                // itself when already there
  Tensor to(ScalarType dtype) const;
  Tensor cuda() const { return to(Device{DeviceType::cuda, 0}); }
  Tensor cpu() const { return to(Device{DeviceType::cpu, 0}); }

  // ---- autograd (defined in autograd/tensor_autograd.cpp: link bytegrad_autograd to use these)
  bool requires_grad() const;
  const Tensor& requires_grad_(bool enabled = true) const;  // leaves only
  Tensor grad() const;                                      // undefined until a backward reaches it
  void set_grad(const Tensor& grad) const;                  // assign or (undefined) clear .grad
  bool is_leaf() const;
  std::string grad_fn_name() const;  // "" for leaves and plain tensors
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // torch.Tensor.register_hook: `hook(grad)` runs each time a gradient for this tensor is computed, before
  // it is used (before AccumulateGrad for a leaf); a hook returning a Tensor replaces the gradient with a
  // defined result, one returning void only looks. Hooks run in registration order. The tensor must require
  // grad. remove() on the returned handle (or remove_hook(handle)) unregisters it.
  template <std::invocable<const Tensor&> Hook>
  RemovableHandle register_hook(Hook hook) const {
    if constexpr (std::is_void_v<std::invoke_result_t<Hook&, const Tensor&>>) {
      return register_gradient_hook([hook = std::move(hook)](const Tensor& grad) mutable {
        hook(grad);
        return Tensor();
      });
    } else {
      return register_gradient_hook(GradientHook(std::move(hook)));
    }
  }
  RemovableHandle register_gradient_hook(GradientHook hook) const;
  static void remove_hook(RemovableHandle& handle) { handle.remove(); }
  Tensor detach() const;  // shares storage and version, no history

  // ---- reading values (copies to the host; throws on meta)
  double item() const;  // one element
  // libtorch's item<float>(), item<int64_t>(): the element converted to T; an integral or bool T refuses a
  // value it cannot hold (NaN, out of range) with std::invalid_argument.
  template <Arithmetic T>
  T item() const {
    const double value = item();
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!(value >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
            value <= static_cast<double>(std::numeric_limits<T>::max())))
        throw_item_out_of_range(value, sizeof(T), std::is_signed_v<T>);
    }
    return static_cast<T>(value);
  }
  std::vector<double> tolist() const;  // row-major, as doubles
  std::string str() const;             // PyTorch-like repr

  // ---- ops (defined in tensor/ops_*.cpp; free functions, operators and the rules in tensor/ops.h)
  Tensor add(const Tensor& other, double alpha = 1.0) const;
  Tensor add(double other, double alpha = 1.0) const;
  Tensor sub(const Tensor& other, double alpha = 1.0) const;
  Tensor sub(double other, double alpha = 1.0) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(double other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(double other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(double exponent) const;
  // Every unary pointwise op of the op table (core/op_table.h) is a member: x.neg(), x.log(), x.sqrt(),
  // x.relu(), ... (ops.h declares the free functions).
#define BYTEGRAD_UNARY_MEMBER(op, ...) Tensor op() const;
  BYTEGRAD_UNARY_OPS(BYTEGRAD_UNARY_MEMBER)
#undef BYTEGRAD_UNARY_MEMBER
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;  // (ops.h)
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  // In place: bump the version counter, allocate nothing.
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(double other, double alpha = 1.0) const;
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& sub_(double other, double alpha = 1.0) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(double other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(double other) const;
  const Tensor& neg_() const;
  const Tensor& relu_() const;
  const Tensor& masked_fill_(const Tensor& mask, double value) const;
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const;
  const Tensor& clamp_(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  const Tensor& clamp_min_(double min) const;
  const Tensor& clamp_max_(double max) const;
  Tensor sum(std::optional<ScalarType> dtype = std::nullopt) const;  // dtype: as sum's (ops.h)
  Tensor sum(const Shape& dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) const;
  template <DimIndex D>  // x.sum(1): one dimension, as libtorch's x.sum(1, keepdim)
  Tensor sum(D dim, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) const {
    return sum(Shape{static_cast<int64_t>(dim)}, keepdim, dtype);
  }
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  template <DimIndex D>
  Tensor mean(D dim, bool keepdim = false) const {
    return mean(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  Tensor norm(std::optional<ScalarType> dtype = std::nullopt) const;  // the 2-norm (ops.h)
  Tensor norm(const Shape& dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor var() const;  // unbiased; var({}, false, 0.0) for the population variance
  Tensor var(const Shape& dims, bool keepdim = false, double correction = 1.0) const;
  Tensor std() const;
  Tensor std(const Shape& dims, bool keepdim = false, double correction = 1.0) const;
  Tensor max() const;
  Tensor min() const;
  ValuesIndices max(int64_t dim, bool keepdim = false) const;  // values then indices (as torch.max(x, dim))
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor softmax(int64_t dim, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor log_softmax(int64_t dim, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor bmm(const Tensor& other) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
  [[noreturn]] static void throw_item_out_of_range(double value, size_t bytes, bool is_signed);
  [[noreturn]] static void throw_undefined();
};

// torch.max(x, dim) and min's result: two tensors, usable as `auto [values, indices] = x.max(1);` or as
// libtorch's std::tuple.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
  // NOLINTNEXTLINE(google-explicit-constructor): libtorch returns std::tuple; this keeps its spelling working
  operator std::tuple<Tensor, Tensor>() const { return {values, indices}; }
};

// Prints str(), PyTorch's repr (values, then the device and a dtype other than the default), as libtorch's
// `std::cout << x`.
std::ostream& operator<<(std::ostream& out, const Tensor& t);

// Normalizes a possibly negative dimension; throws naming the op when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// "Tensor(shape=[2, 3], dtype=float32, device=sim)" for error messages.
std::string describe(const Tensor& t);

// PyTorch's computeStorageNbytes: the bytes a storage needs to hold every element of a tensor with these
// sizes and strides (in elements) starting at `storage_offset` elements (0 when a size is 0). Throws naming
// `op`: std::invalid_argument for a negative stride or offset, std::length_error when the size overflows.
size_t storage_bytes_for(const char* op, const Shape& sizes, const Shape& strides, int64_t storage_offset,
                         size_t element_size);

// ---- factories
Tensor empty(const Shape& sizes, TensorOptions options = {});
Tensor empty_strided(const Shape& sizes, const Shape& strides, TensorOptions options = {});
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
Tensor full(const Shape& sizes, double value, TensorOptions options = {});
// A bound or step of arange, remembering whether it was written as an integer: torch.arange's dtype,
// when options give none, is int64 if start, end and step are all integers, else float32 (arange(12) is
// int64, arange(12.0) and arange(0, 1, 0.25) float32).
class ArangeBound {
 public:
  template <RealNumber T>
  ArangeBound(T value)  // NOLINT(google-explicit-constructor): stands for a number in arange's arguments
      : value_(static_cast<double>(value)), integral_(std::is_integral_v<T>) {}
  double value() const { return value_; }
  bool integral() const { return integral_; }

 private:
  double value_;
  bool integral_;
};
Tensor arange(ArangeBound end, TensorOptions options = {});
Tensor arange(ArangeBound start, ArangeBound end, ArangeBound step = 1, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// Values given row-major, with their shape (the data is converted to options.dtype).
Tensor from_vector(const std::vector<double>& values, const Shape& sizes, TensorOptions options = {});
// Host memory holding numel(sizes) elements of options.dtype (float32 when unset), row-major, copied into
// a new tensor on options.device (one block there). libtorch's from_blob wraps the memory without copying
// (on the host); bytegrad's tensors own their storage, so this is from_blob(...).to(device) in one step.
// bool elements must be 0 or 1 (std::invalid_argument otherwise). `data` may be null only when numel is 0.
Tensor from_blob(const void* data, const Shape& sizes, TensorOptions options = {});
// The dtype of a C++ element type: int64_t -> int64, int32_t -> int32, uint8_t -> uint8, float -> float32,
// double -> float64.
template <typename T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, int64_t>) return ScalarType::int64;
  else if constexpr (std::is_same_v<T, int32_t>) return ScalarType::int32;
  else if constexpr (std::is_same_v<T, uint8_t>) return ScalarType::uint8;
  else if constexpr (std::is_same_v<T, float>) return ScalarType::float32;
  else if constexpr (std::is_same_v<T, double>) return ScalarType::float64;
  else static_assert(sizeof(T) == 0, "scalar_type_of: no dtype for this element type");
}
// Typed host values, exact (int64 values beyond 2^53 too): the tensor's dtype is T's unless options say
// another, which converts as from_vector's doubles do (checked). A braced list of numbers still calls
// the double overload above.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, TensorOptions options = {}) {
  if (options.dtype && *options.dtype != scalar_type_of<T>())
    return from_vector(std::vector<double>(values.begin(), values.end()), sizes, options);
  if (static_cast<int64_t>(values.size()) != shape_numel(sizes))  // the double overload's error
    return from_vector(std::vector<double>(values.begin(), values.end()), sizes, options);
  options.dtype = scalar_type_of<T>();
  return from_blob(values.data(), sizes, options);
}
// Nested initializer lists, like torch.tensor([[1.0, 2.0], [3.0, 4.0]]).
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});  // 0-d

// ---- random (one seeded process generator; the same seed gives the same values on every device)
void manual_seed(uint64_t seed);
// The generator's whole state, as torch.get_rng_state / set_rng_state: what was drawn after get_rng_state
// is drawn again after set_rng_state (checkpointing's recomputation relies on it).
struct RngState {
  std::string engine;  // the host engine's state, serialized
};
RngState get_rng_state();
void set_rng_state(const RngState& state);
Tensor rand(const Shape& sizes, TensorOptions options = {});   // uniform [0, 1)
Tensor randn(const Shape& sizes, TensorOptions options = {});  // standard normal
// Integers in [low, high); int64 unless options.dtype says otherwise (torch.randint's default), so
// randint(0, 10, {4}, device(kSim)) is int64.
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options = {});
// A random generator of its own (torch.Generator): seeded on its own, drawn from without touching the
// process generator, so a data loader's shuffling does not shift the model's initialization. A handle:
// copies share one state.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL);  // PyTorch's default seed
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const;
  // The state as text, to store in a checkpoint and restore (set_state refuses text get_state did not make).
  std::string get_state() const;
  void set_state(const std::string& state);
  uint64_t random64();  // the next 64 random bits

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};
// torch.randperm: 0 .. n-1 in random order, int64 unless options.dtype says otherwise, from `generator`
// (the process generator when null). Drawn on the host by a Fisher-Yates shuffle, as PyTorch's CPU
// kernel draws it (the values are not PyTorch's: another engine). On cuda, sim and meta it allocates what
// PyTorch's CUDA randperm does (Randperm.cu: the result, an arange, random keys and their sorted copy, CUB's
// radix-sort scratch, modelled in random.cpp; the temporaries freed before it returns) and copies the host
// shuffle in (meta: no values). n < 0, or n beyond what the dtype holds exactly, is refused.
Tensor randperm(int64_t n, TensorOptions options = {}, Generator* generator = nullptr);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
// Writes row-major host values into t (converted to its dtype); used by random factories and initializers.
// `values` must hold exactly t.numel() values, each fitting t's dtype (checked_convert): otherwise
// std::invalid_argument naming the counts (or the value and dtype), before anything is written.
void fill_from_host(const Tensor& t, std::span<const double> values);
// rand, randn and the nn::init fills draw floating values: any other dtype is refused as PyTorch refuses
// it (std::invalid_argument, "rand: not implemented for 'Long' (int64) ...").
void check_random_floating(const char* op, ScalarType dtype);
// The process generator's next uniform [0,1) / normal draws.
double random_uniform();
double random_normal();

}  // namespace bytegrad
