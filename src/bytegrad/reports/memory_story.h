// MemoryStory: why memory_allocated() changed between two points of a program, in the ops' own words.
// It reads the device allocator's history (it turns recording on): which ops' blocks appeared since the
// previous mark and are still alive, which older blocks were freed, and how many blocks came and went in
// between (transient). Ops are named by the allocation tag they ran under (memory/allocation_context.h):
// "linear", "relu", "workspace", ..., or by the TensorNameScope the blocks were made in ("0.weight.exp_avg").
//
//   bytegrad::MemoryStory story(bytegrad::kSim);
//   auto y = model(x);
//   std::cout << story.since_last_mark();   // "+4.00 MiB (4194304 B) linear, +2.00 MiB (2097152 B) relu"
//   loss.backward();
//   auto change = story.mark();             // the same as data: change.added, change.freed, ...
//
// Bytes are block bytes (what the allocator handed out, rounded), so they add up to memory_allocated()'s
// change. The bytegrad-walkthrough prints one story per mark.
//
// Each mark is also kept (marks()): its label, the allocator's figures and bytes per category at that
// moment, and where it falls in the history, which is what write_memory_report (memory_report.h) draws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/memory_category.h"

namespace bytegrad {

struct OpBytes {
  std::string op;
  int64_t bytes = 0;
};

struct MemoryChange {
  std::vector<OpBytes> added;        // blocks made since the previous mark and alive now, by op, largest first
  std::vector<OpBytes> freed;        // blocks made before the previous mark and freed since, by op, largest first
  int64_t transient_blocks = 0;      // made and freed again between the two marks
  bool device_reconfigured = false;  // the device got a new allocator: its history starts now
  CategoryBytes category_delta{};    // allocated bytes by category now minus at the previous mark
  int64_t net_bytes() const;         // sum(added) - sum(freed)
  // "+4.00 MiB (4194304 B) linear, -512 B sum (earlier); 3 transient blocks", or "no change"; at most 12
  // phrases, the largest, then "and N more (...)".
  std::string str() const;
  // What each category did: "+4.00 MiB (4194304 B) activation, -512 B other"; "" when none changed.
  std::string by_category() const;
};

class CachingAllocator;
struct TraceEntry;

// The block bytes behind a history entry's address: the live block's size (a request can be handed a whole
// unsplit block), or, once freed, the request rounded as the allocator rounds it.
size_t traced_block_bytes(const CachingAllocator& allocator, const TraceEntry& entry);

// The eight figures a mark records: memory_stats()'s, named as the golden files name them.
struct MemoryFigures {
  int64_t allocated = 0;       // allocated_bytes.all.current
  int64_t reserved = 0;        // reserved_bytes.all.current
  int64_t max_allocated = 0;   // allocated_bytes.all.peak
  int64_t max_reserved = 0;    // reserved_bytes.all.peak
  int64_t segments = 0;        // segment.all.current
  int64_t blocks = 0;          // allocation.all.current
  int64_t requested = 0;       // requested_bytes.all.current
  int64_t inactive_split = 0;  // inactive_split_bytes.all.current
};
MemoryFigures memory_figures(const CachingAllocator& allocator);

// One mark as the story kept it.
struct StoryMark : MemoryFigures {
  std::string label;
  std::string note;  // why memory looks as it does here, in the program's words ("" when it gave none)
  // The index, in the device allocator's history (snapshot().trace), of the `snapshot` entry this mark
  // logged; -1 once that history is gone (the device got a new allocator after the mark).
  int64_t event = -1;
  CategoryBytes ledger{};  // allocated bytes by category (sums to `allocated`)
  MemoryChange change;     // what changed since the previous mark
};

class MemoryStory {
 public:
  // Attaches to the device allocator's history as an observer (CachingAllocator::attach_history_observer):
  // it records while the story lives, and other stories, probes and record_history calls leave this
  // story's reading alone.
  explicit MemoryStory(Device device);
  ~MemoryStory();  // detaches
  MemoryStory(const MemoryStory&) = delete;
  MemoryStory& operator=(const MemoryStory&) = delete;

  // The change since the previous mark (or since construction), and the start of the next. The mark is
  // kept under `label` ("mark N" when empty) with `note`, a sentence saying why (the HTML report shows it
  // with the mark, as the walkthrough prints its notes).
  MemoryChange mark(const std::string& label = {}, const std::string& note = {});
  std::string since_last_mark(const std::string& label = {}) { return mark(label).str(); }

  Device device() const { return device_; }
  const std::vector<StoryMark>& marks() const { return marks_; }

 private:
  struct LiveBlock {
    size_t bytes = 0;
    std::string tag;
    bool this_mark = false;  // allocated since the last mark
  };
  Device device_;
  uint64_t allocator_id_ = 0;            // the allocator being read (a reconfigured device gets a new one)
  uint64_t next_entry_ = 0;              // the sequence number of the first history entry not read yet
  std::map<uintptr_t, LiveBlock> live_;  // blocks allocated while recording
  CategoryBytes previous_ledger_{};      // the categories at the previous mark (or at construction)
  std::vector<StoryMark> marks_;
};

}  // namespace bytegrad
