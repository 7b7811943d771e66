#include "bytegrad/memory/outside_allocator.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"

namespace bytegrad {

namespace {

struct Registry {
  // Held while a source runs, so that unregister waits for a call in progress (a source usually reads an
  // object that unregisters in its destructor).
  std::mutex mutex;
  std::map<int, OutsideAllocatorSource> sources;
  int next_id = 1;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

int register_outside_allocator_source(OutsideAllocatorSource source) {
  if (!source) throw std::invalid_argument("register_outside_allocator_source: the source is empty");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const int id = r.next_id++;
  r.sources.emplace(id, std::move(source));
  return id;
}

void unregister_outside_allocator_source(int id) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.sources.erase(id);
}

std::optional<OutsideAllocatorFigures> outside_allocator_figures(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::optional<OutsideAllocatorFigures> all;
  for (const auto& [id, source] : r.sources) {
    std::optional<OutsideAllocatorFigures> one = source(device);
    if (!one || one->parts.empty()) continue;
    if (!all) {
      all = std::move(one);
      continue;
    }
    all->measured = all->measured && one->measured;
    if (all->basis.empty()) all->basis = one->basis;
    for (OutsideAllocatorPart& part : one->parts) {
      bool merged = false;
      for (OutsideAllocatorPart& mine : all->parts)
        if (mine.name == part.name) {
          mine.bytes += part.bytes;
          merged = true;
        }
      if (!merged) all->parts.push_back(std::move(part));
    }
  }
  return all;
}

std::string outside_allocator_line(const OutsideAllocatorFigures& figures, int64_t outside_bytes) {
  std::string line = "outside the allocator:";
  int64_t parts = 0;
  for (size_t i = 0; i < figures.parts.size(); ++i) {
    const OutsideAllocatorPart& part = figures.parts[i];
    line += (i ? ", " : " NCCL ") + part.name + " " + human_bytes(part.bytes);
    parts += part.bytes;
  }
  const int64_t context = figures.measured ? outside_bytes - parts : outside_bytes;
  line += ", CUDA context " + human_bytes(context);
  if (!figures.measured) line += " (NCCL modelled: " + figures.basis + ")";
  return line;
}

std::string outside_allocator_line(Device device) {
  if (!device.uses_caching_allocator()) return "";
  const std::optional<OutsideAllocatorFigures> figures = outside_allocator_figures(device);
  if (!figures) return "";
  const auto [free, total] = mem_get_info(device);
  return outside_allocator_line(*figures,
                                static_cast<int64_t>(total) - static_cast<int64_t>(free) - memory_reserved(device));
}

}  // namespace bytegrad
