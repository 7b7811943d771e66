// Export to PyTorch's memory_viz viewer (reports/memory_viz.h): a small recorded history is exported, the
// JSON parsed back with a minimal reader, and held to the checklist of shared/reference/memory-viz-format.md
// section 7 (what the viewer needs to draw) and to the allocator's own figures.
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "helpers.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/reports/memory_viz.h"
#include "bytegrad/memory/out_of_memory.h"
#include "tests/support/json.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// --------------------------------------------------------------------------------- the checklist

constexpr uint64_t kTwoTo53 = uint64_t{1} << 53;

// An integer field the viewer reads as a number: present, an integer, and exact in a double.
uint64_t field(const Json& object, const std::string& key) {
  INFO("field " << key);
  const uint64_t v = object[key].unsigned_integer();
  CHECK(v < kTwoTo53);
  return v;
}

// No "category" anywhere under `v` (segments and blocks have none in the format).
void check_no_category(const Json& v) {
  for (const auto& [k, child] : v.members) {
    CHECK(k != "category");
    check_no_category(child);
  }
  for (const Json& child : v.items) check_no_category(child);
}

// Trace entries carry "category": alloc and free entries one of bytegrad's categories (memory_category.h), the
// others "unknown". The viewer throws when categories exist but none is "unknown" (the format's item 5).
void check_categories(const Json& doc) {
  check_no_category(doc["segments"]);
  std::set<std::string> names;
  for (MemoryCategory c : kMemoryCategories) names.insert(std::string(category_name(c)));
  size_t categorized = 0, unknown = 0;
  for (const Json& trace : doc["device_traces"].items) {
    for (const Json& e : trace.items) {
      const std::string& action = e["action"].string();
      const std::string& category = e["category"].string();
      INFO(action << " " << category);
      if (action == "alloc" || action == "free_requested" || action == "free_completed") {
        CHECK(names.count(category) == 1);
        ++categorized;
      } else {
        CHECK(category == "unknown");
        ++unknown;
      }
    }
  }
  if (categorized > 0) CHECK(unknown > 0);
}

void check_frames(const Json& frames) {
  REQUIRE(frames.kind == Json::Kind::array);
  for (const Json& f : frames.items) {
    CHECK(f["filename"].string() == "bytegrad");
    CHECK(f["line"].integer() == 0);
    CHECK_FALSE(f["name"].string().empty());
  }
}

// The name of a one-frame stack, "" for [].
std::string frame_name(const Json& frames) {
  if (frames.size() == 0) return "";
  REQUIRE(frames.size() == 1);
  return frames[0]["name"].string();
}

struct Checked {
  uint64_t active_allocated_bytes = 0;
  uint64_t active_blocks = 0;
  uint64_t reserved_bytes = 0;
  uint64_t segments = 0;
  uint64_t viewer_final_requested = 0;         // the Active Memory Timeline's last height, replayed as the viewer does
  uint64_t viewer_final_reserved = 0;          // the Active Cached Segment Timeline's
  std::map<uint64_t, std::string> block_tags;  // active block address -> its frame's name
};

// Section 7's checklist, for every device of an exported document.
Checked check_document(const Json& doc) {
  Checked out;
  REQUIRE(doc.kind == Json::Kind::object);
  REQUIRE(doc["segments"].kind == Json::Kind::array);
  REQUIRE(doc["device_traces"].kind == Json::Kind::array);
  REQUIRE(doc["allocator_settings"].kind == Json::Kind::object);
  check_categories(doc);
  const Json& traces = doc["device_traces"];

  std::map<int64_t, std::vector<const Json*>> segments_of;
  for (const Json& seg : doc["segments"].items) {
    const int64_t device = seg["device"].integer();
    INFO("segment at " << seg["address"].text << " on device " << device);
    // device_traces must have an entry for every device with segments.
    REQUIRE(device >= 0);
    CHECK(static_cast<size_t>(device) < traces.size());
    segments_of[device].push_back(&seg);

    const uint64_t address = field(seg, "address");
    const uint64_t total = field(seg, "total_size");
    field(seg, "stream");
    const std::string& type = seg["segment_type"].string();
    CHECK((type == "large" || type == "small"));
    REQUIRE(seg["segment_pool_id"].size() == 2);
    CHECK(seg["segment_pool_id"][0].integer() == 0);
    CHECK(seg["segment_pool_id"][1].integer() == 0);
    CHECK(seg["is_expandable"].kind == Json::Kind::boolean);
    CHECK_FALSE(seg["is_expandable"].boolean);
    CHECK(seg["frames"].size() == 0);

    // The blocks tile the segment, in address order; the viewer derives each address from the sizes.
    uint64_t next = address, allocated = 0, active = 0, requested = 0;
    REQUIRE(seg["blocks"].kind == Json::Kind::array);
    REQUIRE(seg["blocks"].size() > 0);
    for (const Json& block : seg["blocks"].items) {
      CHECK(field(block, "address") == next);
      const uint64_t size = field(block, "size");
      const uint64_t block_requested = field(block, "requested_size");
      CHECK(size > 0);
      const std::string& state = block["state"].string();
      CHECK((state == "active_allocated" || state == "active_pending_free" || state == "inactive"));
      check_frames(block["frames"]);
      if (state == "active_allocated") {
        CHECK(size % 512 == 0);
        CHECK(block_requested <= size);
        allocated += size;
        active += size;
        requested += block_requested;
        out.block_tags[next] = frame_name(block["frames"]);
        ++out.active_blocks;
      } else {
        CHECK(block["frames"].size() == 0);  // a free block has no allocation to name
      }
      next += size;
    }
    CHECK(next == address + total);
    CHECK(field(seg, "allocated_size") == allocated);
    CHECK(field(seg, "active_size") == active);
    CHECK(field(seg, "requested_size") == requested);
    out.active_allocated_bytes += allocated;
    out.reserved_bytes += total;
    ++out.segments;
  }

  static const std::set<std::string> kActions = {"alloc",         "free_requested", "free_completed",
                                                 "segment_alloc", "segment_free",   "segment_map",
                                                 "segment_unmap", "snapshot",       "oom"};
  for (size_t device = 0; device < traces.size(); ++device) {
    const Json& trace = traces[device];
    REQUIRE(trace.kind == Json::Kind::array);
    INFO("device " << device);
    int64_t previous_time = 0;
    std::map<uint64_t, uint64_t> live;      // alloc'ed and not yet freed in the trace: addr -> size
    std::map<uint64_t, uint64_t> segments;  // segment_alloc'ed and not yet freed
    uint64_t freed_unseen = 0;              // frees of blocks allocated before the trace began
    for (size_t i = 0; i < trace.size(); ++i) {
      const Json& e = trace[i];
      INFO("entry " << i);
      const std::string& action = e["action"].string();
      CHECK(kActions.count(action) == 1);
      const uint64_t size = field(e, "size");
      field(e, "stream");
      const int64_t time = e["time_us"].integer();
      CHECK(time >= previous_time);  // time_us never goes back
      CHECK(time < static_cast<int64_t>(kTwoTo53));
      previous_time = time;
      check_frames(e["frames"]);
      CHECK(e["compile_context"].string() == "N/A");
      if (action == "oom") {
        field(e, "device_free");
        CHECK_FALSE(e.has("addr"));
        continue;
      }
      CHECK_FALSE(e.has("device_free"));
      const uint64_t addr = field(e, "addr");
      if (action == "alloc") {
        CHECK(live.count(addr) == 0);
        live[addr] = size;
      } else if (action == "free_requested") {
        // Each free is free_requested then free_completed, same addr and size, as the viewer merges them.
        REQUIRE(i + 1 < trace.size());
        const Json& next = trace[i + 1];
        CHECK(next["action"].string() == "free_completed");
        CHECK(field(next, "addr") == addr);
        CHECK(field(next, "size") == size);
        if (auto it = live.find(addr); it != live.end()) CHECK(it->second == size);  // the alloc's size
      } else if (action == "free_completed") {
        REQUIRE(i > 0);
        CHECK(trace[i - 1]["action"].string() == "free_requested");
        if (auto it = live.find(addr); it != live.end()) live.erase(it);
        else ++freed_unseen;
      } else if (action == "segment_alloc") {
        CHECK(segments.count(addr) == 0);
        segments[addr] = size;
      } else if (action == "segment_free") {
        if (auto it = segments.find(addr); it != segments.end()) {
          CHECK(it->second == size);
          segments.erase(it);
        }
      }
    }
    CHECK(freed_unseen == 0);  // our tests start recording before any block they free

    // What the viewer draws at the end: allocs not freed, plus live blocks it never saw allocated ("ghosts",
    // drawn with their requested_size); the same for segments.
    for (const auto& [addr, size] : live) out.viewer_final_requested += size;
    for (const auto& [addr, size] : segments) out.viewer_final_reserved += size;
    for (const Json* seg : segments_of[static_cast<int64_t>(device)]) {
      if (segments.count((*seg)["address"].unsigned_integer()) == 0)
        out.viewer_final_reserved += (*seg)["total_size"].unsigned_integer();
      for (const Json& block : (*seg)["blocks"].items)
        if (block["state"].string() == "active_allocated" && live.count(block["address"].unsigned_integer()) == 0)
          out.viewer_final_requested += block["requested_size"].unsigned_integer();
    }
  }
  return out;
}

}  // namespace

TEST_CASE("memory_viz: a recorded history exports everything the viewer needs, matching the allocator") {
  // A 64 MiB card (4 MiB held by the "driver"), so that a big request runs out of memory.
  auto allocator = make_allocator({}, SimulatedCapacity{.total_bytes = 64 * MiB, .context_bytes = 4 * MiB});
  void* before = allocator->malloc(700);  // allocated before recording: a "ghost" to the viewer
  allocator->record_history(true);

  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr, *w = nullptr;
  {
    AllocationScope scope("linear");
    a = allocator->malloc(1000);
    b = allocator->malloc(3 * MiB);
    c = allocator->malloc(5000);
  }
  {
    AllocationScope scope("Adam state");
    d = allocator->malloc(12 * MiB + 1);
  }
  allocator->free(a);  // freed outside any scope
  {
    AllocationScope scope("huge");
    CHECK_THROWS_AS(allocator->malloc(100 * MiB), OutOfMemoryError);
  }
  {
    AllocationScope scope("workspace");
    w = allocator->malloc(2 * MiB, /*stream=*/7);
  }
  void* transient = allocator->malloc(12 * MiB);  // a 12 MiB segment of its own: 54 of the 60 MiB
  allocator->free(transient);
  allocator->empty_cache();  // releases transient's segment: a segment_free

  const MemorySnapshot snap = allocator->snapshot();
  const std::string text = memory_viz_json(snap);
  const Json doc = parse_json(text);
  const Checked checked = check_document(doc);

  // The figures against the allocator's own.
  CHECK(checked.active_allocated_bytes == static_cast<uint64_t>(allocator->memory_allocated()));
  CHECK(checked.reserved_bytes == static_cast<uint64_t>(allocator->memory_reserved()));
  CHECK(checked.segments == static_cast<uint64_t>(stat(*allocator, "segment.all.current")));
  CHECK(checked.active_blocks == static_cast<uint64_t>(stat(*allocator, "allocation.all.current")));
  // The timelines end where the allocator is: requested bytes live, bytes reserved.
  CHECK(checked.viewer_final_requested == static_cast<uint64_t>(stat(*allocator, "requested_bytes.all.current")));
  CHECK(checked.viewer_final_reserved == static_cast<uint64_t>(allocator->memory_reserved()));
  CHECK(doc["segments"].size() == snap.segments.size());

  // One device, every entry of the history in order, with PyTorch's action names.
  REQUIRE(doc["device_traces"].size() == 1);
  const Json& trace = doc["device_traces"][0];
  REQUIRE(trace.size() == snap.trace.size());
  size_t frees = 0, ooms = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = snap.trace[i];
    CHECK(trace[i]["action"].string() == trace_action_name(e.action));
    CHECK(trace[i]["size"].unsigned_integer() == e.size);
    CHECK(trace[i]["time_us"].integer() == e.time_us);
    CHECK(frame_name(trace[i]["frames"]) == e.tag);
    if (e.action == TraceAction::oom) {
      ++ooms;
      CHECK(trace[i]["device_free"].unsigned_integer() == e.device_free);
      CHECK(frame_name(trace[i]["frames"]) == "huge");
    } else {
      CHECK(trace[i]["addr"].unsigned_integer() == e.address);
    }
    if (e.action == TraceAction::free_requested) ++frees;
  }
  CHECK(ooms == 1);
  CHECK(frees == 2);  // a and transient
  // PyTorch reads the trace before recording the snapshot's own entry: it ends with empty_cache's segment_free.
  CHECK(trace[trace.size() - 1]["action"].string() == "segment_free");

  // Allocs name the op; live blocks name the op that allocated them, or nothing when the history does not
  // have their alloc.
  auto alloc_tag = [&](const void* p) {
    for (const Json& e : trace.items)
      if (e["action"].string() == "alloc" && e["addr"].unsigned_integer() == reinterpret_cast<uintptr_t>(p))
        return frame_name(e["frames"]);
    return std::string("(no alloc)");
  };
  CHECK(alloc_tag(a) == "linear");
  CHECK(alloc_tag(d) == "Adam state");
  CHECK(alloc_tag(transient).empty());
  auto block_tag = [&](const void* p) {
    auto it = checked.block_tags.find(reinterpret_cast<uintptr_t>(p));
    REQUIRE(it != checked.block_tags.end());
    return it->second;
  };
  CHECK(block_tag(b) == "linear");
  CHECK(block_tag(c) == "linear");
  CHECK(block_tag(d) == "Adam state");
  CHECK(block_tag(w) == "workspace");
  CHECK(block_tag(before).empty());
  CHECK(checked.block_tags.size() == 5);

  // The stream travels with the segment and the entries.
  bool found_stream = false;
  for (const Json& seg : doc["segments"].items)
    if (seg["address"].unsigned_integer() == reinterpret_cast<uintptr_t>(w)) {
      CHECK(seg["stream"].unsigned_integer() == 7);
      found_stream = true;
    }
  CHECK(found_stream);

  // The default settings.
  const Json& settings = doc["allocator_settings"];
  CHECK(settings["PYTORCH_CUDA_ALLOC_CONF"].string().empty());
  CHECK(settings["max_split_size"].integer() == -1);
  CHECK(settings["garbage_collection_threshold"].number() == 0.0);
  CHECK_FALSE(settings["expandable_segments"].boolean);
  CHECK(settings["roundup_power2_divisions"].size() == 16);

  for (void* p : {before, b, c, d, w}) allocator->free(p);
}

TEST_CASE("memory_viz: allocator_settings come from the allocator's configuration") {
  const AllocatorConfig config = AllocatorConfig::parse(
      "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6");
  auto allocator = make_allocator(config);
  const Json doc = parse_json(memory_viz_json(*allocator));
  check_document(doc);
  const Json& settings = doc["allocator_settings"];
  CHECK(settings["PYTORCH_CUDA_ALLOC_CONF"].string() == config.raw);
  CHECK(settings["max_split_size"].integer() == 64 * static_cast<int64_t>(MiB));
  CHECK(settings["garbage_collection_threshold"].number() == doctest::Approx(0.6));
  const Json& divisions = settings["roundup_power2_divisions"];
  REQUIRE(divisions.size() == kRoundupPower2Intervals);
  for (size_t i = 0; i < kRoundupPower2Intervals; ++i) {
    // PyTorch's keys: each interval's lower bound in MiB, "1" ... "32768".
    CHECK(divisions.members[i].first == std::to_string(size_t{1} << i));
    CHECK(divisions.members[i].second.unsigned_integer() == config.roundup_power2_divisions[i]);
  }
  CHECK(divisions["256"].integer() == 1);
  CHECK(divisions["512"].integer() == 2);
  CHECK(divisions["32768"].integer() == 8);
}

TEST_CASE("memory_viz: several devices share one file, device_traces indexed by device") {
  auto dev0 = std::make_unique<CachingAllocator>(make_address_only_raw_memory({}), AllocatorConfig{}, 0);
  auto dev2 = std::make_unique<CachingAllocator>(make_address_only_raw_memory({}), AllocatorConfig{}, 2);
  dev0->record_history(true);
  dev2->record_history(true);
  void* p = dev0->malloc(4096);
  void* q = dev2->malloc(5 * MiB);
  void* r = dev2->malloc(100);
  dev2->free(r);

  const Json doc = parse_json(memory_viz_json(std::vector<MemorySnapshot>{dev0->snapshot(), dev2->snapshot()}));
  const Checked checked = check_document(doc);
  CHECK(checked.active_allocated_bytes == static_cast<uint64_t>(dev0->memory_allocated() + dev2->memory_allocated()));
  CHECK(checked.reserved_bytes == static_cast<uint64_t>(dev0->memory_reserved() + dev2->memory_reserved()));
  REQUIRE(doc["device_traces"].size() == 3);
  CHECK(doc["device_traces"][0].size() == 2);  // segment_alloc, alloc (the snapshot's entry comes after)
  CHECK(doc["device_traces"][1].size() == 0);  // no such device: an empty list, as the viewer needs
  CHECK(doc["device_traces"][2].size() == 6);  // 2 x (segment_alloc, alloc), free pair
  std::set<int64_t> devices;
  for (const Json& seg : doc["segments"].items) devices.insert(seg["device"].integer());
  CHECK(devices == std::set<int64_t>{0, 2});

  // Two snapshots of one device index cannot be told apart by the viewer.
  CHECK_THROWS_AS(memory_viz_json(std::vector<MemorySnapshot>{dev0->snapshot(), dev0->snapshot()}),
                  std::invalid_argument);
  // Nothing at all is still a valid (empty) document.
  const Json empty = parse_json(memory_viz_json(std::vector<MemorySnapshot>{}));
  CHECK(empty["segments"].size() == 0);
  CHECK(empty["device_traces"].size() == 0);
  dev0->free(p);
  dev2->free(q);
}

TEST_CASE("memory_viz: addresses at or beyond 2^53 are shifted down together, keeping the layout") {
  // A hand-made snapshot: real devices stay below 2^47, this one does not.
  const uintptr_t base = (uintptr_t{1} << 60) + 6 * MiB + 4096;  // not 2 MiB aligned
  MemorySnapshot snap;
  snap.device_index = 0;
  SegmentInfo seg;
  seg.address = base;
  seg.total_size = 2 * MiB;
  seg.allocated_size = seg.active_size = 512;
  seg.requested_size = 100;
  seg.blocks = {BlockInfo{base, 512, 100, BlockState::active_allocated},
                BlockInfo{base + 512, 2 * MiB - 512, 0, BlockState::inactive}};
  snap.segments.push_back(seg);
  snap.trace = {TraceEntry{TraceAction::segment_alloc, base, 2 * MiB, 0, 1, 0, "x"},
                TraceEntry{TraceAction::alloc, base, 100, 0, 2, 0, "x"},
                TraceEntry{TraceAction::snapshot, 0, 512, 0, 3, 0, ""}};
  const Json doc = parse_json(memory_viz_json(snap));
  check_document(doc);
  const uint64_t shifted = doc["segments"][0]["address"].unsigned_integer();
  CHECK(shifted == base - ((uintptr_t{1} << 60) + 6 * MiB));  // lowest address, rounded down to 2 MiB
  CHECK(doc["segments"][0]["blocks"][1]["address"].unsigned_integer() == shifted + 512);
  CHECK(doc["device_traces"][0][1]["addr"].unsigned_integer() == shifted);
  CHECK(doc["device_traces"][0][2]["addr"].unsigned_integer() == 0);  // the snapshot entry has no address
  // Deterministic: the same input, the same file.
  CHECK(memory_viz_json(snap) == memory_viz_json(snap));

  // A device whose addresses span 2^53 or more cannot be drawn exactly.
  snap.trace.push_back(TraceEntry{TraceAction::segment_alloc, 4096, 2 * MiB, 0, 4, 0, ""});
  CHECK_THROWS_AS(memory_viz_json(snap), std::range_error);
}

TEST_CASE("memory_viz: tags are escaped, and dump_memory_viz writes the file") {
  auto allocator = make_allocator();
  allocator->record_history(true);
  void* p = nullptr;
  {
    AllocationScope scope("odd \"tag\"\\\n\x01");
    p = allocator->malloc(4096);
  }
  const MemorySnapshot snap = allocator->snapshot();
  const std::string text = memory_viz_json(snap);
  const Json doc = parse_json(text);
  check_document(doc);
  CHECK(frame_name(doc["device_traces"][0][1]["frames"]) == "odd \"tag\"\\\n\x01");

  const std::string path =
      (std::filesystem::temp_directory_path() / ("bytegrad_memory_viz_" + std::to_string(::getpid()) + ".json"))
          .string();
  dump_memory_viz(path, std::vector<MemorySnapshot>{snap});
  std::ifstream in(path, std::ios::binary);
  std::stringstream written;
  written << in.rdbuf();
  CHECK(written.str() == text);
  std::remove(path.c_str());
  // The allocator overload takes its own snapshot.
  dump_memory_viz(path, *allocator);
  std::ifstream again(path, std::ios::binary);
  std::stringstream second;
  second << again.rdbuf();
  const Json reread = parse_json(second.str());
  CHECK(reread["device_traces"][0].size() == snap.trace.size() + 1);  // the first snapshot's entry
  std::remove(path.c_str());

  CHECK_THROWS_AS(dump_memory_viz("/nonexistent-dir/x.json", *allocator), std::runtime_error);
  allocator->free(p);
}
