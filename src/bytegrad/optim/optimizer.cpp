// The optimizer base: the parameter list and zero_grad.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "bytegrad/autograd/accumulate_grad.h"
#include "bytegrad/optim/optimizer.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  if (params_.empty()) throw std::invalid_argument("optimizer got an empty parameter list");
  for (const Tensor& p : params_) {
    if (!p.defined()) throw std::invalid_argument("optimizer: a parameter is an undefined tensor");
    if (!p.is_leaf())
      throw std::invalid_argument(
          fmt::format("optimizer can only optimize leaf tensors, got {} (grad_fn {})", describe(p), p.grad_fn_name()));
  }
}

void Optimizer::check_groups_disjoint(const std::vector<size_t>& group_ends) const {
  std::unordered_map<const TensorImpl*, size_t> group_of;
  size_t group = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    while (group < group_ends.size() && i >= group_ends[group]) ++group;
    const auto [it, inserted] = group_of.emplace(&params_[i].impl(), group);
    if (!inserted && it->second != group)
      throw std::invalid_argument(
          fmt::format("some parameters appear in more than one parameter group: {} is in groups {} and {}",
                      describe(params_[i]), it->second, group));
  }
}

void check_at_least_zero(const char* optimizer, const char* what, double value) {
  if (!(0.0 <= value)) throw std::invalid_argument(fmt::format("{}: Invalid {}: {}", optimizer, what, value));
}

void check_beta(const char* optimizer, int index, double beta) {
  if (!(0.0 <= beta && beta < 1.0))
    throw std::invalid_argument(fmt::format("{}: Invalid beta parameter at index {}: {}", optimizer, index, beta));
}

void check_not_nan(const char* optimizer, const char* what, double value) {
  if (std::isnan(value)) throw std::invalid_argument(fmt::format("{}: Invalid {}: {}", optimizer, what, value));
}

void Optimizer::zero_grad(bool set_to_none) { zero_grads(params_, set_to_none); }

}  // namespace bytegrad::optim
