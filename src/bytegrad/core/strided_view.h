// The ground level's view of a tensor's memory: sizes and strides in elements, and the layout rules that
// both kernels and tensor ops need (each written once, here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/core/scalar_type.h"
#include "bytegrad/core/small_vector.h"

namespace bytegrad {

// Sizes or strides in elements. Inline room for 5 dimensions (GPT-2's largest tensors have 4), so making a
// tensor or view allocates nothing for its shape; it converts to and from std::vector<int64_t>.
using Shape = SmallVector<int64_t, 5>;

// Product of the sizes (1 for a 0-d shape). Throws std::length_error when it exceeds int64 (which a
// tensor's shape never does: check_shape refuses such shapes where tensors are made).
int64_t shape_numel(const Shape& sizes);
// The product of non-negative sizes, or nullopt when it exceeds int64 (0 when any size is 0, as c10's
// safe_multiply_u64).
std::optional<int64_t> checked_numel(const Shape& sizes);
// Refuses a shape no tensor can have: a negative size (std::invalid_argument) or more elements than int64
// counts (std::length_error); `op` starts the message, which names the shape.
void check_shape(const char* op, const Shape& sizes);
// Row-major strides for `sizes` (a size of 0 or 1 counts as 1, as PyTorch's contiguous strides). Throws
// std::length_error when a stride exceeds int64.
Shape contiguous_strides(const Shape& sizes);
// "[2, 3]"
std::string shape_str(const Shape& sizes);
// c10's is_non_overlapping_and_dense: some order of the dimensions makes the strides contiguous.
bool is_non_overlapping_and_dense(const Shape& sizes, const Shape& strides);

// A tensor as kernels see it: the address of element 0 (storage offset applied; nullptr on meta), the
// element type, and sizes and strides in elements.
struct StridedView {
  void* data = nullptr;
  ScalarType dtype = ScalarType::float32;
  Shape sizes;
  Shape strides;
  Device device;

  int64_t numel() const { return shape_numel(sizes); }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
      if (sizes[d] != 1 && strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
  bool is_non_overlapping_and_dense() const { return bytegrad::is_non_overlapping_and_dense(sizes, strides); }
};

}  // namespace bytegrad
