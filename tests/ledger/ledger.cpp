// The ledger (reports/memory_ledger.h): at every mark of every seed and extra program, with both cuBLAS
// workspace settings, the categories sum to allocated; at chosen marks of seed001 each category equals
// the arithmetic beside it. Run on meta: the categories follow the tensors, not their values. Its own
// process: running every program on meta here changed the segment placement a later program in the same
// process saw (x_mlp_sgd_momentum_mse with default workspaces, by one 2 MiB segment): a program whose
// figures already depend on segment placement (tests/programs/check_programs.cpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "bytegrad/reports/memory_ledger.h"
#include "programs/checks.h"
#include "programs/registry.h"
#include "programs/seed_programs.h"

using namespace bytegrad;
using namespace bytegrad::programs;

namespace {

int64_t sum(const CategoryBytes& bytes) {
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  return total;
}

int64_t at(const CategoryBytes& bytes, MemoryCategory c) { return bytes[static_cast<size_t>(c)]; }

const GoldenStep& step(const std::vector<GoldenStep>& steps, const std::string& label) {
  for (const GoldenStep& s : steps)
    if (s.label == label) return s;
  FAIL("no mark " << label);
  return steps.front();
}

}  // namespace

TEST_CASE("ledger: at every mark of every program the categories sum to allocated") {
  for (Workspaces workspaces : {Workspaces::none, Workspaces::pytorch_default}) {
    std::vector<Program> programs = seed_programs();
    for (const Program& p : extra_programs()) programs.push_back(p);
    for (const Program& program : programs) {
      CAPTURE(program.name);
      for (const GoldenStep& s : run_scenario(program.name, kMeta, program.run, workspaces)) {
        CAPTURE(s.label);
        CHECK(sum(s.ledger) == s.allocated);
      }
    }
  }
}

TEST_CASE("ledger: seed001's categories as arithmetic") {
  const std::vector<GoldenStep> steps = run_scenario("seed001_mlp_estimate", kMeta, run_seed001_mlp_estimate);
  // Linear(784,1024), Linear(1024,1024), Linear(1024,10) in fp32; the 10-float bias takes a 512-byte block.
  const int64_t parameters = 784 * 1024 * 4 + 1024 * 4 + 1024 * 1024 * 4 + 1024 * 4 + 10 * 1024 * 4 + 512;
  CHECK(parameters == 7455232);
  const int64_t data = 256 * 784 * 4 + 256 * 8;  // x (fp32) and the int64 targets: inputs are `other`
  const int64_t hidden = 256 * 1024 * 4;         // one ReLU output
  const int64_t logits = 256 * 10 * 4;

  const GoldenStep model = step(steps, "model");
  CHECK(at(model.ledger, MemoryCategory::parameter) == parameters);
  CHECK(at(model.ledger, MemoryCategory::other) == 0);

  // Each ReLU saves its output, which the next Linear saves too: two activations. The Linears' outputs
  // before the ReLUs are freed; the first Linear's input x is a leaf (other); the logits are the user's.
  const GoldenStep forward = step(steps, "forward");
  CHECK(at(forward.ledger, MemoryCategory::activation) == 2 * hidden);
  CHECK(at(forward.ledger, MemoryCategory::other) == data + logits);
  CHECK(at(forward.ledger, MemoryCategory::gradient) == 0);

  // Backward released the activations and left one gradient per parameter; the loss (a 512-byte block)
  // and the logits stay, held by the program.
  const GoldenStep backward = step(steps, "backward");
  CHECK(at(backward.ledger, MemoryCategory::gradient) == parameters);
  CHECK(at(backward.ledger, MemoryCategory::activation) == 0);
  CHECK(at(backward.ledger, MemoryCategory::autograd_temporary) == 0);
  CHECK(at(backward.ledger, MemoryCategory::other) == data + logits + 512);

  const GoldenStep zero_grad = step(steps, "zero_grad_none");
  CHECK(at(zero_grad.ledger, MemoryCategory::gradient) == 0);
  CHECK(at(zero_grad.ledger, MemoryCategory::parameter) == parameters);
}

TEST_CASE(
    "ledger: PyTorch's default workspaces are `workspace`: 32 MiB + 1 MiB forward, 32 MiB for backward's thread") {
  const std::vector<GoldenStep> steps =
      run_scenario("seed001_mlp_estimate", kMeta, run_seed001_mlp_estimate, Workspaces::pytorch_default);
  CHECK(at(step(steps, "forward").ledger, MemoryCategory::workspace) == 33554432 + 1048576);
  CHECK(at(step(steps, "backward").ledger, MemoryCategory::workspace) == 2 * 33554432 + 1048576);
}
