// The seed programs (programs/seed_programs/) on a real GPU, against the goldens PyTorch 2.11 recorded on an H100:
// seed004's three attention programs and seed002's tensor part, every figure at every mark.
// The golden conditions set CUBLAS_WORKSPACE_CONFIG=:0:0 before the first matmul, as the goldens were
// taken. Segments come from the real driver here; best fit's ties go by the placement model's addresses
// (RawMemory::tie_address), as on sim and meta.
#include "programs/seed_programs.h"
#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/scenario_checks.h"

namespace bytegrad::testing {
namespace {

TEST_CASE("seed004 attention programs on cuda match the goldens at every mark") {
  require_gpu();
  check_against_golden("seed004_attention_function", kCuda, programs::run_seed004_attention_function);
  check_against_golden("seed004_attention_global", kCuda, programs::run_seed004_attention_global);
  check_against_golden("seed004_x_plus_1", kCuda, programs::run_seed004_x_plus_1);
}

TEST_CASE("seed002 small linear (parameters as tensors) on cuda matches the golden at every mark") {
  require_gpu();
  check_against_golden("seed002_small_linear", kCuda, programs::run_seed002_small_linear);
}

}  // namespace
}  // namespace bytegrad::testing
