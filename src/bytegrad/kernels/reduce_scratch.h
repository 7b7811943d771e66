// The private scratch of PyTorch's CUDA reduction kernel (aten/src/ATen/native/cuda/Reduce.cuh,
// gpu_reduce_kernel): when its launch configuration splits each output's inputs across thread blocks (a
// "global" reduction), it allocates a staging buffer for the blocks' partial results
// (ReduceConfig::global_memory_size()) and then one int semaphore per grid column
// (ReduceConfig::semaphore_size()) from the caching allocator, after the op's outputs, and frees the
// semaphores, then the buffer, before the op returns. Measured on an H100 with PyTorch 2.11
// (tests/data/pytorch_probes/events.jsonl, group "reduce").
//
// This is the rule as a pure function of the reduction's TensorIterator geometry: the operands' sizes and
// strides before TensorIterator reorders and coalesces them (done here as TensorIterator does), the
// element sizes, the kernel's accumulator size and unrolling, and the device's SM count and threads per SM.
// Ops allocate what it returns (tensor/ops_support.h, run_reduction).
#pragma once

#include <cstdint>
#include <vector>

namespace bytegrad {

// The reduction as TensorIterator receives it. `output_sizes` has the input's rank with 1 at every reduced
// dimension (PyTorch's viewed result); a dimension is reduced where the output has size 1 and the input
// does not, which is where TensorIterator gives the output stride 0.
struct ReduceIterGeometry {
  std::vector<int64_t> input_sizes;
  std::vector<int64_t> input_strides;  // elements
  int input_element_size = 4;          // sizeof(scalar_t) of the tensor the kernel reads
  int64_t input_offset = 0;            // storage offset in elements: the data pointer's alignment
  std::vector<int64_t> output_sizes;
  std::vector<int64_t> output_strides;  // elements
  int output_element_size = 4;
};

// The kernel instantiation's constants: sizeof(arg_t) (the accumulator: float for a half sum,
// pair<value, int64> for argmax, WelfordData for var, ...), vt0 (values unrolled per thread) and
// input_vec_size (the vector width of loads along a contiguous reduced dimension).
struct ReduceKernelTraits {
  int accumulator_size = 4;
  int vt0 = 4;
  int input_vec_size = 4;
  int max_num_threads = 512;  // mnt_wrapper: 256 only for complex<double>, which bytegrad lacks
};

// cudaDeviceProp's multiProcessorCount and maxThreadsPerMultiProcessor (H100: 132 and 2048).
struct ReduceDeviceLimits {
  int multiprocessor_count = 132;
  int max_threads_per_multiprocessor = 2048;
};

struct ReduceScratch {
  int64_t buffer_bytes = 0;  // 0: no global reduction, nothing is allocated
  int64_t semaphore_bytes = 0;
  bool global() const { return buffer_bytes > 0; }
};

ReduceScratch reduce_scratch(const ReduceIterGeometry& geometry, const ReduceKernelTraits& traits,
                             const ReduceDeviceLimits& device);

}  // namespace bytegrad
