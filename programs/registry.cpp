#include "programs/registry.h"

#include "programs/extra_programs.h"
#include "programs/gpt2_programs.h"
#include "programs/seed_programs.h"

namespace bytegrad::programs {

const std::vector<Program>& seed_programs() {
  static const std::vector<Program> programs = {
      {"seed000_builtin_sum", run_seed000_builtin_sum, true},
      {"seed000_torch_sum", run_seed000_torch_sum, true},
      {"seed000_wide_builtin_sum", run_seed000_wide_builtin_sum, true},
      {"seed000_wide_torch_sum", run_seed000_wide_torch_sum, true},
      {"seed001_mlp_estimate", run_seed001_mlp_estimate, true},
      {"seed002_small_linear", run_seed002_small_linear, true},
      {"seed003_randn", run_seed003_randn, true},
      {"seed003_code_a_small_card", run_seed003_code_a_small_card, false, true},
      {"seed004_attention_function", run_seed004_attention_function, true},
      {"seed004_attention_global", run_seed004_attention_global, true},
      {"seed004_x_plus_1", run_seed004_x_plus_1, true},
  };
  return programs;
}

const std::vector<Program>& extra_programs() {
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

const std::vector<Program>& gpt2_programs() {
  static const std::vector<Program> programs = {
      {"g_gpt2_tiny_fp32", g_gpt2_tiny_fp32, true},
      {"g_gpt2_small_fp32", g_gpt2_small_fp32, true},
      {"g_gpt2_tiny_bf16", g_gpt2_tiny_bf16, true},
      {"g_gpt2_small_bf16", g_gpt2_small_bf16, true},
      {"g_gpt2_small_bf16_sdpa", g_gpt2_small_bf16_sdpa, true},
  };
  return programs;
}

}  // namespace bytegrad::programs
