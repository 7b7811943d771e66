// randperm with a Generator, from_blob / typed from_vector, and data::TensorDataset / DataLoader: values,
// and the memory of a batch from arithmetic (x[idx]: the index copied to the device, the rows, the index
// copy freed).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "bytegrad/data/dataloader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// randperm's device: an unset one is default_device(), which the suites set to sim.
const TensorOptions kHost = device(kCpu);

std::vector<int64_t> as_ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.tolist()) out.push_back(static_cast<int64_t>(v));
  return out;
}

}  // namespace

TEST_CASE("randperm: a permutation, int64, repeatable from a Generator, the process generator untouched") {
  Generator a(42), b(42), c(43);
  const Tensor pa = randperm(100, kHost, &a);
  CHECK(pa.dtype() == ScalarType::int64);
  CHECK(pa.device() == kCpu);
  std::vector<int64_t> sorted = as_ints(pa);
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(sorted == expected);
  CHECK(as_ints(randperm(100, kHost, &b)) == as_ints(pa));
  CHECK(as_ints(randperm(100, kHost, &c)) != as_ints(pa));
  CHECK(as_ints(randperm(100, kHost, &a)) != as_ints(pa));  // the generator moved on
  // Its state round-trips as text.
  const std::string state = a.get_state();
  const std::vector<int64_t> next = as_ints(randperm(10, kHost, &a));
  a.set_state(state);
  CHECK(as_ints(randperm(10, kHost, &a)) == next);
  manual_seed(3);
  const double first = rand({1}).item();
  manual_seed(3);
  randperm(50, kHost, &a);
  CHECK(rand({1}).item() == first);
  CHECK(randperm(0, kHost).numel() == 0);
  CHECK(as_ints(randperm(1, kHost)) == std::vector<int64_t>{0});
  CHECK(randperm(5, TensorOptions{ScalarType::int32, kCpu}).dtype() == ScalarType::int32);
  CHECK_THROWS_WITH_AS(randperm(-1, kHost), doctest::Contains("n must be non-negative"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(randperm(300, TensorOptions{ScalarType::uint8, kCpu}), doctest::Contains("n is too large"),
                       std::invalid_argument);
  CHECK(randperm(8, device(kSim)).device() ==
        kSim);  // PyTorch's CUDA temporaries: tests/autograd/masked_gqa_randperm.cpp
  CHECK_THROWS_AS(a.set_state("not a state"), std::invalid_argument);
}

TEST_CASE("from_vector<int64_t> and from_blob: exact integers, one block on the device") {
  fresh(kSim);
  const std::vector<int64_t> big = {(int64_t{1} << 60) + 1, -7, 0};
  const Tensor t = from_vector(big, {3});
  CHECK(t.dtype() == ScalarType::int64);
  // 2^60 + 1 is not a double: compare through an int64 sum of differences computed on the device.
  const Tensor back = from_vector(std::vector<int64_t>{int64_t{1} << 60, -7, 0}, {3});
  CHECK((t - back).tolist() == std::vector<double>{1, 0, 0});
  const std::vector<int32_t> small = {1, 2, 3, 4, 5, 6};
  MemoryProbe probe(kSim);
  const Tensor s = from_vector(small, {2, 3}, device(kSim));
  CHECK(s.dtype() == ScalarType::int32);
  CHECK(probe.allocated_delta_is(512));  // 6 * 4 = 24 bytes: one block
  CHECK(s.tolist() == std::vector<double>{1, 2, 3, 4, 5, 6});
  const uint8_t flags[3] = {1, 0, 2};
  CHECK_THROWS_WITH_AS(from_blob(flags, {3}, dtype(ScalarType::bool_)), doctest::Contains("bool element 2"),
                       std::invalid_argument);
  CHECK(from_blob(flags, {2}, dtype(ScalarType::bool_)).tolist() == std::vector<double>{1, 0});
  const float f[2] = {0.5F, -2.0F};
  CHECK(from_blob(f, {2}).tolist() == std::vector<double>{0.5, -2.0});
  CHECK(from_vector(small, {6}, dtype(ScalarType::float32)).dtype() == ScalarType::float32);
  CHECK_THROWS_AS(from_vector(small, {4}), std::invalid_argument);
}

TEST_CASE("DataLoader: batches in order or shuffled, drop_last, len") {
  const Tensor x = arange(0.0, 10.0, 1.0, dtype(ScalarType::float32)).reshape({10, 1});
  const Tensor y = arange(0.0, 10.0, 1.0, dtype(ScalarType::int64));
  data::TensorDataset dataset({x, y});
  CHECK(dataset.size() == 10);
  CHECK(dataset.get(-1)[1].item() == 9);
  data::DataLoader plain(dataset, 4);
  CHECK(plain.size() == 3);
  std::vector<std::vector<double>> seen;
  for (const data::DataLoader::Batch& batch : plain) seen.push_back(batch[1].tolist());
  CHECK(seen == std::vector<std::vector<double>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
  data::DataLoader dropping(dataset, 4, false, /*drop_last=*/true);
  CHECK(dropping.size() == 2);
  int batches = 0;
  for (const auto& batch : dropping) {
    CHECK(batch[0].size(0) == 4);
    ++batches;
  }
  CHECK(batches == 2);
  // Shuffled: each epoch a permutation of all samples, x and y rows kept together; the same generator
  // seed gives the same epochs.
  data::DataLoader shuffled(dataset, {.batch_size = 3, .shuffle = true}, Generator(1));
  data::DataLoader again(dataset, {.batch_size = 3, .shuffle = true}, Generator(1));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<double> all;
    std::vector<double> order, order_again;
    for (const auto& batch : shuffled) {
      CHECK(batch[0].reshape({-1}).tolist() == batch[1].tolist());
      for (double v : batch[1].tolist()) {
        all.insert(v);
        order.push_back(v);
      }
    }
    for (const auto& batch : again)
      for (double v : batch[1].tolist()) order_again.push_back(v);
    CHECK(all == std::multiset<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(order == order_again);
  }
  CHECK_THROWS_WITH_AS(data::DataLoader(dataset, 0), doctest::Contains("batch_size should be a positive integer"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(data::TensorDataset({x, arange(0.0, 3.0, 1.0, {})}), doctest::Contains("Size mismatch"),
                       std::invalid_argument);
}

TEST_CASE("DataLoader on sim: a batch is x[idx]: the index copy, the rows, the index copy freed") {
  fresh(kSim);
  // x: 100 x 300 float32 on sim; a batch of 32 rows is 32 * 300 * 4 = 38400 bytes (75 blocks of 512);
  // its index 32 * 8 = 256 bytes (one block).
  const Tensor x = zeros({100, 300}, TensorOptions{ScalarType::float32, kSim});
  data::DataLoader loader(data::TensorDataset({x}), {.batch_size = 32, .shuffle = true}, Generator(0));
  auto it = loader.begin();
  data::DataLoader::Batch batch;
  const AllocationEvents events = allocation_events(kSim, [&] { batch = *it; });
  CHECK(events == AllocationEvents{{"alloc", 256}, {"alloc", 38400}, {"free", 256}});
  CHECK(batch[0].device() == kSim);
  CHECK(batch[0].sizes() == Shape{32, 300});
  // A host dataset with batches sent to sim: one block per batch tensor there, nothing else.
  const Tensor host_x = zeros({100, 300}, TensorOptions{ScalarType::float32, kCpu});
  data::DataLoader to_sim(data::TensorDataset({host_x}), {.batch_size = 32, .device = kSim});
  auto it2 = to_sim.begin();
  // The batch moved to sim, then the previous batch freed as `batch` is rebound.
  CHECK(allocation_events(kSim, [&] { batch = *it2; }) == AllocationEvents{{"alloc", 38400}, {"free", 38400}});
  CHECK(batch[0].device() == kSim);
}
