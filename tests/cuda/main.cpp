// The GPU tests' entry point: without a CUDA GPU the whole program skips (exit code 77, which ctest reads
// as "skipped" through SKIP_RETURN_CODE).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/cuda/gpu_test_helpers.h"

int main(int argc, char** argv) {
  bytegrad::testing::require_gpu();
  doctest::Context context(argc, argv);
  return context.run();
}
