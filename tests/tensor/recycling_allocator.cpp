// core/recycling_allocator.h: a single object's block freed on a thread is that thread's next block of the
// size; blocks never serve two live objects, also when made on one thread and dropped on another; arrays
// and node containers work through it as through std::allocator.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "bytegrad/core/recycling_allocator.h"

using namespace bytegrad;

namespace {

struct Probe {
  explicit Probe(int64_t v) : value(v), check(~v) {}
  int64_t value;
  int64_t check;            // ~value while the object is alive and its block not reused
  char padding[1000] = {};  // a size class of its own: no tensor object's blocks share its list
  bool intact() const { return check == ~value; }
};

}  // namespace

TEST_CASE("a freed block is the thread's next block of its size") {
  auto first = make_shared_recycled<Probe>(1);
  const void* block = first.get();
  first.reset();
  auto second = make_shared_recycled<Probe>(2);
  CHECK(static_cast<const void*>(second.get()) == block);
  CHECK(second->value == 2);
  CHECK(second->intact());
}

TEST_CASE("blocks made on one thread and dropped on another serve one live object each") {
  std::vector<std::shared_ptr<Probe>> kept, handed;
  for (int64_t i = 0; i < 200; ++i) (i % 2 ? kept : handed).push_back(make_shared_recycled<Probe>(i));
  std::vector<std::shared_ptr<Probe>> made_there;
  std::thread other([&] {
    handed.clear();  // onto this thread's list
    for (int64_t i = 1000; i < 1300; ++i) made_there.push_back(make_shared_recycled<Probe>(i));
  });
  other.join();  // its list is freed as it ends; the objects it made live on
  for (int64_t i = 2000; i < 2300; ++i) kept.push_back(make_shared_recycled<Probe>(i));
  std::set<const Probe*> addresses;
  for (const auto* list : {&kept, &made_there})
    for (const auto& p : *list) {
      CHECK(p->intact());
      CHECK(addresses.insert(p.get()).second);
    }
  CHECK(kept[0]->value == 1);
  CHECK(made_there.back()->value == 1299);
}

TEST_CASE("containers allocate through it as through std::allocator") {
  std::vector<int64_t, RecyclingAllocator<int64_t>> values(100);  // one array: operator new
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i * i);
  CHECK(values[99] == 99 * 99);
  std::set<int64_t, std::less<>, RecyclingAllocator<int64_t>> ordered;  // one node at a time: recycled
  for (int64_t v : {5, 1, 4, 2, 3}) ordered.insert(v);
  ordered.erase(4);
  ordered.insert(9);
  CHECK(std::vector<int64_t>(ordered.begin(), ordered.end()) == std::vector<int64_t>{1, 2, 3, 5, 9});
}
