#include "bytegrad/tensor/memory_overlap.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace bytegrad {

namespace {

// Checked first: a contiguous tensor (the common destination) needs no sort; an empty one is contiguous.
bool non_overlapping_and_dense(const Tensor& t) {
  return t.numel() == 0 || t.is_contiguous() || is_non_overlapping_and_dense(t.sizes(), t.strides());
}

// The first dimension of size > 1 and stride 0, or -1. An empty tensor has no elements to share a location
// (PyTorch counts it contiguous, hence non-overlapping and dense, whatever its strides): -1.
int64_t first_shared_dimension(const Tensor& t) {
  if (t.numel() == 0) return -1;
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1 && strides[d] == 0) return static_cast<int64_t>(d);
  return -1;
}

// A tensor with its layout, for the messages: the shapes alone cannot show why two tensors overlap.
std::string layout(const Tensor& t) {
  return fmt::format("{} with strides {} at storage offset {}", describe(t), shape_str(t.strides()),
                     t.storage_offset());
}

}  // namespace

MemOverlap has_internal_overlap(const Tensor& t) {
  // A stride-0 dimension of size > 1 maps two elements to one address; such a tensor is never dense.
  if (first_shared_dimension(t) >= 0) return MemOverlap::yes;
  return non_overlapping_and_dense(t) ? MemOverlap::no : MemOverlap::too_hard;
}

MemOverlapStatus get_overlap_status(const Tensor& a, const Tensor& b) {
  if (a.impl_ptr() == b.impl_ptr()) return MemOverlapStatus::full;
  // Storage identity (not addresses: meta tensors have none) decides whether they can meet at all.
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return MemOverlapStatus::no;
  if (!non_overlapping_and_dense(a) || !non_overlapping_and_dense(b)) return MemOverlapStatus::too_hard;
  // A non-overlapping and dense tensor covers exactly numel elements from its first one.
  const int64_t a_begin = a.storage_offset() * static_cast<int64_t>(a.element_size());
  const int64_t a_end = a_begin + a.numel() * static_cast<int64_t>(a.element_size());
  const int64_t b_begin = b.storage_offset() * static_cast<int64_t>(b.element_size());
  const int64_t b_end = b_begin + b.numel() * static_cast<int64_t>(b.element_size());
  if (a_begin == b_begin && a_end == b_end)
    return a.strides() == b.strides() ? MemOverlapStatus::full : MemOverlapStatus::partial;
  if (a_begin < b_end && b_begin < a_end) return MemOverlapStatus::partial;
  return MemOverlapStatus::no;
}

}  // namespace bytegrad

namespace bytegrad::ops_detail {

void check_write_overlap(const char* op, const Tensor& dest, std::initializer_list<const Tensor*> inputs,
                         SharedDestination shared) {
  if (shared == SharedDestination::refuse) {
    if (const int64_t d = first_shared_dimension(dest); d >= 0)
      throw std::invalid_argument(fmt::format(
          "{}: unsupported operation: more than one element of the written-to tensor refers to a single memory "
          "location. Please clone() the tensor before performing the operation. (The written-to tensor is {}: "
          "dimension {} of size {} has stride 0, as in an expanded view.)",
          op, layout(dest), d, dest.sizes()[static_cast<size_t>(d)]));
  }
  for (const Tensor* input : inputs) {
    if (input == nullptr || !input->defined() || input->impl_ptr() == dest.impl_ptr()) continue;
    if (get_overlap_status(dest, *input) == MemOverlapStatus::partial)
      throw std::invalid_argument(fmt::format(
          "{}: unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
          "memory location. Please clone() the tensor before performing the operation. (The input is {}; the "
          "written-to tensor is {}; both are in one storage.)",
          op, layout(*input), layout(dest)));
  }
}

}  // namespace bytegrad::ops_detail
