// core/small_vector.h, the type behind Shape: behaves as std::vector<int64_t> (checked against one doing
// the same edits), keeps up to 5 elements inside the object and moves to the heap past them, and converts
// to and from std::vector.
#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "bytegrad/core/small_vector.h"
#include "bytegrad/core/strided_view.h"

using namespace bytegrad;

namespace {

using Small = SmallVector<int64_t, 5>;

bool same(const Small& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < b.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("Shape keeps 5 dimensions inline") {
  static_assert(std::is_same_v<Shape, Small>);
  Shape s{1, 2, 3, 4, 5};
  CHECK(s.is_inline());
  CHECK(s.capacity() == 5);
  s.push_back(6);
  CHECK_FALSE(s.is_inline());
  CHECK(s.capacity() >= 6);
  CHECK(same(s, {1, 2, 3, 4, 5, 6}));
}

TEST_CASE("SmallVector grows past its inline room as std::vector does") {
  Small s;
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 40; ++i) {
    s.push_back(i * 7);
    v.push_back(i * 7);
    REQUIRE(same(s, v));
  }
  s.emplace_back(-1);
  v.emplace_back(-1);
  s.pop_back();
  v.pop_back();
  CHECK(same(s, v));
  s.insert(s.begin() + 3, 99);
  v.insert(v.begin() + 3, 99);
  s.insert(s.begin(), 2, -5);
  v.insert(v.begin(), 2, -5);
  s.insert(s.end(), {7, 8});
  v.insert(v.end(), {7, 8});
  s.erase(s.begin() + 1);
  v.erase(v.begin() + 1);
  s.erase(s.begin() + 4, s.begin() + 10);
  v.erase(v.begin() + 4, v.begin() + 10);
  CHECK(same(s, v));
  s.resize(3);
  v.resize(3);
  CHECK(same(s, v));
  s.resize(9, 4);
  v.resize(9, 4);
  CHECK(same(s, v));
  CHECK(s.front() == v.front());
  CHECK(s.back() == v.back());
  CHECK(std::vector<int64_t>(s.rbegin(), s.rend()) == std::vector<int64_t>(v.rbegin(), v.rend()));
  s.clear();
  CHECK(s.empty());
}

TEST_CASE("SmallVector insert of its own element while growing") {
  Small s{1, 2, 3, 4, 5};
  s.push_back(s[0]);  // grows to the heap while reading from the inline room
  s.insert(s.begin(), s[5]);
  CHECK(same(s, {1, 1, 2, 3, 4, 5, 1}));
  s.insert(s.begin() + 1, s.begin() + 4, s.end());
  CHECK(same(s, {1, 4, 5, 1, 1, 2, 3, 4, 5, 1}));
}

TEST_CASE("SmallVector copies and moves between inline and heap storage") {
  const Small small{1, 2};
  const Small large{1, 2, 3, 4, 5, 6, 7};

  Small copy_small = small;
  Small copy_large = large;
  CHECK(copy_small.is_inline());
  CHECK_FALSE(copy_large.is_inline());
  CHECK(copy_large.data() != large.data());  // a copy owns its own heap block
  CHECK(copy_small == small);
  CHECK(copy_large == large);

  // Assigning each kind over the other.
  copy_small = large;
  copy_large = small;
  CHECK(copy_small == large);
  CHECK(copy_large == small);

  Small moved_large = std::move(copy_small);  // takes the heap block
  CHECK(moved_large == large);
  CHECK_FALSE(moved_large.is_inline());
  CHECK(copy_small.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified here
  CHECK(copy_small.is_inline());

  // copy_large kept its heap block when given fewer elements (as std::vector keeps its capacity): a move
  // takes the block.
  CHECK_FALSE(copy_large.is_inline());
  Small moved_kept_block = std::move(copy_large);
  CHECK(moved_kept_block == small);
  CHECK_FALSE(moved_kept_block.is_inline());

  Small inline_source = small;
  Small moved_small = std::move(inline_source);  // copies the inline elements
  CHECK(moved_small == small);
  CHECK(moved_small.is_inline());

  // Move-assigning over a heap vector frees its block and takes the other's elements.
  moved_large = std::move(moved_small);
  CHECK(moved_large == small);
  CHECK(moved_large.is_inline());

  // Assigning the heap vector's elements back to an inline one that outgrows its room.
  Small target{9};
  target = Small(large);
  CHECK(target == large);

  Small a = large, b = small;
  a.swap(b);
  CHECK(a == small);
  CHECK(b == large);
}

TEST_CASE("SmallVector equality and ordering") {
  CHECK(Small{1, 2, 3} == Small{1, 2, 3});
  CHECK(Small{1, 2, 3} != Small{1, 2});
  CHECK(Small{1, 2, 3} != Small{1, 2, 4});
  CHECK(Small{1, 2, 3, 4, 5, 6} == Small{1, 2, 3, 4, 5, 6});
  CHECK(Small{} == Small{});
  CHECK(Small{1, 2} < Small{1, 3});
  CHECK(Small{1, 2} < Small{1, 2, 0});
  CHECK_FALSE(Small{1, 3} < Small{1, 2, 9});
  const std::vector<int64_t> v{4, 5};
  CHECK(Small{4, 5} == v);
  CHECK(v == Small{4, 5});
  CHECK(Small{4, 5, 6} != v);
  CHECK(v != Small{4});
}

TEST_CASE("SmallVector converts to and from std::vector") {
  const std::vector<int64_t> long_vector{1, 2, 3, 4, 5, 6, 7, 8};
  Small from_vector = long_vector;
  CHECK(same(from_vector, long_vector));
  std::vector<int64_t> back = from_vector;
  CHECK(back == long_vector);

  Small assigned;
  assigned = std::vector<int64_t>{3, 2};
  CHECK(same(assigned, {3, 2}));

  // Constructors std::vector has: count, count and value, an iterator range.
  CHECK(same(Small(3), {0, 0, 0}));
  CHECK(same(Small(size_t{7}, 2), {2, 2, 2, 2, 2, 2, 2}));
  CHECK(same(Small(long_vector.begin() + 2, long_vector.end()), {3, 4, 5, 6, 7, 8}));
  Small from_braces{3, 1};  // a list, as for std::vector
  CHECK(same(from_braces, {3, 1}));

  // A function taking std::vector accepts a Shape, and one taking a Shape accepts a std::vector.
  auto sum = [](const std::vector<int64_t>& values) {
    int64_t total = 0;
    for (int64_t x : values) total += x;
    return total;
  };
  CHECK(sum(Small{1, 2, 3, 4, 5, 6}) == 21);
  CHECK(shape_numel(long_vector) == 40320);
}
