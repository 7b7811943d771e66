// torch.triu / torch.tril: one contiguous output (a structured op's fresh result), the kernel zeroing what
// lies outside the triangle.
#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/host_work.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

template <OpId op>
Tensor triangle_recorded(const Tensor& x, int64_t diagonal, bool upper) {
  const char* name = op_name(op).data();
  Tensor out = without_recording([&] {
    AllocationScope scope(name);
    check_defined(name, x);
    if (x.dim() < 2)
      throw std::invalid_argument(
          fmt::format("{}: input tensor must have at least 2 dimensions, got {}", name, describe(x)));
    Tensor result = empty(x.sizes(), TensorOptions{x.dtype(), x.device()});
    backend_of(x).triangle(kv(result), kv(x), diagonal, upper);
    // PyTorch loops over the matrices, then over one matrix's rows, both with grain 0 (host_work.h).
    const int64_t rows = x.size(-2);
    const int64_t cols = x.size(-1);
    if (rows * cols > 0) {
      const int64_t matrices = result.numel() / (rows * cols);
      note_host_parallel_for(x.device(), matrices > 1 ? matrices : rows, 0);
    }
    return result;
  });
  record_for_autograd({x}, [&] { return make_record<op>({x}, {out}, {diagonal}); });
  return out;
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle_recorded<OpId::triu>(x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle_recorded<OpId::tril>(x, diagonal, false); }

}  // namespace bytegrad
