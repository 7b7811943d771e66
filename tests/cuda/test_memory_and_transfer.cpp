// Device memory accounting on a real GPU, and host transfers of non-contiguous views (which must not
// allocate device memory).
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/tensor/blas_plan.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

CachingAllocator& gpu_allocator() { return caching_allocator(kCuda); }

TEST_CASE("empty({1024, 1024}) float32 on cuda allocates exactly 4194304 bytes") {
  require_gpu();
  const int64_t before = gpu_allocator().memory_allocated();
  {
    Tensor t = empty({1024, 1024}, TensorOptions{}.with_device(kCuda));
    CHECK(gpu_allocator().memory_allocated() - before == 1024 * 1024 * 4);
  }
  CHECK(gpu_allocator().memory_allocated() == before);
}

TEST_CASE("gemm on contiguous operands allocates nothing beyond the cuBLAS workspace") {
  require_gpu();
  Tensor a = randn({256, 128}, TensorOptions{}.with_device(kCuda));
  Tensor b = randn({128, 64}, TensorOptions{}.with_device(kCuda));
  Tensor c = empty({256, 64}, TensorOptions{}.with_device(kCuda));
  const auto view3 = [](const Tensor& t) { return t.unsqueeze(0); };
  clear_blas_workspaces();  // the next product allocates this thread's workspace afresh
  const int64_t before = gpu_allocator().memory_allocated();
  gpu_allocator().reset_peak_stats();
  gemm_into(view3(c), view3(a), view3(b), 1.0, 0.0);
  const int64_t workspace = static_cast<int64_t>(blas_workspace_bytes(kCuda));
  CHECK(gpu_allocator().memory_allocated() - before == workspace);
  CHECK(gpu_allocator().max_memory_allocated() - before == workspace);
  gemm_into(view3(c), view3(a), view3(b), 1.0, 0.0);  // the second reuses it
  CHECK(gpu_allocator().memory_allocated() - before == workspace);
  CHECK(gpu_allocator().max_memory_allocated() - before == workspace);
  // batched, contiguous: nothing either
  Tensor ab = randn({4, 32, 16}, TensorOptions{}.with_device(kCuda));
  Tensor bb = randn({4, 16, 8}, TensorOptions{}.with_device(kCuda));
  Tensor cb = empty({4, 32, 8}, TensorOptions{}.with_device(kCuda));
  const int64_t before_batched = gpu_allocator().memory_allocated();
  gpu_allocator().reset_peak_stats();
  gemm_into(cb, ab, bb, 1.0, 0.0);
  CHECK(gpu_allocator().max_memory_allocated() == before_batched);
}

TEST_CASE("copy_to_host of transposed, sliced, expanded and column views allocates no device memory") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16, ScalarType::int64, ScalarType::bool_}) {
    Pair base = on_both(random_pair({40, 70}, ScalarType::float32, 5.0).cpu.to(dtype));
    const std::vector<std::function<Tensor(const Tensor&)>> views = {
        [](const Tensor& t) { return t.transpose(0, 1); },
        [](const Tensor& t) { return t.slice(1, 3, 60); },  // rows at a pitch (cudaMemcpy2D)
        [](const Tensor& t) { return t.slice(0, 1, std::nullopt, 3).slice(1, 2, 9); },
        [](const Tensor& t) { return t.select(1, 5); },  // a column: stride 70
        [](const Tensor& t) {
          return t.select(0, 2).unsqueeze(0).expand({4, 70});
        },
        [](const Tensor& t) {
          return t.view({40, 7, 10}).permute({2, 0, 1});
        },
    };
    for (const auto& view : views) {
      Pair v = base.map(view);
      const int64_t before = gpu_allocator().memory_allocated();
      gpu_allocator().reset_peak_stats();
      const std::vector<double> g = v.gpu.tolist();
      CHECK(gpu_allocator().max_memory_allocated() == before);
      CHECK(g == v.cpu.tolist());
    }
  }
}

TEST_CASE("copy_from_host then copy_to_host round-trips every dtype") {
  require_gpu();
  for (ScalarType dtype : kAllDtypes) {
    Tensor host = randn({3, 5, 7}, TensorOptions{}.with_device(kCpu)).to(dtype);
    Tensor device_copy = host.to(kCuda);
    CHECK(device_copy.tolist() == host.tolist());
  }
}

TEST_CASE("gemm rejects integer dtypes before allocating anything") {
  require_gpu();
  Tensor a = empty({2, 3, 3}, TensorOptions{}.with_dtype(ScalarType::int64).with_device(kCuda));
  CHECK_THROWS_AS(gemm_into(a, a, a, 1.0, 0.0), std::invalid_argument);
}

}  // namespace
}  // namespace bytegrad::testing
