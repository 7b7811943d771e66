// CUBLAS_WORKSPACE_CONFIG and CUBLASLT_WORKSPACE_SIZE on bad input: a number that does not fit, or a
// workspace total that overflows, throws std::invalid_argument naming the variable, the text and the
// accepted syntax (it used to be a bare "stoull" std::out_of_range, or a silently wrapped size), and
// allocates nothing. Valid settings keep their sizes.
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "helpers.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// The std::invalid_argument message of blas_workspace_bytes(kSim) under CUBLAS_WORKSPACE_CONFIG=`text`.
std::string rejection_of(const char* text) {
  ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", text);
  try {
    (void)blas_workspace_bytes(kSim);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("CUBLAS_WORKSPACE_CONFIG=" << std::string(text) << " must throw std::invalid_argument");
  return "";
}

}  // namespace

TEST_CASE("CUBLAS_WORKSPACE_CONFIG: valid settings give their sizes") {
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
    CHECK(blas_workspace_bytes(kSim) == 4096 * 1024 * 8);
  }
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", ":4096:2:16:8");
    CHECK(blas_workspace_bytes(kSim) == 8519680);
  }
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", ":0:0");
    CHECK(blas_workspace_bytes(kSim) == 0);
  }
  // No ":SIZE:COUNT" pair at all: PyTorch warns and keeps its default (32 MiB on the H100), and so do we.
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", "garbage");
    CHECK(blas_workspace_bytes(kSim) == 32 * 1024 * 1024);
  }
}

TEST_CASE("CUBLAS_WORKSPACE_CONFIG: numbers out of range and overflowing totals name the variable, text and syntax") {
  SUBCASE("a SIZE beyond 64 bits") {
    const std::string message = rejection_of(":99999999999999999999999:2");
    CHECK(contains(message, "CUBLAS_WORKSPACE_CONFIG"));
    CHECK(contains(message, ":99999999999999999999999:2"));
    CHECK(contains(message, "out of range"));
    CHECK(contains(message, ":SIZE:COUNT"));
    CHECK(contains(message, "KiB"));
  }
  SUBCASE("a COUNT beyond 64 bits") {
    CHECK(contains(rejection_of(":4096:99999999999999999999999"), "99999999999999999999999"));
  }
  SUBCASE("SIZE * 1024 overflows") {
    const std::string message = rejection_of(":18014398509481984:1");  // 2^54 KiB = 2^64 bytes
    CHECK(contains(message, "overflow"));
    CHECK(contains(message, ":SIZE:COUNT"));
  }
  SUBCASE("SIZE * 1024 * COUNT overflows") {
    CHECK(contains(rejection_of(":9007199254740992:2"), "overflow"));  // 2^63 bytes x 2
  }
  SUBCASE("the sum of the pairs overflows") {
    CHECK(contains(rejection_of(":9007199254740992:1:9007199254740992:1"), "overflow"));  // 2^63 bytes, twice
  }
}

TEST_CASE("CUBLAS_WORKSPACE_CONFIG: a rejected setting allocates no workspace and leaves the statistics") {
  fresh(kSim);
  const auto stats = caching_allocator(kSim).memory_stats();
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", ":99999999999999999999999:2");
    CHECK_THROWS_AS((void)blas_workspace(kSim), std::invalid_argument);
    CHECK_THROWS_AS((void)blas_lt_workspace(kSim), std::invalid_argument);
  }
  CHECK(caching_allocator(kSim).memory_stats() == stats);
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
    const BlasWorkspace workspace = blas_workspace(kSim);
    CHECK(workspace.bytes == 4096 * 1024 * 8);
    CHECK(allocated(kSim) == 4096 * 1024 * 8);
  }
  fresh(kSim);
}

TEST_CASE("CUBLASLT_WORKSPACE_SIZE: a non-number or an overflowing size names the variable") {
  ScopedEnv workspace("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
  {
    ScopedEnv env("CUBLASLT_WORKSPACE_SIZE", "2048");
    CHECK(blas_lt_workspace_bytes(kSim) == 2048 * 1024);
  }
  for (const char* bad : {"abc", "-1", "99999999999999999999999", "18014398509481984"}) {
    CAPTURE(bad);
    ScopedEnv env("CUBLASLT_WORKSPACE_SIZE", bad);
    const std::string message = error_of([] { (void)blas_lt_workspace_bytes(kSim); });
    CHECK(contains(message, "CUBLASLT_WORKSPACE_SIZE"));
    CHECK(contains(message, bad));
    CHECK_THROWS_AS((void)blas_lt_workspace_bytes(kSim), std::invalid_argument);
  }
}

TEST_CASE("CUBLASLT_WORKSPACE_SIZE: a bad value is refused before anything is allocated, the cuBLAS workspace too") {
  // It used to be read when the bias-fused product asked for the Lt workspace, after the result and the
  // 32 MiB cuBLAS workspace were allocated: the error came with the figures changed.
  fresh(kSim);
  ScopedEnv workspace("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
  {
    ScopedEnv env("CUBLASLT_WORKSPACE_SIZE", "garbage");
    const TensorOptions on_sim{ScalarType::float32, kSim};
    const Tensor bias = zeros({2}, on_sim), a = ones({3, 4}, on_sim), b = ones({4, 2}, on_sim);
    const auto with_operands = caching_allocator(kSim).memory_stats();
    CHECK(contains(error_of([&] { (void)addmm(bias, a, b); }), "CUBLASLT_WORKSPACE_SIZE='garbage'"));
    CHECK(contains(error_of([&] { (void)mm(a, b); }), "CUBLASLT_WORKSPACE_SIZE='garbage'"));
    CHECK_THROWS_AS((void)blas_workspace(kSim), std::invalid_argument);
    CHECK(caching_allocator(kSim).memory_stats() == with_operands);  // every counter: nothing was allocated
  }
  CHECK(allocated(kSim) == 0);
  fresh(kSim);
}

TEST_CASE("set_blas_workspace_config: only ':SIZE:COUNT' pairs; a forgotten colon or garbage keeps the setting") {
  // The variable keeps PyTorch's rule (no pair found: its warning and the default 32 MiB, measured on the
  // H100 for CUBLAS_WORKSPACE_CONFIG=0:0 and =garbage); in code the text must be pairs and nothing else.
  set_blas_workspace_config(":0:0");
  for (const char* bad : {"0:0", "garbage", ":4096", ":4096:8,", " :4096:8", ":4096:8:", "", ":a:1", "::8"}) {
    CAPTURE(bad);
    const std::string message = error_of([&] { set_blas_workspace_config(std::string(bad)); });
    CHECK(contains(message, "CUBLAS_WORKSPACE_CONFIG='" + std::string(bad) + "'"));
    CHECK(contains(message, ":SIZE:COUNT"));
    CHECK(blas_workspace_bytes(kSim) == 0);  // the previous setting, :0:0, stays
  }
  set_blas_workspace_config(":4096:2:16:8");
  CHECK(blas_workspace_bytes(kSim) == 4096 * 1024 * 2 + 16 * 1024 * 8);  // 8519680
  set_blas_workspace_config(std::nullopt);
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", "0:0");
    CHECK(blas_workspace_bytes(kSim) == 32 * 1024 * 1024);
  }
}
