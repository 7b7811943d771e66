// The op fuzzer: every row of the op table (core/op_table.h, iterated, never listed here) called on random
// shapes (0-d, empty, size-1 broadcast dimensions), layouts (transposed, sliced with steps, expanded,
// overlapping as_strided views, storage offsets), dtypes (all eight) and devices (cpu, sim, meta).
//
// For each case an oracle written here from PyTorch's rules (the row's dtype column, broadcasting, type
// promotion, in-place castability, PyTorch's memory-overlap rules for in-place writes, checked scalar
// conversions) decides whether the call is valid, and with what dtype and shape:
//  - valid: the result's dtype and shape are the oracle's, its values match a float64 reference computed
//    here (dtype-appropriate tolerances), the inputs are unchanged (all but the one an in-place form writes),
//    the sim device's figures return once the result is gone, an in-place form agrees with its out-of-place
//    form, and on meta the same call gives the same shapes, strides, dtypes and allocated bytes as on sim;
//  - invalid: the call throws a std::exception subclass, with the sim device's figures and every input's
//    values unchanged.
// Environment (tests/fuzz/fuzz_support.h):
//   BYTEGRAD_FUZZ_OP_ITERATIONS / BYTEGRAD_FUZZ_ITERATIONS  the number of cases (CI: kCiCases below, 50000;
//                            20000 in a sanitized build)
//   BYTEGRAD_FUZZ_SEED       the seed; every failure prints it with the case number and the full input
//   BYTEGRAD_FUZZ_OP_CASE    run only this case number (a reproducer)
//   BYTEGRAD_FUZZ_OP_FIRST   the first case number (default 0): a long run split into processes, each
//                            running cases [FIRST, FIRST + ITERATIONS)
//   BYTEGRAD_FUZZ_OP_ROWS    only these rows (comma-separated op names)
//   BYTEGRAD_FUZZ_OP_SKIP    skip cases exercising these rule classes (comma-separated: dtype, promotion,
//                            scalar, overlap, device, ...); while developing only: the default checks all
//   BYTEGRAD_FUZZ_OP_TRACE=1 print each case before running it (to find one that crashes the process)
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/core/op_table.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "tests/fuzz/fuzz_support.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

using Values = std::vector<double>;
using Rng = std::mt19937_64;

// ------------------------------------------------------------------------------- shapes and dtypes

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

constexpr ScalarType kDtypes[] = {ScalarType::float32, ScalarType::float64, ScalarType::float16, ScalarType::bfloat16,
                                  ScalarType::int64,   ScalarType::int32,   ScalarType::uint8,   ScalarType::bool_};
constexpr ScalarType kFloatDtypes[] = {ScalarType::float32, ScalarType::float64, ScalarType::float16,
                                       ScalarType::bfloat16};

bool is_float(ScalarType t) {
  return t == ScalarType::float32 || t == ScalarType::float64 || t == ScalarType::float16 || t == ScalarType::bfloat16;
}
bool is_bool(ScalarType t) { return t == ScalarType::bool_; }
bool is_int(ScalarType t) { return !is_float(t) && !is_bool(t); }  // integral, bool aside
std::string name(ScalarType t) { return std::string(scalar_type_name(t)); }

// PyTorch's promoteTypes for the eight dtypes (written from its table, not bytegrad's).
ScalarType promote(ScalarType a, ScalarType b) {
  using S = ScalarType;
  if (a == b) return a;
  if (is_bool(a)) return b;
  if (is_bool(b)) return a;
  if (is_float(a) != is_float(b)) return is_float(a) ? a : b;
  if (is_float(a)) {
    if ((a == S::float16 && b == S::bfloat16) || (a == S::bfloat16 && b == S::float16)) return S::float32;
    auto width = [](S t) { return t == S::float64 ? 3 : t == S::float32 ? 2 : 1; };
    return width(a) >= width(b) ? a : b;
  }
  auto width = [](S t) { return t == S::int64 ? 3 : t == S::int32 ? 2 : 1; };
  return width(a) >= width(b) ? a : b;
}

int category(ScalarType t) { return is_bool(t) ? 0 : is_int(t) ? 1 : 2; }

// torch.result_type over tensor operands and Python-number scalars: dimensioned tensors, then 0-d tensors,
// then wrapped numbers, each consulted only when of a higher category than what came before.
struct Operand {
  ScalarType dtype;
  bool zero_dim = false;
  bool wrapped_number = false;
};
ScalarType result_type(const std::vector<Operand>& operands) {
  std::optional<ScalarType> dims, zero, wrapped;
  for (const Operand& o : operands) {
    auto& slot = o.wrapped_number ? wrapped : o.zero_dim ? zero : dims;
    slot = slot ? promote(*slot, o.dtype) : o.dtype;
  }
  auto combine = [](std::optional<ScalarType> higher, std::optional<ScalarType> lower) -> std::optional<ScalarType> {
    if (!higher) return lower;
    if (!lower) return higher;
    if (category(*lower) > category(*higher)) {
      // A wrapped float promotes integers to the default dtype (float32), not float64.
      return promote(*higher, *lower);
    }
    return higher;
  };
  // Wrapped numbers come in as their default types (float32 for float, int64 for int, bool), so that
  // combining gives PyTorch's answer.
  return combine(combine(dims, zero), wrapped).value_or(ScalarType::float32);
}

// A Python number: integral values act as Python ints, others as floats.
Operand wrapped(double value) {
  if (std::isfinite(value) && value == std::trunc(value)) return {ScalarType::int64, true, true};
  return {ScalarType::float32, true, true};
}

// PyTorch's canCast: floating into integral, and non-bool into bool, are refused.
bool may_cast(ScalarType from, ScalarType to) {
  if (is_float(from) && !is_float(to)) return false;
  if (!is_bool(from) && is_bool(to)) return false;
  return true;
}

// Whether a Python number converts to `t` without overflow (c10's checked_convert, as fill_, masked_fill_
// and constant_pad_nd use it; tests/data/pytorch_probes/bad_inputs/pytorch_2_11.txt): floating types take
// inf and NaN but no finite value beyond their largest; bool takes anything; integral types take no NaN or
// inf, and an int (an integral value) wraps into uint8 down to -255, while a float must be in range.
bool fits(double value, ScalarType t) {
  if (is_bool(t)) return true;
  if (is_float(t)) {
    if (!std::isfinite(value)) return true;
    const double max = t == ScalarType::float64   ? std::numeric_limits<double>::max()
                       : t == ScalarType::float32 ? std::numeric_limits<float>::max()
                       : t == ScalarType::float16 ? 65504.0
                                                  : 3.3895313892515355e38;
    return std::fabs(value) <= max;
  }
  if (!std::isfinite(value)) return false;
  const bool python_int = value == std::trunc(value);
  switch (t) {
    case ScalarType::int64: return value >= -9.2233720368547758e18 && value < 9.2233720368547758e18;
    case ScalarType::int32: return value >= -2147483648.0 && value <= 2147483647.0;
    default: return value <= 255 && value >= (python_int ? -255 : 0);  // uint8
  }
}

// A value as a tensor of `t` holds it: integers wrap (two's complement), floats round; bool is != 0.
double to_dtype_value(double v, ScalarType t) {
  switch (t) {
    case ScalarType::float64: return v;
    case ScalarType::float32: return static_cast<double>(static_cast<float>(v));
    case ScalarType::float16:
    case ScalarType::bfloat16: return v;  // compared with the dtype's tolerance instead
    case ScalarType::bool_: return v != 0 ? 1.0 : 0.0;
    default: break;
  }
  const int64_t i = static_cast<int64_t>(std::trunc(v));  // in range: the fuzzer keeps values small
  if (t == ScalarType::int64) return static_cast<double>(i);
  if (t == ScalarType::int32) return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(i)));
  return static_cast<double>(static_cast<uint8_t>(static_cast<uint64_t>(i)));
}

// --------------------------------------------------------------------------------------- the plan

// One storage (dtype, values, device) and views over it; a case's tensors are views, so that aliasing
// (an in-place destination overlapping an input) is expressed by two views of one storage.
struct StorageSpec {
  ScalarType dtype;
  Values values;
  bool other_device = false;  // on the case's other device (cpu <-> sim)
};
struct ViewSpec {
  int storage;
  Shape sizes, strides;
  int64_t offset = 0;
  std::string layout;
};
struct Plan {
  std::vector<StorageSpec> storages;
  std::vector<ViewSpec> views;
  std::vector<double> scalars;
  std::vector<int64_t> ints;
  Shape shape;  // a shape argument (view, expand, permute, pad, normalized_shape, ...)
  bool in_place = false;
  int variant = 0;
  std::string note;
};

struct Host {
  ScalarType dtype;
  Shape sizes;
  Values v;
};

Host host_view(const Plan& plan, int i) {
  const ViewSpec& view = plan.views[i];
  const StorageSpec& storage = plan.storages[view.storage];
  Host out{storage.dtype, view.sizes, {}};
  const int64_t n = numel_of(view.sizes);
  out.v.resize(n);
  Shape index(view.sizes.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t at = view.offset;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * view.strides[d];
    out.v[k] = storage.values[at];
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < view.sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

bool shares_storage(const Plan& plan, int a, int b) { return plan.views[a].storage == plan.views[b].storage; }

std::string describe(const Plan& plan) {
  std::ostringstream out;
  for (size_t i = 0; i < plan.views.size(); ++i) {
    const ViewSpec& v = plan.views[i];
    const StorageSpec& s = plan.storages[v.storage];
    out << "\n  input " << i << ": " << name(s.dtype) << (s.other_device ? " (other device)" : "") << " sizes "
        << shape_text(v.sizes) << " strides " << shape_text(v.strides) << " offset " << v.offset << " (" << v.layout
        << ") over storage " << v.storage << " of " << s.values.size() << " values";
    const Host h = host_view(plan, static_cast<int>(i));
    if (h.v.size() <= 32) {
      out << ": {";
      for (size_t k = 0; k < h.v.size(); ++k) out << (k ? ", " : "") << h.v[k];
      out << "}";
    }
  }
  if (!plan.scalars.empty()) {
    out << "\n  scalars:";
    for (double s : plan.scalars) out << " " << s;
  }
  if (!plan.ints.empty()) {
    out << "\n  ints:";
    for (int64_t i : plan.ints) out << " " << i;
  }
  if (!plan.shape.empty() || plan.note.size()) out << "\n  shape argument " << shape_text(plan.shape);
  out << "\n  variant " << plan.variant << (plan.in_place ? ", in place" : "") << (plan.note.empty() ? "" : ", ")
      << plan.note;
  return out.str();
}

// ------------------------------------------------------------------------------------ generation

struct Gen {
  Rng& rng;
  bool specials = false;  // NaN, inf, -0 among float values

  int64_t pick(int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }
  bool chance(int percent) { return pick(100) < percent; }
  template <typename T, size_t N>
  T one_of(const T (&options)[N]) {
    return options[pick(N)];
  }

  double value(ScalarType t) {
    switch (t) {
      case ScalarType::bool_: return static_cast<double>(pick(2));
      case ScalarType::uint8: return static_cast<double>(pick(13));
      case ScalarType::int32:
      case ScalarType::int64: return static_cast<double>(pick(19) - 9);
      default: break;
    }
    if (specials && chance(3)) {
      const double kSpecial[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity(), -0.0};
      return one_of(kSpecial);
    }
    return static_cast<double>(pick(65) - 32) / 8.0;  // exact in every float dtype
  }

  // A scalar argument: small integers or eighths (sometimes out of range for fill-like ops, chosen by callers).
  double scalar() {
    if (chance(50)) return static_cast<double>(pick(11) - 5);
    return static_cast<double>(pick(41) - 20) / 8.0;
  }

  int64_t dim_size() {
    const int64_t kSizes[] = {0, 1, 1, 2, 2, 3, 3, 4, 5};
    return one_of(kSizes);
  }

  Shape shape(int max_rank = 4) {
    Shape s(pick(max_rank + 1));
    for (int64_t& d : s) d = dim_size();
    if (numel_of(s) > 96) s.back() = 1;
    return s;
  }

  ScalarType dtype() { return one_of(kDtypes); }
  ScalarType float_dtype() { return one_of(kFloatDtypes); }
  // Mostly `preferred`, sometimes any dtype (so that dtype rules are exercised).
  ScalarType dtype_like(ScalarType preferred, int other_percent = 20) {
    return chance(other_percent) ? dtype() : preferred;
  }

  // A new storage and a view of `sizes` over it in a random layout.
  int tensor(Plan& plan, ScalarType t, const Shape& sizes, bool other_device = false) {
    ViewSpec view{static_cast<int>(plan.storages.size()), sizes, contiguous_strides(sizes), 0, "contiguous"};
    const size_t rank = sizes.size();
    const int kind = static_cast<int>(pick(100));
    if (kind < 45 || rank == 0) {
      view.offset = chance(30) ? pick(3) : 0;
    } else if (kind < 60) {  // a permutation of a contiguous tensor (transposed)
      std::vector<size_t> order(rank);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      Shape base(rank);
      for (size_t i = 0; i < rank; ++i) base[i] = sizes[order[i]];
      const Shape base_strides = contiguous_strides(base);
      for (size_t i = 0; i < rank; ++i) view.strides[order[i]] = base_strides[i];
      view.layout = "permuted";
    } else if (kind < 75) {  // sliced with steps
      Shape base = sizes, steps(rank);
      for (size_t i = 0; i < rank; ++i) {
        steps[i] = 1 + pick(3);
        base[i] = sizes[i] * steps[i] + pick(2);
      }
      const Shape base_strides = contiguous_strides(base);
      for (size_t i = 0; i < rank; ++i) view.strides[i] = base_strides[i] * steps[i];
      view.offset = pick(2);
      view.layout = "stepped";
    } else if (kind < 88) {  // expanded: stride 0 on some dims
      Shape base = sizes;
      for (size_t i = 0; i < rank; ++i)
        if (chance(50)) base[i] = 1;
      const Shape base_strides = contiguous_strides(base);
      for (size_t i = 0; i < rank; ++i) view.strides[i] = base[i] == 1 && sizes[i] != 1 ? 0 : base_strides[i];
      view.layout = "expanded";
    } else {  // as_strided with small strides: elements overlap
      for (int64_t& s : view.strides) s = pick(3);
      view.offset = pick(2);
      view.layout = "as_strided";
    }
    int64_t span = view.offset;
    if (numel_of(sizes) > 0) {
      for (size_t i = 0; i < rank; ++i) span += (sizes[i] - 1) * view.strides[i];
      span += 1;
    }
    StorageSpec storage{t, Values(span + pick(2)), other_device};
    for (double& v : storage.values) v = value(t);
    plan.storages.push_back(std::move(storage));
    plan.views.push_back(std::move(view));
    return static_cast<int>(plan.views.size()) - 1;
  }

  // A contiguous tensor (for operands whose layout the op's contract restricts).
  int contiguous(Plan& plan, ScalarType t, const Shape& sizes) {
    int64_t n = numel_of(sizes);
    StorageSpec storage{t, Values(n), false};
    for (double& v : storage.values) v = value(t);
    plan.storages.push_back(std::move(storage));
    plan.views.push_back(
        {static_cast<int>(plan.storages.size()) - 1, sizes, contiguous_strides(sizes), 0, "contiguous"});
    return static_cast<int>(plan.views.size()) - 1;
  }

  // A view over view `of`'s storage: the same view (full overlap), its transpose, shifted by one element
  // (partial overlap), or beyond its span (no overlap). `sizes` is used where the view is not the same.
  int alias(Plan& plan, int of, const Shape& sizes) {
    const ViewSpec& base = plan.views[of];
    ViewSpec view = base;
    StorageSpec& storage = plan.storages[base.storage];
    const int kind = static_cast<int>(pick(4));
    if (kind == 0) {
      view.layout = "alias: the same view";
    } else if (kind == 1 && base.sizes.size() >= 2) {
      std::swap(view.sizes[0], view.sizes[1]);
      std::swap(view.strides[0], view.strides[1]);
      view.layout = "alias: transposed";
    } else {
      view.sizes = sizes;
      view.strides = contiguous_strides(sizes);
      view.offset = kind == 3 ? static_cast<int64_t>(storage.values.size()) : base.offset + 1;
      view.layout = kind == 3 ? "alias: past the view" : "alias: shifted by one";
    }
    int64_t span = view.offset;
    if (numel_of(view.sizes) > 0) {
      for (size_t i = 0; i < view.sizes.size(); ++i) span += (view.sizes[i] - 1) * view.strides[i];
      span += 1;
    }
    while (static_cast<int64_t>(storage.values.size()) < span) storage.values.push_back(value(storage.dtype));
    plan.views.push_back(std::move(view));
    return static_cast<int>(plan.views.size()) - 1;
  }

  // Shapes that broadcast together (trailing dims of one full shape, some set to 1); with `mismatch`, one
  // dimension of one operand is changed so that they do not (when possible).
  std::vector<Shape> broadcastable(size_t count, bool mismatch) {
    const Shape full = shape();
    std::vector<Shape> shapes;
    for (size_t i = 0; i < count; ++i) {
      const size_t rank = chance(60) ? full.size() : static_cast<size_t>(pick(full.size() + 1));
      Shape s(full.end() - rank, full.end());
      for (int64_t& d : s)
        if (chance(20)) d = 1;
      shapes.push_back(s);
    }
    if (mismatch) {
      Shape& s = shapes[pick(count)];
      if (!s.empty()) {
        int64_t& d = s[pick(s.size())];
        d = d == 2 ? 3 : 2;
      }
    }
    return shapes;
  }
};

// ----------------------------------------------------------------------------------- the oracle

// A case's verdict: valid or not, the classes of rules it exercises (for BYTEGRAD_FUZZ_OP_SKIP), and for a
// valid call the result's dtype and sizes.
struct Expect {
  bool valid = true;
  std::set<std::string> classes;
  std::string rule;           // the rule that refuses it
  std::string refused_class;  // its class
  ScalarType dtype = ScalarType::float32;
  Shape sizes;
  int written = -1;          // the view an in-place form writes (its values after the call are checked)
  bool values_known = true;  // false where PyTorch's result depends on its kernel's order (internal overlap)
  bool undefined_result = false;
  double tolerance_scale = 1;  // reductions over many elements
  bool check_inputs_unchanged = true;
  // PyTorch's kernel for a meta self skips the rule that refuses this case (copy_ into meta returns before
  // TensorIterator's overlap checks): on meta the call may succeed.
  bool meta_skips_refusal = false;
  // Instead of the reference's values, where the result is random (dropout): "" when the values are right.
  std::function<std::string(const Values& got, const std::vector<Host>& inputs, const Plan&)> custom_check;

  Expect& refuse(const std::string& klass, const std::string& why) {
    if (valid) {
      valid = false;
      rule = why;
      refused_class = klass;
    }
    classes.insert(klass);
    return *this;
  }
  Expect& tag(const std::string& klass) {
    classes.insert(klass);
    return *this;
  }
};

std::optional<Shape> broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      const int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return std::nullopt;
    }
  }
  return out;
}

bool is_non_overlapping_and_dense(const ViewSpec& v) {
  // PyTorch's rule: sorted by stride (size-1 dims ignored), each stride equals the product of the sizes
  // of the dims below it.
  if (numel_of(v.sizes) == 0) return true;
  std::vector<size_t> dims;
  for (size_t i = 0; i < v.sizes.size(); ++i)
    if (v.sizes[i] != 1) dims.push_back(i);
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return v.strides[a] < v.strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (v.strides[d] != expected) return false;
    expected *= v.sizes[d];
  }
  return true;
}

// PyTorch's has_internal_overlap == Yes: a dimension of size > 1 with stride 0 (other overlaps are
// "too hard" and allowed).
bool has_internal_overlap(const ViewSpec& v) {
  if (is_non_overlapping_and_dense(v)) return false;
  for (size_t i = 0; i < v.sizes.size(); ++i)
    if (v.sizes[i] > 1 && v.strides[i] == 0) return true;
  return false;
}
// Overlaps in a way whose result PyTorch does not define (TooHard: not dense, overlapping).
bool may_overlap_itself(const ViewSpec& v) { return !is_non_overlapping_and_dense(v); }

enum class Overlap { none, full, partial, too_hard };
// PyTorch's get_overlap_status(a, b).
Overlap overlap_status(const Plan& plan, int a, int b) {
  if (a == b) return Overlap::full;
  const ViewSpec &x = plan.views[a], &y = plan.views[b];
  if (numel_of(x.sizes) == 0 || numel_of(y.sizes) == 0) return Overlap::none;
  if (!is_non_overlapping_and_dense(x) || !is_non_overlapping_and_dense(y))
    return x.storage == y.storage ? Overlap::too_hard : Overlap::none;
  if (x.storage != y.storage) return Overlap::none;
  const int64_t x_begin = x.offset, x_end = x.offset + numel_of(x.sizes);
  const int64_t y_begin = y.offset, y_end = y.offset + numel_of(y.sizes);
  if (x_begin == y_begin && x_end == y_end) return x.strides == y.strides ? Overlap::full : Overlap::partial;
  if (x_begin < y_end && y_begin < x_end) return Overlap::partial;
  return Overlap::none;
}

// The in-place write checks of a TensorIterator op (and copy_): the destination must not overlap itself
// (stride 0), and no input may partially overlap it. Full overlap is allowed.
void check_in_place_overlap(Expect& e, const Plan& plan, int out, const std::vector<int>& inputs) {
  const ViewSpec& dst = plan.views[out];
  for (int64_t stride : dst.strides)
    if (stride == 0) e.tag("overlap");  // (an empty or size-1 dim of stride 0 overlaps nothing: allowed)
  if (has_internal_overlap(dst)) {
    e.refuse("overlap", "the destination overlaps itself (assert_no_internal_overlap)");
  } else if (may_overlap_itself(dst) && numel_of(dst.sizes) > 1) {
    e.tag("overlap");
    e.values_known = false;  // an overlapping destination's values depend on the kernel's order
  }
  for (int in : inputs) {
    if (!shares_storage(plan, out, in)) continue;
    e.tag("overlap");
    const Overlap status = overlap_status(plan, out, in);
    if (status == Overlap::partial) e.refuse("overlap", "an input partially overlaps the destination");
    if (status == Overlap::too_hard) e.values_known = false;
  }
}

// Same device for every operand (the cases put an operand on the other device to test it; a lone operand
// on it is no mix, so the drivers keep operand 0 on the case's device).
void check_devices(Expect& e, const Plan& plan, const std::vector<int>& views) {
  bool here = false, other = false;
  for (int v : views) (plan.storages[plan.views[v].storage].other_device ? other : here) = true;
  if (here && other) e.refuse("device", "operands on different devices");
}

void check_dtype_rule(Expect& e, DtypeRule rule, ScalarType t, const std::string& op) {
  if (rule == DtypeRule::floating && !is_float(t))
    e.refuse("dtype", op + ": the table's floating rule refuses " + name(t));
  if (rule == DtypeRule::not_bool && is_bool(t)) e.refuse("dtype", op + ": the table refuses bool");
}

// Validates dims for a reduction or view: every dim in [-rank, rank) (0-d tensors take 0 and -1), no repeats.
std::optional<std::vector<size_t>> wrap_dims(const Shape& dims, size_t rank) {
  const int64_t r = std::max<int64_t>(static_cast<int64_t>(rank), 1);
  std::vector<size_t> out;
  for (int64_t d : dims) {
    if (d < -r || d >= r) return std::nullopt;
    const size_t w = static_cast<size_t>(d < 0 ? d + r : d);
    if (std::find(out.begin(), out.end(), w) != out.end()) return std::nullopt;
    out.push_back(w);
  }
  return out;
}

// ----------------------------------------------------------------------------- reference math

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double silu_ref(double x) { return x / (1 + std::exp(-x)); }  // PyTorch's formula (-inf gives NaN, as its kernel)

// Integer arithmetic in 64 bits with two's complement wrap (then wrapped to the dtype by to_dtype_value).
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// An exact 64-bit result wrapped to `t` while still exact (a double would drop the low bits that a narrow
// type keeps).
double wrapped_to(int64_t v, ScalarType t) {
  if (t == ScalarType::int32) return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(v)));
  if (t == ScalarType::uint8) return static_cast<double>(static_cast<uint8_t>(static_cast<uint64_t>(v)));
  return static_cast<double>(v);
}

int64_t int_pow_exact(int64_t base, int64_t exponent) {
  if (exponent < 0) return base == 1 ? 1 : base == -1 ? ((-exponent) % 2 ? -1 : 1) : 0;
  int64_t out = 1;
  for (int64_t i = 0; i < exponent; ++i) out = wrap_mul(out, base);
  return out;
}

// Binary math as PyTorch computes it in `t` (the computation type).
double binary_ref(std::string_view op, double a, double b, double alpha, ScalarType t) {
  const bool integral = !is_float(t);
  // Operands are first converted to the computation type (an int64 -2 compared with uint8 is 254).
  if (integral && !is_bool(t)) a = to_dtype_value(a, t), b = to_dtype_value(b, t);
  if (op == "add" || op == "sub") {
    const double sign = op == "sub" ? -1 : 1;
    if (is_bool(t)) return (a + sign * alpha * b) != 0 ? 1 : 0;
    if (integral)
      return wrapped_to(
          wrap_add(static_cast<int64_t>(a), wrap_mul(static_cast<int64_t>(sign * alpha), static_cast<int64_t>(b))), t);
    return a + sign * alpha * b;
  }
  if (op == "mul")
    return is_bool(t) ? (a != 0 && b != 0) : integral ? wrapped_to(wrap_mul(int64_t(a), int64_t(b)), t) : a * b;
  if (op == "div") return a / b;
  if (op == "pow") {
    if (is_bool(t)) return (a != 0 || b == 0) ? 1 : 0;
    return integral ? wrapped_to(int_pow_exact(static_cast<int64_t>(a), static_cast<int64_t>(b)), t) : std::pow(a, b);
  }
  if (op == "maximum" || op == "minimum") {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
    return op == "maximum" ? std::max(a, b) : std::min(a, b);
  }
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  if (op == "ge") return a >= b;
  if (op == "logical_and") return (a != 0) && (b != 0);
  if (op == "logical_or") return (a != 0) || (b != 0);
  if (op == "relu_backward") return b <= 0 ? 0 : a;
  if (op == "sigmoid_backward") return a * (1 - b) * b;
  if (op == "tanh_backward") return a * (1 - b * b);
  if (op == "gelu_backward") {
    const double cdf = 0.5 * (1 + std::erf(b / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * b * b) / std::sqrt(2 * M_PI);
    return a * (cdf + b * pdf);
  }
  if (op == "leaky_relu_backward") return b > 0 ? a : a * alpha;
  if (op == "silu_backward") {
    const double s = sigmoid_ref(b);
    return a * s * (1 + b * (1 - s));
  }
  throw std::logic_error("op fuzz: no reference for binary op " + std::string(op));
}

double unary_ref(std::string_view op, double x, ScalarType t) {
  if (op == "neg") return is_float(t) ? -x : to_dtype_value(-x, t);
  if (op == "abs") return std::fabs(x);
  if (op == "exp") return std::exp(x);
  if (op == "expm1") return std::expm1(x);
  if (op == "log") return std::log(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "reciprocal") return 1 / x;
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "cos") return std::cos(x);
  if (op == "sin") return std::sin(x);
  if (op == "log_sigmoid") return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x)));
  if (op == "relu") return std::isnan(x) ? x : x > 0 ? x : 0.0;
  if (op == "sigmoid") return sigmoid_ref(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "gelu") return gelu_ref(x);
  if (op == "silu") return silu_ref(x);
  if (op == "logical_not") return x == 0 ? 1 : 0;
  throw std::logic_error("op fuzz: no reference for unary op " + std::string(op));
}

// Index of a broadcast input's element for an output position.
int64_t broadcast_source(const Shape& out_sizes, const Shape& in_sizes, int64_t linear) {
  int64_t index = 0, in_stride = 1;
  for (size_t k = out_sizes.size(); k-- > 0;) {
    const int64_t coord = linear % std::max<int64_t>(out_sizes[k], 1);
    linear /= std::max<int64_t>(out_sizes[k], 1);
    const size_t in_dim = k + in_sizes.size();
    if (in_dim < out_sizes.size()) continue;
    const int64_t size = in_sizes[in_dim - out_sizes.size()];
    if (size != 1) index += coord * in_stride;
    in_stride *= size;
  }
  return index;
}

// ---------------------------------------------------------------------------------- the drivers

Device other_device_of(Device d) { return d.type == DeviceType::cpu ? kSim : kCpu; }

double tolerance(ScalarType t) {
  switch (t) {
    case ScalarType::float64: return 1e-10;
    case ScalarType::float32: return 2e-5;
    case ScalarType::float16: return 2e-3;
    case ScalarType::bfloat16: return 1.6e-2;
    default: return 0;
  }
}

struct Driver {
  std::function<Plan(Gen&)> make;
  std::function<Expect(const Plan&)> expect;
  std::function<Values(const std::vector<Host>&, const Plan&, const Expect&)> reference;
  std::function<Tensor(const std::vector<Tensor>&, const Plan&)> call;
};

using Drivers = std::map<OpId, Driver>;

// Reduction output shape: dims removed (or kept as 1).
Shape reduced_shape(const Shape& sizes, const std::vector<size_t>& dims, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) out.push_back(sizes[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Groups the input's elements by output position of a reduction over `dims` (empty: all).
std::vector<Values> reduction_groups(const Host& x, const std::vector<size_t>& dims) {
  const Shape kept = reduced_shape(x.sizes, dims, false);
  std::vector<Values> groups(numel_of(kept));
  Shape index(x.sizes.size(), 0);
  for (int64_t k = 0; k < numel_of(x.sizes); ++k) {
    int64_t g = 0;
    for (size_t d = 0; d < x.sizes.size(); ++d) {
      const bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
      if (!reduced) g = g * x.sizes[d] + index[d];
    }
    groups[g].push_back(x.v[k]);
    for (size_t d = x.sizes.size(); d-- > 0;) {
      if (++index[d] < x.sizes[d]) break;
      index[d] = 0;
    }
  }
  return groups;
}

// Gathers `x` at the view (sizes, strides, offset) of its row-major elements.
Values strided_gather(const Host& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  Values out(numel_of(sizes));
  Shape index(sizes.size(), 0);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t at = offset;
    for (size_t d = 0; d < sizes.size(); ++d) at += index[d] * strides[d];
    out[k] = x.v[at];
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// The drivers of the pointwise rows come from the enums; the structured rows' from add_structured_drivers.
void add_pointwise_drivers(Drivers& drivers);
void add_structured_drivers(Drivers& drivers);

const Drivers& drivers() {
  static const Drivers all = [] {
    Drivers d;
    add_pointwise_drivers(d);
    add_structured_drivers(d);
    return d;
  }();
  return all;
}

}  // namespace

namespace {

// ------------------------------------------------------------------------------ pointwise drivers

// Values of `in` broadcast to `out_sizes`, converted to the computation type `t`.
double at_broadcast(const Host& in, const Shape& out_sizes, int64_t k) {
  return in.v[broadcast_source(out_sizes, in.sizes, k)];
}

// The in-place unary forms the API has.
std::function<void(const Tensor&)> unary_in_place(std::string_view op) {
  if (op == "neg") return [](const Tensor& x) { x.neg_(); };
  if (op == "relu") return [](const Tensor& x) { x.relu_(); };
  if (op == "sqrt") return [](const Tensor& x) { sqrt_(x); };
  return nullptr;
}

void add_pointwise_drivers(Drivers& drivers) {
  // ---- unary rows
  using UnaryCall = Tensor (*)(const Tensor&);
  static const std::map<OpId, UnaryCall> kUnary = {
#define BYTEGRAD_FUZZ_UNARY(op, ...) {OpId::op, [](const Tensor& x) { return x.op(); }},
      BYTEGRAD_UNARY_OPS(BYTEGRAD_FUZZ_UNARY)
#undef BYTEGRAD_FUZZ_UNARY
  };
  for (const auto& [id, fn] : kUnary) {
    const std::string op(op_name(id));
    const DtypeRule rule = op_info(id).dtypes;
    UnaryCall call = fn;
    drivers[id] = Driver{[op](Gen& g) {
                           g.specials = true;
                           Plan p;
                           g.tensor(p, g.dtype(), g.shape());
                           p.in_place = unary_in_place(op) && g.chance(35);
                           return p;
                         },
                         [op, rule](const Plan& p) {
                           Expect e;
                           const ScalarType t = p.storages[0].dtype;
                           check_dtype_rule(e, rule, t, op);
                           if (op == "relu" && is_bool(t)) e.refuse("intarith", "relu: Boolean inputs not supported");
                           e.dtype = rule == DtypeRule::to_bool ? ScalarType::bool_ : t;
                           e.sizes = p.views[0].sizes;
                           if (p.in_place) {
                             e.written = 0;
                             check_in_place_overlap(e, p, 0, {0});
                           }
                           return e;
                         },
                         [op](const std::vector<Host>& in, const Plan&, const Expect& e) {
                           Values out;
                           for (double x : in[0].v) out.push_back(unary_ref(op, x, e.dtype));
                           return out;
                         },
                         [op, call](const std::vector<Tensor>& in, const Plan& p) {
                           if (!p.in_place) return call(in[0]);
                           unary_in_place(op)(in[0]);
                           return in[0];
                         }};
  }

  // ---- binary rows (two tensors)
  using BinaryCall = Tensor (*)(const Tensor&, const Tensor&);
  static const std::map<OpId, BinaryCall> kBinary = {
#define BYTEGRAD_FUZZ_BINARY(op, ...) {OpId::op, [](const Tensor& a, const Tensor& b) { return bytegrad::op(a, b); }},
      BYTEGRAD_BINARY_OPS(BYTEGRAD_FUZZ_BINARY)
#undef BYTEGRAD_FUZZ_BINARY
  };
  for (const auto& [id, fn] : kBinary) {
    const std::string op(op_name(id));
    const DtypeRule rule = op_info(id).dtypes;
    const bool has_alpha = op == "add" || op == "sub";
    const bool has_in_place = has_alpha || op == "mul" || op == "div" || op == "maximum";
    BinaryCall call = fn;
    drivers[id] = Driver{
        [op, has_alpha, has_in_place](Gen& g) {
          g.specials = true;
          Plan p;
          const ScalarType a = g.dtype(), b = g.dtype_like(a, 40);
          const std::vector<Shape> shapes = g.broadcastable(2, g.chance(8));
          p.in_place = has_in_place && g.chance(35);
          const int self = g.tensor(p, a, shapes[0]);
          if (p.in_place && g.chance(30)) g.alias(p, self, shapes[1]);
          else g.tensor(p, b, shapes[1], g.chance(4));
          const double kAlphas[] = {1, 1, 2, -1, 0.5, 0};
          p.scalars = {has_alpha ? g.one_of(kAlphas) : 1.0};
          return p;
        },
        [op, rule, has_alpha](const Plan& p) {
          Expect e;
          check_devices(e, p, {0, 1});
          const Host a = host_view(p, 0), b = host_view(p, 1);
          const std::optional<Shape> shape = broadcast_shapes({a.sizes, b.sizes});
          if (!shape)
            e.refuse("broadcast",
                     "shapes " + shape_text(a.sizes) + " and " + shape_text(b.sizes) + " do not broadcast");
          if (a.dtype != b.dtype) e.tag("promotion");
          const ScalarType rt = result_type({{a.dtype, a.sizes.empty()}, {b.dtype, b.sizes.empty()}});
          if (rule == DtypeRule::floating && !is_float(rt))
            e.refuse("dtype", op + ": result type " + name(rt) + " is not floating");
          if (op == "sub" && (is_bool(a.dtype) || is_bool(b.dtype)))
            e.refuse("intarith", "subtraction with a bool tensor");
          if (op == "pow" && is_bool(rt)) e.refuse("intarith", "pow is not implemented for bool");
          if (op == "relu_backward" && is_bool(rt))
            e.refuse("intarith", "threshold_backward is not implemented for bool");
          if (op == "pow" && !is_float(rt)) e.tag("intarith");
          const double alpha = p.scalars[0];
          if (has_alpha && alpha != 1) {
            e.tag("scalar");
            if (!is_float(rt) && alpha != std::trunc(alpha))
              e.refuse("scalar", "a fractional alpha with integral tensors");
          }
          e.dtype = rule == DtypeRule::to_bool ? ScalarType::bool_ : rt;
          e.sizes = shape.value_or(Shape{});
          if (p.in_place) {
            e.written = 0;
            if (shape && *shape != a.sizes)
              e.refuse("broadcast",
                       "the broadcast shape " + shape_text(*shape) + " is not self's " + shape_text(a.sizes));
            if (!may_cast(e.dtype, a.dtype))
              e.refuse("promotion", "result type " + name(e.dtype) + " can't be cast to " + name(a.dtype));
            e.dtype = a.dtype;
            check_in_place_overlap(e, p, 0, {1});
          }
          return e;
        },
        [op](const std::vector<Host>& in, const Plan& p, const Expect& e) {
          const ScalarType rt = result_type({{in[0].dtype, in[0].sizes.empty()}, {in[1].dtype, in[1].sizes.empty()}});
          Values out(numel_of(e.sizes));
          for (size_t k = 0; k < out.size(); ++k)
            out[k] = binary_ref(op, at_broadcast(in[0], e.sizes, k), at_broadcast(in[1], e.sizes, k), p.scalars[0], rt);
          if (e.dtype != rt && !is_bool(e.dtype))
            for (double& v : out) v = to_dtype_value(to_dtype_value(v, rt), e.dtype);
          return out;
        },
        [op, call, has_alpha](const std::vector<Tensor>& in, const Plan& p) {
          const double alpha = p.scalars[0];
          if (p.in_place) {
            if (op == "add") in[0].add_(in[1], alpha);
            else if (op == "sub") in[0].sub_(in[1], alpha);
            else if (op == "mul") in[0].mul_(in[1]);
            else if (op == "div") in[0].div_(in[1]);
            else maximum_(in[0], in[1]);
            return in[0];
          }
          if (op == "add") return bytegrad::add(in[0], in[1], alpha);
          if (op == "sub") return bytegrad::sub(in[0], in[1], alpha);
          (void)has_alpha;
          return call(in[0], in[1]);
        }};
  }

  // ---- rows with a Python-number operand
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpId id = static_cast<OpId>(i);
    // (clamp, with two bounds, is a structured row computed by binary_scalar: its driver is its own.)
    if (op_info(id).kernel != "binary_scalar" || id == OpId::clamp) continue;
    const ScalarOpKernel kernel = scalar_op_kernel(id);
    const std::string op(op_name(id)), k(op_name(op_id(kernel.kernel)));
    const bool scalar_first = kernel.order == OperandOrder::scalar_first;
    const DtypeRule rule = op_info(id).dtypes;
    const bool clamp_bound = k == "maximum" || k == "minimum";  // clamp_min, clamp_max
    const bool has_in_place = !scalar_first && (k == "add" || k == "sub" || k == "mul" || k == "div" || clamp_bound);
    drivers[id] =
        Driver{[has_in_place](Gen& g) {
                 g.specials = true;
                 Plan p;
                 g.tensor(p, g.dtype(), g.shape());
                 p.scalars = {g.scalar()};
                 p.in_place = has_in_place && g.chance(35);
                 return p;
               },
               [op, k, rule, scalar_first](const Plan& p) {
                 Expect e;
                 const Host x = host_view(p, 0);
                 const double s = p.scalars[0];
                 const ScalarType rt = result_type({{x.dtype, x.sizes.empty()}, wrapped(s)});
                 if (rt != x.dtype) e.tag("scalar");
                 if (rule == DtypeRule::floating && !is_float(rt))
                   e.refuse("dtype", op + ": result type " + name(rt) + " is not floating");
                 if (k == "sub" && is_bool(x.dtype)) e.refuse("intarith", "subtraction with a bool tensor");
                 if ((k == "maximum" || k == "minimum") && is_bool(x.dtype))
                   e.refuse("dtype", "clamp of a bool tensor");
                 if ((k == "maximum" || k == "minimum") && rt != x.dtype)
                   e.refuse("intarith", "an integer tensor clamped to a fractional bound (bytegrad does not promote)");
                 if ((k == "maximum" || k == "minimum") && !fits(s, x.dtype))  // the kernel's Scalar::to, checked
                   e.refuse("scalar", "clamp: the bound cannot be converted to the tensor's dtype without overflow");
                 if (k == "pow") {
                   if (!is_float(rt)) e.tag("intarith");
                   if (!scalar_first && is_integral(x.dtype, true) && s == std::trunc(s) && s < 0)
                     e.refuse("intarith", "integers to negative integer powers");
                   if (is_bool(rt)) e.refuse("intarith", "pow is not implemented for bool");
                 }
                 const bool in_range = x.dtype == ScalarType::uint8   ? s >= 0 && s <= 255
                                       : x.dtype == ScalarType::bool_ ? s == 0 || s == 1
                                                                      : fits(s, x.dtype);
                 if (rule == DtypeRule::to_bool && is_integral(x.dtype, true) && rt == x.dtype && !in_range) {
                   // A comparison with a number outside the tensor's dtype (uint8 > -2): whether PyTorch wraps the
                   // number first is the scalar rules' business, so only shapes and dtypes are checked here.
                   e.tag("scalar");
                   e.values_known = false;
                 }
                 e.dtype = rule == DtypeRule::to_bool ? ScalarType::bool_ : rt;
                 e.sizes = x.sizes;
                 if (p.in_place) {
                   e.written = 0;
                   if (!may_cast(e.dtype, x.dtype))
                     e.refuse("scalar", "result type " + name(e.dtype) + " can't be cast to " + name(x.dtype));
                   e.dtype = x.dtype;
                   check_in_place_overlap(e, p, 0, {});
                 }
                 return e;
               },
               [k, scalar_first](const std::vector<Host>& in, const Plan& p, const Expect& e) {
                 const double s = p.scalars[0];
                 const ScalarType rt = result_type({{in[0].dtype, in[0].sizes.empty()}, wrapped(s)});
                 Values out;
                 for (double x : in[0].v) {
                   double v = scalar_first ? binary_ref(k, s, x, 1, rt) : binary_ref(k, x, s, 1, rt);
                   // PyTorch computes a float tensor to the power 0.5 as sqrt and -0.5 as rsqrt (so (-inf) ** 0.5 is
                   // NaN and (-0) ** -0.5 is -inf, where std::pow gives inf).
                   if (k == "pow" && !scalar_first && s == 0.5 && is_float(rt)) v = std::sqrt(x);
                   if (k == "pow" && !scalar_first && s == -0.5 && is_float(rt)) v = 1 / std::sqrt(x);
                   if (e.dtype != rt && !is_bool(e.dtype)) v = to_dtype_value(to_dtype_value(v, rt), e.dtype);
                   out.push_back(v);
                 }
                 return out;
               },
               [k, scalar_first](const std::vector<Tensor>& in, const Plan& p) {
                 const Tensor& x = in[0];
                 const double s = p.scalars[0];
                 if (p.in_place) {
                   if (k == "add") x.add_(s);
                   else if (k == "sub") x.sub_(s);
                   else if (k == "mul") x.mul_(s);
                   else if (k == "maximum") x.clamp_min_(s);
                   else if (k == "minimum") x.clamp_max_(s);
                   else x.div_(s);
                   return x;
                 }
                 if (k == "maximum") return bytegrad::clamp_min(x, s);
                 if (k == "minimum") return bytegrad::clamp_max(x, s);
                 if (k == "add") return bytegrad::add(x, s);
                 if (k == "sub") return scalar_first ? bytegrad::sub(s, x) : bytegrad::sub(x, s);
                 if (k == "mul") return bytegrad::mul(x, s);
                 if (k == "div") return scalar_first ? bytegrad::div(s, x) : bytegrad::div(x, s);
                 if (k == "pow") return scalar_first ? bytegrad::pow(s, x) : bytegrad::pow(x, s);
                 if (k == "eq") return bytegrad::eq(x, s);
                 if (k == "ne") return bytegrad::ne(x, s);
                 if (k == "lt") return bytegrad::lt(x, s);
                 if (k == "le") return bytegrad::le(x, s);
                 if (k == "gt") return bytegrad::gt(x, s);
                 if (k == "ge") return bytegrad::ge(x, s);
                 throw std::logic_error("op fuzz: no call for scalar kernel " + k);
               }};
  }
}

// ----------------------------------------------------------------------------- structured drivers

// A random dims list for a reduction over x (sometimes invalid: out of range or repeated).
Shape random_dims(Gen& g, size_t rank) {
  const int64_t r = static_cast<int64_t>(std::max<size_t>(rank, 1));
  Shape dims;
  const int64_t count = g.pick(std::min<int64_t>(r, 3) + 1);
  for (int64_t i = 0; i < count; ++i) dims.push_back(g.pick(2 * r) - r);
  if (g.chance(5)) dims.push_back(r + g.pick(2));  // out of range
  return dims;
}

double sum_of(const Values& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

void add_view_drivers(Drivers& drivers);
void add_copy_drivers(Drivers& drivers);
void add_nn_drivers(Drivers& drivers);
void add_more_nn_drivers(Drivers& drivers);
void add_along_dim_drivers(Drivers& drivers);

void add_structured_drivers(Drivers& drivers) {
  auto row = [&](OpId id, Driver d) { drivers[id] = std::move(d); };
  auto one_tensor = [](ScalarType t, Gen& g, Plan& p) { return g.tensor(p, t, g.shape()); };

  // ---- reductions. kind: sum, mean, prod, max, min, amax, amin, norm, var, std.
  struct Reduction {
    OpId id;
    std::string kind;
    bool has_dims;
  };
  const Reduction kReductions[] = {
      {OpId::sum, "sum", false},       {OpId::sum_dims, "sum", true}, {OpId::mean, "mean", false},
      {OpId::mean_dims, "mean", true}, {OpId::prod, "prod", false},   {OpId::max, "max", false},
      {OpId::min, "min", false},       {OpId::amax, "amax", true},    {OpId::amin, "amin", true},
      {OpId::norm, "norm", true},      {OpId::var, "var", true},      {OpId::std, "std", true}};
  for (const Reduction& r : kReductions) {
    const DtypeRule rule = op_info(r.id).dtypes;
    const std::string kind = r.kind, op(op_name(r.id));
    const bool has_dims = r.has_dims;
    row(r.id, Driver{[kind, has_dims, one_tensor](Gen& g) {
                       Plan p;
                       g.specials = g.chance(20);
                       const int x = one_tensor(g.dtype(), g, p);
                       if (kind == "prod")  // small factors, so that products stay exact
                         for (double& v : p.storages[0].values) v = std::fmod(v, 3);
                       if (has_dims) p.shape = random_dims(g, p.views[x].sizes.size());
                       p.ints = {g.chance(40) ? 1 : 0};               // keepdim
                       p.scalars = {static_cast<double>(g.pick(3))};  // correction (var, std)
                       return p;
                     },
                     [kind, has_dims, rule, op](const Plan& p) {
                       Expect e;
                       const Host x = host_view(p, 0);
                       check_dtype_rule(e, rule, x.dtype, op);
                       std::vector<size_t> dims;
                       if (has_dims) {
                         const auto wrapped_dims = wrap_dims(p.shape, x.sizes.size());
                         if (!wrapped_dims)
                           e.refuse("dims", "dims " + shape_text(p.shape) + " out of range or repeated");
                         else dims = *wrapped_dims;
                       }
                       if (x.sizes.empty()) dims.clear();
                       const bool keepdim = has_dims && p.ints[0];
                       if ((kind == "max" || kind == "min") && x.v.empty())
                         e.refuse("empty", "max()/min() of an empty tensor");
                       if (kind == "amax" || kind == "amin") {
                         for (size_t d = 0; d < x.sizes.size(); ++d) {
                           const bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
                           if (reduced && x.sizes[d] == 0) e.refuse("empty", "amax/amin over a dimension of size 0");
                         }
                       }
                       e.sizes = reduced_shape(x.sizes, dims, keepdim);
                       e.dtype = (kind == "sum" || kind == "prod") && !is_float(x.dtype) ? ScalarType::int64 : x.dtype;
                       e.tolerance_scale = 1 + std::sqrt(static_cast<double>(x.v.size()));
                       return e;
                     },
                     [kind](const std::vector<Host>& in, const Plan& p, const Expect& e) {
                       std::vector<size_t> dims;
                       if (!p.shape.empty() && !in[0].sizes.empty()) dims = *wrap_dims(p.shape, in[0].sizes.size());
                       (void)e;
                       Values out;
                       for (const Values& group : reduction_groups(in[0], dims)) {
                         const double n = static_cast<double>(group.size());
                         if (kind == "sum") out.push_back(sum_of(group));
                         else if (kind == "mean") out.push_back(sum_of(group) / n);
                         else if (kind == "prod") {
                           int64_t integral = 1;
                           double floating = 1;
                           for (double v : group) integral = wrap_mul(integral, static_cast<int64_t>(v)), floating *= v;
                           out.push_back(is_float(in[0].dtype) ? floating : static_cast<double>(integral));
                         } else if (kind == "norm") {
                           double s = 0;
                           for (double v : group) s += v * v;
                           out.push_back(std::sqrt(s));
                         } else if (kind == "var" || kind == "std") {
                           const double mean = sum_of(group) / n, correction = p.scalars[0];
                           double s = 0;
                           for (double v : group) s += (v - mean) * (v - mean);
                           const double var = s / std::max(0.0, n - correction);
                           out.push_back(kind == "var" ? var : std::sqrt(var));
                         } else {
                           const bool largest = kind == "max" || kind == "amax";
                           double best = group[0];
                           for (double v : group) {
                             if (std::isnan(v) || std::isnan(best)) best = std::numeric_limits<double>::quiet_NaN();
                             else best = largest ? std::max(best, v) : std::min(best, v);
                           }
                           out.push_back(best);
                         }
                       }
                       return out;
                     },
                     [kind, has_dims](const std::vector<Tensor>& in, const Plan& p) {
                       const Tensor& x = in[0];
                       const bool keepdim = p.ints[0] != 0;
                       if (kind == "sum") return has_dims ? sum(x, p.shape, keepdim) : sum(x);
                       if (kind == "mean") return has_dims ? mean(x, p.shape, keepdim) : mean(x);
                       if (kind == "prod") return prod(x);
                       if (kind == "max") return max(x);
                       if (kind == "min") return min(x);
                       if (kind == "amax") return amax(x, p.shape, keepdim);
                       if (kind == "amin") return amin(x, p.shape, keepdim);
                       if (kind == "norm") return norm(x, p.shape, keepdim);
                       if (kind == "var") return var(x, p.shape, keepdim, p.scalars[0]);
                       return bytegrad::std(x, p.shape, keepdim, p.scalars[0]);
                     }});
  }
  // var/std with a correction reaching n: PyTorch divides by max(0, n - correction) (inf or NaN).

  // ---- matrix products
  struct Product {
    OpId id;
    std::string kind;
  };
  for (const Product& prod_row : {Product{OpId::mm, "mm"}, Product{OpId::bmm, "bmm"}, Product{OpId::addmm, "addmm"},
                                  Product{OpId::dot, "dot"}, Product{OpId::mv, "mv"}}) {
    const std::string kind = prod_row.kind, op(op_name(prod_row.id));
    const DtypeRule rule = op_info(prod_row.id).dtypes;
    row(prod_row.id,
        Driver{[kind](Gen& g) {
                 Plan p;
                 const ScalarType t = g.dtype(), u = g.dtype_like(t, 10);
                 const int64_t b = g.dim_size(), n = g.dim_size(), m = g.dim_size(), q = g.dim_size();
                 const int64_t m2 = g.chance(8) ? m + 1 : m;  // mismatched inner sizes
                 if (kind == "mm") g.tensor(p, t, {n, m}), g.tensor(p, u, {m2, q});
                 if (kind == "bmm") g.tensor(p, t, {b, n, m}), g.tensor(p, u, {g.chance(8) ? b + 1 : b, m2, q});
                 if (kind == "dot") g.tensor(p, t, {m}), g.tensor(p, u, {m2});
                 if (kind == "mv") g.tensor(p, t, {n, m}), g.tensor(p, u, {m2});
                 if (kind == "addmm") {
                   const Shape bias_shapes[] = {{n, q}, {q}, {1, q}, {n, 1}, {}, {q + 1}};
                   g.tensor(p, g.dtype_like(t, 10), g.one_of(bias_shapes));
                   g.tensor(p, t, {n, m}), g.tensor(p, u, {m2, q});
                   const double kFactors[] = {1, 2, 0, 0.5}, kIntegral[] = {1, 2, 0, -1};
                   // Integral tensors take integral factors (a fractional one is the scalar rules' business).
                   if (is_float(t)) p.scalars = {g.one_of(kFactors), g.one_of(kFactors)};  // beta, alpha
                   else p.scalars = {g.one_of(kIntegral), g.one_of(kIntegral)};
                 }
                 // Rank errors now and then: a 1-d operand where 2-d is needed.
                 if (g.chance(4) && kind != "dot" && !p.views[0].sizes.empty()) {
                   const Shape& s = p.views[0].sizes;
                   const int fewer = g.tensor(p, p.storages[p.views[0].storage].dtype, Shape(s.begin(), s.end() - 1));
                   p.views[0] = p.views[fewer];
                   p.views.pop_back();
                 }
                 return p;
               },
               [kind, rule, op](const Plan& p) {
                 Expect e;
                 check_devices(e, p, {0, 1});
                 std::vector<Host> in;
                 for (size_t i = 0; i < p.views.size(); ++i) in.push_back(host_view(p, static_cast<int>(i)));
                 const Host& a = in[kind == "addmm" ? 1 : 0];
                 const Host& b = in[kind == "addmm" ? 2 : 1];
                 for (const Host& h : in)
                   if (h.dtype != in[0].dtype) e.refuse("promotion", op + ": operands of different dtypes");
                 check_dtype_rule(e, rule, a.dtype, op);
                 const size_t ra = kind == "bmm"   ? 3
                                   : kind == "dot" ? 1
                                                   : 2,
                              rb = kind == "bmm"                     ? 3
                                   : kind == "mm" || kind == "addmm" ? 2
                                                                     : 1;
                 if (a.sizes.size() != ra || b.sizes.size() != rb) {
                   e.refuse("shape", op + ": operand ranks");
                   return e;
                 }
                 if (a.sizes.back() != b.sizes[kind == "bmm" ? 1 : 0]) e.refuse("shape", op + ": inner sizes differ");
                 if (kind == "bmm" && a.sizes[0] != b.sizes[0]) e.refuse("shape", "bmm: batch sizes differ");
                 if (kind == "mm" || kind == "addmm") e.sizes = {a.sizes[0], b.sizes[1]};
                 if (kind == "bmm") e.sizes = {a.sizes[0], a.sizes[1], b.sizes[2]};
                 if (kind == "mv") e.sizes = {a.sizes[0]};
                 if (kind == "addmm") {
                   const auto shape = broadcast_shapes({in[0].sizes, e.sizes});
                   if (!shape || *shape != e.sizes)
                     e.refuse("broadcast", "addmm: bias does not broadcast to the product");
                   if (!is_float(a.dtype) &&
                       (p.scalars[0] != std::trunc(p.scalars[0]) || p.scalars[1] != std::trunc(p.scalars[1])))
                     e.tag("scalar");
                 }
                 e.dtype = a.dtype;
                 e.tolerance_scale = 1 + a.sizes.back();
                 return e;
               },
               [kind](const std::vector<Host>& in, const Plan& p, const Expect& e) {
                 const Host& a = in[kind == "addmm" ? 1 : 0];
                 const Host& b = in[kind == "addmm" ? 2 : 1];
                 const int64_t inner = a.sizes.back();
                 Values out(numel_of(e.sizes));
                 if (kind == "dot") {
                   double s = 0;
                   for (int64_t k = 0; k < inner; ++k) s += a.v[k] * b.v[k];
                   out[0] = s;
                   return out;
                 }
                 const int64_t batches = kind == "bmm" ? a.sizes[0] : 1, rows = a.sizes[a.sizes.size() - 2];
                 const int64_t cols = kind == "mv" ? 1 : b.sizes.back();
                 for (int64_t bi = 0; bi < batches; ++bi)
                   for (int64_t i = 0; i < rows; ++i)
                     for (int64_t j = 0; j < cols; ++j) {
                       double s = 0;
                       for (int64_t k = 0; k < inner; ++k)
                         s += a.v[(bi * rows + i) * inner + k] * b.v[(bi * inner + k) * cols + j];
                       out[(bi * rows + i) * cols + j] = s;
                     }
                 if (kind == "addmm") {
                   const double beta = p.scalars[0], alpha = p.scalars[1];
                   for (size_t k = 0; k < out.size(); ++k)
                     out[k] = alpha * out[k] + (beta == 0 ? 0 : beta * at_broadcast(in[0], e.sizes, k));
                 }
                 if (!is_float(a.dtype))
                   for (double& v : out) v = to_dtype_value(v, a.dtype);
                 return out;
               },
               [kind](const std::vector<Tensor>& in, const Plan& p) {
                 if (kind == "mm") return mm(in[0], in[1]);
                 if (kind == "bmm") return bmm(in[0], in[1]);
                 if (kind == "addmm") return addmm(in[0], in[1], in[2], p.scalars[0], p.scalars[1]);
                 if (kind == "dot") return dot(in[0], in[1]);
                 return mv(in[0], in[1]);
               }});
  }
  add_view_drivers(drivers);
  add_copy_drivers(drivers);
  add_nn_drivers(drivers);
  add_more_nn_drivers(drivers);
  add_along_dim_drivers(drivers);
}

}  // namespace

namespace {

// Whether a view of `target` sizes can be laid on (sizes, strides), checked from the definition rather than
// by PyTorch's run-merging rule (computeStride, which the library follows, so the two are independent): the
// view exists when strides for `target` reach every element's memory offset, in row-major order.
bool view_is_expressible(const Shape& sizes, const Shape& strides, const Shape& target) {
  const int64_t n = numel_of(sizes);
  if (n == 0) return true;  // no element to reach (PyTorch gives contiguous strides)
  auto offset_of = [](int64_t element, const Shape& shape, const Shape& steps) {
    int64_t offset = 0;
    for (size_t d = shape.size(); d-- > 0; element /= shape[d]) offset += element % shape[d] * steps[d];
    return offset;
  };
  std::vector<int64_t> memory(n);
  for (int64_t k = 0; k < n; ++k) memory[k] = offset_of(k, sizes, strides);
  // The only candidate stride of a target dimension: the offset between its first two elements.
  const Shape unit = contiguous_strides(target);
  Shape view(target.size(), 0);
  for (size_t d = 0; d < target.size(); ++d)
    if (target[d] > 1) view[d] = memory[unit[d]] - memory[0];
  for (int64_t k = 0; k < n; ++k)
    if (memory[0] + offset_of(k, target, view) != memory[k]) return false;
  return true;
}

// A view's expected values: x's row-major values read through (sizes, strides over x's logical layout, offset).
Values logical_view(const Host& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  return strided_gather(x, sizes, strides, offset);
}

// A driver for an op whose result is x viewed (or copied) with sizes/strides over x's logical layout that
// the oracle computes; `refusal` is set when the call is invalid.
struct ViewOutcome {
  std::string klass, refusal;
  Shape sizes, strides;
  int64_t offset = 0;
  bool undefined = false;
};

void view_row(Drivers& drivers, OpId id, std::function<void(Gen&, Plan&)> make_args,
              std::function<ViewOutcome(const Host&, const Plan&)> outcome,
              std::function<Tensor(const Tensor&, const Plan&)> call) {
  drivers[id] = Driver{[make_args](Gen& g) {
                         Plan p;
                         g.specials = true;
                         g.tensor(p, g.dtype(), g.shape());
                         make_args(g, p);
                         return p;
                       },
                       [outcome](const Plan& p) {
                         Expect e;
                         const Host x = host_view(p, 0);
                         const ViewOutcome o = outcome(x, p);
                         if (!o.refusal.empty()) e.refuse(o.klass.empty() ? "shape" : o.klass, o.refusal);
                         e.dtype = x.dtype;
                         e.sizes = o.sizes;
                         e.undefined_result = o.undefined;
                         return e;
                       },
                       [outcome](const std::vector<Host>& in, const Plan& p, const Expect&) {
                         const ViewOutcome o = outcome(in[0], p);
                         return logical_view(in[0], o.sizes, o.strides, o.offset);
                       },
                       [call](const std::vector<Tensor>& in, const Plan& p) { return call(in[0], p); }};
}

// Wraps a dim for an op over `rank` dims (0-d tensors take 0 and -1); nullopt when out of range.
std::optional<int64_t> wrap(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) return std::nullopt;
  return dim < 0 ? dim + r : dim;
}

void add_view_drivers(Drivers& drivers) {
  view_row(
      drivers, OpId::view,
      [](Gen& g, Plan& p) {
        const Shape& s = p.views[0].sizes;
        Shape target = s;
        switch (g.pick(5)) {
          case 0: target = g.shape(); break;
          case 1: std::shuffle(target.begin(), target.end(), g.rng); break;
          case 2:
            if (target.size() >= 2) {
              const size_t i = g.pick(target.size() - 1);
              target[i] *= target[i + 1];
              target.erase(target.begin() + i + 1);
            }
            break;
          case 3: target.insert(target.begin() + g.pick(target.size() + 1), 1); break;
          default: target = {numel_of(s)}; break;
        }
        if (!target.empty() && g.chance(25)) target[g.pick(target.size())] = -1;
        p.shape = target;
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        Shape target = p.shape;
        int64_t known = 1, infer = -1;
        for (size_t i = 0; i < target.size(); ++i) {
          if (target[i] == -1) infer = static_cast<int64_t>(i);
          else known *= target[i];
        }
        const int64_t n = numel_of(x.sizes);
        if (infer >= 0) {
          if (known == 0 || n % known != 0) {
            o.refusal = "view: shape " + shape_text(p.shape) + " is invalid for " + std::to_string(n) + " elements";
            return o;
          }
          target[infer] = n / known;
        }
        if (numel_of(target) != n) {
          o.refusal = "view: shape " + shape_text(p.shape) + " is invalid for " + std::to_string(n) + " elements";
          return o;
        }
        if (!view_is_expressible(p.views[0].sizes, p.views[0].strides, target))
          o.refusal = "view: size and stride incompatible";
        o.sizes = target;
        o.strides = contiguous_strides(target);
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.view(p.shape); });

  view_row(
      drivers, OpId::t, [](Gen&, Plan&) {},
      [](const Host& x, const Plan&) {
        ViewOutcome o;
        if (x.sizes.size() > 2) o.refusal = "t() expects a tensor with <= 2 dimensions";
        o.sizes = x.sizes;
        o.strides = contiguous_strides(x.sizes);
        if (x.sizes.size() == 2) std::swap(o.sizes[0], o.sizes[1]), std::swap(o.strides[0], o.strides[1]);
        return o;
      },
      [](const Tensor& x, const Plan&) { return x.t(); });

  view_row(
      drivers, OpId::transpose,
      [](Gen& g, Plan& p) {
        const int64_t r = std::max<int64_t>(1, p.views[0].sizes.size());
        p.ints = {g.pick(2 * r + 1) - r, g.pick(2 * r + 1) - r};
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        const auto a = wrap(p.ints[0], x.sizes.size()), b = wrap(p.ints[1], x.sizes.size());
        o.sizes = x.sizes;
        o.strides = contiguous_strides(x.sizes);
        if (!a || !b) o.refusal = "transpose: dimension out of range", o.klass = "dims";
        else if (!x.sizes.empty()) std::swap(o.sizes[*a], o.sizes[*b]), std::swap(o.strides[*a], o.strides[*b]);
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.transpose(p.ints[0], p.ints[1]); });

  view_row(
      drivers, OpId::permute,
      [](Gen& g, Plan& p) {
        Shape order(p.views[0].sizes.size());
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), g.rng);
        for (int64_t& d : order)
          if (g.chance(20)) d -= static_cast<int64_t>(order.size());
        if (g.chance(8) && !order.empty()) order[0] = order.back();
        if (g.chance(5)) order.push_back(0);
        p.shape = order;
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        const auto dims = p.shape.size() == x.sizes.size() ? wrap_dims(p.shape, x.sizes.size()) : std::nullopt;
        if (!dims || (x.sizes.empty() && !p.shape.empty())) {
          o.refusal = "permute: dims " + shape_text(p.shape) + " are no permutation", o.klass = "dims";
          return o;
        }
        const Shape strides = contiguous_strides(x.sizes);
        for (size_t d : *dims) o.sizes.push_back(x.sizes[d]), o.strides.push_back(strides[d]);
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.permute(p.shape); });

  view_row(
      drivers, OpId::expand,
      [](Gen& g, Plan& p) {
        Shape target;
        const int64_t extra = g.pick(3);
        for (int64_t i = 0; i < extra; ++i) target.push_back(g.chance(5) ? -1 : g.dim_size());
        for (int64_t d : p.views[0].sizes) {
          if (g.chance(20)) target.push_back(-1);
          else if (d == 1) target.push_back(g.dim_size());
          else target.push_back(g.chance(5) ? d + 1 : d);
        }
        p.shape = target;
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        const size_t lead = p.shape.size() - std::min(p.shape.size(), x.sizes.size());
        if (p.shape.size() < x.sizes.size()) {
          o.refusal = "expand: fewer sizes than dimensions";
          return o;
        }
        const Shape strides = contiguous_strides(x.sizes);
        for (size_t i = 0; i < p.shape.size(); ++i) {
          if (i < lead) {
            if (p.shape[i] < 0) o.refusal = "expand: -1 for a new leading dimension";
            o.sizes.push_back(p.shape[i]), o.strides.push_back(0);
            continue;
          }
          const int64_t have = x.sizes[i - lead], want = p.shape[i] == -1 ? have : p.shape[i];
          if (have != want && have != 1)
            o.refusal = "expand: size " + std::to_string(want) + " for a dimension of " + std::to_string(have);
          o.sizes.push_back(want), o.strides.push_back(have == want ? strides[i - lead] : 0);
        }
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.expand(p.shape); });

  view_row(
      drivers, OpId::unsqueeze,
      [](Gen& g, Plan& p) {
        const int64_t r = p.views[0].sizes.size();
        p.ints = {g.pick(2 * r + 5) - r - 2};
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        const int64_t r = x.sizes.size();
        int64_t d = p.ints[0];
        if (d < -r - 1 || d > r) {
          o.refusal = "unsqueeze: dimension out of range", o.klass = "dims";
          return o;
        }
        if (d < 0) d += r + 1;
        o.sizes = x.sizes;
        o.strides = contiguous_strides(x.sizes);
        o.sizes.insert(o.sizes.begin() + d, 1);
        o.strides.insert(o.strides.begin() + d, 1);
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.unsqueeze(p.ints[0]); });

  view_row(
      drivers, OpId::squeeze,
      [](Gen& g, Plan& p) {
        const int64_t r = std::max<int64_t>(1, p.views[0].sizes.size());
        p.ints = {g.pick(2 * r + 1) - r};
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        const auto d = wrap(p.ints[0], x.sizes.size());
        o.sizes = x.sizes;
        o.strides = contiguous_strides(x.sizes);
        if (!d) o.refusal = "squeeze: dimension out of range", o.klass = "dims";
        else if (!x.sizes.empty() && x.sizes[*d] == 1)
          o.sizes.erase(o.sizes.begin() + *d), o.strides.erase(o.strides.begin() + *d);
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.squeeze(p.ints[0]); });

  view_row(
      drivers, OpId::select,
      [](Gen& g, Plan& p) {
        const int64_t r = std::max<int64_t>(1, p.views[0].sizes.size());
        p.ints = {g.pick(2 * r + 1) - r, g.pick(9) - 4};
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        if (x.sizes.empty()) {
          o.refusal = "select() cannot be applied to a 0-dim tensor", o.klass = "dims";
          return o;
        }
        const auto d = wrap(p.ints[0], x.sizes.size());
        if (!d) {
          o.refusal = "select: dimension out of range", o.klass = "dims";
          return o;
        }
        const int64_t size = x.sizes[*d], index = p.ints[1] < 0 ? p.ints[1] + size : p.ints[1];
        if (index < 0 || index >= size) {
          o.refusal = "select: index out of range", o.klass = "index";
          return o;
        }
        const Shape strides = contiguous_strides(x.sizes);
        o.sizes = x.sizes, o.strides = strides;
        o.offset = index * strides[*d];
        o.sizes.erase(o.sizes.begin() + *d), o.strides.erase(o.strides.begin() + *d);
        return o;
      },
      [](const Tensor& x, const Plan& p) { return x.select(p.ints[0], p.ints[1]); });

  // slice(dim, start, end, step): kNone for an absent start or end.
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  view_row(
      drivers, OpId::slice,
      [](Gen& g, Plan& p) {
        const int64_t r = std::max<int64_t>(1, p.views[0].sizes.size());
        const int64_t kSteps[] = {1, 1, 2, 3, 0, -1};
        p.ints = {g.pick(2 * r + 1) - r, g.chance(20) ? kNone : g.pick(13) - 6, g.chance(20) ? kNone : g.pick(13) - 6,
                  g.one_of(kSteps)};
      },
      [](const Host& x, const Plan& p) {
        ViewOutcome o;
        if (x.sizes.empty()) {
          o.refusal = "slice() cannot be applied to a 0-dim tensor", o.klass = "dims";
          return o;
        }
        const auto d = wrap(p.ints[0], x.sizes.size());
        if (!d) {
          o.refusal = "slice: dimension out of range", o.klass = "dims";
          return o;
        }
        const int64_t step = p.ints[3];
        if (step <= 0) {
          o.refusal = "slice step must be positive", o.klass = "index";
          return o;
        }
        const int64_t size = x.sizes[*d];
        auto clamp_index = [size](int64_t i, int64_t fallback) {
          if (i == kNone) return fallback;
          if (i < 0) i += size;
          return std::clamp<int64_t>(i, 0, size);
        };
        const int64_t start = clamp_index(p.ints[1], 0), end = std::max(start, clamp_index(p.ints[2], size));
        const Shape strides = contiguous_strides(x.sizes);
        o.sizes = x.sizes, o.strides = strides;
        o.sizes[*d] = (end - start + step - 1) / step;
        o.strides[*d] *= step;
        o.offset = start * strides[*d];
        return o;
      },
      [](const Tensor& x, const Plan& p) {
        auto opt = [](int64_t i) { return i == kNone ? std::optional<int64_t>() : std::optional<int64_t>(i); };
        return x.slice(p.ints[0], opt(p.ints[1]), opt(p.ints[2]), p.ints[3]);
      });

  // unbind and split: part k of the parts (the count is checked inside the call).
  auto parts_row = [&](OpId id, bool split) {
    view_row(
        drivers, id,
        [split](Gen& g, Plan& p) {
          const int64_t r = std::max<int64_t>(1, p.views[0].sizes.size());
          p.ints = {g.pick(2 * r + 1) - r, g.pick(4), split ? g.pick(5) - (g.chance(10) ? 2 : 0) : 0};
        },
        [split](const Host& x, const Plan& p) {
          ViewOutcome o;
          if (x.sizes.empty()) {
            o.refusal = "unbind/split of a 0-dim tensor", o.klass = "dims";
            return o;
          }
          const auto d = wrap(p.ints[0], x.sizes.size());
          if (!d) {
            o.refusal = "dimension out of range", o.klass = "dims";
            return o;
          }
          const int64_t size = x.sizes[*d], split_size = p.ints[2];
          int64_t count = size, part_size = 1;
          if (split) {
            if (split_size < 0 || (split_size == 0 && size != 0)) {
              o.refusal =
                  "split: split_size " + std::to_string(split_size) + " for a dimension of " + std::to_string(size),
              o.klass = "index";
              return o;
            }
            count = split_size == 0 ? 1 : std::max<int64_t>(1, (size + split_size - 1) / split_size);
            part_size = split_size;
          }
          if (count == 0) {
            o.undefined = true;
            return o;
          }
          const int64_t k = p.ints[1] % count;
          const Shape strides = contiguous_strides(x.sizes);
          o.sizes = x.sizes, o.strides = strides;
          o.offset = k * part_size * strides[*d];
          if (split) o.sizes[*d] = std::min(part_size, size - k * part_size);
          else o.sizes.erase(o.sizes.begin() + *d), o.strides.erase(o.strides.begin() + *d);
          return o;
        },
        [split](const Tensor& x, const Plan& p) {
          const std::vector<Tensor> parts = split ? x.split(p.ints[2], p.ints[0]) : x.unbind(p.ints[0]);
          const int64_t size = x.size(p.ints[0]), split_size = p.ints[2];
          const size_t expected =
              split ? (split_size == 0 ? 1 : std::max<int64_t>(1, (size + split_size - 1) / split_size)) : size;
          if (parts.size() != expected)
            throw std::logic_error("op fuzz: " + std::to_string(parts.size()) + " parts, expected " +
                                   std::to_string(expected));
          return parts.empty() ? Tensor() : parts[p.ints[1] % parts.size()];
        });
  };
  parts_row(OpId::unbind, false);
  parts_row(OpId::split, true);
}

}  // namespace

namespace {

// An input and a mask that broadcast together (mostly): a bool mask, now and then another dtype
// (masked_fill, masked_select).
Plan input_and_mask(Gen& g) {
  Plan p;
  const std::vector<Shape> shapes = g.broadcastable(2, g.chance(6));
  g.tensor(p, g.dtype(), shapes[0]);
  g.tensor(p, g.chance(90) ? ScalarType::bool_ : g.dtype(), shapes[1], g.chance(3));
  return p;
}

// A Python-number argument that may not fit the tensor's dtype (fill_, masked_fill, constant_pad_nd).
double fill_value(Gen& g) {
  const double kOutOfRange[] = {300,
                                -1,
                                1e39,
                                1e6,
                                70000,
                                2.5,
                                0.5,
                                2,
                                3e9,
                                std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::infinity()};
  return g.chance(25) ? g.one_of(kOutOfRange) : g.scalar();
}

// The value a fill of `value` leaves in a tensor of `t` (checked to fit first).
double filled(double value, ScalarType t) { return is_bool(t) ? (value != 0) : to_dtype_value(value, t); }

// x's values at an output position of a tensor whose dims are padded: nullopt where padding.
void add_copy_drivers(Drivers& drivers) {
  // clone, to_dtype, to_device: a copy of x (converted).
  auto copy_like = [&](OpId id, int kind) {
    drivers[id] = Driver{[kind](Gen& g) {
                           Plan p;
                           g.specials = kind != 1;
                           g.tensor(p, g.dtype(), g.shape());
                           p.ints = {static_cast<int64_t>(g.pick(8))};  // to_dtype's target
                           return p;
                         },
                         [kind](const Plan& p) {
                           Expect e;
                           e.dtype = kind == 1 ? kDtypes[p.ints[0]] : p.storages[0].dtype;
                           e.sizes = p.views[0].sizes;
                           return e;
                         },
                         [](const std::vector<Host>& in, const Plan&, const Expect& e) {
                           Values out = in[0].v;
                           for (double& v : out) v = to_dtype_value(v, e.dtype);
                           return out;
                         },
                         [kind](const std::vector<Tensor>& in, const Plan& p) {
                           if (kind == 0) return in[0].clone();
                           if (kind == 1) return in[0].to(kDtypes[p.ints[0]]);
                           const Device d = in[0].device();
                           return in[0].to(d.type == DeviceType::meta ? d : other_device_of(d));
                         }};
  };
  copy_like(OpId::clone, 0);
  copy_like(OpId::to_dtype, 1);
  copy_like(OpId::to_device, 2);

  // dst.copy_(src): src broadcast to dst's shape, converted to dst's dtype, from any device.
  drivers[OpId::copy] =
      Driver{[](Gen& g) {
               Plan p;
               const std::vector<Shape> shapes = g.broadcastable(2, g.chance(8));
               const int dst = g.tensor(p, g.dtype(), shapes[0]);
               if (g.chance(30)) g.alias(p, dst, shapes[1]);
               else g.tensor(p, g.dtype(), shapes[1], g.chance(15));
               p.in_place = true;
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host dst = host_view(p, 0), src = host_view(p, 1);
               const auto shape = broadcast_shapes({dst.sizes, src.sizes});
               if (!shape || *shape != dst.sizes)
                 e.refuse("broadcast", "copy_: source of shape " + shape_text(src.sizes) + " does not broadcast to " +
                                           shape_text(dst.sizes));
               if (p.storages[p.views[1].storage].other_device) e.tag("device");
               if (dst.dtype != src.dtype) e.tag("promotion");
               // copy_ of a tensor onto itself returns at once (is_same); otherwise TensorIterator's overlap checks.
               if (!(p.views[0].sizes == p.views[1].sizes && p.views[0].strides == p.views[1].strides &&
                     p.views[0].offset == p.views[1].offset && shares_storage(p, 0, 1)))
                 check_in_place_overlap(e, p, 0, {1});
               // PyTorch's copy_impl returns for a meta self after the broadcast check, before the overlap checks.
               e.meta_skips_refusal = e.refused_class == "overlap";
               e.written = 0;
               e.dtype = dst.dtype;
               e.sizes = dst.sizes;
               return e;
             },
             [](const std::vector<Host>& in, const Plan&, const Expect& e) {
               Values out(numel_of(e.sizes));
               for (size_t k = 0; k < out.size(); ++k)
                 out[k] = to_dtype_value(at_broadcast(in[1], e.sizes, k), e.dtype);
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) {
               if (!p.in_place) {  // the out-of-place twin: src broadcast and converted
                 Tensor out = empty(in[0].sizes(), TensorOptions{in[0].dtype(), in[0].device()});
                 out.copy_(in[1]);
                 return out;
               }
               in[0].copy_(in[1]);
               return in[0];
             }};

  // cat and stack: 1-3 tensors of one shape but for the joined dim (cat) or of one shape (stack).
  auto join_row = [&](OpId id, bool stacking) {
    drivers[id] = Driver{
        [stacking](Gen& g) {
          Plan p;
          const Shape base = g.shape(3);
          const int64_t count = 1 + g.pick(3), rank = static_cast<int64_t>(base.size());
          const int64_t dim = stacking ? g.pick(2 * rank + 3) - rank - 1 : (rank ? g.pick(2 * rank + 1) - rank : 0);
          const ScalarType t = g.dtype();
          for (int64_t i = 0; i < count; ++i) {
            Shape s = base;
            if (!stacking && rank > 0) {
              const auto w = wrap(dim, rank);
              if (w) s[*w] = g.dim_size();
            }
            if (g.chance(5) && !s.empty()) s[g.pick(s.size())] += 1;  // mismatched
            if (!stacking && g.chance(5)) s = {0};                    // legacy empty 1-d tensor
            g.tensor(p, g.dtype_like(t, 12), s, i > 0 && g.chance(3));
          }
          p.ints = {dim};
          return p;
        },
        [stacking](const Plan& p) {
          Expect e;
          std::vector<int> all(p.views.size());
          std::iota(all.begin(), all.end(), 0);
          check_devices(e, p, all);
          std::vector<Operand> operands;
          std::optional<Shape> shape;
          for (size_t i = 0; i < p.views.size(); ++i) {
            const Shape& s = p.views[i].sizes;
            operands.push_back({p.storages[p.views[i].storage].dtype, false});
            if (operands.back().dtype != operands[0].dtype) e.tag("promotion");
            if (stacking) {
              if (shape && *shape != s) e.refuse("shape", "stack expects each tensor to be equal size");
              shape = s;
              continue;
            }
            if (s.empty()) {
              e.refuse("shape", "zero-dimensional tensor cannot be concatenated");
              continue;
            }
            if (s == Shape{0}) {
              e.tag("legacy_empty");
              continue;  // skipped, as PyTorch does
            }
            const auto w = wrap(p.ints[0], s.size());
            if (!w) {
              e.refuse("dims", "cat: dimension out of range");
              continue;
            }
            if (!shape) {
              shape = s;
              continue;
            }
            if (shape->size() != s.size()) {
              e.refuse("shape", "cat: tensors of different ranks");
              continue;
            }
            for (size_t d = 0; d < s.size(); ++d)
              if (static_cast<int64_t>(d) != *w && (*shape)[d] != s[d])
                e.refuse("shape", "cat: sizes differ outside the joined dim");
            (*shape)[*w] += s[*w];
          }
          if (stacking && shape) {
            const int64_t r = static_cast<int64_t>(shape->size()), d = p.ints[0];
            if (d < -r - 1 || d > r) e.refuse("dims", "stack: dimension out of range");
            else shape->insert(shape->begin() + (d < 0 ? d + r + 1 : d), static_cast<int64_t>(p.views.size()));
          }
          if (!shape) shape = Shape{0};  // every tensor a legacy empty one
          // The result type over all of them (cat and stack promote).
          ScalarType t = operands[0].dtype;
          for (const Operand& o : operands) t = promote(t, o.dtype);
          e.dtype = t;
          e.sizes = *shape;
          return e;
        },
        [stacking](const std::vector<Host>& in, const Plan& p, const Expect& e) {
          // Row-major over (outer, joined, inner): take each input's block in turn.
          Values out;
          // An empty result has no values (and with only legacy empty [0] inputs PyTorch leaves the dim
          // unwrapped, legacy_cat_wrap_dim, so there is no dim to wrap here either).
          if (numel_of(e.sizes) == 0) return out;
          const int64_t r = stacking ? static_cast<int64_t>(e.sizes.size()) : 0;
          size_t rank = 0;
          for (const Host& h : in)
            if (h.sizes != Shape{0} || stacking) rank = h.sizes.size();
          const int64_t dim = stacking ? (p.ints[0] < 0 ? p.ints[0] + r : p.ints[0]) : *wrap(p.ints[0], rank);
          int64_t outer = 1;
          for (int64_t d = 0; d < dim; ++d) outer *= e.sizes[d];
          for (int64_t o = 0; o < outer; ++o)
            for (const Host& h : in) {
              if (!stacking && h.sizes == Shape{0} && rank != 1) continue;
              const int64_t block = outer ? static_cast<int64_t>(h.v.size()) / std::max<int64_t>(outer, 1) : 0;
              for (int64_t k = 0; k < block; ++k) out.push_back(h.v[o * block + k]);
            }
          return out;
        },
        [stacking](const std::vector<Tensor>& in, const Plan& p) {
          return stacking ? stack(in, p.ints[0]) : cat(in, p.ints[0]);
        }};
  };
  join_row(OpId::cat, false);
  join_row(OpId::stack, true);

  drivers[OpId::constant_pad_nd] = Driver{
      [](Gen& g) {
        Plan p;
        g.tensor(p, g.dtype(), g.shape(3));
        const int64_t pairs = g.pick(p.views[0].sizes.size() + 1) + (g.chance(5) ? 1 : 0);
        for (int64_t i = 0; i < 2 * pairs; ++i) p.shape.push_back(g.pick(5) - 2);
        if (g.chance(5)) p.shape.push_back(1);  // odd length
        p.scalars = {fill_value(g)};
        return p;
      },
      [](const Plan& p) {
        Expect e;
        const Host x = host_view(p, 0);
        if (p.shape.size() % 2) e.refuse("shape", "pad length must be even");
        if (p.shape.size() > 2 * x.sizes.size()) e.refuse("shape", "pad longer than twice the dims");
        e.sizes = x.sizes;
        bool grows = false;
        for (size_t i = 0; i + 1 < p.shape.size() && i / 2 < x.sizes.size(); i += 2) {
          int64_t& d = e.sizes[x.sizes.size() - 1 - i / 2];
          // Negative padding narrows first (before, then after), and each narrowing needs a size >= 0.
          if (p.shape[i] < 0 && d + p.shape[i] < 0) e.refuse("shape", "cropping more than the dimension holds");
          if (p.shape[i + 1] < 0 && d + std::min<int64_t>(p.shape[i], 0) + p.shape[i + 1] < 0)
            e.refuse("shape", "cropping more than the dimension holds");
          d += p.shape[i] + p.shape[i + 1];
          grows = grows || p.shape[i] > 0 || p.shape[i + 1] > 0;
          if (d < 0) e.refuse("shape", "padding gives a negative size");
        }
        if (grows) {
          e.tag("scalar");
          if (!fits(p.scalars[0], x.dtype)) e.refuse("scalar", "pad value does not fit " + name(x.dtype));
        }
        e.dtype = x.dtype;
        return e;
      },
      [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
        const Host& x = in[0];
        const size_t r = x.sizes.size();
        Values out(numel_of(e.sizes));
        Shape index(r, 0);
        const Shape strides = contiguous_strides(x.sizes);
        for (size_t k = 0; k < out.size(); ++k) {
          int64_t at = 0;
          bool inside = true;
          for (size_t d = 0; d < r; ++d) {
            const size_t pair = r - 1 - d;
            const int64_t before = 2 * pair < p.shape.size() ? p.shape[2 * pair] : 0;
            const int64_t i = index[d] - before;
            if (i < 0 || i >= x.sizes[d]) inside = false;
            else at += i * strides[d];
          }
          out[k] = inside ? x.v[at] : filled(p.scalars[0], x.dtype);
          for (size_t d = r; d-- > 0;) {
            if (++index[d] < e.sizes[d]) break;
            index[d] = 0;
          }
        }
        return out;
      },
      [](const std::vector<Tensor>& in, const Plan& p) { return constant_pad_nd(in[0], p.shape, p.scalars[0]); }};

  // fill_ and zero_: every element of x, whatever its layout (fill_ is exempt from the overlap rules).
  auto fill_row = [&](OpId id, bool zero) {
    drivers[id] = Driver{
        [zero](Gen& g) {
          Plan p;
          g.tensor(p, g.dtype(), g.shape());
          p.scalars = {zero ? 0.0 : fill_value(g)};
          p.in_place = true;
          return p;
        },
        [](const Plan& p) {
          Expect e;
          const ScalarType t = p.storages[0].dtype;
          if (p.scalars[0] != 0) e.tag("scalar");
          if (may_overlap_itself(p.views[0]) || std::count(p.views[0].strides.begin(), p.views[0].strides.end(), 0))
            e.tag("overlap");  // fill_ is exempt from the overlap rules
          if (!fits(p.scalars[0], t))
            e.refuse("scalar", "value cannot be converted to " + name(t) + " without overflow");
          e.dtype = t;
          e.sizes = p.views[0].sizes;
          e.written = 0;
          return e;
        },
        [](const std::vector<Host>& in, const Plan& p, const Expect&) {
          return Values(in[0].v.size(), filled(p.scalars[0], in[0].dtype));
        },
        [zero](const std::vector<Tensor>& in, const Plan& p) {
          if (!p.in_place) return full_like(in[0], p.scalars[0]);
          if (zero) in[0].zero_();
          else in[0].fill_(p.scalars[0]);
          return in[0];
        }};
  };
  fill_row(OpId::fill, false);
  fill_row(OpId::zero, true);
}

}  // namespace

namespace {

ScalarType index_dtype(Gen& g, int other_percent) {
  if (g.chance(other_percent)) return g.dtype();
  return g.chance(70) ? ScalarType::int64 : ScalarType::int32;
}

// Index values in [0, size), sometimes one out of range (negative or too large).
void index_values(Gen& g, StorageSpec& s, int64_t size) {
  for (double& v : s.values) v = size > 0 ? static_cast<double>(g.pick(size)) : 0;
  if (!s.values.empty() && g.chance(8))
    s.values[g.pick(s.values.size())] = g.chance(50) ? -1 : static_cast<double>(size);
  if (s.dtype == ScalarType::bool_ || s.dtype == ScalarType::uint8)
    for (double& v : s.values) v = std::fabs(v) > 1 && s.dtype == ScalarType::bool_ ? 1 : std::fabs(v);
}

bool indices_in_range(const Host& index, int64_t size) {
  for (double v : index.v)
    if (v < 0 || v >= size) return false;
  return true;
}

Values softmax_ref(const Host& x, int64_t dim, bool log) {
  Values out(x.v.size());
  const int64_t r = static_cast<int64_t>(x.sizes.size());
  if (x.v.empty()) return out;
  if (r == 0) {
    out = {log ? 0.0 : 1.0};
    if (std::isnan(x.v[0]) || std::isinf(x.v[0])) out = {std::numeric_limits<double>::quiet_NaN()};
    return out;
  }
  const int64_t size = x.sizes[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < r; ++d) inner *= x.sizes[d];
  const int64_t outer = size ? static_cast<int64_t>(x.v.size()) / (size * inner) : 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < size; ++k) m = std::max(m, x.v[(o * size + k) * inner + i]);
      for (int64_t k = 0; k < size; ++k) s += std::exp(x.v[(o * size + k) * inner + i] - m);
      for (int64_t k = 0; k < size; ++k) {
        const double v = x.v[(o * size + k) * inner + i] - m;
        out[(o * size + k) * inner + i] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  return out;
}

void add_nn_drivers(Drivers& drivers) {
  drivers[OpId::index_select] =
      Driver{[](Gen& g) {
               Plan p;
               Shape s = g.shape(3);
               if (s.empty()) s = {g.dim_size()};
               g.tensor(p, g.dtype(), s);
               const int64_t r = s.size(), dim = g.pick(2 * r + 1) - r;
               const int i = g.contiguous(p, index_dtype(g, 10), {g.dim_size()});
               const auto w = wrap(dim, r);
               index_values(g, p.storages[p.views[i].storage], w ? s[*w] : 1);
               p.ints = {dim};
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host x = host_view(p, 0), index = host_view(p, 1);
               if (index.dtype != ScalarType::int64 && index.dtype != ScalarType::int32)
                 e.refuse("dtype", "index_select: index must be int64 or int32");
               const auto d = wrap(p.ints[0], x.sizes.size());
               if (!d) return e.refuse("dims", "index_select: dimension out of range");
               if (!indices_in_range(index, x.sizes[*d])) e.refuse("index", "index_select: index out of range");
               e.dtype = x.dtype;
               e.sizes = x.sizes;
               e.sizes[*d] = numel_of(index.sizes);
               return e;
             },
             [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
               const int64_t d = *wrap(p.ints[0], in[0].sizes.size());
               Values out(numel_of(e.sizes));
               const Shape xs = contiguous_strides(in[0].sizes), os = contiguous_strides(e.sizes);
               for (size_t k = 0; k < out.size(); ++k) {
                 int64_t rest = k, at = 0;
                 for (size_t j = 0; j < e.sizes.size(); ++j) {
                   int64_t c = rest / os[j];
                   rest %= os[j];
                   if (static_cast<int64_t>(j) == d) c = static_cast<int64_t>(in[1].v[c]);
                   at += c * xs[j];
                 }
                 out[k] = in[0].v[at];
               }
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) { return index_select(in[0], p.ints[0], in[1]); }};

  drivers[OpId::gather] =
      Driver{[](Gen& g) {
               Plan p;
               Shape s = g.shape(3);
               if (s.empty()) s = {1 + g.pick(3)};
               g.tensor(p, g.dtype(), s);
               const int64_t r = s.size(), dim = g.pick(2 * r + 1) - r;
               Shape is = s;
               for (int64_t& v : is) v = g.chance(10) ? v + 1 : g.pick(v + 1);
               if (g.chance(5)) is.push_back(1);
               const auto w = wrap(dim, r);
               if (w) is[*w] = g.dim_size();
               const int i = g.contiguous(p, index_dtype(g, 10), is);
               index_values(g, p.storages[p.views[i].storage], w ? s[*w] : 1);
               p.ints = {dim};
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host x = host_view(p, 0), index = host_view(p, 1);
               // PyTorch 2.11 takes int32 indices too (probed).
               if (index.dtype != ScalarType::int64 && index.dtype != ScalarType::int32)
                 e.refuse("dtype", "gather: index must be int64 or int32");
               const auto d = wrap(p.ints[0], x.sizes.size());
               if (!d) return e.refuse("dims", "gather: dimension out of range");
               if (index.sizes.size() != x.sizes.size())
                 return e.refuse("shape", "gather: index and input ranks differ");
               for (size_t j = 0; j < x.sizes.size(); ++j)
                 if (static_cast<int64_t>(j) != *d && index.sizes[j] > x.sizes[j])
                   e.refuse("shape", "gather: index larger than input");
               if (!indices_in_range(index, x.sizes[*d])) e.refuse("index", "gather: index out of range");
               e.dtype = x.dtype;
               e.sizes = index.sizes;
               return e;
             },
             [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
               const int64_t d = *wrap(p.ints[0], in[0].sizes.size());
               Values out(numel_of(e.sizes));
               const Shape xs = contiguous_strides(in[0].sizes), os = contiguous_strides(e.sizes);
               for (size_t k = 0; k < out.size(); ++k) {
                 int64_t rest = k, at = 0;
                 for (size_t j = 0; j < e.sizes.size(); ++j) {
                   int64_t c = rest / os[j];
                   rest %= os[j];
                   if (static_cast<int64_t>(j) == d) c = static_cast<int64_t>(in[1].v[k]);
                   at += c * xs[j];
                 }
                 out[k] = in[0].v[at];
               }
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) { return gather(in[0], p.ints[0], in[1]); }};

  drivers[OpId::embedding] = Driver{[](Gen& g) {
                                      Plan p;
                                      const int64_t n = 1 + g.pick(5), dim = g.dim_size();
                                      g.tensor(p, g.dtype(), g.chance(5) ? Shape{n} : Shape{n, dim});
                                      const int i = g.contiguous(p, index_dtype(g, 8), g.shape(2));
                                      index_values(g, p.storages[p.views[i].storage], n);
                                      return p;
                                    },
                                    [](const Plan& p) {
                                      Expect e;
                                      const Host w = host_view(p, 0), index = host_view(p, 1);
                                      if (w.sizes.size() != 2)
                                        return e.refuse("shape", "embedding: weight must be 2-D");
                                      if (index.dtype != ScalarType::int64 && index.dtype != ScalarType::int32)
                                        e.refuse("dtype", "embedding: indices must be int64 or int32");
                                      if (!indices_in_range(index, w.sizes[0]))
                                        e.refuse("index", "embedding: index out of range");
                                      e.dtype = w.dtype;
                                      e.sizes = index.sizes;
                                      e.sizes.push_back(w.sizes[1]);
                                      return e;
                                    },
                                    [](const std::vector<Host>& in, const Plan&, const Expect&) {
                                      Values out;
                                      const int64_t dim = in[0].sizes[1];
                                      for (double i : in[1].v)
                                        for (int64_t j = 0; j < dim; ++j)
                                          out.push_back(in[0].v[static_cast<int64_t>(i) * dim + j]);
                                      return out;
                                    },
                                    [](const std::vector<Tensor>& in, const Plan&) { return embedding(in[0], in[1]); }};

  for (const bool log : {false, true}) {
    const OpId id = log ? OpId::log_softmax : OpId::softmax;
    drivers[id] =
        Driver{[](Gen& g) {
                 Plan p;
                 g.specials = g.chance(20);
                 g.tensor(p, g.dtype_like(g.float_dtype(), 15), g.shape());
                 const int64_t r = std::max<int64_t>(1, p.views[0].sizes.size());
                 p.ints = {g.pick(2 * r + 1) - r};
                 return p;
               },
               [id](const Plan& p) {
                 Expect e;
                 const Host x = host_view(p, 0);
                 check_dtype_rule(e, op_info(id).dtypes, x.dtype, std::string(op_name(id)));
                 if (!wrap(p.ints[0], x.sizes.size())) e.refuse("dims", "softmax: dimension out of range");
                 e.dtype = x.dtype;
                 e.sizes = x.sizes;
                 e.tolerance_scale = 4;
                 return e;
               },
               [log](const std::vector<Host>& in, const Plan& p, const Expect&) {
                 return softmax_ref(in[0], *wrap(p.ints[0], in[0].sizes.size()) * (in[0].sizes.empty() ? 0 : 1), log);
               },
               [log](const std::vector<Tensor>& in, const Plan& p) {
                 return log ? log_softmax(in[0], p.ints[0]) : softmax(in[0], p.ints[0]);
               }};
  }

  drivers[OpId::masked_fill] = Driver{[](Gen& g) {
                                        Plan p = input_and_mask(g);
                                        p.scalars = {fill_value(g)};
                                        p.in_place = g.chance(35);
                                        return p;
                                      },
                                      [](const Plan& p) {
                                        Expect e;
                                        check_devices(e, p, {0, 1});
                                        const Host x = host_view(p, 0), mask = host_view(p, 1);
                                        if (!is_bool(mask.dtype))
                                          e.refuse("dtype", "masked_fill only supports boolean masks");
                                        const auto shape = broadcast_shapes({x.sizes, mask.sizes});
                                        if (!shape) e.refuse("broadcast", "mask does not broadcast");
                                        if (p.in_place && shape && *shape != x.sizes)
                                          e.refuse("broadcast", "mask does not broadcast to self");
                                        e.tag("scalar");
                                        if (!fits(p.scalars[0], x.dtype))
                                          e.refuse("scalar", "value cannot be converted to " + name(x.dtype));
                                        e.dtype = x.dtype;
                                        e.sizes = p.in_place ? x.sizes : shape.value_or(Shape{});
                                        if (p.in_place) {
                                          e.written = 0;
                                          // masked_fill_ only warns on an expanded self (deprecated), so its values are
                                          // the kernel's.
                                          if (may_overlap_itself(p.views[0])) e.tag("overlap"), e.values_known = false;
                                        }
                                        return e;
                                      },
                                      [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
                                        Values out(numel_of(e.sizes));
                                        for (size_t k = 0; k < out.size(); ++k)
                                          out[k] = at_broadcast(in[1], e.sizes, k) != 0
                                                       ? filled(p.scalars[0], in[0].dtype)
                                                       : at_broadcast(in[0], e.sizes, k);
                                        return out;
                                      },
                                      [](const std::vector<Tensor>& in, const Plan& p) {
                                        if (!p.in_place) return masked_fill(in[0], in[1], p.scalars[0]);
                                        in[0].masked_fill_(in[1], p.scalars[0]);
                                        return in[0];
                                      }};

  // masked_select(x, mask): the broadcast elements where mask is true, row-major, as 1-d. Its size depends on
  // the mask's values, so meta refuses it (data_dependent_rows below: run on cpu and sim only).
  drivers[OpId::masked_select] =
      Driver{[](Gen& g) { return input_and_mask(g); },
             [](const Plan& p) {
               Expect e;
               check_devices(e, p, {0, 1});
               const Host x = host_view(p, 0), mask = host_view(p, 1);
               if (!is_bool(mask.dtype)) e.refuse("dtype", "masked_select: expected BoolTensor for mask");
               const auto shape = broadcast_shapes({x.sizes, mask.sizes});
               if (!shape) e.refuse("broadcast", "mask does not broadcast");
               e.dtype = x.dtype;
               int64_t count = 0;
               if (shape)
                 for (int64_t k = 0; k < numel_of(*shape); ++k) count += at_broadcast(mask, *shape, k) != 0 ? 1 : 0;
               e.sizes = {count};
               return e;
             },
             [](const std::vector<Host>& in, const Plan&, const Expect&) {
               Values out;
               const Shape shape = broadcast_shapes({in[0].sizes, in[1].sizes}).value_or(Shape{});
               for (int64_t k = 0; k < numel_of(shape); ++k)
                 if (at_broadcast(in[1], shape, k) != 0) out.push_back(at_broadcast(in[0], shape, k));
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan&) { return masked_select(in[0], in[1]); }};

  // clamp(x, min?, max?): ints[0] says which bounds are given (bit 0: min, bit 1: max; none is refused).
  drivers[OpId::clamp] =
      Driver{[](Gen& g) {
               Plan p;
               g.specials = true;
               g.tensor(p, g.dtype(), g.shape());
               p.scalars = {g.scalar(), g.scalar()};
               if (g.chance(5)) p.scalars[g.pick(2)] = std::numeric_limits<double>::quiet_NaN();
               p.ints = {g.chance(5) ? 0 : 1 + g.pick(3)};
               p.in_place = g.chance(35);
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host x = host_view(p, 0);
               const int64_t which = p.ints[0];
               if (which == 0) e.refuse("scalar", "clamp: at least one of min and max must be given");
               if (is_bool(x.dtype)) e.refuse("dtype", "clamp of a bool tensor");
               for (int b = 0; b < 2; ++b) {
                 const double s = p.scalars[b];
                 if ((which >> b & 1) && !is_float(x.dtype) && !(std::isfinite(s) && s == std::trunc(s)))
                   e.refuse("intarith", "an integer tensor clamped to a fractional bound (bytegrad does not promote)");
                 if ((which >> b & 1) && !fits(s, x.dtype))  // the kernel's Scalar::to, checked
                   e.refuse("scalar", "clamp: the bound cannot be converted to the tensor's dtype without overflow");
               }
               e.tag("scalar");
               e.dtype = x.dtype;
               e.sizes = x.sizes;
               if (p.in_place) {
                 e.written = 0;
                 check_in_place_overlap(e, p, 0, {});
               }
               return e;
             },
             [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
               Values out;
               for (double v : in[0].v) {
                 if (p.ints[0] & 1) v = binary_ref("maximum", v, p.scalars[0], 1, e.dtype);
                 if (p.ints[0] & 2) v = binary_ref("minimum", v, p.scalars[1], 1, e.dtype);
                 out.push_back(is_float(e.dtype) ? v : to_dtype_value(v, e.dtype));
               }
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) {
               const std::optional<double> min = (p.ints[0] & 1) ? std::optional<double>(p.scalars[0]) : std::nullopt;
               const std::optional<double> max = (p.ints[0] & 2) ? std::optional<double>(p.scalars[1]) : std::nullopt;
               if (!p.in_place) return clamp(in[0], min, max);
               in[0].clamp_(min, max);
               return in[0];
             }};

  drivers[OpId::where] = Driver{[](Gen& g) {
                                  Plan p;
                                  g.specials = true;
                                  const std::vector<Shape> shapes = g.broadcastable(3, g.chance(6));
                                  g.tensor(p, g.chance(90) ? ScalarType::bool_ : g.dtype(), shapes[0]);
                                  const ScalarType t = g.dtype();
                                  g.tensor(p, t, shapes[1], g.chance(3));
                                  g.tensor(p, g.dtype_like(t, 30), shapes[2]);
                                  return p;
                                },
                                [](const Plan& p) {
                                  Expect e;
                                  check_devices(e, p, {0, 1, 2});
                                  const Host c = host_view(p, 0), a = host_view(p, 1), b = host_view(p, 2);
                                  if (!is_bool(c.dtype))
                                    e.refuse("dtype", "where expected condition to be a boolean tensor");
                                  const auto shape = broadcast_shapes({c.sizes, a.sizes, b.sizes});
                                  if (!shape) e.refuse("broadcast", "where: shapes do not broadcast");
                                  if (a.dtype != b.dtype) e.tag("promotion");
                                  e.dtype = result_type({{a.dtype, a.sizes.empty()}, {b.dtype, b.sizes.empty()}});
                                  e.sizes = shape.value_or(Shape{});
                                  return e;
                                },
                                [](const std::vector<Host>& in, const Plan&, const Expect& e) {
                                  Values out(numel_of(e.sizes));
                                  for (size_t k = 0; k < out.size(); ++k)
                                    out[k] = at_broadcast(in[0], e.sizes, k) != 0 ? at_broadcast(in[1], e.sizes, k)
                                                                                  : at_broadcast(in[2], e.sizes, k);
                                  return out;
                                },
                                [](const std::vector<Tensor>& in, const Plan&) { return where(in[0], in[1], in[2]); }};

  drivers[OpId::dropout] =
      Driver{[](Gen& g) {
               Plan p;
               g.tensor(p, g.dtype_like(g.float_dtype(), 15), g.shape());
               const double kP[] = {0, 0.5, 0.25, 1, 0.5, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()};
               p.scalars = {g.one_of(kP)};
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host x = host_view(p, 0);
               const double prob = p.scalars[0];
               if (!(prob >= 0 && prob <= 1)) e.refuse("scalar", "dropout probability has to be between 0 and 1");
               // PyTorch returns the input for p == 0 and multiplies by 0 for p == 1 whatever its dtype; only a
               // real draw (0 < p < 1) needs a floating tensor.
               if (prob > 0 && prob < 1 && !x.v.empty()) check_dtype_rule(e, DtypeRule::floating, x.dtype, "dropout");
               e.dtype = x.dtype;
               e.sizes = x.sizes;
               e.custom_check = [](const Values& got, const std::vector<Host>& in, const Plan& plan) -> std::string {
                 const double prob = plan.scalars[0];
                 if (got.size() != in[0].v.size()) return "wrong number of values";
                 for (size_t k = 0; k < got.size(); ++k) {
                   const double kept = prob == 1 ? 0 : in[0].v[k] / (1 - prob);
                   const double tol = tolerance(in[0].dtype) * (1 + std::fabs(kept));
                   if (got[k] != 0 && std::fabs(got[k] - kept) > tol)
                     return "value " + std::to_string(k) + " is " + std::to_string(got[k]) + ", neither 0 nor " +
                            std::to_string(kept);
                 }
                 return "";
               };
               return e;
             },
             nullptr, [](const std::vector<Tensor>& in, const Plan& p) { return dropout(in[0], p.scalars[0]); }};
}

}  // namespace

namespace {

// Calls f(first, step, length) for each slice along dim d of a row-major tensor of `sizes` (0-d: one of 1).
template <typename F>
void for_each_slice(const Shape& sizes, int64_t d, F&& f) {
  if (sizes.empty()) return f(int64_t{0}, int64_t{1}, int64_t{1});
  const Shape strides = contiguous_strides(sizes);
  const int64_t length = sizes[static_cast<size_t>(d)], step = strides[static_cast<size_t>(d)];
  const int64_t total = numel_of(sizes);
  if (length == 0) return;
  for (int64_t k = 0; k < total; ++k)
    if ((k / step) % length == 0) f(k, step, length);
}

// sort's order over doubles: NaN above every number; stable.
std::vector<int64_t> sorted_positions(const Values& v, int64_t first, int64_t step, int64_t length, bool descending) {
  std::vector<int64_t> order(static_cast<size_t>(length));
  for (int64_t j = 0; j < length; ++j) order[static_cast<size_t>(j)] = j;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double x = v[first + a * step], y = v[first + b * step];
    if (descending) return std::isnan(x) ? !std::isnan(y) : (!std::isnan(y) && x > y);
    return std::isnan(y) ? !std::isnan(x) : (!std::isnan(x) && x < y);
  });
  return order;
}

// cumsum, flip, sort, topk: one tensor and a dimension (topk: k too).
void add_along_dim_drivers(Drivers& drivers) {
  const auto plan_with_dim = [](Gen& g, ScalarType t) {
    Plan p;
    const Shape s = g.shape(3);
    g.tensor(p, t, s);
    const int64_t r = std::max<int64_t>(static_cast<int64_t>(s.size()), 1);
    p.ints = {g.pick(2 * r + 1) - r, static_cast<int64_t>(g.pick(2))};  // dim (sometimes out of range), a flag
    return p;
  };
  const auto expect_same_shape = [](const Plan& p, const char* op, DtypeRule rule) {
    Expect e;
    const Host x = host_view(p, 0);
    check_dtype_rule(e, rule, x.dtype, op);
    if (!wrap(p.ints[0], static_cast<int64_t>(x.sizes.size())))
      e.refuse("dims", std::string(op) + ": dimension out of range");
    e.dtype = x.dtype;
    e.sizes = x.sizes;
    return e;
  };
  drivers[OpId::cumsum] = Driver{[plan_with_dim](Gen& g) { return plan_with_dim(g, g.dtype()); },
                                 [expect_same_shape](const Plan& p) {
                                   Expect e = expect_same_shape(p, "cumsum", DtypeRule::any);
                                   if (!is_floating_point(e.dtype))
                                     e.dtype = ScalarType::int64;  // integers and bool sum in int64
                                   e.tolerance_scale = 4;
                                   return e;
                                 },
                                 [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
                                   Values out(in[0].v.size());
                                   const int64_t d = *wrap(p.ints[0], static_cast<int64_t>(e.sizes.size()));
                                   for_each_slice(e.sizes, d, [&](int64_t first, int64_t step, int64_t length) {
                                     double running = 0;
                                     for (int64_t j = 0; j < length; ++j)
                                       out[first + j * step] = running += in[0].v[first + j * step];
                                   });
                                   return out;
                                 },
                                 [](const std::vector<Tensor>& in, const Plan& p) { return cumsum(in[0], p.ints[0]); }};
  drivers[OpId::flip] =
      Driver{[plan_with_dim](Gen& g) { return plan_with_dim(g, g.dtype()); },
             [expect_same_shape](const Plan& p) { return expect_same_shape(p, "flip", DtypeRule::any); },
             [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
               Values out(in[0].v.size());
               const int64_t d = *wrap(p.ints[0], static_cast<int64_t>(e.sizes.size()));
               for_each_slice(e.sizes, d, [&](int64_t first, int64_t step, int64_t length) {
                 for (int64_t j = 0; j < length; ++j) out[first + j * step] = in[0].v[first + (length - 1 - j) * step];
               });
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) { return flip(in[0], p.ints[0]); }};
  drivers[OpId::sort] =
      Driver{[plan_with_dim](Gen& g) { return plan_with_dim(g, g.dtype()); },
             [expect_same_shape](const Plan& p) { return expect_same_shape(p, "sort", DtypeRule::not_bool); },
             [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
               Values out(in[0].v.size());
               const int64_t d = *wrap(p.ints[0], static_cast<int64_t>(e.sizes.size()));
               for_each_slice(e.sizes, d, [&](int64_t first, int64_t step, int64_t length) {
                 const std::vector<int64_t> order = sorted_positions(in[0].v, first, step, length, p.ints[1] == 1);
                 for (int64_t j = 0; j < length; ++j) out[first + j * step] = in[0].v[first + order[j] * step];
               });
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) { return sort(in[0], p.ints[0], p.ints[1] == 1).first; }};
  drivers[OpId::topk] =
      Driver{[plan_with_dim](Gen& g) {
               Plan p = plan_with_dim(g, g.dtype());
               const Shape& s = p.views[0].sizes;
               const auto d = wrap(p.ints[0], static_cast<int64_t>(s.size()));
               const int64_t length = !d || s.empty() ? 1 : s[static_cast<size_t>(*d)];
               p.ints.push_back(g.chance(10) ? length + 1 : g.pick(length + 1));  // k, sometimes too large
               return p;
             },
             [expect_same_shape](const Plan& p) {
               Expect e = expect_same_shape(p, "topk", DtypeRule::not_bool);
               if (!e.valid) return e;
               const int64_t d = *wrap(p.ints[0], static_cast<int64_t>(e.sizes.size()));
               const int64_t length = e.sizes.empty() ? 1 : e.sizes[static_cast<size_t>(d)];
               if (p.ints[2] > length) return e.refuse("k", "topk: k out of range");
               if (!e.sizes.empty()) e.sizes[static_cast<size_t>(d)] = p.ints[2];
               // A 0-d input keeps its one element with k = 0, which PyTorch's kernel never writes.
               if (e.sizes.empty() && p.ints[2] == 0) e.values_known = false;
               return e;
             },
             [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
               Values out(static_cast<size_t>(numel_of(e.sizes)));
               const Host& x = in[0];
               const int64_t d = *wrap(p.ints[0], static_cast<int64_t>(x.sizes.size()));
               const int64_t k = p.ints[2];
               for_each_slice(x.sizes, d, [&](int64_t first, int64_t step, int64_t length) {
                 const std::vector<int64_t> order = sorted_positions(x.v, first, step, length, p.ints[1] == 1);
                 // the slice's position in the output: the same coordinates with dim's size k
                 const int64_t outer = x.sizes.empty() ? 0 : first / (step * length), inner = first % step;
                 const int64_t out_first = x.sizes.empty() ? 0 : outer * step * k + inner;
                 for (int64_t j = 0; j < k; ++j) out[out_first + j * step] = x.v[first + order[j] * step];
               });
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) {
               return topk(in[0], p.ints[2], p.ints[0], p.ints[1] == 1).first;
             }};
}

void add_more_nn_drivers(Drivers& drivers) {
  drivers[OpId::native_layer_norm] = Driver{
      [](Gen& g) {
        Plan p;
        Shape s = g.shape(3);
        if (s.empty()) s = {1 + g.pick(4)};
        const ScalarType t = g.dtype_like(g.float_dtype(), 10);
        g.tensor(p, t, s);
        const size_t k = 1 + g.pick(s.size());
        p.shape = Shape(s.end() - k, s.end());
        if (g.chance(6)) p.shape[0] += 1;
        p.ints = {g.chance(60), g.chance(60)};  // weight, bias given
        for (int i = 0; i < 2; ++i)
          if (p.ints[i]) g.tensor(p, t, g.chance(5) ? Shape{p.shape.back() + 1} : p.shape);
        return p;
      },
      [](const Plan& p) {
        Expect e;
        const Host x = host_view(p, 0);
        check_dtype_rule(e, DtypeRule::floating, x.dtype, "native_layer_norm");
        const Shape& n = p.shape;
        if (n.size() > x.sizes.size() || !std::equal(n.begin(), n.end(), x.sizes.end() - n.size()))
          e.refuse("shape", "layer_norm: normalized_shape " + shape_text(n) + " is not the input's trailing shape");
        for (size_t i = 1; i < p.views.size(); ++i)
          if (p.views[i].sizes != n) e.refuse("shape", "layer_norm: weight or bias of the wrong shape");
        e.dtype = x.dtype;
        e.sizes = x.sizes;
        e.tolerance_scale = 8;
        return e;
      },
      [](const std::vector<Host>& in, const Plan& p, const Expect&) {
        const Host& x = in[0];
        const int64_t n = numel_of(p.shape), rows = n ? static_cast<int64_t>(x.v.size()) / n : 0;
        Values out(x.v.size());
        size_t next = 1;
        const Host* weight = p.ints[0] ? &in[next++] : nullptr;
        const Host* bias = p.ints[1] ? &in[next++] : nullptr;
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0;
          for (int64_t j = 0; j < n; ++j) mean += x.v[r * n + j];
          mean /= n;
          for (int64_t j = 0; j < n; ++j) var += (x.v[r * n + j] - mean) * (x.v[r * n + j] - mean);
          var /= n;
          for (int64_t j = 0; j < n; ++j) {
            double v = (x.v[r * n + j] - mean) / std::sqrt(var + 1e-5);
            if (weight) v *= weight->v[j];
            if (bias) v += bias->v[j];
            out[r * n + j] = v;
          }
        }
        return out;
      },
      [](const std::vector<Tensor>& in, const Plan& p) {
        size_t next = 1;
        std::optional<Tensor> weight, bias;
        if (p.ints[0]) weight = in[next++];
        if (p.ints[1]) bias = in[next++];
        return layer_norm(in[0], p.shape, weight, bias);
      }};

  // rms_norm: native_layer_norm's plan less the bias; eps left unset (the accumulation dtype's epsilon).
  drivers[OpId::fused_rms_norm] = Driver{
      [](Gen& g) {
        Plan p;
        Shape s = g.shape(3);
        if (s.empty()) s = {1 + g.pick(4)};
        const ScalarType t = g.dtype_like(g.float_dtype(), 10);
        g.tensor(p, t, s);
        const size_t k = 1 + g.pick(s.size());
        p.shape = Shape(s.end() - k, s.end());
        if (g.chance(6)) p.shape[0] += 1;
        p.ints = {g.chance(60)};  // weight given
        if (p.ints[0]) g.tensor(p, t, g.chance(5) ? Shape{p.shape.back() + 1} : p.shape);
        return p;
      },
      [](const Plan& p) {
        Expect e;
        const Host x = host_view(p, 0);
        check_dtype_rule(e, DtypeRule::floating, x.dtype, "fused_rms_norm");
        const Shape& n = p.shape;
        if (n.size() > x.sizes.size() || !std::equal(n.begin(), n.end(), x.sizes.end() - n.size()))
          e.refuse("shape", "rms_norm: normalized_shape " + shape_text(n) + " is not the input's trailing shape");
        for (size_t i = 1; i < p.views.size(); ++i)
          if (p.views[i].sizes != n) e.refuse("shape", "rms_norm: weight of the wrong shape");
        e.dtype = x.dtype;
        e.sizes = x.sizes;
        e.tolerance_scale = 8;
        return e;
      },
      [](const std::vector<Host>& in, const Plan& p, const Expect&) {
        const Host& x = in[0];
        const int64_t n = numel_of(p.shape), rows = n ? static_cast<int64_t>(x.v.size()) / n : 0;
        const double eps = x.dtype == ScalarType::float64 ? std::numeric_limits<double>::epsilon()
                                                          : static_cast<double>(std::numeric_limits<float>::epsilon());
        Values out(x.v.size());
        const Host* weight = p.ints[0] ? &in[1] : nullptr;
        for (int64_t r = 0; r < rows; ++r) {
          double squares = 0;
          for (int64_t j = 0; j < n; ++j) squares += x.v[r * n + j] * x.v[r * n + j];
          const double rstd = 1.0 / std::sqrt(squares / n + eps);
          for (int64_t j = 0; j < n; ++j) out[r * n + j] = x.v[r * n + j] * rstd * (weight ? weight->v[j] : 1.0);
        }
        return out;
      },
      [](const std::vector<Tensor>& in, const Plan& p) {
        return rms_norm(in[0], p.shape, p.ints[0] ? std::optional<Tensor>(in[1]) : std::nullopt);
      }};

  for (const bool upper : {true, false}) {
    drivers[upper ? OpId::triu : OpId::tril] =
        Driver{[](Gen& g) {
                 Plan p;
                 g.tensor(p, g.dtype(), g.shape());
                 p.ints = {g.pick(7) - 3};
                 return p;
               },
               [](const Plan& p) {
                 Expect e;
                 const Host x = host_view(p, 0);
                 if (x.sizes.size() < 2) e.refuse("shape", "triu/tril: input tensor must have at least 2 dimensions");
                 e.dtype = x.dtype;
                 e.sizes = x.sizes;
                 return e;
               },
               [upper](const std::vector<Host>& in, const Plan& p, const Expect&) {
                 const Host& x = in[0];
                 const int64_t rows = x.sizes[x.sizes.size() - 2], cols = x.sizes.back();
                 Values out = x.v;
                 for (size_t k = 0; k < out.size(); ++k) {
                   const int64_t j = static_cast<int64_t>(k) % cols,
                                 i = (static_cast<int64_t>(k) / cols) % std::max<int64_t>(rows, 1);
                   const bool keep = upper ? j - i >= p.ints[0] : j - i <= p.ints[0];
                   if (!keep) out[k] = 0;
                 }
                 return out;
               },
               [upper](const std::vector<Tensor>& in, const Plan& p) {
                 return upper ? triu(in[0], p.ints[0]) : tril(in[0], p.ints[0]);
               }};
  }

  // The fused attention ops: q (B, H, Sq, D), k (B, H, Sk, D), v (B, H, Sk, Dv), contiguous.
  struct Attention {
    OpId id;
    int kind;  // 0 cudnn, 1 efficient, 2 flash
  };
  for (const Attention a : {Attention{OpId::scaled_dot_product_cudnn_attention, 0},
                            Attention{OpId::scaled_dot_product_efficient_attention, 1},
                            Attention{OpId::scaled_dot_product_flash_attention, 2}}) {
    const int kind = a.kind;
    drivers[a.id] = Driver{
        [kind](Gen& g) {
          Plan p;
          const ScalarType efficient[] = {ScalarType::float32, ScalarType::float64};
          ScalarType t = kind == 1 ? g.one_of(efficient) : g.float_dtype();
          if (g.chance(8)) t = g.dtype();
          const int64_t b = 1 + g.pick(2), h = 1 + g.pick(2), sq = 1 + g.pick(4);
          const bool causal = g.chance(40);
          const int64_t sk = kind == 2 && causal ? sq : 1 + g.pick(5);
          const int64_t d = kind == 2 ? 8 * (1 + g.pick(2)) : 1 + g.pick(6), dv = kind == 2 ? d : 1 + g.pick(6);
          g.contiguous(p, t, {b, h, sq, d});
          g.contiguous(p, t, {g.chance(5) ? b + 1 : b, h, sk, d});
          g.contiguous(p, t, {b, h, sk, dv});
          for (StorageSpec& s : p.storages)
            for (double& v : s.values) v = is_float(s.dtype) ? v / 4 : v;
          p.ints = {causal};
          p.scalars = {g.chance(50) ? 0.0 : 0.25 * (1 + g.pick(4))};  // 0: the default scale
          return p;
        },
        [kind](const Plan& p) {
          Expect e;
          const Host q = host_view(p, 0), k = host_view(p, 1), v = host_view(p, 2);
          if (!is_float(q.dtype)) e.refuse("dtype", "attention: floating dtypes only");
          if (q.sizes[0] != k.sizes[0]) e.refuse("shape", "attention: batch sizes differ");
          e.dtype = q.dtype;
          e.sizes = {q.sizes[0], q.sizes[1], q.sizes[2], v.sizes[3]};
          e.tolerance_scale = 8;
          (void)kind;
          return e;
        },
        [](const std::vector<Host>& in, const Plan& p, const Expect& e) {
          const Host &q = in[0], &k = in[1], &v = in[2];
          const int64_t bh = q.sizes[0] * q.sizes[1], sq = q.sizes[2], sk = k.sizes[2], d = q.sizes[3], dv = v.sizes[3];
          const double scale = p.scalars[0] == 0 ? 1 / std::sqrt(static_cast<double>(d)) : p.scalars[0];
          Values out(numel_of(e.sizes));
          for (int64_t n = 0; n < bh; ++n)
            for (int64_t i = 0; i < sq; ++i) {
              std::vector<double> w(sk, -INFINITY);
              double m = -INFINITY, s = 0;
              for (int64_t j = 0; j < sk; ++j) {
                if (p.ints[0] && j > i) continue;
                double dotp = 0;
                for (int64_t c = 0; c < d; ++c) dotp += q.v[(n * sq + i) * d + c] * k.v[(n * sk + j) * d + c];
                w[j] = dotp * scale;
                m = std::max(m, w[j]);
              }
              for (double& x : w) s += (x = std::exp(x - m));
              for (int64_t c = 0; c < dv; ++c) {
                double acc = 0;
                for (int64_t j = 0; j < sk; ++j) acc += w[j] / s * v.v[(n * sk + j) * dv + c];
                out[(n * sq + i) * dv + c] = acc;
              }
            }
          return out;
        },
        [kind](const std::vector<Tensor>& in, const Plan& p) {
          const bool causal = p.ints[0] != 0;
          const std::optional<double> scale = p.scalars[0] == 0 ? std::nullopt : std::optional<double>(p.scalars[0]);
          if (kind == 0) return scaled_dot_product_cudnn_attention(in[0], in[1], in[2], false, causal, scale).output;
          if (kind == 1)
            return scaled_dot_product_efficient_attention(in[0], in[1], in[2], false, causal, scale).output;
          return scaled_dot_product_flash_attention(in[0], in[1], in[2], causal, scale).output;
        }};
  }

  drivers[OpId::nll_loss] = Driver{[](Gen& g) {
                                     Plan p;
                                     const int64_t n = g.dim_size(), c = 1 + g.pick(4);
                                     const bool batched = g.chance(75);
                                     g.tensor(p, g.dtype_like(g.float_dtype(), 10), batched ? Shape{n, c} : Shape{c});
                                     const int t = g.contiguous(p, g.chance(92) ? ScalarType::int64 : ScalarType::int32,
                                                                batched ? Shape{n} : Shape{});
                                     StorageSpec& target = p.storages[p.views[t].storage];
                                     index_values(g, target, c);
                                     for (double& v : target.values)
                                       if (g.chance(10)) v = -100;
                                     p.ints = {g.pick(3)};  // reduction: none, mean, sum
                                     return p;
                                   },
                                   [](const Plan& p) {
                                     Expect e;
                                     const Host x = host_view(p, 0), t = host_view(p, 1);
                                     check_dtype_rule(e, DtypeRule::floating, x.dtype, "nll_loss");
                                     if (t.dtype != ScalarType::int64)
                                       e.refuse("dtype", "nll_loss: target must be int64");
                                     for (double v : t.v)
                                       if (v != -100 && (v < 0 || v >= x.sizes.back()))
                                         e.refuse("index", "nll_loss: target out of bounds");
                                     e.dtype = x.dtype;
                                     e.sizes = p.ints[0] == 0 && x.sizes.size() == 2 ? Shape{x.sizes[0]} : Shape{};
                                     return e;
                                   },
                                   [](const std::vector<Host>& in, const Plan& p, const Expect&) {
                                     const int64_t c = in[0].sizes.back();
                                     Values losses;
                                     double total = 0, count = 0;
                                     for (size_t i = 0; i < in[1].v.size(); ++i) {
                                       const double t = in[1].v[i];
                                       const double loss = t == -100 ? 0 : -in[0].v[i * c + static_cast<int64_t>(t)];
                                       losses.push_back(loss);
                                       total += loss;
                                       count += t == -100 ? 0 : 1;
                                     }
                                     if (p.ints[0] == 0) return losses;
                                     return Values{p.ints[0] == 2 ? total : total / count};
                                   },
                                   [](const std::vector<Tensor>& in, const Plan& p) {
                                     return nll_loss(in[0], in[1], static_cast<Reduction>(p.ints[0]));
                                   }};

  drivers[OpId::mse_loss] = Driver{[](Gen& g) {
                                     Plan p;
                                     const std::vector<Shape> shapes = g.broadcastable(2, g.chance(6));
                                     const ScalarType t = g.dtype_like(g.float_dtype(), 10);
                                     g.tensor(p, t, shapes[0]);
                                     g.tensor(p, t, g.chance(70) ? shapes[0] : shapes[1]);
                                     p.ints = {g.pick(3)};
                                     return p;
                                   },
                                   [](const Plan& p) {
                                     Expect e;
                                     const Host a = host_view(p, 0), b = host_view(p, 1);
                                     check_dtype_rule(e, DtypeRule::floating, a.dtype, "mse_loss");
                                     const auto shape = broadcast_shapes({a.sizes, b.sizes});
                                     if (!shape) e.refuse("broadcast", "mse_loss: shapes do not broadcast");
                                     e.dtype = a.dtype;
                                     e.sizes = p.ints[0] == 0 ? shape.value_or(Shape{}) : Shape{};
                                     e.tolerance_scale = 4;
                                     return e;
                                   },
                                   [](const std::vector<Host>& in, const Plan& p, const Expect&) {
                                     const Shape shape = *broadcast_shapes({in[0].sizes, in[1].sizes});
                                     Values out(numel_of(shape));
                                     for (size_t k = 0; k < out.size(); ++k) {
                                       const double d = at_broadcast(in[0], shape, k) - at_broadcast(in[1], shape, k);
                                       out[k] = d * d;
                                     }
                                     if (p.ints[0] == 0) return out;
                                     return Values{p.ints[0] == 2 ? sum_of(out) : sum_of(out) / out.size()};
                                   },
                                   [](const std::vector<Tensor>& in, const Plan& p) {
                                     return mse_loss(in[0], in[1], static_cast<Reduction>(p.ints[0]));
                                   }};

  // leaky_relu(x, slope): x > 0 ? x : x * slope.
  drivers[OpId::leaky_relu] =
      Driver{[](Gen& g) {
               Plan p;
               g.specials = true;
               g.tensor(p, g.dtype_like(g.float_dtype(), 10), g.shape());
               p.scalars = {g.chance(50) ? 0.01 : 0.2};
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host x = host_view(p, 0);
               check_dtype_rule(e, DtypeRule::floating, x.dtype, "leaky_relu");
               e.dtype = x.dtype;
               e.sizes = x.sizes;
               return e;
             },
             [](const std::vector<Host>& in, const Plan& p, const Expect&) {
               Values out(in[0].v.size());
               for (size_t k = 0; k < out.size(); ++k) out[k] = in[0].v[k] > 0 ? in[0].v[k] : in[0].v[k] * p.scalars[0];
               return out;
             },
             [](const std::vector<Tensor>& in, const Plan& p) { return leaky_relu(in[0], p.scalars[0]); }};

  // binary_cross_entropy_with_logits: input and target of one shape and dtype.
  drivers[OpId::binary_cross_entropy_with_logits] =
      Driver{[](Gen& g) {
               Plan p;
               const ScalarType t = g.dtype_like(g.float_dtype(), 10);
               const Shape shape = g.shape();
               g.tensor(p, t, shape);
               g.tensor(p, t, g.chance(90) ? shape : g.shape());
               p.ints = {g.pick(3)};
               return p;
             },
             [](const Plan& p) {
               Expect e;
               const Host a = host_view(p, 0), b = host_view(p, 1);
               check_dtype_rule(e, DtypeRule::floating, a.dtype, "binary_cross_entropy_with_logits");
               if (a.sizes != b.sizes) e.refuse("shape", "binary_cross_entropy_with_logits: sizes differ");
               e.dtype = a.dtype;
               e.sizes = p.ints[0] == 0 ? a.sizes : Shape{};
               e.tolerance_scale = 4;
               return e;
             },
             [](const std::vector<Host>& in, const Plan& p, const Expect&) {
               Values out(in[0].v.size());
               for (size_t k = 0; k < out.size(); ++k) {
                 const double x = in[0].v[k], t = in[1].v[k];
                 out[k] = (1 - t) * x - (std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))));
               }
               if (p.ints[0] == 0) return out;
               return Values{p.ints[0] == 2 ? sum_of(out) : sum_of(out) / static_cast<double>(out.size())};
             },
             [](const std::vector<Tensor>& in, const Plan& p) {
               return binary_cross_entropy_with_logits(in[0], in[1], static_cast<Reduction>(p.ints[0]));
             }};

  // lerp_, addcmul_, addcdiv_: self updated in place from operands broadcast to its shape.
  struct Update {
    OpId id;
    int operands;
  };
  for (const Update u : {Update{OpId::lerp, 1}, Update{OpId::addcmul, 2}, Update{OpId::addcdiv, 2}}) {
    const OpId id = u.id;
    const int operands = u.operands;
    const std::string op(op_name(id));
    drivers[id] =
        Driver{[operands](Gen& g) {
                 Plan p;
                 g.specials = true;
                 const std::vector<Shape> shapes = g.broadcastable(1 + operands, g.chance(6));
                 const ScalarType t = g.dtype_like(g.float_dtype(), 12);
                 const int self = g.tensor(p, t, shapes[0]);
                 for (int i = 1; i <= operands; ++i) {
                   if (g.chance(15)) g.alias(p, self, shapes[i]);
                   else g.tensor(p, g.dtype_like(t, 8), shapes[i], g.chance(3));
                 }
                 p.scalars = {g.scalar()};
                 p.in_place = true;
                 return p;
               },
               [operands, op](const Plan& p) {
                 Expect e;
                 std::vector<int> all, inputs;
                 for (int i = 0; i <= operands; ++i) all.push_back(i);
                 for (int i = 1; i <= operands; ++i) inputs.push_back(i);
                 check_devices(e, p, all);
                 std::vector<Shape> shapes;
                 std::vector<Operand> types;
                 for (int i : all) {
                   const ViewSpec& v = p.views[i];
                   shapes.push_back(v.sizes);
                   types.push_back({p.storages[v.storage].dtype, v.sizes.empty()});
                   if (types.back().dtype != types[0].dtype) e.tag("promotion");
                 }
                 const ScalarType self = types[0].dtype;
                 check_dtype_rule(e, DtypeRule::floating, self, op);
                 if (op == "lerp")
                   for (const Operand& o : types)
                     if (o.dtype != self) e.refuse("promotion", "lerp: expected dtype " + name(self) + " for end");
                 const ScalarType rt = result_type(types);
                 if (!may_cast(rt, self))
                   e.refuse("promotion", op + ": result type " + name(rt) + " can't be cast to " + name(self));
                 const auto shape = broadcast_shapes(shapes);
                 if (!shape) e.refuse("broadcast", op + ": shapes do not broadcast");
                 else if (*shape != p.views[0].sizes) e.refuse("broadcast", op + ": the broadcast shape is not self's");
                 check_in_place_overlap(e, p, 0, inputs);
                 e.dtype = self;
                 e.sizes = p.views[0].sizes;
                 e.written = 0;
                 e.tolerance_scale = 4;
                 return e;
               },
               [op](const std::vector<Host>& in, const Plan& p, const Expect& e) {
                 Values out(numel_of(e.sizes));
                 const double w = p.scalars[0];
                 for (size_t k = 0; k < out.size(); ++k) {
                   const double s = in[0].v[k], a = at_broadcast(in[1], e.sizes, k);
                   // PyTorch's lerp: from self below weight 0.5, from end above (exact at both ends).
                   if (op == "lerp") out[k] = std::fabs(w) < 0.5 ? s + w * (a - s) : a - (a - s) * (1 - w);
                   else {
                     const double b = at_broadcast(in[2], e.sizes, k);
                     out[k] = op == "addcmul" ? s + w * a * b : s + w * (a / b);
                   }
                 }
                 return out;
               },
               [op](const std::vector<Tensor>& in, const Plan& p) {
                 const Tensor self = p.in_place ? in[0] : in[0].clone();
                 if (op == "lerp") lerp_(self, in[1], p.scalars[0]);
                 else if (op == "addcmul") addcmul_(self, in[1], in[2], p.scalars[0]);
                 else addcdiv_(self, in[1], in[2], p.scalars[0]);
                 return self;
               }};
  }
}

}  // namespace

namespace {

// ------------------------------------------------------------------------------------- the runner

struct Figures {
  int64_t allocated, reserved, active, requested;
  bool operator==(const Figures&) const = default;
};
Figures figures(Device device) {
  const auto stats = caching_allocator(device).memory_stats();
  return {stats.at("allocated_bytes.all.current"), stats.at("reserved_bytes.all.current"),
          stats.at("active.all.current"), stats.at("requested_bytes.all.current")};
}

std::vector<Tensor> materialize(const Plan& plan, Device device) {
  std::vector<Tensor> storages;
  for (const StorageSpec& s : plan.storages) {
    const Device where = s.other_device ? (device.type == DeviceType::meta ? kCpu : other_device_of(device)) : device;
    storages.push_back(from_vector(s.values, {static_cast<int64_t>(s.values.size())}, TensorOptions{s.dtype, where}));
  }
  std::vector<Tensor> views;
  for (const ViewSpec& v : plan.views) views.push_back(storages[v.storage].as_strided(v.sizes, v.strides, v.offset));
  return views;
}

// Compares values with the output dtype's tolerance; NaN matches NaN, infinities match in sign. A reference
// beyond a 16-bit float's range expects an infinity.
std::string compare_values(const Values& got, const Values& want, ScalarType t, double scale) {
  if (got.size() != want.size())
    return "got " + std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
  const double tol = tolerance(t) * scale;
  for (size_t i = 0; i < got.size(); ++i) {
    double w = to_dtype_value(want[i], t);
    const double g = got[i];
    if ((t == ScalarType::float16 && std::fabs(w) > 65520) || (t == ScalarType::float32 && std::fabs(w) > 3.4028235e38))
      w = w > 0 ? INFINITY : -INFINITY;
    bool ok;
    if (std::isnan(w)) ok = std::isnan(g);
    else if (std::isinf(w)) ok = g == w;
    else ok = !std::isnan(g) && std::fabs(g - w) <= tol * (1 + std::fabs(w)) + (is_float(t) ? 0 : 0);
    if (!ok) {
      std::ostringstream out;
      out << "value " << i << " is " << g << ", expected " << w << " (" << name(t) << ", tolerance " << tol << ")";
      return out.str();
    }
  }
  return "";
}

struct Failure {
  uint64_t count = 0;
  std::string first;
};

struct Runner {
  uint64_t seed;
  std::set<std::string> skip;
  std::map<std::string, Failure> failures;  // by row and kind
  uint64_t cases = 0, valid = 0, refused = 0, skipped = 0, in_place_checked = 0, meta_checked = 0;
  std::map<std::string, uint64_t> per_row_valid, per_row_refused;

  void fail(const std::string& row, const std::string& kind, uint64_t index, const Plan& plan, Device device,
            const std::string& detail) {
    Failure& f = failures[row + ": " + kind];
    if (f.count++ == 0) {
      std::ostringstream out;
      out << row << " on " << device.str() << ": " << kind << ": " << detail
          << "\n  reproduce: BYTEGRAD_FUZZ_SEED=" << seed << " BYTEGRAD_FUZZ_OP_CASE=" << index << describe(plan);
      f.first = out.str();
    }
  }

  void run_case(uint64_t index, const OpInfo& info, const Driver& driver) {
    Rng rng(seed * 0x9E3779B97F4A7C15ull + index);
    Gen gen{rng};
    const Device kDevices[] = {kCpu, kSim, kSim, kMeta};
    // Rows whose output size depends on the input's values: meta has none and refuses them (as PyTorch's meta).
    const bool data_dependent = info.name == "masked_select";
    const Device kWithValues[] = {kCpu, kSim};
    const Device device = data_dependent ? gen.one_of(kWithValues) : gen.one_of(kDevices);
    Plan plan = driver.make(gen);
    const std::string row(info.name);
    Expect expect;
    try {
      expect = driver.expect(plan);
    } catch (const std::exception& e) {
      fail(row, "the oracle threw", index, plan, device, e.what());
      return;
    }
    for (const std::string& c : expect.classes)
      if (skip.count(c)) {
        ++skipped;
        return;
      }
    if (std::getenv("BYTEGRAD_FUZZ_OP_TRACE"))
      std::cerr << "case " << index << ": " << row << " on " << device.str() << describe(plan) << std::endl;
    ++cases;
    clear_blas_workspaces();  // parked on a device's first product; the leak check below wants none
    const Figures sim_base = figures(kSim), meta_base = figures(kMeta);
    std::vector<Tensor> inputs = materialize(plan, device);
    std::vector<Host> before;
    for (size_t i = 0; i < plan.views.size(); ++i) before.push_back(host_view(plan, static_cast<int>(i)));
    const Figures sim_before = figures(kSim), meta_before = figures(kMeta);
    const std::string where = device.str();

    Tensor result;
    std::string error;
    bool threw = false;
    try {
      result = driver.call(inputs, plan);
    } catch (const std::exception& e) {
      threw = true;
      error = e.what();
    } catch (...) {
      threw = true;
      fail(row, "threw something that is not a std::exception", index, plan, device, "");
      return;
    }

    auto read_inputs_unchanged = [&](int except) -> std::string {
      if (device.type == DeviceType::meta) return "";
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (static_cast<int>(i) == except) continue;
        if (except >= 0 && shares_storage(plan, except, static_cast<int>(i))) continue;
        const Values now = inputs[i].tolist();
        if (now.size() != before[i].v.size()) return "input " + std::to_string(i) + " changed size";
        for (size_t k = 0; k < now.size(); ++k)
          if (!(now[k] == before[i].v[k] || (std::isnan(now[k]) && std::isnan(before[i].v[k]))))
            return "input " + std::to_string(i) + " element " + std::to_string(k) + " changed from " +
                   std::to_string(before[i].v[k]) + " to " + std::to_string(now[k]);
      }
      return "";
    };

    if (!expect.valid) {
      ++refused;
      ++per_row_refused[row];
      if (!threw && device.type == DeviceType::meta && expect.refused_class == "index") return;  // no values on meta
      if (!threw && device.type == DeviceType::meta && expect.meta_skips_refusal) return;
      if (!threw) {
        fail(row, "accepted what PyTorch refuses [" + expect.refused_class + "]", index, plan, device, expect.rule);
        return;
      }
      if (figures(kSim) != sim_before)
        fail(row, "a refusal changed the sim device's figures", index, plan, device, error);
      if (figures(kMeta) != meta_before)
        fail(row, "a refusal changed the meta device's figures", index, plan, device, error);
      const std::string changed = read_inputs_unchanged(-1);
      if (!changed.empty()) fail(row, "a refusal changed an input", index, plan, device, changed + " (" + error + ")");
      return;
    }
    ++valid;
    ++per_row_valid[row];
    if (threw) {
      fail(row, "refused a valid call", index, plan, device, error);
      return;
    }
    if (expect.undefined_result) {
      if (result.defined()) fail(row, "a result where none was expected", index, plan, device, "");
      return;
    }
    if (!result.defined()) {
      fail(row, "an undefined result", index, plan, device, "");
      return;
    }
    if (result.dtype() != expect.dtype)
      fail(row, "wrong dtype", index, plan, device, "got " + name(result.dtype()) + ", expected " + name(expect.dtype));
    if (result.sizes() != expect.sizes)
      fail(row, "wrong shape", index, plan, device,
           "got " + shape_text(result.sizes()) + ", expected " + shape_text(expect.sizes));
    if (result.device() != device && row != "to_device")
      fail(row, "wrong device", index, plan, device, "got " + result.device().str());
    if (device.type != DeviceType::meta && result.dtype() == expect.dtype && result.sizes() == expect.sizes) {
      if (expect.custom_check) {
        const std::string wrong = expect.custom_check(result.tolist(), before, plan);
        if (!wrong.empty()) fail(row, "wrong values", index, plan, device, wrong);
      } else if (expect.values_known) {
        Values want;
        try {
          want = driver.reference(before, plan, expect);
        } catch (const std::exception& e) {
          fail(row, "the reference threw", index, plan, device, e.what());
        }
        const std::string diff = compare_values(result.tolist(), want, expect.dtype, expect.tolerance_scale);
        if (!diff.empty()) fail(row, "wrong values", index, plan, device, diff);
      }
      if (expect.check_inputs_unchanged) {
        const std::string changed = read_inputs_unchanged(expect.written);
        if (!changed.empty()) fail(row, "changed an input it only reads", index, plan, device, changed);
      }
    }
    // In place and out of place agree: the out-of-place form on fresh inputs, converted to the written dtype.
    if (plan.in_place && expect.values_known && device.type != DeviceType::meta) {
      Plan out_of_place = plan;
      out_of_place.in_place = false;
      const Expect other = driver.expect(out_of_place);
      if (other.valid) {
        ++in_place_checked;
        try {
          const Tensor reference = driver.call(materialize(out_of_place, device), out_of_place);
          const std::string diff = compare_values(result.tolist(), reference.to(result.dtype()).tolist(),
                                                  result.dtype(), 2 * expect.tolerance_scale);
          if (!diff.empty()) fail(row, "in-place and out-of-place forms differ", index, plan, device, diff);
        } catch (const std::exception& e) {
          fail(row, "the out-of-place form refused what the in-place form did", index, plan, device, e.what());
        }
      }
    }
    // Meta gives the same shapes, strides, dtype and allocated bytes as sim.
    if (device == kSim && row != "to_device" && !data_dependent) {  // (to_device on meta stays on meta: another op)
      const int64_t sim_growth = figures(kSim).allocated - sim_before.allocated;
      const Shape sim_strides = result.strides();
      try {
        std::vector<Tensor> meta_inputs = materialize(plan, kMeta);
        const Figures meta_start = figures(kMeta);
        const Tensor meta_result = driver.call(meta_inputs, plan);
        ++meta_checked;
        const int64_t meta_growth = figures(kMeta).allocated - meta_start.allocated;
        if (meta_result.sizes() != result.sizes() || meta_result.dtype() != result.dtype() ||
            meta_result.strides() != sim_strides)
          fail(row, "meta differs from sim", index, plan, device,
               "meta " + shape_text(meta_result.sizes()) + " strides " + shape_text(meta_result.strides()) + " " +
                   name(meta_result.dtype()) + ", sim " + shape_text(result.sizes()) + " strides " +
                   shape_text(sim_strides) + " " + name(result.dtype()));
        if (meta_growth != sim_growth)
          fail(row, "meta's allocated bytes differ from sim's", index, plan, device,
               "meta " + std::to_string(meta_growth) + ", sim " + std::to_string(sim_growth));
      } catch (const std::exception& e) {
        fail(row, "meta refused what sim ran", index, plan, device, e.what());
      }
    }
    // Once the result and inputs are gone, every byte is back (no leak).
    result = Tensor();
    inputs.clear();
    clear_blas_workspaces();
    if (figures(kSim).allocated != sim_base.allocated || figures(kMeta).allocated != meta_base.allocated)
      fail(row, "leaked device memory", index, plan, device,
           "sim " + std::to_string(sim_base.allocated) + " -> " + std::to_string(figures(kSim).allocated) + ", meta " +
               std::to_string(meta_base.allocated) + " -> " + std::to_string(figures(kMeta).allocated));
  }
};

std::set<std::string> env_list(const char* variable) {
  std::set<std::string> out;
  const char* text = std::getenv(variable);
  if (!text) return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.insert(item);
  return out;
}

}  // namespace

// CI's short run: every row reached by valid cases (checked below), about 5 s in a normal build; a sanitized
// build runs some 20 times slower, so it takes fewer cases (about 40 s under ASan+UBSan).
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kCiCases = 20000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr uint64_t kCiCases = 20000;
#else
constexpr uint64_t kCiCases = 50000;
#endif
#else
constexpr uint64_t kCiCases = 50000;
#endif

TEST_CASE("fuzz: every op-table row on random shapes, layouts, dtypes and devices against PyTorch's rules") {
  const Drivers& all = drivers();
  // Every row has a driver (a new row without one fails here).
  for (const OpInfo& info : all_ops()) {
    bool found = false;
    for (const auto& [id, d] : all) found = found || op_name(id) == info.name;
    CHECK_MESSAGE(found, "no fuzz driver for op-table row " << info.name);
  }
  const uint64_t iterations = fuzz_iterations("OP", kCiCases);
  Runner runner;
  runner.seed = fuzz_seed();
  runner.skip = env_list("BYTEGRAD_FUZZ_OP_SKIP");
  const std::set<std::string> rows = env_list("BYTEGRAD_FUZZ_OP_ROWS");
  const char* only_case = std::getenv("BYTEGRAD_FUZZ_OP_CASE");
  std::vector<OpId> order;
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpId id = static_cast<OpId>(i);
    if (all.count(id) && (rows.empty() || rows.count(std::string(op_name(id))))) order.push_back(id);
  }
  REQUIRE(!order.empty());
  // The memory checks need an allocator that starts from nothing of ours; leftovers are the process's.
  const auto start = std::chrono::steady_clock::now();
  const uint64_t first = fuzz_env_number(only_case ? "BYTEGRAD_FUZZ_OP_CASE" : "BYTEGRAD_FUZZ_OP_FIRST", 0);
  const uint64_t last = only_case ? first + 1 : first + iterations;
  for (uint64_t index = first; index < last; ++index) {
    // Rows in turn (the case number picks the row, so that a case reproduces alone).
    const OpId id = order[index % order.size()];
    runner.run_case(index, op_info(id), all.at(id));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t failing = 0;
  for (const auto& [kind, f] : runner.failures) {
    failing += f.count;
    MESSAGE(f.count << " x " << f.first);
  }
  MESSAGE("op fuzz, seed " << runner.seed << ": " << runner.cases << " cases over " << order.size() << " rows in "
                           << seconds << " s: " << runner.valid << " valid, " << runner.refused
                           << " refused by the oracle, " << runner.skipped << " skipped, " << runner.in_place_checked
                           << " in-place forms compared with their out-of-place forms, " << runner.meta_checked
                           << " meta runs compared with sim; " << failing << " failures in " << runner.failures.size()
                           << " kinds");
  CHECK(failing == 0);
  if (!only_case && rows.empty() && runner.skip.empty() && iterations >= 10000) {
    for (OpId id : order) {
      const std::string row(op_name(id));
      CHECK_MESSAGE(runner.per_row_valid[row] > 0, "no valid case reached row " << row);
    }
  }
}
