// PyTorch's test/test_cuda.py, class TestCuda: the matrix products' memory (their peaks, and the cuBLAS
// workspace they park in the caching allocator), through bytegrad's tensor layer. sim and meta model the
// H100's cuBLAS (compute capability 9.0), as cuda on the H100 is.
#include <cstdlib>
#include <optional>
#include <string>

#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

// Sets an environment variable for a scope, and puts back what was there (or its absence).
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const char* name) : name_(name) {
    if (const char* value = std::getenv(name)) previous_ = value;
  }
  ~ScopedEnvironment() {
    if (previous_) setenv(name_, previous_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  void set(const char* value) const { setenv(name_, value, 1); }

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

}  // namespace

// PyTorch: test_cuda.py TestCuda.test_matmul_memory_use
TEST_CASE("conformance: matmul of a broadcast batch peaks as matmul and bmm of the expanded one") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    auto get_max_used = [&] {
      synchronize(device);
      const int64_t value = max_memory_allocated(device);
      reset_peak_memory_stats(device);
      return value;
    };
    Tensor a = rand({1, 32, 32}, bytegrad::device(device));
    const Tensor b = rand({24, 32, 1}, bytegrad::device(device));
    get_max_used();

    matmul(a, b);
    const int64_t matmul_mem = get_max_used();

    a = a.expand({24, 32, 32});
    matmul(a, b);
    const int64_t matmul_expand_mem = get_max_used();

    bmm(a, b);
    const int64_t bmm_mem = get_max_used();

    CHECK(matmul_expand_mem == matmul_mem);
    CHECK(bmm_mem == matmul_mem);
  });
}

// PyTorch: test_cuda.py TestCuda.test_cublas_workspace_explicit_allocation (torch.no_grad and
// preferred_blas_library("cublas") have no counterpart needed: `a` records no history, and bytegrad's
// products always run on cuBLAS's rules)
TEST_CASE("conformance: CUBLAS_WORKSPACE_CONFIG sizes the workspace a product parks, read at each product") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const ScopedEnvironment config("CUBLAS_WORKSPACE_CONFIG");
    set_blas_workspace_config(std::nullopt);  // the variable decides
    const Tensor a = randn({7, 7}, bytegrad::device(device));
    // On compute capability 9.0 (the H100, and sim and meta): 4096 KiB x 8.
    constexpr int64_t kDefaultWorkspaceSize = 4096 * 8 * 1024;

    auto check_workspace_size = [&](const Tensor& input) {
      clear_blas_workspaces();
      const int64_t start = dut.stat("active_bytes.all.allocated");
      matmul(input, input);
      const int64_t finish = dut.stat("active_bytes.all.allocated");
      return finish - start;
    };

    // the default
    config.set("");
    CHECK(check_workspace_size(a) - kDefaultWorkspaceSize < 524288);
    CHECK(std::abs(check_workspace_size(a) - kDefaultWorkspaceSize) < 524288);

    // the default, for a setting that cannot be read
    config.set("-1");
    CHECK(check_workspace_size(a) - kDefaultWorkspaceSize < 524288);
    CHECK(std::abs(check_workspace_size(a) - kDefaultWorkspaceSize) < 524288);

    // a valid setting: 128 KiB x 8 + 64 KiB x 16 + 32 KiB x 32 = 3072 KiB
    config.set(":128:8:64:16:32:32");
    CHECK(check_workspace_size(a) - 3072 * 1024 < 524288);
    CHECK(std::abs(check_workspace_size(a) - 3072 * 1024) < 524288);

    clear_blas_workspaces();
  });
}
