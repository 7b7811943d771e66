// The memory rule: each op allocates exactly what PyTorch's op allocates for its result. Expected figures
// are written as arithmetic (numel * element_size; the allocator rounds each block up to 512 bytes).
// Runs on sim, the simulated H100 of the goldens; the BLAS workspace is configured off (":0:0") except
// in the test about the workspace itself.
#include <cstdlib>

#include "helpers.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct WorkspaceOff {
  WorkspaceOff() { setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1); }
  ~WorkspaceOff() { unsetenv("CUBLAS_WORKSPACE_CONFIG"); }
};

TensorOptions on(Device d, ScalarType t = ScalarType::float32) { return TensorOptions{t, d}; }

}  // namespace

TEST_CASE("elementwise ops allocate one output of numel * element_size, scalars none") {
  fresh(kSim);
  {
    const Tensor a = randn({16, 32, 32}, on(kSim)), b = randn({16, 32, 32}, on(kSim));
    const int64_t output = 16 * 32 * 32 * 4;  // 65536
    {
      MemoryProbe p(kSim);
      Tensor c = a + b;
      CHECK(p.allocated_delta_is(output));
      CHECK(p.blocks_delta() == 1);
    }
    {
      MemoryProbe p(kSim);
      Tensor c = a + 1;
      CHECK(p.allocated_delta_is(output));
      CHECK(p.blocks_delta() == 1);
    }  // no tensor for the 1
    {
      MemoryProbe p(kSim);
      Tensor c = 2 * a;
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = a * 0.125;
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = exp(a);
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = gelu(a);
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = pow(a, 2);
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = -a;
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = where(a > 0, a, b);
      CHECK(p.peak_allocated_delta_is(16 * 32 * 32 * 1 + output));
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = masked_fill(a, a > 0, 0);
      CHECK(p.allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor c = a > b;
      CHECK(p.allocated_delta_is(16 * 32 * 32 * 1));
    }  // bool: 16384
    {
      MemoryProbe p(kSim);
      Tensor c = a == 0.5;
      CHECK(p.allocated_delta_is(16 * 32 * 32 * 1));
    }
    // Broadcast: (16, 1, 32) + (32, 32) -> (16, 32, 32).
    const Tensor row = randn({16, 1, 32}, on(kSim)), square = randn({32, 32}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor c = row + square;
      CHECK(c.sizes() == Shape{16, 32, 32});
      CHECK(p.allocated_delta_is(output));
    }
    // A small result still takes a whole 512-byte block: (3, 4) float32 = 48 bytes requested.
    const Tensor small = ones({3, 4}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor c = small + small;
      CHECK(p.allocated_delta_is(512));
      CHECK(p.requested_delta() == 3 * 4 * 4);
    }
    // A transposed operand gives a transposed (dense) output, as TensorIterator lays it out.
    {
      const Tensor t = a.transpose(1, 2);
      Tensor c = t + t;
      CHECK(c.strides() == t.strides());
    }
    {
      const Tensor t = a.transpose(1, 2);
      Tensor c = t + 1;
      CHECK(c.strides() == t.strides());
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("views allocate nothing; reshape of a transposed tensor copies") {
  fresh(kSim);
  {
    const Tensor x = randn({4, 8, 16}, on(kSim));
    MemoryProbe p(kSim);
    {
      const Tensor v1 = x.view({32, 16}), v2 = x.transpose(1, 2), v3 = x.permute({2, 0, 1}), v4 = x.select(1, 3);
      const Tensor v5 = x.slice(2, 0, 8, 2), v6 = x.unsqueeze(0).expand({3, 4, 8, 16}), v7 = x[1].t();
      const auto parts = x.unbind(0);
      const Tensor v8 = x.reshape({4, 128}), v9 = x.flatten(), v10 = x.narrow(0, 1, 2), v11 = x.squeeze();
      const auto chunks = x.chunk(2, 2);
      CHECK(p.allocated_delta_is(0));
      CHECK(p.blocks_delta() == 0);
    }
    // reshape copies exactly when no view can express the result: 4 * 8 * 16 * 4 = 2048 bytes.
    const Tensor copied = x.transpose(1, 2).reshape({4, 128});
    CHECK_FALSE(copied.shares_storage_with(x));
    CHECK(p.allocated_delta_is(4 * 8 * 16 * 4));
    CHECK(x.transpose(1, 2).contiguous().nbytes() == 2048);
  }
  CHECK(allocated() == 0);
}

TEST_CASE("in-place ops allocate nothing and bump the shared version counter") {
  fresh(kSim);
  {
    const Tensor x = randn({8, 8}, on(kSim)), other = randn({8}, on(kSim));
    const Tensor view = x.view({64});
    MemoryProbe p(kSim);
    uint64_t version = x.version();
    const auto bumped = [&] { return x.version() == ++version && view.version() == version; };
    x.add_(other);
    CHECK(bumped());
    x.add_(1.5, 2);
    CHECK(bumped());
    x.sub_(other, 0.5);
    CHECK(bumped());
    x.mul_(other);
    CHECK(bumped());
    x.mul_(3);
    CHECK(bumped());
    x.div_(2);
    CHECK(bumped());
    x.relu_();
    CHECK(bumped());
    x.neg_();
    CHECK(bumped());
    x.masked_fill_(x < -1, 0);
    CHECK(x.version() > version);  // x < -1 itself allocates a bool tensor, freed at once
    version = x.version();
    x.fill_(2);
    CHECK(bumped());
    x.zero_();
    CHECK(bumped());
    x += other;
    CHECK(bumped());
    x *= 2;
    CHECK(bumped());
    CHECK(p.allocated_delta_is(0));
    CHECK(p.peak_allocated_delta_is(512));  // the x < -1 mask: 8 * 8 bool bytes in one 512-byte block, at the peak
  }
  CHECK(allocated() == 0);
}

TEST_CASE("reductions allocate their result; to a scalar, one 0-d block of 512 bytes") {
  fresh(kSim);
  {
    const Tensor x = randn({16, 32, 32}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor s = sum(x);
      CHECK(p.allocated_delta_is(512));
      CHECK(p.requested_delta() == 4);
      CHECK(p.blocks_delta() == 1);
    }
    {
      MemoryProbe p(kSim);
      Tensor s = mean(x);
      CHECK(p.allocated_delta_is(512));
      CHECK(p.requested_delta() == 4);
    }
    {
      MemoryProbe p(kSim);
      Tensor s = max(x);
      CHECK(p.requested_delta() == 4);
    }
    {
      MemoryProbe p(kSim);
      Tensor s = argmax(x);
      CHECK(p.allocated_delta_is(512));
      CHECK(p.requested_delta() == 8);
    }  // int64
    {
      MemoryProbe p(kSim);
      Tensor s = sum(x, {0});
      CHECK(p.allocated_delta_is(32 * 32 * 4));
    }
    {
      MemoryProbe p(kSim);
      Tensor s = sum(x, {1, 2}, true);
      CHECK(p.requested_delta() == 16 * 4);
      CHECK(p.allocated_delta_is(512));
    }
    {
      MemoryProbe p(kSim);
      Tensor s = mean(x.transpose(0, 2), {2});
      CHECK(p.allocated_delta_is(32 * 32 * 4));
    }
    {
      // values (float32) then indices (int64): 32*32*4 + 32*32*8 = 12288
      MemoryProbe p(kSim);
      ValuesIndices m = max(x, 0);
      CHECK(p.allocated_delta_is(32 * 32 * 4 + 32 * 32 * 8));
      CHECK(p.blocks_delta() == 2);
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("softmax allocates its output, plus a temporary copy of a non-contiguous input") {
  fresh(kSim);
  {
    const Tensor x = randn({16, 32, 32}, on(kSim));
    const int64_t output = 16 * 32 * 32 * 4;
    {
      MemoryProbe p(kSim);
      Tensor y = softmax(x, -1);
      CHECK(p.allocated_delta_is(output));
      CHECK(p.peak_allocated_delta_is(output));
    }
    {
      MemoryProbe p(kSim);
      Tensor y = log_softmax(x.transpose(1, 2), -1);
      CHECK(p.allocated_delta_is(output));
      CHECK(p.peak_allocated_delta_is(2 * output));
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("matrix products allocate as PyTorch's decomposition does (workspace off)") {
  WorkspaceOff no_workspace;
  fresh(kSim);
  {
    // (B,H,L,D) @ (B,H,D,L), both contiguous: views to (B*H, L, D), one bmm output.
    const Tensor q = randn({4, 2, 16, 8}, on(kSim)), k = randn({4, 2, 8, 16}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor a = matmul(q, k);
      CHECK(p.allocated_delta_is(4 * 2 * 16 * 16 * 4));
      CHECK(p.peak_allocated_delta_is(p.allocated_delta()));
      CHECK(p.blocks_delta() == 1);
    }
    // 3-d @ 2-d: the batch folds into rows, one mm.
    const Tensor x = randn({8, 16, 32}, on(kSim)), w = randn({32, 24}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor y = matmul(x, w);
      CHECK(p.allocated_delta_is(8 * 16 * 24 * 4));
      CHECK(p.peak_allocated_delta_is(p.allocated_delta()));
    }
    // A permuted 3-d operand cannot fold: bmm over views, still one output.
    const Tensor permuted = randn({16, 8, 32}, on(kSim)).permute({1, 0, 2});
    {
      MemoryProbe p(kSim);
      Tensor y = matmul(permuted, w);
      CHECK(p.allocated_delta_is(8 * 16 * 24 * 4));
      CHECK(p.peak_allocated_delta_is(p.allocated_delta()));
    }
    // Batch broadcast (4,8,16,32) @ (8,32,16): the expanded rhs cannot be reshaped to (32,32,16) as a
    // view, so it is copied (4*8*32*16*4 = 65536, freed on return) before the bmm output (32*16*16*4).
    const Tensor lhs = randn({4, 8, 16, 32}, on(kSim)), rhs = randn({8, 32, 16}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor y = matmul(lhs, rhs);
      CHECK(p.allocated_delta_is(32 * 16 * 16 * 4));
      CHECK(p.peak_allocated_delta_is(4 * 8 * 32 * 16 * 4 + 32 * 16 * 16 * 4));
    }
    // mm with an operand cuBLAS cannot read in place (column stride 2): cloned (64*32*4) after the output.
    const Tensor wide = randn({64, 64}, on(kSim)), right = randn({32, 16}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor y = mm(wide.slice(1, 0, 64, 2), right);
      CHECK(p.allocated_delta_is(64 * 16 * 4));
      CHECK(p.peak_allocated_delta_is(64 * 16 * 4 + 64 * 32 * 4));
    }
    // A transposed operand is read in place.
    {
      MemoryProbe p(kSim);
      Tensor y = mm(wide.t(), wide);
      CHECK(p.peak_allocated_delta_is(64 * 64 * 4));
    }
    // dot: a 0-d result; mv: a vector.
    const Tensor u = randn({64}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor y = matmul(u, u);
      CHECK(p.allocated_delta_is(512));
      CHECK(p.requested_delta() == 4);
    }
    {
      MemoryProbe p(kSim);
      Tensor y = matmul(wide, u);
      CHECK(p.requested_delta() == 64 * 4);
    }
    // addmm: one output, the bias copied into it.
    const Tensor bias = randn({16}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor y = addmm(bias, wide.slice(1, 0, 32), right);
      CHECK(p.allocated_delta_is(64 * 16 * 4));
      CHECK(p.peak_allocated_delta_is(p.allocated_delta()));
    }
    // linear: 3-d contiguous input with bias folds to addmm (one output); a non-contiguous one goes
    // through matmul and adds the bias in place (still one output).
    const Tensor weight = randn({16, 32}, on(kSim));
    {
      MemoryProbe p(kSim);
      Tensor y = linear(x, weight, bias);
      CHECK(y.sizes() == Shape{8, 16, 16});
      CHECK(p.allocated_delta_is(8 * 16 * 16 * 4));
      CHECK(p.peak_allocated_delta_is(p.allocated_delta()));
    }
    {
      MemoryProbe p(kSim);
      Tensor y = linear(randn({8, 32, 16}, on(kSim)).transpose(1, 2), weight, bias);
      CHECK(p.allocated_delta_is(8 * 16 * 16 * 4));
    }
    // outer: the elementwise product of two views.
    {
      MemoryProbe p(kSim);
      Tensor y = outer(u, u);
      CHECK(p.allocated_delta_is(64 * 64 * 4));
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("a device's first matrix product parks the cuBLAS workspace after its output; cpu gets none") {
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
  fresh(kSim);
  caching_allocator(kSim).record_history(true);
  {
    const Tensor a = randn({64, 32}, on(kSim)), b = randn({32, 16}, on(kSim)), bias = randn({16}, on(kSim));
    const int64_t output = 64 * 16 * 4;
    const int64_t workspace = 4096 * 1024 * 8;  // PyTorch's default on compute capability 9.x: 32 MiB
    {
      MemoryProbe p(kSim);
      Tensor y = mm(a, b);
      CHECK(p.allocated_delta_is(output + workspace));
    }
    {
      MemoryProbe p(kSim);
      Tensor y = mm(a, b);
      CHECK(p.allocated_delta_is(output));
    }  // the workspace stays parked
    const auto trace = caching_allocator(kSim).snapshot().trace;
    std::vector<std::string> alloc_tags;
    for (const auto& e : trace)
      if (e.action == TraceAction::alloc) alloc_tags.push_back(e.tag);
    CHECK(alloc_tags.size() == 6);
    CHECK(alloc_tags[3] == "mm");
    CHECK(alloc_tags[4] == "workspace");
    CHECK(alloc_tags[5] == "mm");
  }
  caching_allocator(kSim).record_history(false);
  fresh(kSim);
  {
    // addmm with a 1-d bias takes the cuBLASLt path: output, cuBLAS workspace, then the 1 MiB Lt block.
    const Tensor a = randn({64, 32}, on(kSim)), b = randn({32, 16}, on(kSim)), bias = randn({16}, on(kSim));
    MemoryProbe p(kSim);
    Tensor y = addmm(bias, a, b);
    CHECK(p.allocated_delta_is(64 * 16 * 4 + 4096 * 1024 * 8 + 1024 * 1024));
    CHECK(p.blocks_delta() == 3);
  }
  fresh(kSim);
  {
    // A 2-d bias is not fused: no Lt block.
    const Tensor a = randn({64, 32}, on(kSim)), b = randn({32, 16}, on(kSim)), bias = randn({64, 16}, on(kSim));
    MemoryProbe p(kSim);
    Tensor y = addmm(bias, a, b);
    CHECK(p.allocated_delta_is(64 * 16 * 4 + 4096 * 1024 * 8));
  }
  fresh(kSim);
  CHECK(blas_workspace(kCpu).bytes == 0);
}

TEST_CASE("parked_blas_workspace lends the calling thread's parked workspace and allocates nothing") {
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
  fresh(kSim);
  {
    const Tensor a = randn({64, 32}, on(kSim)), b = randn({32, 16}, on(kSim));
    {
      MemoryProbe p(kSim);
      CHECK(parked_blas_workspace(kSim).data == nullptr);  // no product yet: nothing to lend
      CHECK(p.allocated_delta_is(0));
      CHECK(p.blocks_delta() == 0);
    }
    const Tensor y = mm(a, b);
    MemoryProbe p(kSim);
    const BlasWorkspace parked = parked_blas_workspace(kSim);
    CHECK(parked.data != nullptr);
    CHECK(parked.bytes == size_t{4096} * 1024 * 8);   // PyTorch's default on compute capability 9.x: 32 MiB
    CHECK(parked.data == blas_workspace(kSim).data);  // the block the product parked
    CHECK(p.allocated_delta_is(0));
    CHECK(p.blocks_delta() == 0);
    CHECK(parked_blas_workspace(kCpu).data == nullptr);
    // In a backward: still this thread's own, not the autograd device thread's, which threads share.
    BlasHandleOwnerScope autograd_thread(BlasHandleOwner::autograd_device_thread);
    CHECK(parked_blas_workspace(kSim).data == parked.data);
    const Tensor z = mm(a, b);  // parks the autograd thread's workspace
    CHECK(blas_workspace(kSim).data != parked.data);
    CHECK(parked_blas_workspace(kSim).data == parked.data);
  }
  {
    WorkspaceOff no_workspace;  // ":0:0": no workspace is parked, so nothing is lent
    fresh(kSim);
    const Tensor a = randn({64, 32}, on(kSim)), b = randn({32, 16}, on(kSim));
    const Tensor y = mm(a, b);
    CHECK(parked_blas_workspace(kSim).data == nullptr);
  }
  fresh(kSim);
}

TEST_CASE("dropout, indexing and joining allocate their outputs") {
  fresh(kSim);
  {
    const Tensor x = randn({16, 32, 32}, on(kSim));
    // native_dropout: output (float32) then mask (bool): 65536 + 16384.
    {
      MemoryProbe p(kSim);
      DropoutResult d = dropout_with_mask(x, 0.1);
      CHECK(p.allocated_delta_is(16 * 32 * 32 * 4 + 16 * 32 * 32 * 1));
      CHECK(p.blocks_delta() == 2);
    }
    {
      MemoryProbe p(kSim);
      Tensor d = dropout(x, 0.1, false);
      CHECK(p.allocated_delta_is(0));
    }
    const Tensor table = randn({100, 32}, on(kSim));
    const Tensor ids = randint(0, 100, {4, 8}, on(kSim, ScalarType::int64));
    {
      MemoryProbe p(kSim);
      Tensor e = embedding(table, ids);
      CHECK(p.allocated_delta_is(4 * 8 * 32 * 4));
    }
    // Non-contiguous indices are flattened by reshape, which copies them first: 4 * 8 * 8 bytes -> 512.
    {
      MemoryProbe p(kSim);
      Tensor e = embedding(table, ids.t());
      CHECK(p.allocated_delta_is(8 * 4 * 32 * 4));
      CHECK(p.peak_allocated_delta_is(8 * 4 * 32 * 4 + 512));
    }
    {
      MemoryProbe p(kSim);
      Tensor g = gather(table, 1, randint(0, 32, {100, 4}, on(kSim, ScalarType::int64)));
      CHECK(p.requested_delta() == 100 * 4 * 4);
      CHECK(p.allocated_delta_is(2048));
    }  // 1600 rounded up to 4 * 512
    {
      MemoryProbe p(kSim);
      Tensor c = cat({table, table}, 1);
      CHECK(p.allocated_delta_is(100 * 64 * 4));
      CHECK(p.blocks_delta() == 1);
    }
    {
      MemoryProbe p(kSim);
      Tensor s = stack({table, table, table});
      CHECK(p.allocated_delta_is(3 * 100 * 32 * 4));
      CHECK(p.blocks_delta() == 1);
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("meta tensors allocate the same figures and compute nothing") {
  WorkspaceOff no_workspace;
  fresh(kMeta);
  {
    const Tensor q = empty({64, 8, 32, 64}, on(kMeta)), k = empty({64, 8, 64, 32}, on(kMeta));
    CHECK(q.is_meta());
    {
      MemoryProbe p(kMeta);
      Tensor a = matmul(q, k) * 0.125;
      CHECK(p.allocated_delta_is(64 * 8 * 32 * 32 * 4));
      CHECK(p.peak_allocated_delta_is(2 * 64 * 8 * 32 * 32 * 4));
    }
    {
      MemoryProbe p(kMeta);
      Tensor s = sum(q);
      CHECK(p.requested_delta() == 4);
      CHECK(p.allocated_delta_is(512));
    }
    {
      MemoryProbe p(kMeta);
      Tensor r = q.transpose(1, 2).reshape({64, 32, 512});
      CHECK(p.allocated_delta_is(64 * 8 * 32 * 64 * 4));
    }
    {
      MemoryProbe p(kMeta);
      Tensor y = softmax(q, -1);
      CHECK(p.allocated_delta_is(64 * 8 * 32 * 64 * 4));
    }
    {
      MemoryProbe p(kMeta);
      DropoutResult d = dropout_with_mask(q, 0.5);
      CHECK(p.allocated_delta_is(64 * 8 * 32 * 64 * 5));
    }
    {
      MemoryProbe p(kMeta);
      Tensor y = linear(q, empty({16, 64}, on(kMeta)), empty({16}, on(kMeta)));
      CHECK(p.allocated_delta_is(64 * 8 * 32 * 16 * 4));
    }
  }
  fresh(kMeta);
}
