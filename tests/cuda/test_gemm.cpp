// gemm on cuda against cpu over every operand layout the rules distinguish, and the temporary copies
// each layout costs (PyTorch 2.11's rules: see tensor/blas_plan.h).
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/tensor/blas_plan.h"
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

// Builds a (B, R, C) operand with a given layout from a fresh random tensor.
enum class Layout { contiguous, transposed, padded_rows, expanded_batch, permuted_batch, inner_step_two };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::padded_rows: return "padded rows (ld > cols)";
    case Layout::expanded_batch: return "expanded batch (stride 0)";
    case Layout::permuted_batch: return "permuted batch";
    case Layout::inner_step_two: return "inner stride 2";
  }
  return "?";
}

Pair operand(Layout layout, int64_t B, int64_t R, int64_t C, ScalarType dtype) {
  switch (layout) {
    case Layout::contiguous: return random_pair({B, R, C}, dtype);
    case Layout::transposed:
      return random_pair({B, C, R}, dtype).map([](const Tensor& t) { return t.transpose(1, 2); });
    case Layout::padded_rows:
      return random_pair({B, R, C + 5}, dtype).map([C](const Tensor& t) { return t.slice(2, 0, C); });
    case Layout::expanded_batch:
      return random_pair({R, C}, dtype).map([B](const Tensor& t) { return t.unsqueeze(0).expand({B, -1, -1}); });
    case Layout::permuted_batch:
      return random_pair({R, B, C}, dtype).map([](const Tensor& t) { return t.transpose(0, 1); });
    case Layout::inner_step_two:
      return random_pair({B, R, 2 * C}, dtype).map([](const Tensor& t) { return t.slice(2, 0, std::nullopt, 2); });
  }
  throw std::logic_error("layout");
}

// Bytes of the contiguous copy gemm makes of an operand with this layout (0 when used in place).
int64_t copy_bytes(Layout layout, int64_t B, int64_t R, int64_t C, ScalarType dtype) {
  return layout == Layout::inner_step_two ? B * R * C * static_cast<int64_t>(element_size(dtype)) : 0;
}

double gemm_rtol(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float16: return 2e-3;
    case ScalarType::bfloat16: return 1.6e-2;
    default: return default_rtol(dtype);
  }
}

CachingAllocator& gpu_allocator() { return caching_allocator(kCuda); }

TEST_CASE("gemm matches cpu for every operand layout, batched and not, with alpha and beta") {
  require_gpu();
  const int64_t M = 16, K = 32, N = 24;
  const std::vector<Layout> layouts = {Layout::contiguous,     Layout::transposed,     Layout::padded_rows,
                                       Layout::expanded_batch, Layout::permuted_batch, Layout::inner_step_two};
  {  // the cuBLAS workspace exists before anything is measured
    Pair a = random_pair({1, 2, 2}), b = random_pair({1, 2, 2}), c = empty_pair({1, 2, 2}, ScalarType::float32);
    gemm_into(c.gpu, a.gpu, b.gpu, 1.0, 0.0);
  }
  for (ScalarType dtype : kFloatDtypes) {
    for (int64_t B : {1, 3}) {
      for (Layout la : layouts) {
        for (Layout lb : layouts) {
          if (la != Layout::contiguous && lb != Layout::contiguous && la != lb) continue;  // pairs of interest
          const std::string what = std::string(scalar_type_name(dtype)) + " B=" + std::to_string(B) + " a " +
                                   layout_name(la) + ", b " + layout_name(lb);
          Pair a = operand(la, B, M, K, dtype);
          Pair b = operand(lb, B, K, N, dtype);
          for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 2.0}}) {
            Pair out = on_both(random_pair({B, M, N}, dtype).cpu);
            const int64_t before = gpu_allocator().memory_allocated();
            gpu_allocator().reset_peak_stats();
            gemm_into(out.cpu, a.cpu, b.cpu, alpha, beta);
            gemm_into(out.gpu, a.gpu, b.gpu, alpha, beta);
            CHECK(gpu_allocator().memory_allocated() == before);  // temporaries are gone
            if (dtype == ScalarType::float32) {  // these sizes are multiples of 512 B: no rounding in the figures
              INFO(what);
              CHECK(gpu_allocator().max_memory_allocated() - before ==
                    copy_bytes(la, B, M, K, dtype) + copy_bytes(lb, B, K, N, dtype));
            }
            const double rtol = gemm_rtol(dtype);
            check_close(out, rtol, rtol * std::max(1.0, max_abs(out.cpu)), what);
          }
        }
      }
    }
  }
}

TEST_CASE("gemm writes transposed and strided outputs (the latter through a temporary)") {
  require_gpu();
  const int64_t M = 16, K = 32, N = 24;
  for (int64_t B : {1, 3}) {
    Pair a = random_pair({B, M, K}), b = random_pair({B, K, N});
    struct OutCase {
      const char* name;
      std::function<Tensor(const Tensor&)> view;
      Shape base;
      int64_t copy_bytes;
    };
    const std::vector<OutCase> cases = {
        {"transposed out", [](const Tensor& t) { return t.transpose(1, 2); }, {B, N, M}, 0},
        {"inner stride 2 out",
         [](const Tensor& t) { return t.slice(2, 0, std::nullopt, 2); },
         {B, M, 2 * N},
         B * M * N * 4},
    };
    for (const OutCase& c : cases) {
      for (double beta : {0.0, 1.0}) {
        Pair base = random_pair(c.base);
        Pair out = base.map(c.view);
        const int64_t before = gpu_allocator().memory_allocated();
        gpu_allocator().reset_peak_stats();
        gemm_into(out.cpu, a.cpu, b.cpu, 1.0, beta);
        gemm_into(out.gpu, a.gpu, b.gpu, 1.0, beta);
        INFO(c.name << " B=" << B << " beta " << beta);
        CHECK(gpu_allocator().memory_allocated() == before);
        CHECK(gpu_allocator().max_memory_allocated() - before == c.copy_bytes);
        check_close(base, 1e-5, 1e-5 * std::max(1.0, max_abs(base.cpu)), c.name);  // untouched elements too
      }
    }
  }
}

TEST_CASE("gemm with an empty reduction scales or zeroes the output, without touching cuBLAS") {
  require_gpu();
  Pair a = random_pair({2, 4, 0}), b = random_pair({2, 0, 5});
  for (double beta : {0.0, 3.0}) {
    Pair out = random_pair({2, 4, 5});
    gemm_into(out.cpu, a.cpu, b.cpu, 1.0, beta);
    gemm_into(out.gpu, a.gpu, b.gpu, 1.0, beta);
    check_close(out, 1e-6, 1e-6, "K = 0");
  }
}

TEST_CASE("gemm of vectors and single rows (leading dimensions of size-1 matrices are adjusted)") {
  require_gpu();
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 1}, {5, 1, 3}, {1, 9, 6}, {6, 9, 1}}) {
    for (int64_t B : {1, 2}) {
      Pair a = random_pair({B, M, K}), b = random_pair({B, K, N}), out = empty_pair({B, M, N}, ScalarType::float32);
      gemm_into(out.cpu, a.cpu, b.cpu, 1.0, 0.0);
      gemm_into(out.gpu, a.gpu, b.gpu, 1.0, 0.0);
      check_close(out, 1e-5, 1e-5, "small shapes");
      Pair at = a.map([](const Tensor& t) { return t.transpose(1, 2).contiguous().transpose(1, 2); });
      gemm_into(out.cpu, at.cpu, b.cpu, 1.0, 0.0);
      gemm_into(out.gpu, at.gpu, b.gpu, 1.0, 0.0);
      check_close(out, 1e-5, 1e-5, "small shapes, column-major a");
    }
  }
}

// GPT-2's logits are 50257 wide: a 16-bit row that long is off 16 bytes, so its three products run as aligned
// pieces (kernels/aligned_pieces.h). Here 2049 wide (the same misalignment) and at least 2^30 multiply-adds
// each, so they take that path: the forward (C unaligned), the input's gradient (B unaligned, summed over the
// vocabulary in pieces) and the weight's (B transposed and unaligned, summed over the tokens in groups).
TEST_CASE("products with an odd vocabulary, in aligned pieces, match cpu") {
  require_gpu();
  const int64_t T = 1024, C = 768, V = 2049;
  for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16}) {
    CAPTURE(scalar_type_name(dtype));
    Pair x = random_pair({T, C}, dtype), w = random_pair({V, C}, dtype), g = random_pair({T, V}, dtype);
    // What the pieces allocate is nothing (they only compute: tests/tensor/aligned_pieces.cpp; the benchmark's
    // peaks are the same with BYTEGRAD_GEMM_PIECES=0), so only the values are checked here.
    Pair logits{matmul(x.cpu, w.cpu.t()), matmul(x.gpu, w.gpu.t())};
    Pair grad_x{matmul(g.cpu, w.cpu), matmul(g.gpu, w.gpu)};
    Pair grad_w{matmul(g.cpu.t(), x.cpu), matmul(g.gpu.t(), x.gpu)};
    // The weight's gradient adds 8 groups' sums in 16 bits: a few roundings more than one product's.
    const double rtol = gemm_rtol(dtype) * 4;
    for (const auto& [name, result] :
         {std::pair<const char*, Pair*>{"logits", &logits}, {"grad_x", &grad_x}, {"grad_w", &grad_w}})
      check_close(*result, rtol, rtol * std::max(1.0, max_abs(result->cpu)), name);
  }
}

}  // namespace
}  // namespace bytegrad::testing
