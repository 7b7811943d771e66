#include "bytegrad/memory/out_of_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "bytegrad/memory/format_size.h"
#include "bytegrad/memory/memory_functions.h"

namespace bytegrad {

std::string out_of_memory_message(const OutOfMemoryReport& r) {
  std::string message = "CUDA out of memory. Tried to allocate " + format_size(r.segment_bytes) + ". GPU " +
                        std::to_string(r.device_index) + " has a total capacity of " + format_size(r.device_total) +
                        " of which " + format_size(r.device_free) + " is free. ";
  if (r.process_in_use)
    message += "Including non-PyTorch memory, this process has " + format_size(*r.process_in_use) + " memory in use. ";
  if (r.allowed_bytes) message += format_size(*r.allowed_bytes) + " allowed; ";
  // PyTorch counts the free bytes of private pools (MemPool, CUDA graphs) as allocated here.
  const size_t private_free = r.private_free_bytes;
  message += "Of the allocated memory " + format_size(r.allocated_bytes + private_free) + " is allocated by PyTorch, ";
  if (private_free > 0)
    message += "with " + format_size(private_free) + " allocated in private pools (e.g., CUDA Graphs), ";
  message +=
      "and " + format_size(r.reserved_bytes - r.allocated_bytes - private_free) +
      " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
      "Memory Management  "
      "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  return message;
}

size_t OutOfMemoryReport::room_for_segment() const {
  if (!allowed_bytes) return device_free;
  const size_t under_cap = *allowed_bytes > reserved_bytes ? *allowed_bytes - reserved_bytes : 0;
  return std::min(device_free, under_cap);
}

bool OutOfMemoryReport::fragmentation_caused() const {
  return largest_free_piece < block_bytes && cached_free_bytes + room_for_segment() >= block_bytes;
}

namespace {
std::string human(size_t bytes) { return human_bytes(static_cast<int64_t>(bytes)); }
}  // namespace

std::string OutOfMemoryReport::str() const {
  std::string text = fmt::format("out of memory on GPU {} during {}\n", device_index, phase_name(phase));
  text += fmt::format("request: {} asked for, a block of {} from the {} pool; the allocator tried to obtain {} more\n",
                      human(requested_bytes), human(block_bytes), pool == PoolKind::small ? "small" : "large",
                      human(segment_bytes));
  text += fmt::format("device: {} total, {} free", human(device_total), human(device_free));
  if (allowed_bytes) text += fmt::format(", the memory fraction allows {}", human(*allowed_bytes));
  if (process_in_use) text += fmt::format(", this process holds {}", human(*process_in_use));
  const size_t room = room_for_segment();
  text += fmt::format("\n  room for a new segment {}, short by {}\n", human(room),
                      human(segment_bytes > room ? segment_bytes - room : 0));
  if (!outside_allocator.empty()) text += "  " + outside_allocator + "\n";
  text += fmt::format("allocated {}, by category:\n", human(allocated_bytes));
  for (MemoryCategory c : kMemoryCategories) {
    const int64_t b = categories[static_cast<size_t>(c)];
    if (b != 0) text += fmt::format("  {:<20} {:>26}\n", category_name(c), human_bytes(b));
  }
  text += fmt::format(
      "reserved {} = allocated + {} cached free, all in segments that hold live blocks "
      "(empty_cache cannot return it); the {} pool has {} free pieces, the largest {}\n",
      human(reserved_bytes), human(cached_free_bytes), pool == PoolKind::small ? "small" : "large", cached_free_pieces,
      human(largest_free_piece));
  if (fragmentation_caused())
    text += fmt::format(
        "fragmentation made it fail: the {} block does not fit in any free piece, but the cached "
        "free bytes and the room left would hold it were they one piece; "
        "expandable_segments:True lets segments grow in place instead\n",
        human(block_bytes));
  else
    text += fmt::format(
        "not fragmentation: even in one piece, the cached free bytes and the room left ({}) "
        "cannot hold the {} block; live memory must shrink (the largest blocks below)\n",
        human(cached_free_bytes + room), human(block_bytes));
  if (!largest_live.empty()) {
    text += "largest live blocks:\n";
    for (const LedgerBlock& b : largest_live)
      text += fmt::format("  {:>26}  {:<18}  {}\n", human_bytes(b.bytes), category_name(b.category), b.owner);
  }
  return text;
}

std::ostream& operator<<(std::ostream& out, const OutOfMemoryReport& report) { return out << report.str(); }

const OutOfMemoryReport& OutOfMemoryError::report() const {
  if (!report_)
    throw std::logic_error(
        "this OutOfMemoryError has no report: the request was refused before any "
        "attempt (more than 1 EB)");
  return *report_;
}

}  // namespace bytegrad
