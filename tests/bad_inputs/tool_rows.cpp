// Bad-input rows: optimizer and module arguments, the memory tools, allocator and workspace settings,
// the programs' inputs.
#include <cmath>
#include <limits>

#include "bytegrad/nn/sequential.h"
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Adam's (or AdamW's) options with one hyperparameter set by `set`.
template <typename Set>
optim::AdamOptions adam_options(Set set) {
  optim::AdamOptions o;
  set(o);
  return o;
}

}  // namespace

std::vector<Row> tool_rows() {
  using E = Expect;
  using optim::AdamOptions;
  using optim::AdamParamGroup;
  using optim::SGDOptions;
  return {
      // ------------------------------------------------------ optimizers: PyTorch 2.11's ValueError texts
      // Every range check is written so that NaN fails it too (tests/data/pytorch_probes/bad_inputs).
      {"Adam with lr NaN", E::invalid_argument, "Adam: Invalid learning rate: nan",
       [](Fixture& f) { optim::Adam({f.leaf}, adam_options([](AdamOptions& o) { o.lr = kNaN; })); }},
      {"Adam with lr -1", E::invalid_argument, "Adam: Invalid learning rate: -1",
       [](Fixture& f) { optim::Adam({f.leaf}, -1.0); }},
      {"Adam with beta1 NaN", E::invalid_argument, "Invalid beta parameter at index 0: nan",
       [](Fixture& f) {
         optim::Adam({f.leaf}, 1e-3, {kNaN, 0.999});
       }},
      {"Adam with beta1 1.0", E::invalid_argument, "Invalid beta parameter at index 0: 1",
       [](Fixture& f) {
         optim::Adam({f.leaf}, 1e-3, {1.0, 0.999});
       }},
      {"Adam with beta2 NaN", E::invalid_argument, "Invalid beta parameter at index 1: nan",
       [](Fixture& f) {
         optim::Adam({f.leaf}, 1e-3, {0.9, kNaN});
       }},
      {"Adam with beta2 -0.1", E::invalid_argument, "Invalid beta parameter at index 1: -0.1",
       [](Fixture& f) {
         optim::Adam({f.leaf}, 1e-3, {0.9, -0.1});
       }},
      {"Adam with eps NaN", E::invalid_argument, "Invalid epsilon value: nan",
       [](Fixture& f) {
         optim::Adam({f.leaf}, 1e-3, {0.9, 0.999}, kNaN);
       }},
      {"Adam with weight_decay NaN", E::invalid_argument, "Invalid weight_decay value: nan",
       [](Fixture& f) {
         optim::Adam({f.leaf}, 1e-3, {0.9, 0.999}, 1e-8, kNaN);
       }},
      {"AdamW with lr NaN", E::invalid_argument, "AdamW: Invalid learning rate: nan",
       [](Fixture& f) { optim::AdamW({f.leaf}, kNaN); }},
      {"AdamW with weight_decay -1", E::invalid_argument, "AdamW: Invalid weight_decay value: -1",
       [](Fixture& f) {
         optim::AdamW({f.leaf}, 1e-3, {0.9, 0.999}, 1e-8, -1.0);
       }},
      {"Adam with a second group's beta2 NaN", E::invalid_argument, "Invalid beta parameter at index 1: nan",
       [](Fixture& f) {
         optim::Adam({AdamParamGroup{{f.leaf}, {}},
                      AdamParamGroup{{f.a.detach().requires_grad_()},
                                     adam_options([](AdamOptions& o) { o.betas.second = kNaN; })}});
       }},
      // PyTorch's SGD checks `lr < 0` and `momentum < 0`, which NaN passes (its parameters all become NaN):
      // refused here, a deliberate difference.
      {"SGD with lr NaN", E::invalid_argument, "SGD: Invalid learning rate: nan",
       [](Fixture& f) { optim::SGD({f.leaf}, kNaN); }},
      {"SGD with lr -1", E::invalid_argument, "SGD: Invalid learning rate: -1",
       [](Fixture& f) { optim::SGD({f.leaf}, -1.0); }},
      {"SGD with momentum NaN", E::invalid_argument, "SGD: Invalid momentum value: nan",
       [](Fixture& f) { optim::SGD({f.leaf}, 0.1, kNaN); }},
      {"SGD with momentum -1", E::invalid_argument, "SGD: Invalid momentum value: -1",
       [](Fixture& f) { optim::SGD({f.leaf}, 0.1, -1.0); }},
      {"SGD with weight_decay NaN", E::invalid_argument, "SGD: Invalid weight_decay value: nan",
       [](Fixture& f) { optim::SGD({f.leaf}, SGDOptions{.lr = 0.1, .weight_decay = kNaN}); }},
      {"SGD with dampening NaN", E::invalid_argument, "SGD: Invalid dampening value: nan",
       [](Fixture& f) { optim::SGD({f.leaf}, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = kNaN}); }},
      {"Adam with one parameter in two groups", E::invalid_argument,
       "some parameters appear in more than one parameter group",
       [](Fixture& f) {
         optim::Adam({AdamParamGroup{{f.leaf}, {}},
                      AdamParamGroup{{f.leaf}, adam_options([](AdamOptions& o) { o.lr = 0.1; })}});
       }},
      {"AdamW with one parameter in groups 0 and 2 of three", E::invalid_argument, "groups 0 and 2",
       [](Fixture& f) {
         const Tensor other = f.a.detach().requires_grad_();
         optim::AdamW({AdamParamGroup{{f.leaf}, {}}, AdamParamGroup{{other}, {}}, AdamParamGroup{{f.leaf}, {}}});
       }},
      // ------------------------------------------------------------------ modules: cycles and self
      {"a module registered under its own child", E::invalid_argument, "would make a cycle",
       [](Fixture&) {
         auto a = std::make_shared<nn::Sequential>();
         auto b = std::make_shared<nn::Sequential>();
         a->push_back(b);
         b->push_back(a);  // b is 'a.0': a is already above it
       }},
      {"a cycle through three modules names both ends", E::invalid_argument,
       "registering Sequential (top level) as '0' under Sequential '0.0'",
       [](Fixture&) {
         auto a = std::make_shared<nn::Sequential>();
         auto b = std::make_shared<nn::Sequential>();
         auto c = std::make_shared<nn::Sequential>();
         a->push_back(b);
         b->push_back(c);
         c->push_back(a);
       }},
      {"a module registered under itself", E::invalid_argument, "is the module itself",
       [](Fixture&) {
         auto a = std::make_shared<nn::Sequential>();
         a->register_module("me", a);
       }},
      // ------------------------------------------------- allocator settings: PyTorch's booleans and limits
      {"expandable_segments:true in lower case", E::invalid_argument,
       "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'",
       [](Fixture&) { AllocatorConfig::parse("expandable_segments:true"); }},
      {"expandable_segments:1", E::invalid_argument,
       "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '1'",
       [](Fixture&) { AllocatorConfig::parse("expandable_segments:1"); }},
      {"release_lock_on_cudamalloc:true", E::invalid_argument, "release_lock_on_cudamalloc: Expected 'True' or 'False'",
       [](Fixture&) { AllocatorConfig::parse("release_lock_on_cudamalloc:true"); }},
      {"pinned_use_background_threads:0", E::invalid_argument,
       "pinned_use_background_threads: Expected 'True' or 'False'",
       [](Fixture&) { AllocatorConfig::parse("pinned_use_background_threads:0"); }},
      {"pinned_num_register_threads above 128", E::invalid_argument, "less than or equal to 128",
       [](Fixture&) { AllocatorConfig::parse("pinned_num_register_threads:1024"); }},
      {"reset_device under BYTEGRAD_ALLOC_CONF=expandable_segments:true", E::invalid_argument, "got 'true'",
       [](Fixture&) {
         ScopedEnv env("BYTEGRAD_ALLOC_CONF", "expandable_segments:true");
         reset_device(Device{DeviceType::sim, 1});
       }},
      // ------------------------------------------------------------------- the cuBLAS workspace settings
      {"set_blas_workspace_config(\"0:0\"), a colon forgotten", E::invalid_argument,
       "CUBLAS_WORKSPACE_CONFIG='0:0': set_blas_workspace_config takes ':SIZE:COUNT' pairs and nothing else; found '0' "
       "at character 1",
       [](Fixture&) { set_blas_workspace_config("0:0"); }},
      {"set_blas_workspace_config of garbage", E::invalid_argument, "found 'g' at character 1",
       [](Fixture&) { set_blas_workspace_config("garbage"); }},
      {"set_blas_workspace_config with a SIZE and no COUNT", E::invalid_argument, "found the end at character 6",
       [](Fixture&) { set_blas_workspace_config(":4096"); }},
      {"a bias-fused product under CUBLASLT_WORKSPACE_SIZE=garbage", E::invalid_argument,
       "CUBLASLT_WORKSPACE_SIZE='garbage'",
       [](Fixture& f) {
         ScopedEnv workspace("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
         ScopedEnv env("CUBLASLT_WORKSPACE_SIZE", "garbage");
         addmm(f.b.select(0, 0), f.a, f.b);  // bias [2] + [3, 4] @ [4, 2]
       }},
      // ------------------------------------------------------------- reading values and the trace reader
      {"tolist of 2^40 expanded elements", E::length_error, "has 1099511627776 elements",
       [](Fixture& f) { f.a.select(0, 0).select(0, 0).expand({int64_t{1} << 40}).tolist(); }},
      {"a trace line longer than the cap (a stream without newlines)", E::runtime_error,
       "line 1: longer than 65536 characters",
       [](Fixture&) {
         std::istringstream in(std::string(200000, '\0'));
         parse_trace(in, "zeros");
       }},
  };
}

}  // namespace bytegrad::bad_inputs
