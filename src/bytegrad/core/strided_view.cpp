#include "bytegrad/core/strided_view.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <functional>
#include <numeric>

namespace bytegrad {

namespace {

// "18446744073709551616 (2^64)": the exact product of the sizes where 128 bits hold it, and its log2.
std::string element_count_text(const Shape& sizes) {
  double log2_count = 0;
  unsigned __int128 exact = 1;
  bool exact_fits = true;
  for (int64_t s : sizes) {
    log2_count += std::log2(static_cast<double>(s));
    if (exact_fits && __builtin_mul_overflow(exact, static_cast<unsigned __int128>(s), &exact)) exact_fits = false;
  }
  std::string digits;
  if (exact_fits) {
    for (unsigned __int128 v = exact; v > 0; v /= 10)
      digits.insert(digits.begin(), static_cast<char>('0' + int(v % 10)));
    return fmt::format("{} (2^{:.4g})", digits, log2_count);
  }
  return fmt::format("about 2^{:.4g}", log2_count);
}

}  // namespace

std::optional<int64_t> checked_numel(const Shape& sizes) {
  if (std::find(sizes.begin(), sizes.end(), int64_t{0}) != sizes.end()) return 0;
  int64_t n = 1;
  for (int64_t s : sizes)
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) return std::nullopt;
  return n;
}

void check_shape(const char* op, const Shape& sizes) {
  for (int64_t s : sizes)
    if (s < 0)
      throw std::invalid_argument(fmt::format("{}: negative dimension {} in shape {}", op, s, shape_str(sizes)));
  if (!checked_numel(sizes))
    throw std::length_error(fmt::format("{}: the shape {} has {} elements, more than int64 can count", op,
                                        shape_str(sizes), element_count_text(sizes)));
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(n, s, &n)) {
      if (auto checked = checked_numel(sizes)) return *checked;  // a zero later in the shape
      throw std::length_error(fmt::format("the shape {} has more elements than int64 can count", shape_str(sizes)));
    }
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    if (d > 0 && __builtin_mul_overflow(stride, std::max<int64_t>(sizes[d], 1), &stride))
      throw std::length_error(fmt::format("the contiguous strides of shape {} exceed int64", shape_str(sizes)));
  }
  return strides;
}

std::string shape_str(const Shape& sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

bool is_non_overlapping_and_dense(const Shape& sizes, const Shape& strides) {
  const size_t ndim = sizes.size();
  if (ndim == 1) return sizes[0] < 2 || strides[0] == 1;
  SmallVector<size_t, 5> perm(ndim);  // asked of most new tensors: no heap block for up to 5 dimensions
  std::iota(perm.begin(), perm.end(), size_t{0});
  // Size-0/1 dimensions last, the rest by increasing stride.
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t required = 1;
  for (size_t d : perm) {
    if (sizes[d] < 2) return true;
    if (strides[d] != required) return false;
    required *= sizes[d];
  }
  return true;
}

}  // namespace bytegrad
