// The cuda backend's fast paths against cpu, each on the shapes that take it and on the edges beside them:
// multi-tensor foreach batches (and AdamW's foreach step through them), the cuBLASLt bias epilogue, column
// sums (bias gradients), warp-register and shared-memory softmax, the register layer-norm input gradient,
// the vectorised masked_fill and inner-vectorised strided copies.
#include <functional>

#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/blas_plan.h"
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

// Sizes around the foreach kernel's vector width (4), its 8192-element chunk and its 48-tensor table.
std::vector<int64_t> foreach_sizes() {
  std::vector<int64_t> sizes = {1, 3, 4, 5, 768, 8191, 8192, 8193, 20003};
  for (int i = 0; i < 50; ++i) sizes.push_back(7 + 13 * i);
  return sizes;
}

TEST_CASE("foreach batches on cuda: unary, binary_scalar and ternary over many tensors match per-tensor cpu calls") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16}) {
    std::vector<Pair> selfs, as, bs, roots;
    for (int64_t n : foreach_sizes()) {
      selfs.push_back(random_pair({n}, dtype));
      as.push_back(random_pair({n}, dtype));
      bs.push_back(random_pair({n}, dtype, 2.0));
      roots.push_back(empty_pair({n}, dtype));
    }
    // One batch holding several ops in a row on the same tensors: launched in call order, op by op.
    auto run = [&](KernelBackend& backend, bool on_gpu) {
      auto v = [&](const Pair& p) { return on_gpu ? p.gpu_view() : p.cpu_view(); };
      backend.begin_foreach();
      for (size_t k = 0; k < selfs.size(); ++k)
        backend.binary_scalar(BinaryOp::mul, v(selfs[k]), v(selfs[k]), 0.9 + 0.001 * static_cast<double>(k), false);
      for (size_t k = 0; k < selfs.size(); ++k)
        backend.ternary(TernaryOp::lerp, v(selfs[k]), v(selfs[k]), v(as[k]), v(as[k]), 0.1);
      for (size_t k = 0; k < selfs.size(); ++k)
        backend.ternary(TernaryOp::addcmul, v(as[k]), v(as[k]), v(bs[k]), v(bs[k]), 0.05);
      for (size_t k = 0; k < selfs.size(); ++k) backend.unary(UnaryOp::abs, v(roots[k]), v(as[k]));
      for (size_t k = 0; k < selfs.size(); ++k) backend.unary(UnaryOp::sqrt, v(roots[k]), v(roots[k]));
      for (size_t k = 0; k < selfs.size(); ++k)
        backend.binary_scalar(BinaryOp::add, v(roots[k]), v(roots[k]), 1e-3, false);
      for (size_t k = 0; k < selfs.size(); ++k)
        backend.ternary(TernaryOp::addcdiv, v(selfs[k]), v(selfs[k]), v(as[k]), v(roots[k]),
                        -0.01 * static_cast<double>(k + 1));
      backend.end_foreach();
    };
    run(cpu(), false);
    run(gpu(), true);
    const double rtol = default_rtol(dtype) * 4;
    for (size_t k = 0; k < selfs.size(); ++k) {
      check_close(selfs[k], rtol, rtol * std::max(1.0, max_abs(selfs[k].cpu)), "foreach self " + std::to_string(k));
      check_close(as[k], rtol, rtol * std::max(1.0, max_abs(as[k].cpu)), "foreach a " + std::to_string(k));
      check_close(roots[k], rtol, rtol, "foreach root " + std::to_string(k));
    }
  }
}

// One batch over an optimizer's ops (the cuda backend runs them as one pass over each tensor) against the
// same ops each in its own batch: the same bits, every tensor. Then lists that share tensors between
// positions, which one pass would read before another position's stage wrote them: still op by op.
TEST_CASE("foreach ops held in one batch give the bits of op-by-op launches; lists sharing tensors stay op by op") {
  require_gpu();
  KernelBackend& backend = gpu();
  auto view = [](const Tensor& t) { return t.view_for_kernels(); };
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16}) {
    CAPTURE(scalar_type_name(dtype));
    // params, exp_avg, exp_avg_sq, grads, denominators; the second set a copy of the first
    std::vector<std::vector<Tensor>> sets[2];
    for (auto& set : sets) set.resize(5);
    for (int64_t n : foreach_sizes())
      for (int j = 0; j < 5; ++j) {
        Tensor t = j == 2 ? random_pair({n}, dtype).gpu.abs() : random_pair({n}, dtype).gpu;
        sets[0][j].push_back(t);
        sets[1][j].push_back(t.clone());
      }
    auto adamw = [&](std::vector<std::vector<Tensor>>& t, bool one_batch, bool decay) {
      std::vector<Tensor>&p = t[0], &m = t[1], &v = t[2], &g = t[3], &d = t[4];
      auto stage = [&](const std::function<void(size_t)>& op) {
        if (!one_batch) backend.begin_foreach();
        for (size_t k = 0; k < p.size(); ++k) op(k);
        if (!one_batch) backend.end_foreach();
      };
      if (one_batch) backend.begin_foreach();
      if (decay)
        stage([&](size_t k) { backend.binary_scalar(BinaryOp::mul, view(p[k]), view(p[k]), 1.0 - 1e-3, false); });
      stage([&](size_t k) { backend.ternary(TernaryOp::lerp, view(m[k]), view(m[k]), view(g[k]), view(g[k]), 0.1); });
      stage([&](size_t k) { backend.binary_scalar(BinaryOp::mul, view(v[k]), view(v[k]), 0.95, false); });
      stage(
          [&](size_t k) { backend.ternary(TernaryOp::addcmul, view(v[k]), view(v[k]), view(g[k]), view(g[k]), 0.05); });
      stage([&](size_t k) { backend.unary(UnaryOp::sqrt, view(d[k]), view(v[k])); });
      stage([&](size_t k) {
        backend.binary_scalar(BinaryOp::div, view(d[k]), view(d[k]), 0.3 + 0.01 * static_cast<double>(k), false);
      });
      stage([&](size_t k) { backend.binary_scalar(BinaryOp::add, view(d[k]), view(d[k]), 1e-8, false); });
      stage([&](size_t k) {
        backend.ternary(TernaryOp::addcdiv, view(p[k]), view(p[k]), view(m[k]), view(d[k]),
                        -1e-3 * static_cast<double>(k + 1));
      });
      if (one_batch) backend.end_foreach();
    };
    for (bool decay : {true, false}) {  // AdamW's update with weight decay, and Adam's without
      CAPTURE(decay);
      adamw(sets[0], true, decay);
      adamw(sets[1], false, decay);
      for (int j = 0; j < 5; ++j) {
        int differing = 0;
        for (size_t k = 0; k < sets[0][j].size(); ++k) {
          const std::vector<double> one = sets[0][j][k].tolist(), apart = sets[1][j][k].tolist();
          for (size_t i = 0; i < one.size(); ++i)
            if (one[i] != apart[i] && ++differing <= 2)
              FAIL_CHECK("list " << j << " tensor " << k << " element " << i << ": one batch " << one[i]
                                 << ", op by op " << apart[i] << " (difference " << one[i] - apart[i] << ")");
        }
        INFO("list " << j);
        CHECK(differing == 0);
      }
    }
  }
  // Position 0 of the second op reads what position 1 of the first wrote, and the other way round.
  Tensor a = random_pair({20000}).gpu, b = random_pair({20000}).gpu, c0 = empty_like(a), c1 = empty_like(a);
  Tensor a2 = a.clone(), b2 = b.clone(), d0 = empty_like(a), d1 = empty_like(a);
  auto crossed = [&](Tensor& x, Tensor& y, Tensor& out0, Tensor& out1, bool one_batch) {
    backend.begin_foreach();
    backend.binary_scalar(BinaryOp::mul, view(x), view(x), 2.0, false);
    backend.binary_scalar(BinaryOp::mul, view(y), view(y), 3.0, false);
    if (!one_batch) {
      backend.end_foreach();
      backend.begin_foreach();
    }
    backend.binary_scalar(BinaryOp::add, view(out0), view(y), 1.0, false);
    backend.binary_scalar(BinaryOp::add, view(out1), view(x), 1.0, false);
    backend.end_foreach();
  };
  crossed(a, b, c0, c1, true);
  crossed(a2, b2, d0, d1, false);
  CHECK(c0.tolist() == d0.tolist());
  CHECK(c1.tolist() == d1.tolist());
  CHECK(a.tolist() == a2.tolist());
  const std::vector<double> tripled = b.tolist(), plus_one = c0.tolist();
  for (size_t i = 0; i < tripled.size(); i += 997) CHECK(plus_one[i] == doctest::Approx(tripled[i] + 1.0));
}

TEST_CASE("a foreach batch launches what it holds before a call it cannot hold, and strided operands run at once") {
  require_gpu();
  Pair x = random_pair({300}, ScalarType::float32);
  Pair y = empty_pair({300}, ScalarType::float32);
  Pair strided = random_pair({40, 30}, ScalarType::float32).map([](const Tensor& t) { return t.t(); });
  Pair strided_out = empty_pair({30, 40}, ScalarType::float32);
  for (bool on_gpu : {false, true}) {
    KernelBackend& backend = on_gpu ? gpu() : cpu();
    auto v = [&](const Pair& p) { return on_gpu ? p.gpu_view() : p.cpu_view(); };
    backend.begin_foreach();
    backend.binary_scalar(BinaryOp::mul, v(x), v(x), 3.0, false);  // held back
    backend.copy(v(y), v(x));                                      // launches the multiplication first
    backend.unary(UnaryOp::neg, v(strided_out), v(strided));       // transposed input: not held back
    backend.binary_scalar(BinaryOp::add, v(y), v(y), 1.0, false);  // held back until end_foreach
    backend.end_foreach();
  }
  check_close(x);
  check_close(y);
  check_close(strided_out);
}

TEST_CASE("AdamW foreach steps on cuda match cpu (many parameters, both groups, weight decay)") {
  require_gpu();
  std::vector<Shape> shapes = {{64, 48}, {48}, {3}, {129, 7}, {8193}, {1}};
  for (int i = 0; i < 50; ++i) shapes.push_back({5 + i});
  std::vector<Tensor> cpu_params, gpu_params;
  for (const Shape& shape : shapes) {
    Pair p = random_pair(shape, ScalarType::float32);
    cpu_params.push_back(p.cpu.detach().requires_grad_(true));
    gpu_params.push_back(p.gpu.detach().requires_grad_(true));
  }
  auto groups = [](const std::vector<Tensor>& params) {
    std::vector<Tensor> decay, no_decay;
    for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    optim::AdamOptions with_decay{.lr = 1e-2, .betas = {0.9, 0.95}, .foreach = true}, without_decay = with_decay;
    with_decay.weight_decay = 0.1;
    without_decay.weight_decay = 0.0;
    return std::vector<optim::AdamParamGroup>{{decay, with_decay}, {no_decay, without_decay}};
  };
  optim::AdamW cpu_opt(groups(cpu_params)), gpu_opt(groups(gpu_params));
  for (int step = 0; step < 3; ++step) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      Pair g = random_pair(shapes[k], ScalarType::float32);
      cpu_params[k].set_grad(g.cpu);
      gpu_params[k].set_grad(g.gpu);
    }
    cpu_opt.step();
    gpu_opt.step();
  }
  for (size_t k = 0; k < shapes.size(); ++k)
    check_close(gpu_params[k].detach(), cpu_params[k].detach(), 1e-4, 1e-5, "AdamW parameter " + std::to_string(k));
}

TEST_CASE("addmm with a fused bias (cuBLASLt epilogue) matches cpu, and odd shapes fall back correctly") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16}) {
    for (auto [M, K, N] :
         {std::tuple<int64_t, int64_t, int64_t>{64, 96, 130}, {1024, 768, 2304}, {7, 3, 5}, {33, 65, 1}}) {
      Pair x = random_pair({M, K}, dtype);
      Pair w = random_pair({N, K}, dtype, 0.1);
      Pair b = random_pair({N}, dtype);
      const Tensor cpu_out = linear(x.cpu, w.cpu, b.cpu);
      const Tensor gpu_out = linear(x.gpu, w.gpu, b.gpu);
      const double rtol = dtype == ScalarType::float32 ? 1e-4 : default_rtol(dtype) * 4;
      check_close(gpu_out.to(kCpu), cpu_out, rtol, rtol * std::max(1.0, max_abs(cpu_out)),
                  "linear " + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N));
    }
  }
}

TEST_CASE("column sums (bias gradients) over leading dimensions match cpu") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16, ScalarType::float64}) {
    for (auto [shape, out_shape] : {std::pair<Shape, Shape>{{8192, 768}, {1, 768}},
                                    {{1000, 33}, {1, 33}},
                                    {{4, 256, 2304}, {1, 1, 2304}},
                                    {{3, 5, 64}, {1, 1, 64}},
                                    {{129, 32}, {1, 32}},
                                    {{17, 40}, {1, 40}}}) {
      Pair in = random_pair(shape, dtype);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
        Pair out = empty_pair(out_shape, dtype);
        cpu().reduce(op, out.cpu_view(), in.cpu_view());
        gpu().reduce(op, out.gpu_view(), in.gpu_view());
        const double rtol = default_rtol(dtype) * (dtype == ScalarType::float16 ? 8 : 10);
        check_close(out, rtol, rtol * std::max(1.0, max_abs(out.cpu)), "column reduce " + shape_str(shape));
      }
    }
  }
}

TEST_CASE("softmax and log_softmax on contiguous rows (registers up to 1024, shared memory above) match cpu") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16, ScalarType::float64}) {
    for (int64_t dim : {1, 5, 32, 33, 100, 256, 1000, 1024, 1025, 3000, 50257}) {
      const int64_t rows = dim > 5000 ? 3 : 37;
      for (bool log : {false, true}) {
        Pair in = random_pair({rows, dim}, dtype, 3.0);
        Pair out = empty_pair({rows, dim}, dtype);
        cpu().softmax(out.cpu_view(), in.cpu_view(), 1, log);
        gpu().softmax(out.gpu_view(), in.gpu_view(), 1, log);
        const double rtol = default_rtol(dtype) * 4;
        check_close(out, rtol, rtol, "softmax dim " + std::to_string(dim) + (log ? " log" : ""));
        Pair grad = random_pair({rows, dim}, dtype);
        Pair grad_in = empty_pair({rows, dim}, dtype);
        cpu().softmax_backward(grad_in.cpu_view(), grad.cpu_view(), out.cpu_view(), 1, log);
        gpu().softmax_backward(grad_in.gpu_view(), grad.gpu_view(), out.gpu_view(), 1, log);
        check_close(grad_in, rtol * 4, rtol * 4 * std::max(1.0, max_abs(grad_in.cpu)),
                    "softmax backward dim " + std::to_string(dim) + (log ? " log" : ""));
      }
    }
  }
  // The attention shape: masked rows of -inf (a causal mask) in (B, H, T, T); T = 1024 takes a block a row.
  for (int64_t T : {64, 1024}) {
    Pair scores = random_pair({2, 3, T, T}, ScalarType::float32);
    Tensor mask = triu(ones({T, T}, TensorOptions{}.with_device(kCpu)), 1).view({1, 1, T, T});
    Pair masked{masked_fill(scores.cpu, mask.to(ScalarType::bool_), -INFINITY),
                masked_fill(scores.gpu, mask.to(ScalarType::bool_).to(kCuda), -INFINITY)};
    Pair out = empty_pair({2, 3, T, T}, ScalarType::float32);
    cpu().softmax(out.cpu_view(), masked.cpu_view(), 3, false);
    gpu().softmax(out.gpu_view(), masked.gpu_view(), 3, false);
    check_close(out, 1e-5, 1e-6, "masked attention softmax");
    check_close(masked, 0.0, 0.0, "masked_fill with a broadcast mask");
  }
}

TEST_CASE("strided copies whose inner dimension is contiguous (attention's head transposes) match cpu") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16}) {
    Pair x = random_pair({2, 16, 3, 64}, dtype);  // (B, T, H, hs)
    Pair t = x.map([](const Tensor& v) { return v.transpose(1, 2); });
    Pair out = empty_pair({2, 3, 16, 64}, dtype);
    cpu().copy(out.cpu_view(), t.cpu_view());
    gpu().copy(out.gpu_view(), t.gpu_view());
    check_close(out, 0.0, 0.0, "transposed copy");
    Pair odd = random_pair({2, 16, 3, 62}, dtype).map([](const Tensor& v) { return v.transpose(1, 2); });
    Pair odd_out = empty_pair({2, 3, 16, 62}, dtype);
    cpu().copy(odd_out.cpu_view(), odd.cpu_view());
    gpu().copy(odd_out.gpu_view(), odd.gpu_view());
    check_close(odd_out, 0.0, 0.0, "transposed copy, inner length not a multiple of the vector");
  }
}

TEST_CASE("copies between operands contiguous along different dimensions (tiled transposes) match cpu") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::float64}) {
    // k of a packed (B, T, 3, H, hs) buffer as (B, H, hs, T), made contiguous: every edge tile partial.
    Pair qkv = random_pair({2, 40, 3, 3, 24}, dtype);
    Pair k_t = qkv.map([](const Tensor& v) { return v.select(2, 1).transpose(1, 2).transpose(-2, -1); });
    Pair out = empty_pair({2, 3, 24, 40}, dtype);
    cpu().copy(out.cpu_view(), k_t.cpu_view());
    gpu().copy(out.gpu_view(), k_t.gpu_view());
    check_close(out, 0.0, 0.0, "k transposed, made contiguous");
    // and back: a contiguous gradient written into the packed buffer's transposed slice, the rest untouched
    Pair grad = random_pair({2, 3, 24, 40}, dtype);
    Pair slot = qkv.map([](const Tensor& v) { return v.select(2, 1).transpose(1, 2).transpose(-2, -1); });
    cpu().copy(slot.cpu_view(), grad.cpu_view());
    gpu().copy(slot.gpu_view(), grad.gpu_view());
    check_close(qkv, 0.0, 0.0, "a gradient written into the packed buffer");
  }
  // converting on the way, and tiles of exactly 32
  Pair wide = random_pair({64, 96}, ScalarType::float32, 100.0);
  Pair narrow = empty_pair({96, 64}, ScalarType::bfloat16);
  Pair wide_t = wide.map([](const Tensor& v) { return v.transpose(0, 1); });
  cpu().copy(narrow.cpu_view(), wide_t.cpu_view());
  gpu().copy(narrow.gpu_view(), wide_t.gpu_view());
  check_close(narrow, 0.0, 0.0, "float32 -> bfloat16, transposed");
  // more batches than a grid's third dimension holds (65535)
  Pair many = random_pair({70000, 16, 16}, ScalarType::float16);
  Pair many_t = many.map([](const Tensor& v) { return v.transpose(1, 2); });
  Pair many_out = empty_pair({70000, 16, 16}, ScalarType::float16);
  cpu().copy(many_out.cpu_view(), many_t.cpu_view());
  gpu().copy(many_out.gpu_view(), many_t.gpu_view());
  check_close(many_out, 0.0, 0.0, "70000 batches of 16 x 16 transposes");
}

}  // namespace
}  // namespace bytegrad::testing
