// The memory rule: each op allocates exactly what PyTorch's op allocates for its result. Expected figures
// are written as arithmetic (numel * element_size; the allocator rounds each block up to 512 bytes).
// Runs on sim, the simulated H100 of the goldens; the BLAS workspace is configured off (":0:0") except
// in the test about the workspace itself.
#include <cstdlib>

#include "helpers.h"
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
    { Probe p; Tensor c = a + b; CHECK(p.bytes() == output); CHECK(p.blocks() == 1); }
    { Probe p; Tensor c = a + 1; CHECK(p.bytes() == output); CHECK(p.blocks() == 1); }  // no tensor for the 1
    { Probe p; Tensor c = 2 * a; CHECK(p.bytes() == output); }
    { Probe p; Tensor c = a * 0.125; CHECK(p.bytes() == output); }
    { Probe p; Tensor c = exp(a); CHECK(p.bytes() == output); }
    { Probe p; Tensor c = gelu(a); CHECK(p.bytes() == output); }
    { Probe p; Tensor c = pow(a, 2); CHECK(p.bytes() == output); }
    { Probe p; Tensor c = -a; CHECK(p.bytes() == output); }
    { Probe p; Tensor c = where(a > 0, a, b); CHECK(p.peak() == 16 * 32 * 32 * 1 + output); CHECK(p.bytes() == output); }
    { Probe p; Tensor c = masked_fill(a, a > 0, 0); CHECK(p.bytes() == output); }
    { Probe p; Tensor c = a > b; CHECK(p.bytes() == 16 * 32 * 32 * 1); }  // bool: 16384
    { Probe p; Tensor c = a == 0.5; CHECK(p.bytes() == 16 * 32 * 32 * 1); }
    // Broadcast: (16, 1, 32) + (32, 32) -> (16, 32, 32).
    const Tensor row = randn({16, 1, 32}, on(kSim)), square = randn({32, 32}, on(kSim));
    { Probe p; Tensor c = row + square; CHECK(c.sizes() == Shape{16, 32, 32}); CHECK(p.bytes() == output); }
    // A small result still takes a whole 512-byte block: (3, 4) float32 = 48 bytes requested.
    const Tensor small = ones({3, 4}, on(kSim));
    { Probe p; Tensor c = small + small; CHECK(p.bytes() == 512); CHECK(p.requested() == 3 * 4 * 4); }
    // A transposed operand gives a transposed (dense) output, as TensorIterator lays it out.
    { const Tensor t = a.transpose(1, 2); Tensor c = t + t; CHECK(c.strides() == t.strides()); }
    { const Tensor t = a.transpose(1, 2); Tensor c = t + 1; CHECK(c.strides() == t.strides()); }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("views allocate nothing; reshape of a transposed tensor copies") {
  fresh(kSim);
  {
    const Tensor x = randn({4, 8, 16}, on(kSim));
    Probe p;
    {
      const Tensor v1 = x.view({32, 16}), v2 = x.transpose(1, 2), v3 = x.permute({2, 0, 1}), v4 = x.select(1, 3);
      const Tensor v5 = x.slice(2, 0, 8, 2), v6 = x.unsqueeze(0).expand({3, 4, 8, 16}), v7 = x[1].t();
      const auto parts = x.unbind(0);
      const Tensor v8 = x.reshape({4, 128}), v9 = x.flatten(), v10 = x.narrow(0, 1, 2), v11 = x.squeeze();
      const auto chunks = x.chunk(2, 2);
      CHECK(p.bytes() == 0);
      CHECK(p.blocks() == 0);
    }
    // reshape copies exactly when no view can express the result: 4 * 8 * 16 * 4 = 2048 bytes.
    const Tensor copied = x.transpose(1, 2).reshape({4, 128});
    CHECK_FALSE(copied.shares_storage_with(x));
    CHECK(p.bytes() == 4 * 8 * 16 * 4);
    CHECK(x.transpose(1, 2).contiguous().nbytes() == 2048);
  }
  CHECK(allocated() == 0);
}

TEST_CASE("in-place ops allocate nothing and bump the shared version counter") {
  fresh(kSim);
  {
    const Tensor x = randn({8, 8}, on(kSim)), other = randn({8}, on(kSim));
    const Tensor view = x.view({64});
    Probe p;
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
    CHECK(p.bytes() == 0);
    CHECK(p.peak() == 512);  // the x < -1 mask: 8 * 8 bool bytes in one 512-byte block, at the peak
  }
  CHECK(allocated() == 0);
}

TEST_CASE("reductions allocate their result; to a scalar, one 0-d block of 512 bytes") {
  fresh(kSim);
  {
    const Tensor x = randn({16, 32, 32}, on(kSim));
    { Probe p; Tensor s = sum(x); CHECK(p.bytes() == 512); CHECK(p.requested() == 4); CHECK(p.blocks() == 1); }
    { Probe p; Tensor s = mean(x); CHECK(p.bytes() == 512); CHECK(p.requested() == 4); }
    { Probe p; Tensor s = max(x); CHECK(p.requested() == 4); }
    { Probe p; Tensor s = argmax(x); CHECK(p.bytes() == 512); CHECK(p.requested() == 8); }  // int64
    { Probe p; Tensor s = sum(x, {0}); CHECK(p.bytes() == 32 * 32 * 4); }
    { Probe p; Tensor s = sum(x, {1, 2}, true); CHECK(p.requested() == 16 * 4); CHECK(p.bytes() == 512); }
    { Probe p; Tensor s = mean(x.transpose(0, 2), {2}); CHECK(p.bytes() == 32 * 32 * 4); }
    {
      // values (float32) then indices (int64): 32*32*4 + 32*32*8 = 12288
      Probe p;
      ValuesIndices m = max(x, 0);
      CHECK(p.bytes() == 32 * 32 * 4 + 32 * 32 * 8);
      CHECK(p.blocks() == 2);
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("softmax allocates its output, plus a temporary copy of a non-contiguous input") {
  fresh(kSim);
  {
    const Tensor x = randn({16, 32, 32}, on(kSim));
    const int64_t output = 16 * 32 * 32 * 4;
    { Probe p; Tensor y = softmax(x, -1); CHECK(p.bytes() == output); CHECK(p.peak() == output); }
    { Probe p; Tensor y = log_softmax(x.transpose(1, 2), -1); CHECK(p.bytes() == output); CHECK(p.peak() == 2 * output); }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("matrix products allocate as PyTorch's decomposition does (workspace off)") {
  WorkspaceOff no_workspace;
  fresh(kSim);
  {
    // (B,H,L,D) @ (B,H,D,L), both contiguous: views to (B*H, L, D), one bmm output.
    const Tensor q = randn({4, 2, 16, 8}, on(kSim)), k = randn({4, 2, 8, 16}, on(kSim));
    { Probe p; Tensor a = matmul(q, k); CHECK(p.bytes() == 4 * 2 * 16 * 16 * 4); CHECK(p.peak() == p.bytes()); CHECK(p.blocks() == 1); }
    // 3-d @ 2-d: the batch folds into rows, one mm.
    const Tensor x = randn({8, 16, 32}, on(kSim)), w = randn({32, 24}, on(kSim));
    { Probe p; Tensor y = matmul(x, w); CHECK(p.bytes() == 8 * 16 * 24 * 4); CHECK(p.peak() == p.bytes()); }
    // A permuted 3-d operand cannot fold: bmm over views, still one output.
    const Tensor permuted = randn({16, 8, 32}, on(kSim)).permute({1, 0, 2});
    { Probe p; Tensor y = matmul(permuted, w); CHECK(p.bytes() == 8 * 16 * 24 * 4); CHECK(p.peak() == p.bytes()); }
    // Batch broadcast (4,8,16,32) @ (8,32,16): the expanded rhs cannot be reshaped to (32,32,16) as a
    // view, so it is copied (4*8*32*16*4 = 65536, freed on return) before the bmm output (32*16*16*4).
    const Tensor lhs = randn({4, 8, 16, 32}, on(kSim)), rhs = randn({8, 32, 16}, on(kSim));
    { Probe p; Tensor y = matmul(lhs, rhs); CHECK(p.bytes() == 32 * 16 * 16 * 4); CHECK(p.peak() == 4 * 8 * 32 * 16 * 4 + 32 * 16 * 16 * 4); }
    // mm with an operand cuBLAS cannot read in place (column stride 2): cloned (64*32*4) after the output.
    const Tensor wide = randn({64, 64}, on(kSim)), right = randn({32, 16}, on(kSim));
    { Probe p; Tensor y = mm(wide.slice(1, 0, 64, 2), right); CHECK(p.bytes() == 64 * 16 * 4); CHECK(p.peak() == 64 * 16 * 4 + 64 * 32 * 4); }
    // A transposed operand is read in place.
    { Probe p; Tensor y = mm(wide.t(), wide); CHECK(p.peak() == 64 * 64 * 4); }
    // dot: a 0-d result; mv: a vector.
    const Tensor u = randn({64}, on(kSim));
    { Probe p; Tensor y = matmul(u, u); CHECK(p.bytes() == 512); CHECK(p.requested() == 4); }
    { Probe p; Tensor y = matmul(wide, u); CHECK(p.requested() == 64 * 4); }
    // addmm: one output, the bias copied into it.
    const Tensor bias = randn({16}, on(kSim));
    { Probe p; Tensor y = addmm(bias, wide.slice(1, 0, 32), right); CHECK(p.bytes() == 64 * 16 * 4); CHECK(p.peak() == p.bytes()); }
    // linear: 3-d contiguous input with bias folds to addmm (one output); a non-contiguous one goes
    // through matmul and adds the bias in place (still one output).
    const Tensor weight = randn({16, 32}, on(kSim));
    { Probe p; Tensor y = linear(x, weight, bias); CHECK(y.sizes() == Shape{8, 16, 16}); CHECK(p.bytes() == 8 * 16 * 16 * 4); CHECK(p.peak() == p.bytes()); }
    { Probe p; Tensor y = linear(randn({8, 32, 16}, on(kSim)).transpose(1, 2), weight, bias); CHECK(p.bytes() == 8 * 16 * 16 * 4); }
    // outer: the elementwise product of two views.
    { Probe p; Tensor y = outer(u, u); CHECK(p.bytes() == 64 * 64 * 4); }
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
      Probe p;
      Tensor y = mm(a, b);
      CHECK(p.bytes() == output + workspace);
    }
    { Probe p; Tensor y = mm(a, b); CHECK(p.bytes() == output); }  // the workspace stays parked
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
    Probe p;
    Tensor y = addmm(bias, a, b);
    CHECK(p.bytes() == 64 * 16 * 4 + 4096 * 1024 * 8 + 1024 * 1024);
    CHECK(p.blocks() == 3);
  }
  fresh(kSim);
  {
    // A 2-d bias is not fused: no Lt block.
    const Tensor a = randn({64, 32}, on(kSim)), b = randn({32, 16}, on(kSim)), bias = randn({64, 16}, on(kSim));
    Probe p;
    Tensor y = addmm(bias, a, b);
    CHECK(p.bytes() == 64 * 16 * 4 + 4096 * 1024 * 8);
  }
  fresh(kSim);
  CHECK(blas_workspace(kCpu).bytes == 0);
}

TEST_CASE("dropout, indexing and joining allocate their outputs") {
  fresh(kSim);
  {
    const Tensor x = randn({16, 32, 32}, on(kSim));
    // native_dropout: output (float32) then mask (bool): 65536 + 16384.
    { Probe p; DropoutResult d = dropout_with_mask(x, 0.1); CHECK(p.bytes() == 16 * 32 * 32 * 4 + 16 * 32 * 32 * 1); CHECK(p.blocks() == 2); }
    { Probe p; Tensor d = dropout(x, 0.1, false); CHECK(p.bytes() == 0); }
    const Tensor table = randn({100, 32}, on(kSim));
    const Tensor ids = randint(0, 100, {4, 8}, on(kSim, ScalarType::int64));
    { Probe p; Tensor e = embedding(table, ids); CHECK(p.bytes() == 4 * 8 * 32 * 4); }
    // Non-contiguous indices are flattened by reshape, which copies them first: 4 * 8 * 8 bytes -> 512.
    { Probe p; Tensor e = embedding(table, ids.t()); CHECK(p.bytes() == 8 * 4 * 32 * 4); CHECK(p.peak() == 8 * 4 * 32 * 4 + 512); }
    { Probe p; Tensor g = gather(table, 1, randint(0, 32, {100, 4}, on(kSim, ScalarType::int64))); CHECK(p.requested() == 100 * 4 * 4); CHECK(p.bytes() == 2048); }  // 1600 rounded up to 4 * 512
    { Probe p; Tensor c = cat({table, table}, 1); CHECK(p.bytes() == 100 * 64 * 4); CHECK(p.blocks() == 1); }
    { Probe p; Tensor s = stack({table, table, table}); CHECK(p.bytes() == 3 * 100 * 32 * 4); CHECK(p.blocks() == 1); }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("meta tensors allocate the same figures and compute nothing") {
  WorkspaceOff no_workspace;
  fresh(kMeta);
  {
    const Tensor q = empty({64, 8, 32, 64}, on(kMeta)), k = empty({64, 8, 64, 32}, on(kMeta));
    CHECK(q.is_meta());
    { Probe p(kMeta); Tensor a = matmul(q, k) * 0.125; CHECK(p.bytes() == 64 * 8 * 32 * 32 * 4); CHECK(p.peak() == 2 * 64 * 8 * 32 * 32 * 4); }
    { Probe p(kMeta); Tensor s = sum(q); CHECK(p.requested() == 4); CHECK(p.bytes() == 512); }
    { Probe p(kMeta); Tensor r = q.transpose(1, 2).reshape({64, 32, 512}); CHECK(p.bytes() == 64 * 8 * 32 * 64 * 4); }
    { Probe p(kMeta); Tensor y = softmax(q, -1); CHECK(p.bytes() == 64 * 8 * 32 * 64 * 4); }
    { Probe p(kMeta); DropoutResult d = dropout_with_mask(q, 0.5); CHECK(p.bytes() == 64 * 8 * 32 * 64 * 5); }
    { Probe p(kMeta); Tensor y = linear(q, empty({16, 64}, on(kMeta)), empty({16}, on(kMeta))); CHECK(p.bytes() == 64 * 8 * 32 * 16 * 4); }
  }
  fresh(kMeta);
}
