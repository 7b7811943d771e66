// memory_summary() (reference section 10.1): the measured table after step "del e" of section 13, character
// for character; the abbreviated form; the 77-character lines; and the unit rules of the cell formatters.
#include <doctest/doctest.h>

#include <sstream>

#include "helpers.h"
#include "bytegrad/reports/memory_summary.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// Copied from reference section 10.1: "Measured output, 2.11, in the state after step "del e" of the test
// vector in section 13".
const char* const kMeasuredSummary =
    "|===========================================================================|\n"
    "|                  PyTorch CUDA memory summary, device ID 0                 |\n"
    "|---------------------------------------------------------------------------|\n"
    "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
    "|===========================================================================|\n"
    "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Allocated memory      |  57344 KiB |  77824 KiB |  77824 KiB |  20480 KiB |\n"
    "|       from large pool |  56320 KiB |  76800 KiB |  76800 KiB |  20480 KiB |\n"
    "|       from small pool |   1024 KiB |   1024 KiB |   1024 KiB |      0 KiB |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Active memory         |  57344 KiB |  77824 KiB |  77824 KiB |  20480 KiB |\n"
    "|       from large pool |  56320 KiB |  76800 KiB |  76800 KiB |  20480 KiB |\n"
    "|       from small pool |   1024 KiB |   1024 KiB |   1024 KiB |      0 KiB |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Requested memory      |  55808 KiB |  76287 KiB |  76287 KiB |  20479 KiB |\n"
    "|       from large pool |  54784 KiB |  75263 KiB |  75263 KiB |  20479 KiB |\n"
    "|       from small pool |   1024 KiB |   1024 KiB |   1024 KiB |      0 KiB |\n"
    "|---------------------------------------------------------------------------|\n"
    "| GPU reserved memory   |  90112 KiB |  90112 KiB |  90112 KiB |      0 B   |\n"
    "|       from large pool |  88064 KiB |  88064 KiB |  88064 KiB |      0 B   |\n"
    "|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Non-releasable memory |  12287 KiB |  23552 KiB |  44031 KiB |  31744 KiB |\n"
    "|       from large pool |  11264 KiB |  22528 KiB |  41984 KiB |  30720 KiB |\n"
    "|       from small pool |   1023 KiB |   2047 KiB |   2047 KiB |   1024 KiB |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Allocations           |       5    |       8    |       8    |       3    |\n"
    "|       from large pool |       3    |       6    |       6    |       3    |\n"
    "|       from small pool |       2    |       2    |       2    |       0    |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Active allocs         |       5    |       8    |       8    |       3    |\n"
    "|       from large pool |       3    |       6    |       6    |       3    |\n"
    "|       from small pool |       2    |       2    |       2    |       0    |\n"
    "|---------------------------------------------------------------------------|\n"
    "| GPU reserved segments |       5    |       5    |       5    |       0    |\n"
    "|       from large pool |       4    |       4    |       4    |       0    |\n"
    "|       from small pool |       1    |       1    |       1    |       0    |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Non-releasable allocs |       2    |       3    |       4    |       2    |\n"
    "|       from large pool |       1    |       2    |       3    |       2    |\n"
    "|       from small pool |       1    |       1    |       1    |       0    |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Oversize allocations  |       0    |       0    |       0    |       0    |\n"
    "|---------------------------------------------------------------------------|\n"
    "| Oversize GPU segments |       0    |       0    |       0    |       0    |\n"
    "|===========================================================================|\n";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every line is 75 columns wrapped in |...| (77 characters), and the text ends with a newline.
void check_layout(const std::string& summary) {
  REQUIRE_FALSE(summary.empty());
  CHECK(summary.back() == '\n');
  for (const std::string& line : lines_of(summary)) {
    INFO("line '" << line << "'");
    CHECK(line.size() == 77);
    CHECK(line.front() == '|');
    CHECK(line.back() == '|');
  }
}

}  // namespace

TEST_CASE("memory_summary after section 13's \"del e\" equals the measured output") {
  auto allocator = make_allocator();
  Section13 v(*allocator);
  v.run_through("del e (segment whole again)");
  const std::string summary = memory_summary(*allocator);
  CHECK(summary == kMeasuredSummary);
  check_layout(summary);
  CHECK(lines_of(summary).size() == 47);
}

TEST_CASE("memory_summary(abbreviated=true) drops the \"from ... pool\" rows") {
  auto allocator = make_allocator();
  Section13 v(*allocator);
  v.run_through("del e (segment whole again)");
  std::string expected;
  for (const std::string& line : lines_of(kMeasuredSummary))
    if (line.find("      from large pool") == std::string::npos &&
        line.find("      from small pool") == std::string::npos)
      expected += line + "\n";
  const std::string abbreviated = memory_summary(*allocator, true);
  CHECK(abbreviated == expected);
  CHECK(lines_of(abbreviated).size() == 47 - 9 * 2);  // 9 pool metrics lose two rows each
  check_layout(abbreviated);
}

TEST_CASE("memory_summary layout holds in other states") {
  auto allocator = make_allocator({}, {64 * MiB, 0});
  check_layout(memory_summary(*allocator));  // fresh: all zero
  allocator->malloc(40 * MiB);
  try {
    allocator->malloc(30 * MiB);
  } catch (const std::exception&) {}
  const std::string summary = memory_summary(*allocator);
  check_layout(summary);
  // Line 4: "  {_:9} CUDA OOMs: {num_ooms:<12d} | {_:6} cudaMalloc retries: {num_alloc_retries:<8d}  "
  CHECK(lines_of(summary)[3] == "|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |");
}

TEST_CASE("memory_summary cell units follow the all row of each column") {
  // Crafted stats through the formatter (section 10.1 rules):
  // bytes: f"{sz:6d} {prefix}", stepping to the next prefix while the all-row value is >= 768 * 1024 of the
  // current unit (sz //= 1024); counts: f"{cnt:7d} {prefix} ", stepping while >= 750 * 1000 (cnt //= 1000).
  std::map<std::string, int64_t> stats;
  stats["allocated_bytes.all.current"] = 786431;  // < 768 KiB: "786431 B  "
  stats["allocated_bytes.large_pool.current"] = 786000;
  stats["allocated_bytes.all.peak"] = 786432;          // 768 KiB: "   768 KiB"
  stats["allocated_bytes.small_pool.peak"] = 1023;     // unit from the all row: 1023 // 1024 = "     0 KiB"
  stats["allocated_bytes.all.allocated"] = 805306368;  // 768 MiB: "   768 MiB"
  stats["allocated_bytes.all.freed"] = 1048576;        // 1 MiB: "  1024 KiB"
  stats["allocation.all.current"] = 749999;            // "  749999   "
  stats["allocation.all.peak"] = 750000;               // "    750 K  "
  stats["allocation.large_pool.peak"] = 1999;          // unit from the all row: 1999 // 1000 = "      1 K  "
  stats["oversize_segments.current"] = 3;              // "      3    "
  stats["num_ooms"] = 2;
  stats["num_alloc_retries"] = 5;
  const auto lines = lines_of(format_memory_summary(stats, 1, false));
  REQUIRE(lines.size() == 47);
  // {_:16} PyTorch CUDA memory summary, device ID {device:<17d}
  CHECK(lines[1] == "|                  PyTorch CUDA memory summary, device ID 1                 |");
  CHECK(lines[3] == "|            CUDA OOMs: 2            |        cudaMalloc retries: 5         |");
  CHECK(lines[5] == "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |");
  CHECK(lines[7] == "| Allocated memory      | 786431 B   |    768 KiB |    768 MiB |   1024 KiB |");
  CHECK(lines[8] == "|       from large pool | 786000 B   |      0 KiB |      0 MiB |      0 KiB |");
  CHECK(lines[9] == "|       from small pool |      0 B   |      0 KiB |      0 MiB |      0 KiB |");
  CHECK(lines[27] == "| Allocations           |  749999    |     750 K  |       0    |       0    |");
  CHECK(lines[28] == "|       from large pool |       0    |       1 K  |       0    |       0    |");
  CHECK(lines[45] == "| Oversize GPU segments |       3    |       0    |       0    |       0    |");
  CHECK(lines[44] == "|---------------------------------------------------------------------------|");
  CHECK(lines[46] == "|===========================================================================|");
}
