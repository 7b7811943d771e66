#include "bytegrad/autograd/checkpoint.h"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/validate_gradient.h"
#include "bytegrad/autograd/saved_tensor_hooks.h"
#include "bytegrad/tensor/autocast.h"

namespace bytegrad {

namespace {

// Puts the generator back as it was, however the recomputation ends.
struct RngStateRestorer {
  RngState state;
  ~RngStateRestorer() { set_rng_state(state); }
};

// One checkpointed call: its function, its inputs, and a slot per tensor its graph saved.
class CheckpointFrame final : public SavedTensorHooks, public std::enable_shared_from_this<CheckpointFrame> {
 public:
  CheckpointFrame(CheckpointedFunction function, std::vector<Tensor> inputs)
      : function_(std::move(function)),
        inputs_(std::move(inputs)),
        autocast_(is_autocast_enabled()),
        autocast_dtype_(autocast_dtype()),
        autocast_cache_(is_autocast_cache_enabled()),
        rng_state_(get_rng_state()) {}

  // Forward: remember only the slot number, and what the tensor was (to check the recomputation against).
  std::shared_ptr<void> pack(const Tensor& t) override {
    forward_metadata_.push_back(gradient_metadata_of(t));
    return std::make_shared<Slot>(Slot{shared_from_this(), forward_metadata_.size() - 1});
  }

  // As PyTorch's, the function is recomputed once per backward pass that needs it (a retained graph's second
  // backward recomputes again); the recomputed tensors belong to that backward, which drops whatever is
  // left of them when it returns or throws.
  Tensor unpack(const std::shared_ptr<void>& packed) override {
    const auto& slot = *static_cast<const Slot*>(packed.get());
    std::shared_ptr<void> outside_backward;  // (unpacked outside backward: this call's own recomputation)
    std::shared_ptr<void>* state = backward_pass_state(this);
    std::shared_ptr<void>& recomputed_state = state ? *state : outside_backward;
    if (!recomputed_state) recomputed_state = std::make_shared<std::vector<Tensor>>(recompute());
    auto& recomputed = *static_cast<std::vector<Tensor>*>(recomputed_state.get());
    if (!recomputed.at(slot.index).defined())
      throw std::logic_error(
          fmt::format("checkpoint: saved tensor {} was unpacked twice in one backward pass", slot.index));
    Tensor t = std::move(recomputed[slot.index]);  // handed over: held by the node from now on
    recomputed[slot.index] = Tensor();
    return t;
  }

 private:
  struct Slot {
    std::shared_ptr<CheckpointFrame> frame;  // keeps the frame (and so the inputs) alive with the graph
    size_t index;
  };

  // Thrown when the recomputation has every tensor the forward saved (PyTorch's early stop).
  struct RecomputedEnough {};

  // During recomputation, saved tensors are stored in their slots instead; once all `wanted` are back the
  // rest of the function is not run (torch.utils.checkpoint's early stop, on by default).
  class Recorder final : public SavedTensorHooks {
   public:
    Recorder(std::vector<Tensor>& into, size_t wanted) : into_(into), wanted_(wanted) {}
    std::shared_ptr<void> pack(const Tensor& t) override {
      into_.push_back(t.alias());
      if (into_.size() == wanted_) throw RecomputedEnough{};
      return nullptr;
    }
    Tensor unpack(const std::shared_ptr<void>&) override {
      throw std::logic_error("checkpoint: a recomputed graph was differentiated");
    }

   private:
    std::vector<Tensor>& into_;
    size_t wanted_;
  };

  // Runs the function again and returns the tensors it saved, in the order the forward saved them, after
  // checking that they are the forward's (PyTorch's CheckpointError), before any node uses one.
  // As PyTorch's: the recomputation runs in an autocast region of the forward's settings when the forward ran
  // in one (a region of its own, so its weight casts are made afresh and their cache cleared when it ends),
  // and with the random generator as the forward found it (preserve_rng_state: dropout drops the same
  // elements), the generator's own state put back afterwards.
  std::vector<Tensor> recompute() {
    std::vector<Tensor> recomputed;
    {
      RngStateRestorer restore_after{get_rng_state()};
      set_rng_state(rng_state_);
      EnableGradGuard grad;
      std::optional<AutocastGuard> autocast;
      if (autocast_) autocast.emplace(DeviceType::cuda, autocast_dtype_, true, autocast_cache_);
      SavedTensorHooksScope scope(std::make_shared<Recorder>(recomputed, forward_metadata_.size()));
      try {
        function_(inputs_);  // outputs (and the recomputed graph) are dropped
      } catch (const RecomputedEnough&) {}
    }
    check_matches_forward(recomputed);
    return recomputed;
  }

  void check_matches_forward(const std::vector<Tensor>& recomputed) const {
    const auto describe_metadata = [](const GradientMetadata& m) {
      return fmt::format("{{shape: {}, dtype: {}, device: {}}}", shape_str(m.sizes), scalar_type_name(m.dtype),
                         m.device.str());
    };
    if (recomputed.size() != forward_metadata_.size())
      throw std::runtime_error(fmt::format(
          "checkpoint: the recomputation differs from the forward pass: a different number of tensors was saved "
          "during the original forward and recomputation (forward: {}, recomputation: {}); the checkpointed "
          "function must run the same ops each time",
          forward_metadata_.size(), recomputed.size()));
    std::string differences;
    for (size_t i = 0; i < recomputed.size(); ++i) {
      const GradientMetadata now = gradient_metadata_of(recomputed[i]);
      const GradientMetadata& then = forward_metadata_[i];
      if (now.sizes != then.sizes || now.dtype != then.dtype || now.device != then.device)
        differences += fmt::format("\ntensor at position {}:\nsaved metadata: {}\nrecomputed metadata: {}", i,
                                   describe_metadata(then), describe_metadata(now));
    }
    if (!differences.empty())
      throw std::runtime_error(
          "checkpoint: the recomputation differs from the forward pass: Recomputed values for the following "
          "tensors have different metadata than during the forward pass (the checkpointed function must compute "
          "the same shapes, dtypes and devices each time)." +
          differences);
  }

  CheckpointedFunction function_;
  std::vector<Tensor> inputs_;
  std::vector<GradientMetadata> forward_metadata_;  // per slot: the tensor the forward saved there
  bool autocast_;
  ScalarType autocast_dtype_;
  bool autocast_cache_;
  RngState rng_state_;  // the generator as the forward found it
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointedFunction& function, const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return function(inputs);  // nothing would be saved anyway
  auto frame = std::make_shared<CheckpointFrame>(function, inputs);
  SavedTensorHooksScope scope(frame);
  return function(inputs);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& function, const Tensor& input) {
  // The frame keeps this wrapper until backward, so it owns a copy of the function.
  return checkpoint([function](const std::vector<Tensor>& in) { return std::vector<Tensor>{function(in.at(0))}; },
                    std::vector<Tensor>{input})
      .at(0);
}

}  // namespace bytegrad
