// NCCL's memory outside the allocator in the reports (memory/outside_allocator.h): a process group on a
// device registers its figures, and the ledger, the memory summary, the peak and out-of-memory reports and
// the HTML report show them on a line of their own, never in allocated or reserved. On sim and meta the
// figures are the model measured on two H200s (NCCL 2.28.3, per rank): the communicator 205,520,896 B
// (196 MiB = 196 * 1048576) from the group's first collective, the first all_reduce 301,989,888 B
// (288 MiB = 288 * 1048576) from its first collective on the ring (all_reduce, barrier, all_gather or
// reduce_scatter; named after it), not from a broadcast.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/memory/outside_allocator.h"
#include "bytegrad/reports/memory_ledger.h"
#include "bytegrad/reports/memory_report.h"
#include "bytegrad/reports/memory_summary.h"
#include "bytegrad/tensor/ops.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::FreshDevice;
using bytegrad::testing::small_card;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The simulated card's context: total - free - reserved on sim, the line's "CUDA context".
const std::string kContext = "CUDA context 526.81 MiB (552402944 B)";  // kSimDefaultContextBytes
const std::string kCommunicator = "NCCL communicator 196.00 MiB (205520896 B)";
const std::string kFirstAllReduce = "first all_reduce 288.00 MiB (301989888 B)";

}  // namespace

TEST_CASE("outside the allocator: a fake group's modelled NCCL memory, from its first collective") {
  FreshDevice fresh(kSim, small_card());
  auto pg = make_fake_process_group(0, 2, kSim);
  Tensor x = zeros({1024}, device(kSim));  // 4096 B: one 2 MiB small segment
  CHECK_FALSE(pg->outside_allocator_figures());
  CHECK(outside_allocator_line(kSim).empty());  // no communicator before the first collective
  CHECK_FALSE(memory_ledger(kSim).nccl);

  pg->broadcast(x, 0);  // the communicator is made
  CHECK(outside_allocator_line(kSim) ==
        "outside the allocator: " + kCommunicator + ", " + kContext +
            " (NCCL modelled: measured per rank on two H200s and two H100s, NCCL 2.28.3)");
  pg->all_reduce(x);
  const std::string line = outside_allocator_line(kSim);
  CHECK(line == "outside the allocator: " + kCommunicator + ", " + kFirstAllReduce + ", " + kContext +
                    " (NCCL modelled: measured per rank on two H200s and two H100s, NCCL 2.28.3)");
  pg->all_reduce(x);
  CHECK(outside_allocator_line(kSim) == line);  // only the first all_reduce adds

  // Never in the allocator's figures: the tensor's 4096 B block in its 2 MiB segment, as before.
  CHECK(memory_allocated(kSim) == 4096);
  CHECK(memory_reserved(kSim) == 2 * 1024 * 1024);
  const MemoryLedger ledger = memory_ledger(kSim);
  REQUIRE(ledger.nccl);
  CHECK(ledger.allocated == 4096);
  CHECK(ledger.outside_allocator == static_cast<int64_t>(kSimDefaultContextBytes));  // the context alone
  CHECK(has(ledger.str(), line + "\n"));
  CHECK(has(memory_summary(kSim), line + "\n"));
  CHECK(has(peak_report(kSim).str(), line + "\n"));
  CHECK_FALSE(has(memory_summary(kMeta), "outside the allocator"));  // another device: nothing

  pg.reset();  // the group is gone: so is its line
  CHECK(outside_allocator_line(kSim).empty());
  CHECK_FALSE(has(memory_summary(kSim), "outside the allocator"));
}

TEST_CASE("outside the allocator: a barrier counts as the first all_reduce; two groups on a device add up") {
  FreshDevice fresh(kSim, small_card());
  auto first = make_fake_process_group(0, 2, kSim);
  auto second = make_fake_process_group(1, 4, kSim);
  first->barrier();
  second->broadcast(zeros({4}, device(kSim)), 0);
  const auto figures = outside_allocator_figures(kSim);
  REQUIRE(figures);
  CHECK_FALSE(figures->measured);
  REQUIRE(figures->parts.size() == 2);
  CHECK(figures->parts[0].name == "communicator");
  CHECK(figures->parts[0].bytes == 2 * 205'520'896);  // two communicators
  CHECK(figures->parts[1].name == "first all_reduce");
  CHECK(figures->parts[1].bytes == 301'989'888);  // only the first group all-reduced
}

// PyTorch on four H200s (tools/probes/nccl_outside_probe.py): a new subgroup's first all_gather took 484 MiB
// (= 196 + 288), its reduce_scatter and all_reduce after it nothing.
TEST_CASE("outside the allocator: a first all_gather brings the ring's buffers, named after it") {
  FreshDevice fresh(kSim, small_card());
  auto pg = make_fake_process_group(0, 2, kSim);
  Tensor out = zeros({8}, device(kSim));
  pg->all_gather_into_tensor(out, zeros({4}, device(kSim)));
  pg->reduce_scatter_tensor(zeros({4}, device(kSim)), out);
  pg->all_reduce(out);
  const auto figures = outside_allocator_figures(kSim);
  REQUIRE(figures);
  REQUIRE(figures->parts.size() == 2);
  CHECK(figures->parts[0].bytes == 205'520'896);
  CHECK(figures->parts[1].name == "first all_gather_into_tensor");
  CHECK(figures->parts[1].bytes == 301'989'888);  // once: the reduce_scatter and all_reduce add nothing
}

TEST_CASE("outside the allocator: the out-of-memory report and the HTML report show the line") {
  FreshDevice fresh(kSim, small_card());
  auto pg = make_fake_process_group(0, 2, kSim);
  pg->all_reduce(zeros({4}, device(kSim)));
  const std::string line = outside_allocator_line(kSim);
  REQUIRE_FALSE(line.empty());

  std::string report;
  try {
    empty({int64_t{32} << 30}, device(kSim));  // 128 GiB of float32 on a 16 GiB card
  } catch (const OutOfMemoryError& e) {
    report = e.report().str();
  }
  CHECK_MESSAGE(has(report, "  " + line + "\n"), report);

  MemoryStory story(kSim);
  Tensor y = zeros({256}, device(kSim));
  story.mark("y");
  const std::string page = memory_report_html(story);
  CHECK(has(page, "\"outside_allocator\": \"" + line + "\""));
}

TEST_CASE("outside the allocator: threads ranks on meta each report their own device; cpu ranks none") {
  testing::FreshRankDevices fresh(2, DeviceType::meta);
  std::vector<std::string> lines(2);
  run_ranks(2, DeviceType::meta, [&](ProcessGroup& pg) {
    pg.all_reduce(zeros({8}, device(pg.device())));
    lines[pg.rank()] = outside_allocator_line(pg.device());
  });
  for (const std::string& line : lines) {
    CHECK(has(line, kCommunicator + ", " + kFirstAllReduce));
  }
  std::vector<int> cpu_figures(2, 1);  // not vector<bool>: its elements share bytes across threads
  run_ranks(2, DeviceType::cpu, [&](ProcessGroup& pg) {
    pg.all_reduce(zeros({8}, device(kCpu)));
    cpu_figures[pg.rank()] = pg.outside_allocator_figures().has_value() ? 1 : 0;
  });
  CHECK(cpu_figures[0] == 0);
  CHECK(cpu_figures[1] == 0);
}
