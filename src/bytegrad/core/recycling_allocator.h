// A std allocator for the small objects made and dropped with every op (a tensor's TensorImpl, its storage
// and version counter, each with std::allocate_shared's control block): single objects freed go onto a
// per-thread list of blocks of their size and are handed out again, so making a tensor costs no trip
// through malloc and free. Host bookkeeping only: no device memory figure passes through here.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace bytegrad {

namespace recycling_detail {

// One thread's spare blocks of one size. Trivially destructible, so that a block freed while the thread
// (or the program) is being torn down, after the list was emptied, finds it still readable and goes back
// to operator delete.
struct FreeList {
  struct Node {
    Node* next;
  };
  Node* head = nullptr;
  size_t count = 0;
  bool closed = false;  // the thread is ending: free, do not keep
};

// Frees a thread's spare blocks when the thread ends (or the program exits, for the main thread).
struct FreeListCloser {
  FreeList* list;
  ~FreeListCloser() {
    list->closed = true;
    while (FreeList::Node* node = list->head) {
      list->head = node->next;
      ::operator delete(node);
    }
    list->count = 0;
  }
};

template <size_t kBytes>
struct SizeClass {
  static constexpr size_t kMaxKept = 4096;  // spare blocks kept per thread and size (a few hundred KiB)

  static FreeList& list() {
    thread_local constinit FreeList free_list;
    return free_list;
  }

  static void* take() {
    FreeList& free_list = list();
    if (FreeList::Node* node = free_list.head) {
      free_list.head = node->next;
      --free_list.count;
      return node;
    }
    return ::operator new(kBytes);
  }

  static void give(void* block) {
    FreeList& free_list = list();
    if (free_list.closed || free_list.count >= kMaxKept) {
      ::operator delete(block);
      return;
    }
    thread_local FreeListCloser closer{&free_list};  // registered when the thread first keeps a block
    (void)closer;
    free_list.head = ::new (block) FreeList::Node{free_list.head};
    ++free_list.count;
  }
};

}  // namespace recycling_detail

template <typename T>
struct RecyclingAllocator {
  using value_type = T;

  RecyclingAllocator() = default;
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>& /*other*/) noexcept {}  // NOLINT(google-explicit-constructor)

  // The block size, rounded to the alignment operator new gives (sizeof(T) is meant also when T is a
  // pointer: a container of pointers names this allocator with T = the pointer, and rebinds it to its nodes).
  static constexpr size_t kBlockBytes =
      (sizeof(T) + alignof(std::max_align_t) - 1) /  // NOLINT(bugprone-sizeof-expression): T's own size
      alignof(std::max_align_t) * alignof(std::max_align_t);
  using Class = recycling_detail::SizeClass<kBlockBytes>;
  static_assert(alignof(T) <= alignof(std::max_align_t), "RecyclingAllocator: over-aligned types are not recycled");

  // One object at a time is recycled (what allocate_shared and node containers ask for); arrays go to
  // operator new.
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(Class::take());
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n == 1) Class::give(p);
    else std::allocator<T>().deallocate(p, n);
  }

  template <typename U>
  bool operator==(const RecyclingAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

// std::make_shared through the recycling allocator.
template <typename T, typename... Args>
std::shared_ptr<T> make_shared_recycled(Args&&... args) {
  return std::allocate_shared<T>(RecyclingAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace bytegrad
