// The optimizer base: the parameter list and zero_grad.
#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/optim/optimizer.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  if (params_.empty()) throw std::invalid_argument("optimizer got an empty parameter list");
  for (const Tensor& p : params_) {
    if (!p.defined()) throw std::invalid_argument("optimizer: a parameter is an undefined tensor");
    if (!p.is_leaf())
      throw std::invalid_argument(fmt::format("optimizer can only optimize leaf tensors, got {} (grad_fn {})",
                                              describe(p), p.grad_fn_name()));
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      grad.zero_();
    }
  }
}

}  // namespace bytegrad::optim
