// Inputs the fuzzers found that broke the library, kept as plain tests.
#include <doctest/doctest.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using bytegrad::testing::ScopedEnv;

namespace {

std::string refusal_of(auto&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument");
  return {};
}

}  // namespace

TEST_CASE("regression: a CUBLAS_WORKSPACE_CONFIG with a long run of digits is refused, not a stack overflow") {
  // std::regex recursed once per digit and crashed (SIGSEGV) on runs of some tens of thousands of digits.
  const std::string huge_size = ":" + std::string(200000, '9') + ":2";
  const std::string message = refusal_of([&] { set_blas_workspace_config(huge_size); });
  CHECK(message.find("CUBLAS_WORKSPACE_CONFIG=':9999") == 0);
  CHECK(message.find("is out of range") != std::string::npos);
  CHECK(message.size() < 600);  // an excerpt of the text, not all 200004 characters
  // A long run that is no pair: refused in code (with an excerpt), the default from the variable (PyTorch's
  // rule, with its warning); a long pair list of small numbers is summed.
  const std::string no_pair_message = refusal_of([&] { set_blas_workspace_config(std::string(200000, '7')); });
  CHECK(no_pair_message.find("CUBLAS_WORKSPACE_CONFIG='7777") == 0);
  CHECK(no_pair_message.size() < 600);
  {
    ScopedEnv env("CUBLAS_WORKSPACE_CONFIG", std::string(200000, '7').c_str());
    CHECK(blas_workspace_bytes(kMeta) == size_t{4096} * 1024 * 8);
  }
  std::string many_pairs;
  for (int i = 0; i < 20000; ++i) many_pairs += ":1:1";
  set_blas_workspace_config(many_pairs);
  CHECK(blas_workspace_bytes(kMeta) == size_t{20000} * 1024);
  set_blas_workspace_config(std::nullopt);
}

TEST_CASE("regression: configuration errors quote an excerpt of a huge setting, not all of it") {
  const std::string long_key(100000, 'k');
  const std::string alloc_message = refusal_of([&] { AllocatorConfig::parse(long_key + ":1"); });
  CHECK(alloc_message.find("BYTEGRAD_ALLOC_CONF: unrecognized option 'kkkk") == 0);
  CHECK(alloc_message.find("(100000 characters)") != std::string::npos);
  CHECK(alloc_message.size() < 300);
  const std::string long_value = "max_split_size_mb:" + std::string(100000, '0') + "19";
  const std::string value_message = refusal_of([&] { AllocatorConfig::parse(long_value); });
  CHECK(value_message.find("max_split_size_mb is too small") != std::string::npos);
  CHECK(value_message.size() < 300);
}
