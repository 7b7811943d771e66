// Random workloads recorded in real PyTorch 2.11 on the H100 (tests/data/pytorch_random/README.md): every
// event's allocated/reserved/segments and the final memory_summary() must match, under each trace's
// allocator configuration.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/trace_replay.h"

using namespace bytegrad;

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void check_recorded_trace(const std::string& name) {
  const std::string base = std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_random/" + name;
  std::ifstream in(base + ".trace");
  REQUIRE(in.good());
  std::string header;
  std::getline(in, header);
  REQUIRE(header.rfind("# alloc_conf=", 0) == 0);
  const std::string conf = header.substr(std::string("# alloc_conf=").size());
  in.seekg(0);
  auto events = parse_trace(in);
  CachingAllocator allocator(make_host_backed_raw_memory({}), AllocatorConfig::parse(conf));
  ReplayResult result = replay_trace(events, allocator);
  auto difference = first_difference(result.lines, read_lines(base + ".golden"));
  CHECK_MESSAGE(!difference, name << " (" << conf << "): " << difference.value_or(""));
  std::vector<std::string> summary;
  std::istringstream summary_text(result.summary);
  for (std::string line; std::getline(summary_text, line);) summary.push_back(line);
  auto summary_difference = first_difference(summary, read_lines(base + ".summary"));
  CHECK_MESSAGE(!summary_difference, name << " summary: " << summary_difference.value_or(""));
}

}  // namespace

TEST_CASE("random workloads recorded in PyTorch replay event for event") {
  for (const char* name : {"random_c0_s1", "random_c1_s1", "random_c2_s2", "random_c3_s1", "random_c4_s2",
                           "random_first_large", "random_expandable_s1"}) {
    SUBCASE(name) { check_recorded_trace(name); }
  }
}
