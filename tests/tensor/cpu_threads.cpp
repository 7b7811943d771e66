// The cpu and sim kernels' threads (kernels/parallel.h): set_num_threads/get_num_threads as PyTorch's,
// parallel_for's chunks, and matrix products whose every bit is the same whatever the thread count.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bytegrad/kernels/parallel.h"
#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// Sets the thread count for one scope and puts the previous one back.
class NumThreadsScope {
 public:
  explicit NumThreadsScope(int num_threads) : previous_(get_num_threads()) { set_num_threads(num_threads); }
  ~NumThreadsScope() { set_num_threads(previous_); }
  NumThreadsScope(const NumThreadsScope&) = delete;
  NumThreadsScope& operator=(const NumThreadsScope&) = delete;

 private:
  int previous_;
};

// The chunks parallel_for hands to its body, sorted by their start.
std::vector<std::pair<int64_t, int64_t>> chunks_of(int64_t begin, int64_t end, int64_t grain, int64_t align) {
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  parallel::parallel_for(begin, end, grain, align, [&](int64_t first, int64_t last) {
    const std::lock_guard<std::mutex> lock(mutex);
    chunks.emplace_back(first, last);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

}  // namespace

TEST_CASE("set_num_threads and get_num_threads, as torch's") {
  const int original = get_num_threads();
  CHECK(original >= 1);
  {
    const NumThreadsScope scope(3);
    CHECK(get_num_threads() == 3);
    set_num_threads(1);
    CHECK(get_num_threads() == 1);
  }
  CHECK(get_num_threads() == original);
  CHECK_THROWS_WITH_AS(set_num_threads(0), "set_num_threads: expected a positive number of threads, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(set_num_threads(-2), "set_num_threads: expected a positive number of threads, got -2",
                       std::invalid_argument);
  CHECK(get_num_threads() == original);  // a refused value changes nothing
}

TEST_CASE("parallel_for covers the range once, in chunks of at least the grain, aligned") {
  const NumThreadsScope scope(4);
  // 1000 indices, grain 100, align 16: 4 threads x 4 chunks wanted -> 10 (the grain's limit), each
  // ceil(1000 / 10) = 100 rounded up to 112; floor(1000 / 112) = 8 chunks, the last one 1000 - 7*112 = 216.
  const auto chunks = chunks_of(0, 1000, 100, 16);
  REQUIRE(chunks.size() == 8);
  for (size_t i = 0; i < chunks.size(); ++i) {
    CHECK(chunks[i].first == static_cast<int64_t>(i) * 112);
    CHECK(chunks[i].second == (i + 1 == chunks.size() ? 1000 : chunks[i].first + 112));
  }
  // Offsets count from begin.
  const auto shifted = chunks_of(5, 1005, 100, 16);
  REQUIRE(shifted.size() == 8);
  CHECK(shifted.front() == std::pair<int64_t, int64_t>{5, 117});
  CHECK(shifted.back() == std::pair<int64_t, int64_t>{789, 1005});

  // Less than two grains, one thread, or an empty range: the body runs once with the whole range (or never).
  CHECK(chunks_of(0, 199, 100, 1) == std::vector<std::pair<int64_t, int64_t>>{{0, 199}});
  {
    const NumThreadsScope one(1);
    CHECK(chunks_of(0, 1000, 10, 1) == std::vector<std::pair<int64_t, int64_t>>{{0, 1000}});
  }
  CHECK(chunks_of(7, 7, 1, 1).empty());
}

TEST_CASE("parallel_for runs chunks on two threads at once") {
  // Each of the two chunks waits (up to 30 s, however busy the machine) until both have started: only
  // possible when a helper thread takes one while the caller holds the other.
  const NumThreadsScope scope(2);
  std::atomic<int> started{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;
  parallel::parallel_for(0, 2, 1, 1, [&](int64_t, int64_t) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  CHECK(started.load() == 2);
  CHECK(threads.size() == 2);
}

TEST_CASE("parallel_for: every index written once, nested loops inline, exceptions rethrown") {
  const NumThreadsScope scope(3);
  std::vector<int> hits(100000, 0);
  std::atomic<int> nested_calls{0};
  parallel::parallel_for(0, static_cast<int64_t>(hits.size()), 1000, 8, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) ++hits[static_cast<size_t>(i)];
    // Inside a chunk, another parallel_for runs its whole range on this thread at once.
    parallel::parallel_for(0, 100000, 10, 1, [&](int64_t inner_first, int64_t inner_last) {
      CHECK(inner_first == 0);
      CHECK(inner_last == 100000);
      ++nested_calls;
    });
  });
  CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  CHECK(nested_calls.load() >= 2);  // one per chunk, and 100000 / 1000 allows several

  CHECK_THROWS_WITH_AS(parallel::parallel_for(0, 100000, 1000, 1,
                                              [](int64_t first, int64_t) {
                                                if (first > 0) throw std::runtime_error("chunk failed");
                                              }),
                       "chunk failed", std::runtime_error);
  // The pool still works after a failure.
  std::atomic<int64_t> covered{0};
  parallel::parallel_for(0, 100000, 1000, 1, [&](int64_t first, int64_t last) { covered += last - first; });
  CHECK(covered.load() == 100000);
}

TEST_CASE("matrix products are bitwise the same with 1 to 7 threads") {
  // Row blocks must leave each element's sum as Eigen's single-threaded product computes it: shapes with
  // ragged edges (not multiples of 4, 8 or 16), a single output column (Eigen's matrix-vector path), deep
  // products (Eigen blocks the depth from about 256 on), transposed operands, addmm's beta, and bmm (large
  // products split by rows, small ones shared out whole).
  for (Device device : {kCpu, kSim}) {
    for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16}) {
      CAPTURE(device.str());
      const std::string dtype_name(scalar_type_name(dtype));
      CAPTURE(dtype_name);
      manual_seed(30);
      const auto r = [&](const Shape& s) { return randn(s, bytegrad::device(device).with_dtype(dtype)); };
      struct Case {
        Tensor a, b, c;
      };
      std::vector<Case> cases = {
          {r({1000, 300}), r({300, 70}), Tensor()},       {r({997, 61}), r({61, 33}), Tensor()},
          {r({2049, 784}), r({784, 1}), Tensor()},        {r({515, 1030}), r({1030, 129}), Tensor()},
          {r({300, 777}).t(), r({300, 50}), Tensor()},    {r({640, 128}), r({45, 128}).t(), Tensor()},
          {r({333, 200}), r({200, 96}), r({333, 96})},    {r({3, 400, 64}), r({3, 64, 80}), Tensor()},
          {r({300, 20, 32}), r({300, 32, 24}), Tensor()},  // 30720 flops a product: whole ones to each thread
      };
      const auto products = [&] {
        std::vector<std::vector<double>> values;
        for (const Case& c : cases) {
          if (c.c.defined()) values.push_back(addmm(c.c, c.a, c.b, /*beta=*/0.5, /*alpha=*/1.5).tolist());
          else values.push_back(matmul(c.a, c.b).tolist());
        }
        return values;
      };
      std::vector<std::vector<double>> one_thread;
      {
        const NumThreadsScope scope(1);
        one_thread = products();
      }
      for (int threads : {2, 3, 4, 7}) {
        CAPTURE(threads);
        const NumThreadsScope scope(threads);
        const auto got = products();
        for (size_t i = 0; i < cases.size(); ++i) {
          CAPTURE(i);
          CHECK(got[i] == one_thread[i]);
        }
      }
    }
  }
}

TEST_CASE("randn draws the same values with 1 or 4 threads") {
  // 2,000,001 values: two host chunks of 2^20 and a third with an odd count (its last pair keeps one value).
  const auto draw = [](int threads) {
    const NumThreadsScope scope(threads);
    manual_seed(7);
    return randn({2000001}, bytegrad::device(kSim)).tolist();
  };
  const auto one_thread = draw(1);
  CHECK(draw(4) == one_thread);
  CHECK(draw(3) == one_thread);
}
