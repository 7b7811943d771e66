// Helpers of the tensor-layer tests: float64 references computed with plain loops, and error measures.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

namespace bytegrad::testing {

// Row-major multi-index helpers for references.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return index;
}
// The flat position in `shape` of an index into the broadcast shape `out` (size-1 dimensions repeat).
inline int64_t broadcast_flat(const std::vector<int64_t>& out_index, const Shape& shape) {
  int64_t flat = 0;
  const size_t offset = out_index.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : out_index[offset + d]);
  return flat;
}

// Reference of a broadcasting binary op, in double.
inline std::vector<double> reference_binary(const Tensor& a, const Tensor& b, const Shape& out,
                                            const std::function<double(double, double)>& f) {
  const auto va = a.tolist(), vb = b.tolist();
  std::vector<double> result(static_cast<size_t>(shape_numel(out)));
  for (size_t i = 0; i < result.size(); ++i) {
    const auto index = unravel(static_cast<int64_t>(i), out);
    result[i] = f(va[broadcast_flat(index, a.sizes())], vb[broadcast_flat(index, b.sizes())]);
  }
  return result;
}

inline std::vector<double> reference_unary(const Tensor& x, const std::function<double(double)>& f) {
  auto v = x.tolist();
  for (double& e : v) e = f(e);
  return v;
}

// max |got - want| / max |want|: the relative error of the whole result (robust where single elements
// cancel to near zero).
inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    diff = std::max(diff, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

inline double relative_error(const Tensor& got, const std::vector<double>& want) {
  return relative_error(got.tolist(), want);
}

// Reference torch.matmul in double (vectors promoted to matrices and the added dimension dropped).
inline std::vector<double> reference_matmul(const Tensor& a, const Tensor& b, Shape* out_shape = nullptr) {
  Shape sa = a.sizes(), sb = b.sizes();
  const bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), 1);
  if (b_vector) sb.push_back(1);
  const int64_t n = sa[sa.size() - 2], k = sa.back(), p = sb.back();
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    const int64_t x = i < nb - batch_a.size() ? 1 : batch_a[i - (nb - batch_a.size())];
    const int64_t y = i < nb - batch_b.size() ? 1 : batch_b[i - (nb - batch_b.size())];
    batch[i] = std::max(x, y);
  }
  const auto va = a.tolist(), vb = b.tolist();
  const int64_t batches = shape_numel(batch);
  std::vector<double> out(static_cast<size_t>(batches * n * p));
  for (int64_t bi = 0; bi < batches; ++bi) {
    const auto index = unravel(bi, batch);
    const int64_t oa = broadcast_flat(index, batch_a) * n * k, ob = broadcast_flat(index, batch_b) * k * p;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < p; ++j) {
        double total = 0;
        for (int64_t q = 0; q < k; ++q) total += va[oa + i * k + q] * vb[ob + q * p + j];
        out[static_cast<size_t>((bi * n + i) * p + j)] = total;
      }
  }
  if (out_shape) {
    *out_shape = batch;
    if (!a_vector) out_shape->push_back(n);
    if (!b_vector) out_shape->push_back(p);
  }
  return out;
}

}  // namespace bytegrad::testing
