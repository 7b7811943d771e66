// The memory report: one self-contained HTML page (scripts, styles and data inline; nothing fetched, so it
// opens from file:// offline in any browser) that explains a program's device memory:
//  - the timeline: allocated bytes stacked by category (memory_category.h) at every history entry, the
//    reserved bytes over it, the marks drawn at their entries and the peak; a legend click hides a category
//    (the axis fits what is left), a drag zooms into a range of entries, a double-click shows them all
//    (report.html#hide=workspace,other&zoom=100-400 opens with that view);
//  - the peak: bytes per category when max_memory_allocated() was reached, the phase (forward, backward,
//    optimizer step) and the largest live blocks with their owners (peak_report);
//  - the allocator's state at a chosen entry (a slider, a click on the timeline, a mark, or the page's
//    address: report.html#event=123 or #mark=2, counting from 0): every segment with its live blocks coloured
//    by category and its free space, replayed exactly from the history (allocator_state_after below). When the
//    program used more than one stream, the segments are grouped by the stream that owns them, each group
//    headed by its stream's reserved and allocated bytes; blocks freed while another stream may still use
//    them (record_stream: pending until their events complete) are drawn hatched, whatever the streams;
//  - a table of the marks: each figure (allocated, reserved, max_allocated, max_reserved, segments, blocks,
//    requested, inactive_split) as a plain integer and in human units ("7455232", "7.11 MiB"), and the bytes
//    of each category; with each mark its story (what changed by op and by category, and the mark's note:
//    MemoryStory::mark(label, note)), also shown under the allocator's figures when a mark is chosen.
//
//   bytegrad::MemoryStory story(bytegrad::kSim);   // records the allocator's history from here
//   auto model = ...;            story.mark("model");
//   auto loss = ...;             story.mark("forward");
//   loss.backward();             story.mark("backward");
//   bytegrad::write_memory_report("report.html", story);
//
// The story must be recording from before the blocks of interest are made: blocks that were live when it
// started show as allocated before recording (their category is the one they had then). Marks made before
// the device was reconfigured (configure_simulated_device) are listed without a place on the timeline.
// bytegrad-walkthrough --html DIR writes one report per scenario and an index.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bytegrad/memory/block_categories.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/reports/memory_story.h"

namespace bytegrad {

struct MemoryReportOptions {
  std::string title;     // the page's heading; "" = "bytegrad memory report: <device>"
  std::string subtitle;  // a line under it (e.g. "all 14 marks equal PyTorch's"); may be ""
  // NCCL's memory outside the allocator (memory/outside_allocator.h's line), shown apart under the
  // heading; "" = none. The story's form fills it from the device when left empty.
  std::string outside_allocator;
};

// The whole page as a string, for the story's device as it is now (its allocator's snapshot and history,
// its peak record, the story's marks). Taking the snapshot logs a `snapshot` entry, as snapshot() does.
std::string memory_report_html(const MemoryStory& story, const MemoryReportOptions& options = {});
// Writes it to `path`; throws std::runtime_error when the file cannot be written.
void write_memory_report(const std::string& path, const MemoryStory& story, const MemoryReportOptions& options = {});

// The same from parts (any snapshot taken with history on, any marks whose `event`s index its trace).
std::string memory_report_html(const MemorySnapshot& snapshot, const std::vector<StoryMark>& marks,
                               const PeakRecord& peak, const std::string& device_name,
                               const MemoryReportOptions& options = {});
// The data the page draws, as the JSON embedded in it (documented in memory_report.cpp).
std::string memory_report_json(const MemorySnapshot& snapshot, const std::vector<StoryMark>& marks,
                               const PeakRecord& peak, const std::string& device_name,
                               const MemoryReportOptions& options = {});

// ------------------------------------------------------------------------------ the allocator's state

// A live block in a replayed state.
struct StateBlock {
  uintptr_t address = 0;
  size_t size = 0;                                  // block bytes
  size_t requested = 0;                             // bytes asked for
  MemoryCategory category = MemoryCategory::other;  // at that moment
  std::string tag;                                  // the op that allocated it ("" when its alloc predates the history)
  StreamId stream = 0;                              // the stream it was allocated on
};
// A segment (one cudaMalloc), or one contiguous mapped range of an expandable segment (as snapshot() lists
// them).
struct StateSegment {
  uintptr_t address = 0;
  size_t size = 0;
  bool expandable = false;
  StreamId stream = 0;  // the stream that owns it (its blocks serve that stream's requests only)
};
struct AllocatorState {
  std::map<uintptr_t, StateSegment> segments;  // by address
  std::map<uintptr_t, StateBlock> blocks;      // live blocks, by address
  // Blocks whose free waits on other streams' events (record_stream; TraceEntry::free_deferred): no longer
  // allocated, still active, from their free_requested until their free_completed.
  std::map<uintptr_t, StateBlock> pending;
  CategoryBytes bytes{};      // block bytes per category (live blocks only)
  int64_t allocated() const;  // sum of live block sizes
  int64_t reserved() const;   // sum of segment sizes
  int64_t pending_bytes() const;
};

// The state just before the history's first entry: the snapshot's segments and live blocks with every entry
// undone, newest first. Exact: each entry carries its block's bytes and categories (history.h).
AllocatorState allocator_state_before_history(const MemorySnapshot& snapshot);
// Applies one history entry to a state (what the page's script does, entry by entry).
void apply_trace_entry(AllocatorState& state, const TraceEntry& entry);
// The state just after entry `index` of snapshot.trace (before_history, then entries 0..index applied).
AllocatorState allocator_state_after(const MemorySnapshot& snapshot, size_t index);

}  // namespace bytegrad
