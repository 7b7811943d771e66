// The memory-fraction cap under allocator settings, as PyTorch 2.11 behaved on the H100
// (tools/probes/pytorch_fraction_probe.py; tests/data/pytorch_fraction/README.md): the same allocations and
// frees on a simulated card of the H100's size give the same allocated, reserved and OOM count after
// every step.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/memory/raw_memory.h"

using namespace bytegrad;

namespace {

void replay_fraction_probe(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::string header;
  std::getline(in, header);
  // "# alloc_conf=<setting> total=<bytes>"
  const size_t conf_at = header.find("alloc_conf="), total_at = header.find(" total=");
  REQUIRE_MESSAGE((conf_at != std::string::npos && total_at != std::string::npos), path << ": bad header");
  const std::string conf = header.substr(conf_at + 11, total_at - conf_at - 11);
  const size_t total = std::stoull(header.substr(total_at + 7));
  CachingAllocator allocator(make_host_backed_raw_memory({.total_bytes = total, .context_bytes = 0}),
                             AllocatorConfig::parse(conf));
  std::map<std::string, void*> live;
  int line_number = 1;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const size_t arrow = line.find(" -> ");
    REQUIRE_MESSAGE(arrow != std::string::npos, path << ":" << line_number << ": no figures");
    std::istringstream op(line.substr(0, arrow)), want(line.substr(arrow + 4));
    std::string kind, name;
    op >> kind;
    if (kind == "fraction") {
      std::string fraction;
      op >> fraction;
      allocator.set_memory_fraction(std::strtod(fraction.c_str(), nullptr));  // Python's repr: the same double
    } else if (kind == "alloc") {
      size_t bytes = 0;
      op >> name >> bytes;
      try {
        live[name] = allocator.malloc(bytes);
      } catch (const OutOfMemoryError&) {}
    } else if (kind == "free") {
      op >> name;
      if (auto it = live.find(name); it != live.end()) {
        allocator.free(it->second);
        live.erase(it);
      }
    } else {
      REQUIRE_MESSAGE(kind == "empty_cache", path << ":" << line_number << ": unknown step " << kind);
      allocator.empty_cache();
    }
    int64_t allocated = 0, reserved = 0, ooms = 0;
    want >> allocated >> reserved >> ooms;
    const auto stats = allocator.memory_stats();
    INFO(path.filename().string() << ":" << line_number << " (" << conf << "): " << line);
    CHECK(stats.at("allocated_bytes.all.current") == allocated);
    CHECK(stats.at("reserved_bytes.all.current") == reserved);
    CHECK(stats.at("num_ooms") == ooms);
  }
  for (auto& [name, ptr] : live) allocator.free(ptr);
}

}  // namespace

TEST_CASE("memory fraction: PyTorch's recorded steps under each setting replay on sim") {
  const std::filesystem::path dir = std::filesystem::path(BYTEGRAD_TEST_DATA_DIR) / "pytorch_fraction";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".txt") continue;
    ++files;
    replay_fraction_probe(entry.path());
  }
  CHECK(files >= 3);
}
