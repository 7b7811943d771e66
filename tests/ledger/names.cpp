// What the ledger, the memory_viz snapshot, the HTML report and the story call a block (issue 29's
// teaching views), on sim:
//  - optimizer state is named after its parameter ("0.weight.exp_avg", "2.bias.momentum_buffer"; "param1"
//    for a parameter no module named), not after the op that made it ("zeros", "clone");
//  - TensorNameScope / named() name a program's own tensors, whatever op allocates them;
//  - Dropout's mask is an activation "saved by NativeDropoutBackward0 (...)", as saved_tensors() lists it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/autograd/saved_tensors.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/dropout.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/reports/memory_ledger.h"
#include "bytegrad/reports/memory_report.h"
#include "bytegrad/reports/memory_story.h"
#include "bytegrad/reports/memory_viz.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/fresh_device.h"

using namespace bytegrad;

namespace {

// Every live block's owner in the ledger, by address.
std::map<uintptr_t, LedgerBlock> ledger_blocks(Device on) {
  std::map<uintptr_t, LedgerBlock> blocks;
  for (const LedgerBlock& b : memory_ledger(on, 1000).largest) blocks[b.address] = b;
  return blocks;
}

uintptr_t address_of(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

std::string owner_of(const Tensor& t, Device on = kSim) {
  const auto blocks = ledger_blocks(on);
  auto it = blocks.find(address_of(t));
  return it == blocks.end() ? "(not live)" : it->second.owner;
}

MemoryCategory category_of(const Tensor& t, Device on = kSim) {
  const auto blocks = ledger_blocks(on);
  auto it = blocks.find(address_of(t));
  REQUIRE(it != blocks.end());
  return it->second.category;
}

// The tag of the alloc entry that made the block at `t` in the history.
std::string alloc_tag(const std::vector<TraceEntry>& trace, const Tensor& t) {
  std::string tag = "(no alloc)";
  for (const TraceEntry& e : trace)
    if (e.action == TraceAction::alloc && e.address == address_of(t)) tag = e.tag;
  return tag;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("Adam's state is named after its parameter in the ledger, the history, memory_viz and the report") {
  testing::FreshDevice fresh(kSim);
  set_blas_workspace_config(":0:0");
  CachingAllocator& allocator = caching_allocator(kSim);
  MemoryStory story(kSim);
  nn::Sequential model(nn::Linear(4, 8, true, device(kSim)), nn::ReLU(), nn::Linear(8, 2, true, device(kSim)));
  optim::Adam adam(model.parameters(), 1e-3, {0.9, 0.999}, 1e-8, 0.0, /*amsgrad=*/true);
  Tensor x = randn({3, 4}, device(kSim));
  model(x).sum().backward();
  story.mark("backward");
  adam.step();
  const MemoryChange step = story.mark("step");

  const std::vector<std::string> names = {"0.weight", "0.bias", "2.weight", "2.bias"};
  const MemorySnapshot snap = allocator.snapshot();
  for (size_t p = 0; p < names.size(); ++p) {
    CAPTURE(names[p]);
    const optim::Adam::State& s = adam.state(p);
    CHECK(owner_of(s.exp_avg) == names[p] + ".exp_avg");
    CHECK(owner_of(s.exp_avg_sq) == names[p] + ".exp_avg_sq");
    CHECK(owner_of(s.max_exp_avg_sq) == names[p] + ".max_exp_avg_sq");
    CHECK(category_of(s.exp_avg) == MemoryCategory::optimizer_state);
    CHECK(alloc_tag(snap.trace, s.exp_avg) == names[p] + ".exp_avg");
    CHECK(alloc_tag(snap.trace, s.exp_avg_sq) == names[p] + ".exp_avg_sq");
  }
  // The story names them too (12 state blocks: 3 per parameter; no "zeros").
  const std::string told = step.str();
  CHECK(contains(told, "0.weight.exp_avg"));
  CHECK(!contains(told, "zeros"));
  // 12 state blocks of 512 B each and the step's temporaries: the largest 12 phrases, then a count.
  CHECK(step.added.size() >= 12);
  // The memory_viz snapshot's frames and the HTML report's tags carry the names.
  const std::string viz = memory_viz_json(allocator);
  CHECK(contains(viz, R"("name": "0.weight.exp_avg")"));
  CHECK(contains(viz, R"("name": "2.bias.max_exp_avg_sq")"));
  const std::string page = memory_report_html(story);
  CHECK(contains(page, "\"2.weight.exp_avg_sq\""));
  CHECK(!contains(page, "\"zeros\""));
}

TEST_CASE("a story of many ops lists the largest 12 and counts the rest") {
  MemoryChange change;
  for (int i = 0; i < 14; ++i) change.added.push_back({"op" + std::to_string(i), 1024 * (20 - i)});
  change.freed.push_back({"old", 512});
  // 15 phrases: op0 .. op11 listed (20 KiB down to 9 KiB); op12 (8 KiB), op13 (7 KiB) and old (512 B) counted.
  const std::string text = change.str();
  CHECK(contains(text, "+9.00 KiB (9216 B) op11, and 3 more (+15.00 KiB (15360 B), -512 B (earlier))"));
  CHECK(!contains(text, "op12"));
}

TEST_CASE("SGD's momentum buffers are named after their parameters, foreach or not; loose parameters by index") {
  for (bool foreach : {true, false}) {
    CAPTURE(foreach);
    testing::FreshDevice fresh(kSim);
    nn::Linear fc(4, 2, true, device(kSim));
    Tensor loose = randn({5}, device(kSim)).requires_grad_();  // in no module: "param2"
    optim::SGD sgd({fc.weight(), fc.bias(), loose}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .foreach = foreach});
    (fc(randn({3, 4}, device(kSim))).sum() + loose.sum()).backward();
    sgd.step();
    CHECK(owner_of(sgd.momentum_buffer(0)) == "weight.momentum_buffer");
    CHECK(owner_of(sgd.momentum_buffer(1)) == "bias.momentum_buffer");
    CHECK(owner_of(sgd.momentum_buffer(2)) == "param2.momentum_buffer");
    CHECK(category_of(sgd.momentum_buffer(2)) == MemoryCategory::optimizer_state);
  }
}

TEST_CASE("Adam's state loaded from a state dict is named after its parameter") {
  testing::FreshDevice fresh(kSim);
  nn::Linear fc(4, 2, true, device(kSim));
  optim::Adam adam(fc.parameters(), 1e-3);
  fc(randn({3, 4}, device(kSim))).sum().backward();
  adam.step();
  // A state dict on the host: loading copies each tensor onto sim, as the parameter's state.
  optim::OptimizerStateDict host = adam.state_dict();
  for (auto& [index, state] : host.state)
    for (const std::string key : {"exp_avg", "exp_avg_sq"})
      state.tensors.insert_or_assign(key, state.tensors.at(key).to(kCpu));
  optim::Adam other(fc.parameters(), 1e-3);
  other.load_state_dict(host);
  CHECK(owner_of(other.state(0).exp_avg) == "weight.exp_avg");
  CHECK(owner_of(other.state(1).exp_avg_sq) == "bias.exp_avg_sq");
}

TEST_CASE("TensorNameScope and named() name a program's tensors in the ledger, memory_viz, the report, the story") {
  testing::FreshDevice fresh(kSim);
  set_blas_workspace_config(":0:0");
  CachingAllocator& allocator = caching_allocator(kSim);
  MemoryStory story(kSim);
  Tensor batch;
  {
    TensorNameScope name("my batch");
    batch = randn({64, 784}, device(kSim));  // randn's own tag ("randn") gives way to the name
  }
  Tensor after = randn({4}, device(kSim));  // the scope has ended: the op's tag again
  const MemoryChange made = story.mark("data");
  CHECK(owner_of(batch) == "my batch");
  CHECK(owner_of(after) == "randn");
  CHECK(contains(made.str(), "+196.00 KiB (200704 B) my batch"));  // 64*784*4 = 200704
  CHECK(contains(memory_viz_json(allocator), R"("name": "my batch")"));
  CHECK(contains(memory_report_html(story), "\"my batch\""));

  // Nested scopes: the innermost name wins, the outer one comes back.
  {
    TensorNameScope outer("outer");
    Tensor a = zeros({8}, device(kSim));
    Tensor b = named("inner", [&] { return zeros({8}, device(kSim)); });
    Tensor c = zeros({8}, device(kSim));
    CHECK(owner_of(a) == "outer");
    CHECK(owner_of(b) == "inner");
    CHECK(owner_of(c) == "outer");
  }

  // A named tensor that a node saves keeps its name, with the role beside it.
  Tensor w = randn({784, 16}, device(kSim)).requires_grad_();
  Tensor hidden = named("hidden", [&] { return relu(batch.mm(w)); });
  Tensor loss = hidden.sum();
  CHECK(category_of(hidden) == MemoryCategory::activation);
  CHECK(owner_of(hidden) == "hidden (saved by ReluBackward0)");

  CHECK_THROWS_WITH_AS(TensorNameScope(""), "TensorNameScope: the name is empty", std::invalid_argument);
}

TEST_CASE("Dropout's mask is an activation in the ledger, as saved_tensors() lists it") {
  testing::FreshDevice fresh(kSim);
  nn::Sequential model(nn::Linear(16, 32, true, device(kSim)), nn::Dropout(0.5));
  Tensor x = randn({8, 16}, device(kSim));
  Tensor loss = model(x).sum();

  const SavedTensors saved = saved_tensors(loss);
  const SavedTensorReport* mask = nullptr;
  for (const SavedTensorReport& e : saved)
    if (e.node == "NativeDropoutBackward0" && e.name == "mask") mask = &e;
  REQUIRE(mask != nullptr);
  CHECK(mask->module == "1");
  CHECK(mask->dtype == ScalarType::bool_);
  CHECK(mask->block_bytes == 512);  // 8*32 bools = 256 B in one 512-byte block
  // Find the mask's block in the ledger: the one saved by NativeDropoutBackward0.
  const LedgerBlock* in_ledger = nullptr;
  const auto blocks = ledger_blocks(kSim);
  for (const auto& [address, b] : blocks)
    if (b.owner == "saved by NativeDropoutBackward0 (1)") in_ledger = &b;
  REQUIRE(in_ledger != nullptr);
  CHECK(in_ledger->category == MemoryCategory::activation);
  CHECK(in_ledger->bytes == 512);

  // Backward releases it: no activation left.
  loss.backward();
  CHECK(memory_ledger(kSim)[MemoryCategory::activation] == 0);
}
