// Bad-input rows: gradients entering autograd with the wrong dtype, device or shape; saved-tensor
// hooks; checkpointing.
#include "tests/bad_inputs/bad_input_rows.h"

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/checkpoint.h"
#include "bytegrad/autograd/saved_tensor_hooks.h"

namespace bytegrad::bad_inputs {

namespace {

// A hand-written node returning a fixed gradient for its one input: a node whose gradient is wrong.
class FixedGradient final : public Node {
 public:
  explicit FixedGradient(Tensor gradient) : gradient_(std::move(gradient)) {}
  std::string name() const override { return "FixedGradientBackward"; }
  TensorList apply(TensorList&&) override { return {gradient_}; }

 private:
  Tensor gradient_;
};

// `input` * 1 whose gradient comes from a FixedGradient node returning `gradient`.
Tensor through_fixed_gradient(const Tensor& input, Tensor gradient) {
  Tensor out = input.detach().clone();
  auto node = std::make_shared<FixedGradient>(std::move(gradient));
  node->next_edges.push_back(gradient_edge(input));
  set_history(out, node, 0);
  return out;
}

// Saved-tensor hooks that keep the tensor and give back what `unpacked` makes of it.
class KeepingHooks final : public SavedTensorHooks {
 public:
  enum class Fault { pack_returns_nothing, unpack_returns_undefined };
  explicit KeepingHooks(Fault fault) : fault_(fault) {}
  std::shared_ptr<void> pack(const Tensor& t) override {
    if (fault_ == Fault::pack_returns_nothing) return nullptr;
    return std::make_shared<Tensor>(t);
  }
  Tensor unpack(const std::shared_ptr<void>&) override { return Tensor(); }

 private:
  Fault fault_;
};

Tensor mul_under(std::shared_ptr<SavedTensorHooks> hooks, const Tensor& a, const Tensor& b) {
  SavedTensorHooksScope scope(std::move(hooks));
  return a * b;
}

}  // namespace

std::vector<Row> autograd_rows() {
  using E = Expect;
  const TensorOptions sim_f32{ScalarType::float32, kSim};
  return {
      // ------------------------------------------------- the gradient given to backward(gradient)
      {"backward with a gradient on another device", E::invalid_argument,
       "invalid gradient at index 0 - expected device sim but got cpu",
       [](Fixture& f) { (f.leaf * 2.0).backward(f.c); }},
      {"backward with a gradient the root's shape only broadcasts to", E::invalid_argument,
       "grad_output[0] has a shape of [4] and output[0] has a shape of [3, 4]",
       [sim_f32](Fixture& f) { (f.leaf * 2.0).backward(ones({4}, sim_f32)); }},
      // --------------------------------------------------------- a gradient returned by a node
      {"a node returning a gradient on another device", E::runtime_error,
       "Function FixedGradientBackward returned an invalid gradient at index 0 - expected device sim but got cpu",
       [](Fixture& f) { sum(through_fixed_gradient(f.leaf, f.c)).backward(); }},
      {"a node returning a gradient of an incompatible shape", E::runtime_error,
       "Function FixedGradientBackward returned an invalid gradient at index 0 - got [4, 3] but expected shape "
       "compatible with [3, 4]",
       [sim_f32](Fixture& f) {
         sum(through_fixed_gradient(f.leaf, ones({4, 3}, sim_f32))).backward();
       }},
      // -------------------------------------------------------------------- .grad assignment
      {"set_grad with another dtype", E::invalid_argument,
       "assigned grad has data of a different type: attempting to assign a gradient with dtype float64 to a "
       "tensor with dtype float32",
       [](Fixture& f) {
         f.leaf.set_grad(ones({3, 4}, TensorOptions{ScalarType::float64, kSim}));
       }},
      {"set_grad with an integer gradient", E::invalid_argument, "with dtype int64 to a tensor with dtype float32",
       [](Fixture& f) {
         f.leaf.set_grad(zeros({3, 4}, TensorOptions{ScalarType::int64, kSim}));
       }},
      {"set_grad with a gradient on another device", E::invalid_argument,
       "assigned grad has data located on a different device: attempting to assign a gradient on cpu to a tensor "
       "on sim",
       [](Fixture& f) { f.leaf.set_grad(f.c); }},
      {"set_grad with a gradient of another size", E::invalid_argument,
       "assigned grad has data of a different size: attempting to assign a gradient of size [4, 2] to a tensor of "
       "size [3, 4]",
       [](Fixture& f) { f.leaf.set_grad(f.b); }},
      {"set_grad with a gradient that only broadcasts", E::invalid_argument, "of size [4] to a tensor of size [3, 4]",
       [](Fixture& f) { f.leaf.set_grad(f.a[0]); }},
      {"set_grad with the tensor itself", E::invalid_argument, "own grad", [](Fixture& f) { f.a.set_grad(f.a); }},
      // ------------------------------------------------------------------ saved-tensor hooks
      // (f.a needs no gradient, so MulBackward0 saves only it, as 'other': the factor leaf's gradient needs)
      {"an unpack hook returning an undefined tensor", E::runtime_error,
       "the unpack hook returned an undefined tensor for the saved tensor 'other' of MulBackward0 (a float32 "
       "tensor of shape [3, 4])",
       [](Fixture& f) {
         auto hooks = std::make_shared<KeepingHooks>(KeepingHooks::Fault::unpack_returns_undefined);
         sum(mul_under(hooks, f.leaf, f.a)).backward();
       }},
      {"a pack hook returning nothing", E::runtime_error,
       "the pack hook returned nothing (a null pointer) for the saved tensor 'other' of MulBackward0",
       [](Fixture& f) {
         auto hooks = std::make_shared<KeepingHooks>(KeepingHooks::Fault::pack_returns_nothing);
         sum(mul_under(hooks, f.leaf, f.a)).backward();
       }},
      // ----------------------------------------------------------------------- checkpointing
      {"a checkpointed function whose recomputation changes a saved tensor's shape", E::runtime_error,
       "Recomputed values for the following tensors have different metadata than during the forward pass "
       "(the checkpointed function must compute the same shapes, dtypes and devices each time).\n"
       "tensor at position 0:\nsaved metadata: {shape: [3, 4], dtype: float32, device: sim}\n"
       "recomputed metadata: {shape: [2, 4], dtype: float32, device: sim}",
       [](Fixture& f) {
         auto calls = std::make_shared<int>(0);
         // The first call squares all three rows, the recomputation only two: a saved tensor's shape changes.
         Tensor y = checkpoint(
             [calls](const Tensor& x) {
               Tensor rows = x.narrow(0, 0, (*calls)++ == 0 ? 3 : 2);
               return sum(rows * rows);
             },
             f.leaf);
         y.backward();
       }},
      {"a checkpointed function whose recomputation changes a saved tensor's dtype", E::runtime_error,
       "saved metadata: {shape: [3, 4], dtype: float32, device: sim}\n"
       "recomputed metadata: {shape: [3, 4], dtype: float64, device: sim}",
       [](Fixture& f) {
         auto calls = std::make_shared<int>(0);
         Tensor y = checkpoint(
             [calls](const Tensor& x) {
               Tensor h = (*calls)++ == 0 ? x * 1.0 : x.to(ScalarType::float64);
               return sum(h * h).to(ScalarType::float32);
             },
             f.leaf);
         y.backward();
       }},
      {"a checkpointed function whose recomputation saves fewer tensors", E::runtime_error,
       "a different number of tensors was saved during the original forward and recomputation (forward: 2, "
       "recomputation: 1)",
       [](Fixture& f) {
         auto calls = std::make_shared<int>(0);
         // x * x saves both factors; x * x.detach() only the detached one (x's gradient needs it alone).
         Tensor y = checkpoint([calls](const Tensor& x) { return (*calls)++ == 0 ? sum(x * x) : sum(x * x.detach()); },
                               f.leaf);
         y.backward();
       }},
  };
}

}  // namespace bytegrad::bad_inputs
