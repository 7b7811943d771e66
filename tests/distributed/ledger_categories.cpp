// What each rank holds, by the ledger's names (memory/memory_category.h), under FSDP2 and DDP: the sharded
// parameters are `parameter`, the unsharded ones an all-gather made `gathered_parameter`, the sharded
// gradients `gradient`, Adam's state of the shards `optimizer_state`, and the buffers that exist for a
// collective (all-gather flats, reduce-scatter input, DDP's buckets without bucket views) `communication`.
// Each rank alone on the fake backend on meta; the figures are arithmetic from the models' sizes, and at
// every mark the categories sum to allocated (the ledger's invariant).
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "programs/ddp_programs.h"
#include "programs/fsdp_programs.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;

namespace {

struct Ledger {
  CategoryBytes bytes{};
  int64_t allocated = 0;
  int64_t operator[](MemoryCategory c) const { return bytes[static_cast<size_t>(c)]; }
};

Ledger ledger_now(Device device) {
  return {caching_allocator(device).category_bytes(), memory_stats(device).at("allocated_bytes.all.current")};
}

int64_t sum(const CategoryBytes& bytes) {
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  return total;
}

// A block's bytes: requests round up to 512 (the caching allocator's kMinBlockSize).
constexpr int64_t block(int64_t bytes) { return (bytes + 511) / 512 * 512; }

using Marks = std::map<std::string, Ledger>;

Marks fsdp_marks(const std::string& program, int rank) {
  const Device device{DeviceType::meta, 0};
  testing::FreshDevice fresh(device, testing::small_card());
  clear_blas_workspaces();
  auto pg = make_fake_process_group(rank, 2, device);
  Marks marks;
  programs::run_fsdp_program(program, *pg, [&](const std::string& label) {
    const Ledger l = ledger_now(device);
    CHECK_MESSAGE(sum(l.bytes) == l.allocated, program << " rank " << rank << " at " << label);
    marks[label] = l;
  });
  clear_blas_workspaces();
  return marks;
}

Marks ddp_marks(const std::string& program, int rank) {
  const Device device{DeviceType::meta, 0};
  testing::FreshDevice fresh(device, testing::small_card());
  clear_blas_workspaces();
  auto pg = make_fake_process_group(rank, 2, device);
  Marks marks;
  programs::run_ddp_program(program, *pg, [&](const std::string& label) {
    const Ledger l = ledger_now(device);
    CHECK_MESSAGE(sum(l.bytes) == l.allocated, program << " rank " << rank << " at " << label);
    marks[label] = l;
  });
  clear_blas_workspaces();
  return marks;
}

// The programs' MLP: Linear(1024, 4096), Linear(4096, 4096), Linear(4096, 10), fp32. On two ranks every
// parameter is a shard of ceil(rows / 2) rows, the same on both ranks here (4096 / 2 = 2048, 10 / 2 = 5).
constexpr int64_t kShardFc1 = block(2048 * 1024 * 4) + block(2048 * 4);    // 8388608 + 8192
constexpr int64_t kShardFc2 = block(2048 * 4096 * 4) + block(2048 * 4);    // 33554432 + 8192
constexpr int64_t kShardFc3 = block(5 * 4096 * 4) + block(5 * 4);          // 81920 + 512
constexpr int64_t kShardedParameters = kShardFc1 + kShardFc2 + kShardFc3;  // 42041856
// Each group's sharded gradients are views of one reduce-scatter output: its padded shard elements.
constexpr int64_t kShardedGradients = block((2048 * 1024 + 2048) * 4) + block((2048 * 4096 + 2048) * 4) +
                                      block((5 * 4096 + 5) * 4);  // 8396800 + 33562624 + 82432
// The whole parameters, one block each (what DDP's ranks hold, and what FSDP gathers).
constexpr int64_t kWholeParameters = block(4096 * 1024 * 4) + block(4096 * 4) + block(4096 * 4096 * 4) +
                                     block(4096 * 4) + block(10 * 4096 * 4) + block(10 * 4);  // 84083200

}  // namespace

TEST_CASE("FSDP2 ledger: sharded parameters, gradients and Adam state of the MLP on two ranks, by name") {
  static_assert(kShardedParameters == 42041856);
  static_assert(kShardedGradients == 42041856);  // 82432 = 81940 rounded; equal to the parameters by chance
  static_assert(kWholeParameters == 84083200);
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const Marks m = fsdp_marks("mlp_fsdp", rank);
    for (const char* label : {"sharded", "data", "s0_forward", "s0_backward", "s0_step", "s2_zero_grad"}) {
      CAPTURE(label);
      CHECK(m.at(label)[MemoryCategory::parameter] == kShardedParameters);
    }
    // After sharding nothing else is left: the whole parameters were freed.
    CHECK(m.at("sharded").allocated == kShardedParameters);
    // reshard_after_forward (the default): after forward no parameter is gathered; the root (the MLP)
    // manages no parameter of its own, and the last all-gather flat went at the root's post-forward.
    CHECK(m.at("s0_forward")[MemoryCategory::gathered_parameter] == 0);
    CHECK(m.at("s0_forward")[MemoryCategory::communication] == 0);
    // After backward: the reduce-scatter outputs, all of them .grad views, are the gradients; the unsharded
    // gradients and the reduce-scatter inputs are gone.
    CHECK(m.at("s0_backward")[MemoryCategory::gradient] == kShardedGradients);
    CHECK(m.at("s0_backward")[MemoryCategory::gathered_parameter] == 0);
    CHECK(m.at("s0_backward")[MemoryCategory::communication] == 0);
    // Adam: exp_avg and exp_avg_sq of each shard (the step counts live on the host).
    CHECK(m.at("s0_step")[MemoryCategory::optimizer_state] == 2 * kShardedParameters);
    CHECK(m.at("s0_zero_grad")[MemoryCategory::gradient] == 0);
    CHECK(m.at("s2_zero_grad")[MemoryCategory::optimizer_state] == 2 * kShardedParameters);
    CHECK(m.at("s2_zero_grad")[MemoryCategory::other] < m.at("s2_zero_grad").allocated / 100);  // x, y
  }
}

TEST_CASE("FSDP2 ledger: built on meta, the shards made by to_empty are the parameters") {
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const Marks m = fsdp_marks("mlp_fsdp_meta", rank);
    CHECK(m.at("sharded").allocated == 0);  // sharded on another meta device, nothing here yet
    for (const char* label : {"to_empty", "initialised", "s0_backward", "s2_zero_grad"}) {
      CAPTURE(label);
      CHECK(m.at(label)[MemoryCategory::parameter] == kShardedParameters);
    }
    CHECK(m.at("s0_backward")[MemoryCategory::gradient] == kShardedGradients);
  }
}

TEST_CASE("FSDP2 ledger: uneven shards, padded the same on both ranks, Adam's state by each rank's real rows") {
  // UnevenMLP: Linear(1000, 3001), Linear(3001, 1001), Linear(1001, 10). Padded rows ceil(d0 / 2): 1501, 501
  // and 5; real rows 1501, 501, 5 on rank 0 and 1500, 500, 5 on rank 1.
  const auto linears = [](int64_t rows1, int64_t rows2, int64_t rows3) {
    return block(rows1 * 1000 * 4) + block(rows1 * 4) + block(rows2 * 3001 * 4) + block(rows2 * 4) +
           block(rows3 * 1001 * 4) + block(rows3 * 4);
  };
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const Marks m = fsdp_marks("mlp_fsdp_uneven", rank);
    CHECK(m.at("sharded")[MemoryCategory::parameter] == linears(1501, 501, 5));
    CHECK(m.at("s0_step")[MemoryCategory::parameter] == linears(1501, 501, 5));
    // exp_avg and exp_avg_sq of the real rows. The two weights' states are blocks of about 6 MB, and a large
    // block keeps the rest of its segment when that rest is 1 MiB or less (the caching allocator's rule), so
    // each of those four blocks may count up to 1 MiB more than its request.
    const int64_t state = 2 * (rank == 0 ? linears(1501, 501, 5) : linears(1500, 500, 5));
    CHECK(m.at("s0_step")[MemoryCategory::optimizer_state] >= state);
    CHECK(m.at("s0_step")[MemoryCategory::optimizer_state] <= state + 4 * (int64_t{1} << 20));
  }
}

TEST_CASE("FSDP2 ledger: without resharding after forward the whole parameters stay, as gathered_parameter") {
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const Marks m = fsdp_marks("mlp_fsdp_no_reshard", rank);
    CHECK(m.at("sharded")[MemoryCategory::gathered_parameter] == 0);
    // Each gathered parameter is 2 x its padded shard: the whole tensor (10 rows pad to 2 x 5, no padding).
    CHECK(m.at("s0_forward")[MemoryCategory::gathered_parameter] == kWholeParameters);
    CHECK(m.at("s0_forward")[MemoryCategory::parameter] == kShardedParameters);
    // Backward reshards every group.
    CHECK(m.at("s0_backward")[MemoryCategory::gathered_parameter] == 0);
    CHECK(m.at("s0_backward")[MemoryCategory::gradient] == kShardedGradients);
  }
}

TEST_CASE("FSDP2 ledger: inside a layer's forward, its gathered parameters and its all-gather flat") {
  const Device device{DeviceType::meta, 0};
  testing::FreshDevice fresh(device, testing::small_card());
  auto pg = make_fake_process_group(0, 2, device);
  auto model = std::make_shared<nn::Sequential>();
  auto fc1 = std::make_shared<nn::Linear>(1024, 4096, device);
  auto fc2 = std::make_shared<nn::Linear>(4096, 256, device);
  model->push_back(fc1);
  model->push_back(fc2);
  fully_shard(fc1, *pg);
  fully_shard(fc2, *pg);
  fully_shard(model, *pg);
  std::optional<Ledger> in_fc2;
  // Registered after FSDP's, so it runs once fc2's parameters are gathered.
  fc2->register_forward_pre_hook([&](nn::Module&, const Tensor& x) {
    in_fc2 = ledger_now(device);
    return x;
  });
  Tensor x = randn({8, 1024}, TensorOptions{}.with_device(device));
  Tensor out = (*model)(x);
  REQUIRE(in_fc2);
  const Ledger& l = *in_fc2;
  CHECK(sum(l.bytes) == l.allocated);
  // fc1 resharded after its forward; fc2 (256 x 4096 and 256, shards of 128 rows) is whole.
  CHECK(l[MemoryCategory::gathered_parameter] == block(256 * 4096 * 4) + block(256 * 4));
  // fc2's flat all-gather output (2 ranks x 128 x (4096 + 1) floats) lives until the root's post-forward;
  // fc1's went when fc2 copied out.
  CHECK(l[MemoryCategory::communication] == block(2 * 128 * 4097 * 4));
  CHECK(l[MemoryCategory::parameter] ==
        block(2048 * 1024 * 4) + block(2048 * 4) + block(128 * 4096 * 4) + block(128 * 4));
}

TEST_CASE("DDP ledger: the gradient bucket is communication, or the gradients with gradient_as_bucket_view") {
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    // One bucket of every gradient until the rebuild: all of the MLP's parameters, in one flat.
    constexpr int64_t kBucket = block((1024 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10) * int64_t{4});
    {
      const Marks m = ddp_marks("mlp_ddp", rank);
      CHECK(m.at("wrapped")[MemoryCategory::parameter] == kWholeParameters);
      CHECK(m.at("wrapped")[MemoryCategory::communication] == kBucket);
      CHECK(m.at("wrapped")[MemoryCategory::gradient] == 0);
      // After backward the gradients are counted twice, as PyTorch holds them: .grad and the bucket.
      CHECK(m.at("s0_backward")[MemoryCategory::gradient] == kWholeParameters);
      CHECK(m.at("s0_backward")[MemoryCategory::communication] == kBucket);
    }
    {
      const Marks m = ddp_marks("mlp_ddp_bucket_view", rank);
      CHECK(m.at("wrapped")[MemoryCategory::gradient] == kBucket);
      CHECK(m.at("wrapped")[MemoryCategory::communication] == 0);
      CHECK(m.at("s0_backward")[MemoryCategory::gradient] == kBucket);
      CHECK(m.at("s0_backward")[MemoryCategory::communication] == 0);
    }
  }
}
