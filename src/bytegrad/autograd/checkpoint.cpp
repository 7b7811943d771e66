#include "bytegrad/autograd/checkpoint.h"

#include <optional>
#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/saved_tensor_hooks.h"
#include "bytegrad/tensor/autocast.h"

namespace bytegrad {

namespace {

// One checkpointed call: its function, its inputs, and a slot per tensor its graph saved.
class CheckpointFrame final : public SavedTensorHooks, public std::enable_shared_from_this<CheckpointFrame> {
 public:
  CheckpointFrame(CheckpointedFunction function, std::vector<Tensor> inputs)
      : function_(std::move(function)),
        inputs_(std::move(inputs)),
        autocast_(is_autocast_enabled()),
        autocast_dtype_(autocast_dtype()),
        autocast_cache_(is_autocast_cache_enabled()) {}

  // Forward: remember only the slot number.
  std::shared_ptr<void> pack(const Tensor&) override {
    return std::make_shared<Slot>(Slot{shared_from_this(), slots_++});
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    const auto& slot = *static_cast<const Slot*>(packed.get());
    if (!recomputed_) recompute();
    if (slot.index >= recomputed_tensors_.size() || !recomputed_tensors_[slot.index].defined())
      throw std::runtime_error("checkpoint: the recomputation did not save the same tensors as the forward pass "
                               "(the checkpointed function must run the same ops each time)");
    Tensor t = std::move(recomputed_tensors_[slot.index]);  // handed over: held by the node from now on
    recomputed_tensors_[slot.index] = Tensor();
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

  // As PyTorch's: the recomputation runs in an autocast region of the forward's settings when the forward ran
  // in one (a region of its own, so its weight casts are made afresh and their cache cleared when it ends).
  void recompute() {
    recomputed_ = true;
    EnableGradGuard grad;
    std::optional<AutocastGuard> autocast;
    if (autocast_) autocast.emplace(DeviceType::cuda, autocast_dtype_, true, autocast_cache_);
    SavedTensorHooksScope scope(std::make_shared<Recorder>(recomputed_tensors_, slots_));
    try {
      function_(inputs_);  // outputs (and the recomputed graph) are dropped
    } catch (const RecomputedEnough&) {
    }
  }

  CheckpointedFunction function_;
  std::vector<Tensor> inputs_;
  size_t slots_ = 0;
  bool recomputed_ = false;
  std::vector<Tensor> recomputed_tensors_;
  bool autocast_;
  ScalarType autocast_dtype_;
  bool autocast_cache_;
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
