// Helpers of the memory-layer tests.
//
// Conventions: `malloc(n)` on a CachingAllocator stands for PyTorch's
// `torch.empty(n, dtype=torch.uint8, device="cuda")` (reference section 2: nbytes = numel * element_size, with
// no alignment added), and `free(p)` for the tensor's storage dying.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/raw_memory.h"

namespace bytegrad::testing {

inline constexpr size_t KiB = 1024;
inline constexpr size_t MiB = 1024 * KiB;
inline constexpr size_t GiB = 1024 * MiB;

// A simulated device: host memory posing as a GPU (the H100 80GB of the goldens by default).
inline std::unique_ptr<CachingAllocator> make_allocator(AllocatorConfig config = {}, SimulatedCapacity capacity = {},
                                                        int device_index = 0) {
  return std::make_unique<CachingAllocator>(make_host_backed_raw_memory(capacity), std::move(config), device_index);
}

// memory_stats()[key], failing the test if the key does not exist.
inline int64_t stat(const CachingAllocator& allocator, const std::string& key) {
  const auto stats = allocator.memory_stats();
  const auto it = stats.find(key);
  REQUIRE_MESSAGE(it != stats.end(), "memory_stats() has no key " << key);
  return it->second;
}

inline std::string shared_path(std::string_view relative) {
  return std::string(BYTEGRAD_SHARED_DIR) + "/" + std::string(relative);
}

// The steps of the measured test vector of reference section 13 (default config, one stream).
struct Section13 {
  explicit Section13(CachingAllocator& allocator) : alloc(allocator) {}

  CachingAllocator& alloc;
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr, *e = nullptr, *f = nullptr, *g = nullptr, *h = nullptr,
       *k = nullptr;
  std::vector<void*> many;  // the 5000 fp32 scalars

  struct Step {
    const char* name;  // as in the reference table
    std::function<void(Section13&)> run;
  };

  static const std::vector<Step>& steps() {
    static const std::vector<Step> kSteps = {
        {"a = 1 B", [](Section13& s) { s.a = s.alloc.malloc(1); }},
        {"b = 1048576", [](Section13& s) { s.b = s.alloc.malloc(1048576); }},
        {"c = 1048577", [](Section13& s) { s.c = s.alloc.malloc(1048577); }},
        {"d = 10485760", [](Section13& s) { s.d = s.alloc.malloc(10485760); }},
        {"e = 9436672 (exact tail)", [](Section13& s) { s.e = s.alloc.malloc(9436672); }},
        {"f = 20447232 (19.5 MiB)", [](Section13& s) { s.f = s.alloc.malloc(20447232); }},
        {"g = 26214401", [](Section13& s) { s.g = s.alloc.malloc(26214401); }},
        {"h = 9437184", [](Section13& s) { s.h = s.alloc.malloc(9437184); }},
        {"del d", [](Section13& s) { s.alloc.free(s.d); }},
        {"del c (merges with d)", [](Section13& s) { s.alloc.free(s.c); }},
        {"del e (segment whole again)", [](Section13& s) { s.alloc.free(s.e); }},
        {"empty_cache #1", [](Section13& s) { s.alloc.empty_cache(); }},
        {"del h", [](Section13& s) { s.alloc.free(s.h); }},
        // 3 MiB = 3145728 bytes
        {"k = 3 MiB (takes h's free segment)", [](Section13& s) { s.k = s.alloc.malloc(3145728); }},
        {"del f, g, k",
         [](Section13& s) {
           s.alloc.free(s.f);
           s.alloc.free(s.g);
           s.alloc.free(s.k);
         }},
        {"del a, b",
         [](Section13& s) {
           s.alloc.free(s.a);
           s.alloc.free(s.b);
         }},
        {"empty_cache #2", [](Section13& s) { s.alloc.empty_cache(); }},
        // torch.empty(1) is fp32: 4 bytes each.
        {"5000 x torch.empty(1) fp32",
         [](Section13& s) {
           for (int i = 0; i < 5000; ++i) s.many.push_back(s.alloc.malloc(4));
         }},
        {"del the 5000",
         [](Section13& s) {
           for (void* p : s.many) s.alloc.free(p);
           s.many.clear();
         }},
        {"empty_cache #3", [](Section13& s) { s.alloc.empty_cache(); }},
    };
    return kSteps;
  }

  // Runs the steps not run yet, up to and including the one named `last`.
  void run_through(std::string_view last) {
    while (next_step < steps().size()) {
      const Step& step = steps()[next_step++];
      step.run(*this);
      if (last == step.name) return;
    }
    FAIL("no section 13 step named " << std::string(last) << " left to run");
  }

  size_t next_step = 0;  // index of the next step to run
};

}  // namespace bytegrad::testing
