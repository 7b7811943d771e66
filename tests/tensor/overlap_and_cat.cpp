// PyTorch's memory-overlap rules for writes (the classification itself, and the writes it lets through:
// full overlap, disjoint views of one storage, fill_ of shared elements, masked_fill_ of an expanded view),
// and the joins PyTorch accepts that bytegrad refused: cat across dtypes (result_type of all inputs) and
// cat with legacy empty 1-d tensors. Memory as arithmetic: every block rounds up to 512 bytes.
#include "helpers.h"
#include "bytegrad/tensor/memory_overlap.h"
#include "bytegrad/testing/memory_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

TensorOptions on_sim(ScalarType t = ScalarType::float32) { return TensorOptions{t, kSim}; }

// 0..8 as a dense 3x3 float32 tensor on sim.
Tensor square() { return arange(9.0, on_sim()).view({3, 3}); }

}  // namespace

TEST_CASE("has_internal_overlap: stride 0 over a size above 1 is yes, dense is no, the rest too hard") {
  fresh(kSim);
  {
    const Tensor x = square();
    CHECK(has_internal_overlap(x) == MemOverlap::no);
    CHECK(has_internal_overlap(x.t()) == MemOverlap::no);  // dense, permuted
    CHECK(has_internal_overlap(x.select(0, 0).expand({4, 3})) == MemOverlap::yes);
    CHECK(has_internal_overlap(x.select(0, 0).unsqueeze(0)) == MemOverlap::no);  // size 1: nothing shared
    CHECK(has_internal_overlap(x.as_strided({2, 2}, {1, 1}, 0)) == MemOverlap::too_hard);
    CHECK(has_internal_overlap(x.slice(1, 0, 2)) == MemOverlap::too_hard);  // gaps: not dense, not shared
    // An empty tensor with a stride-0 dimension of size 3 is "no": PyTorch counts every empty tensor
    // contiguous (compute_contiguous returns true for numel 0), so non-overlapping and dense.
    CHECK(has_internal_overlap(x.as_strided({0, 3}, {3, 0}, 0)) == MemOverlap::no);
  }
  CHECK(allocated() == 0);
}

TEST_CASE("get_overlap_status compares storages and byte ranges") {
  fresh(kSim);
  {
    const Tensor x = square(), other = square();
    const Tensor flat = x.view({9});
    CHECK(get_overlap_status(x, x) == MemOverlapStatus::full);
    CHECK(get_overlap_status(x, x.view({3, 3})) == MemOverlapStatus::full);  // another handle, same layout
    CHECK(get_overlap_status(x, x.t()) == MemOverlapStatus::partial);        // same bytes, other strides
    CHECK(get_overlap_status(flat.slice(0, 1, 9), flat.slice(0, 0, 8)) == MemOverlapStatus::partial);
    CHECK(get_overlap_status(x.select(0, 0), x.select(0, 1)) == MemOverlapStatus::no);  // bytes 0-12 and 12-24
    CHECK(get_overlap_status(x, other) == MemOverlapStatus::no);                        // another storage
    CHECK(get_overlap_status(x, x.slice(0, 0, 0)) == MemOverlapStatus::no);             // empty
    CHECK(get_overlap_status(x, x.select(0, 0).expand({3, 3})) == MemOverlapStatus::too_hard);
    CHECK(get_overlap_status(x.select(0, 0), x) == MemOverlapStatus::partial);  // inside the other
    // Meta tensors have no addresses; the rule reads storages and offsets, so it holds there too.
    const Tensor m = empty({3, 3}, TensorOptions{ScalarType::float32, Device{DeviceType::meta, 0}});
    CHECK(get_overlap_status(m, m.t()) == MemOverlapStatus::partial);
  }
  CHECK(allocated() == 0);
}

TEST_CASE("overlapping writes PyTorch refuses leave the destination as it was") {
  fresh(kSim);
  {
    const Tensor x = square();
    const std::vector<double> before = x.tolist();
    const uint64_t version = x.version();
    CHECK_THROWS_WITH_AS(x.copy_(x.t()),
                         doctest::Contains("copy_: unsupported operation: some elements of the input tensor"),
                         std::invalid_argument);
    CHECK_THROWS_AS(x.add_(x.t()), std::invalid_argument);
    CHECK_THROWS_AS(x.view({9}).slice(0, 1, 9).copy_(x.view({9}).slice(0, 0, 8)), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        x.select(0, 0).expand({2, 3}).add_(1.0),
        doctest::Contains("add_: unsupported operation: more than one element of the written-to tensor"),
        std::invalid_argument);
    CHECK(x.tolist() == before);
    CHECK(x.version() == version);  // nothing was written, so nothing counted as a write
  }
  CHECK(allocated() == 0);
}

TEST_CASE(
    "writes PyTorch allows: full overlap, disjoint views of one storage, an overlapping source that is not dense") {
  fresh(kSim);
  {
    // x.add_(x): every element reads itself before it is written. [0..8] * 2.
    const Tensor x = square();
    x.add_(x);
    CHECK(x.tolist() == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16});
    // The same through another handle of the same layout (full overlap, not the same tensor).
    x.mul_(x.view({9}).view({3, 3}));
    CHECK(x.tolist() == std::vector<double>{0, 4, 16, 36, 64, 100, 144, 196, 256});
    // x.copy_(x): the same data; no kernel and no allocation, the values stay.
    {
      MemoryProbe probe(kSim);
      x.copy_(x);
      x.copy_(x.view({3, 3}));
      CHECK(probe.allocated_delta_is(0));
      CHECK(probe.blocks_delta() == 0);
    }
    CHECK(x.tolist() == std::vector<double>{0, 4, 16, 36, 64, 100, 144, 196, 256});
    // Rows 0 and 1 share a storage but no bytes (0-12 and 12-24): x[0] += x[1].
    const Tensor y = square();
    y.select(0, 0).add_(y.select(0, 1));
    CHECK(y.select(0, 0).tolist() == std::vector<double>{3, 5, 7});
    // copy_ from an expanded source of another storage writes every row.
    const Tensor z = zeros({2, 3}, on_sim());
    z.copy_(ones({3}, on_sim()).expand({2, 3}));
    CHECK(z.tolist() == std::vector<double>(6, 1.0));
  }
  CHECK(allocated() == 0);
}

TEST_CASE("fill_ and zero_ write views whose elements share memory, as PyTorch's (no allocation)") {
  fresh(kSim);
  {
    const Tensor base = zeros({3}, on_sim());
    {
      MemoryProbe probe(kSim);
      base.expand({2, 3}).fill_(7.0);
      CHECK(probe.allocated_delta_is(0));
    }
    CHECK(base.tolist() == std::vector<double>{7, 7, 7});
    base.expand({4, 3}).zero_();
    CHECK(base.tolist() == std::vector<double>{0, 0, 0});

    // empty_strided((2, 3), (1, 1)): element (i, j) is at i + j, so the storage holds 1 + 1 + 2 = 4
    // elements: 4 * 4 = 16 bytes requested, one 512-byte block.
    MemoryProbe probe(kSim);
    const Tensor overlapping = empty_strided({2, 3}, {1, 1}, on_sim());
    CHECK(probe.requested_delta() == 4 * 4);
    CHECK(probe.allocated_delta_is(512));
    overlapping.fill_(5.0);
    CHECK(overlapping.tolist() == std::vector<double>(6, 5.0));
    CHECK(probe.allocated_delta_is(512));  // fill_ allocated nothing
    // A stride-0 empty_strided tensor: one element behind all six.
    const Tensor one_element = empty_strided({2, 3}, {0, 0}, on_sim());
    one_element.fill_(-2.5);
    CHECK(one_element.tolist() == std::vector<double>(6, -2.5));
  }
  CHECK(allocated() == 0);
}

TEST_CASE("masked_fill_ into an expanded view is allowed, as PyTorch's (a deprecation warning there)") {
  fresh(kSim);
  {
    const Tensor base = zeros({3}, on_sim());
    // The mask sets column 0 in row 0 and column 2 in row 1; the columns share one element each.
    const Tensor mask = from_vector({1, 0, 0, 0, 0, 1}, {2, 3}, on_sim()) > 0.5;
    base.expand({2, 3}).masked_fill_(mask, 1.0);
    CHECK(base.tolist() == std::vector<double>{1, 0, 1});
  }
  CHECK(allocated() == 0);
}

TEST_CASE("cat promotes over all its inputs into one output allocation, as PyTorch's") {
  fresh(kSim);
  {
    const Tensor a = ones({2, 3}, on_sim(ScalarType::float32));
    const Tensor b = full({1, 3}, 2.5, on_sim(ScalarType::float64));
    MemoryProbe probe(kSim);
    const Tensor out = cat({a, b}, 0);
    CHECK(out.dtype() == ScalarType::float64);
    CHECK(out.sizes() == Shape{3, 3});
    CHECK(out.tolist() == std::vector<double>{1, 1, 1, 1, 1, 1, 2.5, 2.5, 2.5});
    // One block: 3 * 3 * 8 = 72 bytes requested, rounded to 512; no converted copies of the inputs.
    CHECK(probe.blocks_delta() == 1);
    CHECK(probe.requested_delta() == 3 * 3 * 8);
    CHECK(probe.allocated_delta_is(512));
    CHECK(probe.peak_allocated_delta_is(512));
  }
  {
    // PyTorch's recorded results: int64 with float16 gives float16; bool with int32 gives int32.
    const Tensor mixed =
        cat({full({1}, 1.0, on_sim(ScalarType::int64)), full({1}, 2.0, on_sim(ScalarType::float16))}, 0);
    CHECK(mixed.dtype() == ScalarType::float16);
    CHECK(mixed.tolist() == std::vector<double>{1, 2});
    const Tensor counted =
        cat({full({1}, 1.0, on_sim(ScalarType::bool_)), full({1}, 2.0, on_sim(ScalarType::int32))}, 0);
    CHECK(counted.dtype() == ScalarType::int32);
    CHECK(counted.tolist() == std::vector<double>{1, 2});
    // stack goes through cat: the same promotion.
    const Tensor stacked = stack({ones({2}, on_sim()), full({2}, 3.0, on_sim(ScalarType::float64))}, 0);
    CHECK(stacked.dtype() == ScalarType::float64);
    CHECK(stacked.tolist() == std::vector<double>{1, 1, 3, 3});
  }
  CHECK(allocated() == 0);
}

TEST_CASE("cat skips legacy empty 1-d tensors (shape [0]) whatever the other shapes, as PyTorch's") {
  fresh(kSim);
  {
    const Tensor a = ones({2, 3}, on_sim());
    const Tensor legacy = empty({0}, on_sim());
    MemoryProbe probe(kSim);
    const Tensor rows = cat({a, legacy}, 0);
    CHECK(rows.sizes() == Shape{2, 3});
    CHECK(rows.tolist() == std::vector<double>(6, 1.0));
    const Tensor columns = cat({a, legacy, a}, 1);  // dim 1 is past the legacy tensor's one dimension
    CHECK(columns.sizes() == Shape{2, 6});
    // dim -1 is wrapped by the first input that is not skipped (2-d), not by the legacy one in front.
    const Tensor wrapped = cat({legacy, a, a}, -1);
    CHECK(wrapped.sizes() == Shape{2, 6});
    CHECK(wrapped.tolist() == std::vector<double>(12, 1.0));
    // 2*3*4 = 24 and 2*6*4 = 48 bytes twice: three blocks of 512.
    CHECK(probe.blocks_delta() == 3);
    CHECK(probe.requested_delta() == 2 * 3 * 4 + 2 * (2 * 6 * 4));
    CHECK(probe.allocated_delta_is(3 * 512));
  }
  {
    // Only legacy tensors: a [0] result, which allocates nothing (0 bytes).
    const Tensor legacy = empty({0}, on_sim());
    MemoryProbe probe(kSim);
    const Tensor nothing = cat({legacy, legacy}, 0);
    CHECK(nothing.sizes() == Shape{0});
    CHECK(probe.allocated_delta_is(0));
  }
  {
    // The skipped tensor still takes part in the dtype (PyTorch's result_type over every input).
    const Tensor promoted = cat({ones({2, 3}, on_sim()), empty({0}, on_sim(ScalarType::float64))}, 1);
    CHECK(promoted.dtype() == ScalarType::float64);
    CHECK(promoted.tolist() == std::vector<double>(6, 1.0));
  }
  CHECK(allocated() == 0);
}
