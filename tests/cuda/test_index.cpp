// index_select, index_add, gather, scatter_add on cuda against cpu, with repeated indices (the adds go
// through atomics) and non-contiguous operands.
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

Pair indices(const std::vector<double>& values, const Shape& shape) {
  return from_values(values, shape, ScalarType::int64);
}

TEST_CASE("index_select along each dimension of a transposed input") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::int64, ScalarType::float16}) {
    Pair in = on_both(random_pair({10, 8}, ScalarType::float32, 10).cpu.to(dtype)).map([](const Tensor& t) {
      return t.transpose(0, 1);
    });  // (8, 10)
    Pair idx = indices({3, 0, 7, 3, 1}, {5});
    for (int64_t dim = 0; dim < 2; ++dim) {
      Shape shape = in.cpu.sizes();
      shape[dim] = 5;
      Pair out = empty_pair(shape, dtype);
      cpu().index_select(out.cpu_view(), in.cpu_view(), dim, idx.cpu_view());
      gpu().index_select(out.gpu_view(), in.gpu_view(), dim, idx.gpu_view());
      check_close(out, 0, 0, "index_select dim " + std::to_string(dim));
    }
  }
}

TEST_CASE("index_add accumulates repeated indices") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::int64, ScalarType::int32,
                           ScalarType::float16, ScalarType::bfloat16}) {
    for (int64_t dim = 0; dim < 2; ++dim) {
      Shape out_shape{6, 7};
      Shape source_shape = out_shape;
      source_shape[dim] = 9;
      Pair out = on_both(random_pair(out_shape, ScalarType::float32, 4).cpu.to(dtype));
      Pair source = on_both(random_pair(source_shape, ScalarType::float32, 4).cpu.to(dtype));
      Pair idx = indices({0, 5, 5, 2, 0, 5, 1, 3, 5}, {9});
      cpu().index_add(out.cpu_view(), dim, idx.cpu_view(), source.cpu_view());
      gpu().index_add(out.gpu_view(), dim, idx.gpu_view(), source.gpu_view());
      // 16-bit floats: atomics add in a different order and round after every add.
      const double rtol = dtype == ScalarType::float16    ? 4e-3
                          : dtype == ScalarType::bfloat16 ? 3e-2
                                                          : default_rtol(dtype);
      check_close(out, rtol, rtol * 10, "index_add dim " + std::to_string(dim));
    }
  }
}

TEST_CASE("gather and scatter_add along each dimension") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::int64}) {
    Pair in = on_both(random_pair({6, 9}, ScalarType::float32, 10).cpu.to(dtype));
    for (int64_t dim = 0; dim < 2; ++dim) {
      const int64_t limit = in.cpu.size(dim);
      std::vector<double> idx_values;
      for (int i = 0; i < 4 * 5; ++i) idx_values.push_back((i * 7 + 3) % limit);
      Pair idx = indices(idx_values, {4, 5});

      Pair out = empty_pair({4, 5}, dtype);
      cpu().gather(out.cpu_view(), in.cpu_view(), dim, idx.cpu_view());
      gpu().gather(out.gpu_view(), in.gpu_view(), dim, idx.gpu_view());
      check_close(out, 0, 0, "gather dim " + std::to_string(dim));

      // a transposed index view, a larger source than index (allowed), repeated targets
      Pair idx_t = indices(idx_values, {5, 4}).map([](const Tensor& t) { return t.transpose(0, 1); });
      Pair source = on_both(random_pair({7, 8}, ScalarType::float32, 10).cpu.to(dtype));
      Pair target = on_both(zeros({6, 9}, TensorOptions{}.with_dtype(dtype).with_device(kCpu)));
      cpu().scatter_add(target.cpu_view(), dim, idx_t.cpu_view(), source.cpu_view());
      gpu().scatter_add(target.gpu_view(), dim, idx_t.gpu_view(), source.gpu_view());
      check_close(target, -1, 1e-5, "scatter_add dim " + std::to_string(dim));
    }
  }
}

}  // namespace
}  // namespace bytegrad::testing
