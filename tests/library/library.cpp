// The library as a user's program sees it: only the two public headers, torch.cuda's memory functions,
// human units, MemoryProbe and FreshDevice, and the BLAS workspace setting in code. Figures are PyTorch's
// rules written out: blocks are multiples of 512 bytes, requests up to 1 MiB share 2 MiB small-pool
// segments, the cuBLAS workspace is 4096 KiB x 8 = 33554432 B on the modelled H100 and the cuBLASLt one
// 1024 KiB = 1048576 B (shared/reference/pytorch-caching-allocator.md; shared/golden/scenarios-default-workspace).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include <bytegrad/bytegrad.h>
#include <bytegrad/testing.h>

using namespace bytegrad;
using bytegrad::testing::FreshDevice;
using bytegrad::testing::MemoryEvent;
using bytegrad::testing::MemoryProbe;

namespace {

// Restores the cuBLAS workspace setting a test changed, whatever happens in it.
struct WorkspaceSetting {
  explicit WorkspaceSetting(const char* config) { set_blas_workspace_config(config); }
  ~WorkspaceSetting() { set_blas_workspace_config(std::nullopt); }
};

}  // namespace

TEST_CASE("human_bytes: binary units with the exact bytes beside them") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(512) == "512 B");
  CHECK(human_bytes(1024) == "1.00 KiB (1024 B)");
  CHECK(human_bytes(-1536) == "-1.50 KiB (-1536 B)");
  CHECK(human_bytes(4194304) == "4.00 MiB (4194304 B)");  // 4 * 1024 * 1024
  CHECK(human_bytes(int64_t{3} << 30) == "3.00 GiB (3221225472 B)");
}

TEST_CASE("torch.cuda's memory functions on a fresh sim device") {
  FreshDevice fresh(kSim);
  CHECK(memory_allocated(kSim) == 0);
  CHECK(memory_reserved(kSim) == 0);
  {
    Tensor x = empty({1000}, device(kSim));  // 1000 * 4 = 4000 B, rounded up to 4096 (8 * 512)
    CHECK(memory_allocated(kSim) == 4096);
    CHECK(memory_reserved(kSim) == 2097152);  // one small-pool segment
    CHECK(memory_stats(kSim).at("requested_bytes.all.current") == 4000);
    CHECK(memory_summary(kSim).find("PyTorch CUDA memory summary, device ID 0") != std::string::npos);
  }
  CHECK(memory_allocated(kSim) == 0);
  CHECK(max_memory_allocated(kSim) == 4096);
  CHECK(max_memory_reserved(kSim) == 2097152);
  reset_peak_memory_stats(kSim);
  CHECK(max_memory_allocated(kSim) == 0);
  CHECK(memory_reserved(kSim) == 2097152);  // cached until emptied
  empty_cache(kSim);
  CHECK(memory_reserved(kSim) == 0);
  CHECK(max_memory_reserved(kSim) == 2097152);  // peaks survive empty_cache
  CHECK(memory_stats(kSim).at("num_alloc_retries") == 0);
}

TEST_CASE("set_per_process_memory_fraction caps what the allocator may reserve") {
  // 1 GiB card with no context: a fraction of 0.25 leaves 256 MiB for segments.
  FreshDevice fresh(kMeta, SimulatedCapacity{.total_bytes = size_t{1} << 30, .context_bytes = 0});
  set_per_process_memory_fraction(0.25, kMeta);
  Tensor fits = empty({200 * 1024 * 1024 / 4}, device(kMeta));  // 200 MiB
  CHECK(memory_allocated(kMeta) == 200 * 1024 * 1024);
  CHECK_THROWS_AS(empty({100 * 1024 * 1024 / 4}, device(kMeta)), OutOfMemoryError);  // 300 MiB > 256 MiB
  CHECK(memory_allocated(kMeta) == 200 * 1024 * 1024);
  const auto [free_bytes, total_bytes] = mem_get_info(kMeta);
  CHECK(total_bytes == int64_t{1} << 30);
  CHECK(free_bytes == (int64_t{1} << 30) - memory_reserved(kMeta));
}

TEST_CASE("cpu is not cached: the host counts, and the cache functions name the device") {
  const int64_t before = memory_allocated(kCpu);
  {
    Tensor x = empty({256}, device(kCpu));
    CHECK(memory_allocated(kCpu) - before == 1024);  // 256 * 4, not rounded
  }
  CHECK(memory_allocated(kCpu) == before);
  CHECK_THROWS_WITH_AS(memory_reserved(kCpu), doctest::Contains("memory_reserved(cpu)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(empty_cache(kCpu), doctest::Contains("cpu memory is not cached"), std::invalid_argument);
  CHECK_THROWS_AS(MemoryProbe{kCpu}, std::invalid_argument);
  CHECK_THROWS_AS(FreshDevice{kCpu}, std::invalid_argument);
  CHECK_THROWS_AS(FreshDevice{kCuda}, std::invalid_argument);
}

TEST_CASE("FreshDevice: an empty allocator for the scope, the previous one back after, untouched") {
  Tensor outer = empty({1024}, device(kSim));  // 4096 B in the allocator the process had
  const int64_t outer_allocated = memory_allocated(kSim);
  const int64_t outer_reserved = memory_reserved(kSim);
  {
    FreshDevice fresh(kSim);
    CHECK(fresh.device() == kSim);
    CHECK(memory_allocated(kSim) == 0);
    CHECK(memory_reserved(kSim) == 0);
    Tensor inner = empty({256}, device(kSim));
    CHECK(memory_allocated(kSim) == 1024);
    outer = Tensor();  // freed into its own allocator, not the fresh one
    CHECK(memory_allocated(kSim) == 1024);
  }
  CHECK(memory_allocated(kSim) == outer_allocated - 4096);
  CHECK(memory_reserved(kSim) == outer_reserved);
}

TEST_CASE("FreshDevice: a tensor that outlives the scope keeps working") {
  Tensor survivor;
  {
    FreshDevice fresh(kSim);
    survivor = ones({4}, device(kSim));
  }
  CHECK(survivor.sum().item() == 4.0);
  survivor = Tensor();  // frees into the retired allocator without touching the current one
}

TEST_CASE("the cold first matrix product parks the BLAS workspaces; set_blas_workspace_config turns them off") {
  auto product_delta = [] {
    Tensor x = ones({2, 4}, device(kSim));
    nn::Linear layer(4, 128, true, device(kSim));  // output 2 x 128 floats = 1024 B
    MemoryProbe probe(kSim);
    Tensor cold = layer.forward(x);
    const int64_t cold_delta = probe.allocated_delta();
    Tensor warm = layer.forward(x);
    return std::pair{cold_delta, probe.allocated_delta() - cold_delta};
  };
  {
    FreshDevice fresh(kSim);
    const auto [cold, warm] = product_delta();
    CHECK(cold == 33554432 + 1048576 + 1024);  // cuBLAS + cuBLASLt workspaces + the output = 34604032
    CHECK(warm == 1024);
  }
  {
    FreshDevice fresh(kSim);
    WorkspaceSetting off(":0:0");
    const auto [cold, warm] = product_delta();
    CHECK(cold == 1024);
    CHECK(warm == 1024);
  }
  CHECK_THROWS_WITH_AS(set_blas_workspace_config(":99999999999999999999999:8"), doctest::Contains("out of range"),
                       std::invalid_argument);
}

TEST_CASE("MemoryProbe: deltas, the peak since the probe, blocks, requested bytes and events by op") {
  FreshDevice fresh(kSim);
  Tensor before = empty({1024}, device(kSim));  // 4096 B that the probe does not count
  MemoryProbe probe(kSim);
  CHECK(probe.allocated_delta() == 0);
  CHECK(probe.peak_allocated_delta() == 0);
  Tensor a = ones({300}, device(kSim));  // 1200 B requested, 1536 B block
  {
    Tensor t = relu(a);  // another 1536 B, freed at the end of the scope
    CHECK(probe.allocated_delta() == 3072);
  }
  before = Tensor();  // -4096
  CHECK(probe.allocated_delta() == 1536 - 4096);
  CHECK(probe.peak_allocated_delta() == 3072);
  CHECK(probe.blocks_delta() == 0);  // one made, one from before freed
  CHECK(probe.requested_delta() == 1200 - 4096);
  CHECK(probe.reserved_delta() == 0);  // all in the segment the first tensor opened

  const std::vector<MemoryEvent> events = probe.events();
  REQUIRE(events.size() == 4);
  CHECK(events[0].kind == MemoryEvent::Kind::alloc);
  CHECK(events[0].op == "ones");
  CHECK(events[0].requested_bytes == 1200);
  CHECK(events[0].block_bytes == 1536);
  CHECK(events[1].op == "relu");
  CHECK(events[2].kind == MemoryEvent::Kind::free);
  CHECK(events[2].op == "relu");  // the op that made the freed block
  CHECK(events[3].op == "earlier");
  CHECK(events[3].block_bytes == 4096);
}

TEST_CASE("MemoryProbe: a failed check says expected, actual and the ops behind the difference") {
  FreshDevice fresh(kSim);
  MemoryProbe probe(kSim);
  Tensor a = ones({256}, device(kSim));
  Tensor b = relu(a);
  CHECK(probe.allocated_delta_is(2048));
  const testing::DeltaCheck wrong = probe.allocated_delta_is(1024);
  CHECK_FALSE(static_cast<bool>(wrong));
  std::ostringstream printed;
  printed << wrong;
  CHECK(printed.str() ==
        "allocated delta on sim: expected 1.00 KiB (1024 B), got 2.00 KiB (2048 B), "
        "1.00 KiB (1024 B) more; blocks made since the probe and still live, by op: "
        "+1024 ones, +1024 relu");
}

TEST_CASE("MemoryProbe refuses figures from an allocator it did not start on") {
  MemoryProbe probe(kSim);
  FreshDevice fresh(kSim);
  CHECK_THROWS_WITH_AS(probe.allocated_delta(), doctest::Contains("given another allocator"), std::logic_error);
}

TEST_CASE("MemoryStory: what each mark added and freed, by op, in block bytes and human units") {
  FreshDevice fresh(kSim);
  MemoryStory story(kSim);
  Tensor a = ones({1024}, device(kSim));  // 4096 B
  Tensor b = relu(a);                     // 4096 B
  MemoryChange first = story.mark();
  CHECK_FALSE(first.device_reconfigured);
  REQUIRE(first.added.size() == 2);
  CHECK(first.added[0].bytes == 4096);
  CHECK(first.net_bytes() == 8192);
  CHECK(first.str() == "+4.00 KiB (4096 B) ones, +4.00 KiB (4096 B) relu");

  a = Tensor();  // freed: made before the mark
  {
    Tensor t = b * 2;  // made and freed between the marks
  }
  Tensor c = empty({100}, device(kSim));  // 400 B requested, a 512-byte block
  const MemoryChange second = story.mark();
  CHECK(second.net_bytes() == 512 - 4096);
  CHECK(second.transient_blocks == 1);
  CHECK(second.str() == "-4.00 KiB (4096 B) ones (earlier), +512 B empty; 1 transient blocks");
  CHECK(story.since_last_mark() == "no change");
}

TEST_CASE("MemoryStory: each story reads the history on its own; another's end or record_history leaves it be") {
  FreshDevice fresh(kSim);
  const int64_t four_mib = 1024 * 1024 * 4;  // ones({1024, 1024}) in float32: 4194304 B
  auto first = std::make_unique<MemoryStory>(kSim);
  MemoryStory second(kSim);
  first.reset();  // the end of one story used to stop (and clear) the history the other one reads
  Tensor a = ones({1024, 1024}, device(kSim));
  MemoryChange change = second.mark();
  CHECK_FALSE(change.device_reconfigured);
  CHECK(change.net_bytes() == four_mib);
  CHECK(change.str() == "+4.00 MiB (4194304 B) ones");

  // The user's switch, on and off, while the story reads: it neither clears nor restarts the story's history.
  caching_allocator(kSim).record_history(true);
  Tensor b = ones({1024, 1024}, device(kSim));
  caching_allocator(kSim).record_history(false);
  CHECK_FALSE(caching_allocator(kSim).history_enabled());  // the user's switch is off; the story still records
  Tensor c = zeros({1024, 1024}, device(kSim));
  change = second.mark();
  CHECK_FALSE(change.device_reconfigured);
  CHECK(change.net_bytes() == 2 * four_mib);
  CHECK(change.str() == "+4.00 MiB (4194304 B) ones, +4.00 MiB (4194304 B) zeros");

  // A story begun while the user records reads only what comes after it; a MemoryProbe alongside it too.
  caching_allocator(kSim).record_history(true);
  MemoryStory third(kSim);
  Tensor d;
  {
    MemoryProbe probe(kSim);
    a = Tensor();                         // made before the third story: not in its account
    d = ones({512, 1024}, device(kSim));  // 512 * 1024 * 4 = 2097152 B
    CHECK(probe.allocated_delta() == 2097152 - four_mib);
  }
  CHECK(third.mark().str() == "+2.00 MiB (2097152 B) ones");
  CHECK(second.mark().str() == "-4.00 MiB (4194304 B) ones (earlier), +2.00 MiB (2097152 B) ones");
  caching_allocator(kSim).record_history(false);
}

TEST_CASE("MemoryStory keeps its marks; write_memory_report writes them into one self-contained page") {
  FreshDevice fresh(kSim);
  MemoryStory story(kSim);
  Tensor a = ones({1024}, device(kSim));  // 4096 B
  story.mark("ones");
  Tensor b = relu(a);  // 4096 B more
  story.mark();        // named "mark 2"
  REQUIRE(story.marks().size() == 2);
  CHECK(story.marks()[0].label == "ones");
  CHECK(story.marks()[0].allocated == 4096);
  CHECK(story.marks()[1].label == "mark 2");
  CHECK(story.marks()[1].allocated == 8192);
  CHECK(story.marks()[1].ledger[static_cast<size_t>(MemoryCategory::other)] == 8192);
  CHECK(story.marks()[0].event < story.marks()[1].event);  // each mark's entry in the history, in order

  const std::string page = memory_report_html(story, {.title = "two marks", .subtitle = ""});
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("<title>two marks</title>") != std::string::npos);
  CHECK(page.find("{\"label\": \"ones\", \"event\": " + std::to_string(story.marks()[0].event) +
                  ", \"figures\": {\"allocated\": 4096,") != std::string::npos);
  CHECK(page.find(" src=") == std::string::npos);  // nothing to fetch
}

TEST_CASE("memory_ledger: parameters, gradients, optimizer state and activations, with owners; the peak") {
  FreshDevice fresh(kSim);
  WorkspaceSetting off(":0:0");
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(64, 256, true, device(kSim)));  // weight 64*256*4 = 65536, bias 1024
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(256, 1, true, device(kSim)));  // weight 1024, bias 4 -> 512
  const int64_t parameters = 65536 + 1024 + 1024 + 512;
  Tensor x = randn({32, 64}, device(kSim));  // 8192 B, a leaf: other

  MemoryLedger ledger = memory_ledger(kSim);
  CHECK(ledger[MemoryCategory::parameter] == parameters);
  CHECK(ledger[MemoryCategory::other] == 8192);
  REQUIRE_FALSE(ledger.largest.empty());
  CHECK(ledger.largest[0].owner == "0.weight");  // named by its path in the model
  CHECK(ledger.largest[0].bytes == 65536);

  Tensor loss = (*model)(x).sum();
  ledger = memory_ledger(kSim);
  CHECK(ledger[MemoryCategory::activation] == 32 * 256 * 4);  // the ReLU output, saved by ReLU and the Linear
  loss.backward();
  ledger = memory_ledger(kSim);
  CHECK(ledger[MemoryCategory::gradient] == parameters);
  CHECK(ledger[MemoryCategory::activation] == 0);
  // The largest blocks now: 0.weight and its gradient, 65536 B each; the gradient is named after it.
  REQUIRE(ledger.largest.size() >= 2);
  CHECK(ledger.largest[0].bytes == 65536);
  CHECK(ledger.largest[1].bytes == 65536);
  const bool grad_named = ledger.largest[0].owner == "0.weight.grad" || ledger.largest[1].owner == "0.weight.grad";
  CHECK_MESSAGE(grad_named, ledger.str());
  const PeakReport peak = peak_report(kSim);
  CHECK(peak.record.allocated == max_memory_allocated(kSim));
  int64_t at_peak = 0;
  for (int64_t b : peak.record.bytes) at_peak += b;
  CHECK(at_peak == peak.record.allocated);

  optim::Adam adam(model->parameters(), 1e-3);
  adam.step();
  ledger = memory_ledger(kSim);
  CHECK(ledger[MemoryCategory::optimizer_state] == 2 * parameters);  // exp_avg and exp_avg_sq
  adam.zero_grad();
  CHECK(memory_ledger(kSim)[MemoryCategory::gradient] == 0);

  int64_t total = 0;
  for (int64_t b : memory_ledger(kSim).bytes) total += b;
  CHECK(total == memory_allocated(kSim));
  const MemoryLedger last = memory_ledger(kSim);
  CHECK(last.reserved == last.allocated + last.cached_in_split_segments + last.cached_whole_segments);
  CHECK(last.allocated == last.requested + last.rounding);
  CHECK(last.str().find("optimizer_state") != std::string::npos);
}

TEST_CASE("a gradient stops being one when it is no longer the .grad; a user's copy is then `other`") {
  FreshDevice fresh(kSim);
  Tensor w = ones({256}, device(kSim)).requires_grad_();  // 1024 B leaf, not registered: other
  Tensor loss = (w * 2).sum();
  loss.backward();
  CHECK(memory_ledger(kSim)[MemoryCategory::gradient] == 1024);
  Tensor kept = w.grad();
  w.set_grad(Tensor());
  CHECK(memory_ledger(kSim)[MemoryCategory::gradient] == 0);
  CHECK(memory_ledger(kSim)[MemoryCategory::other] == 1024 + 1024 + 512);  // w, the kept gradient, the loss
}
