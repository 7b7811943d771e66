#include "programs.h"

namespace bytegrad::programs {

const std::vector<Program>& all_programs() {
  static const std::vector<Program> programs = {
      {"x_mlp_adam_train", x_mlp_adam_train},
      {"x_mlp_sgd_momentum_mse", x_mlp_sgd_momentum_mse},
      {"x_grad_accumulation", x_grad_accumulation},
      {"x_no_grad_and_detach", x_no_grad_and_detach},
      {"x_inplace_ops", x_inplace_ops},
      {"x_retain_graph", x_retain_graph},
      {"x_checkpoint_deep", x_checkpoint_deep},
      {"x_tiny_transformer_adamw", x_tiny_transformer_adamw},
      {"x_layernorm_mlp", x_layernorm_mlp},
      {"x_mean_sum_reductions", x_mean_sum_reductions},
      {"x_seed_mlp_bias_adam_default", x_seed_mlp_bias_adam_default},
  };
  return programs;
}

}  // namespace bytegrad::programs
