#include "bytegrad/autograd/checkpoint.h"

#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/saved_tensor_hooks.h"

namespace bytegrad {

namespace {

// One checkpointed call: its function, its inputs, and a slot per tensor its graph saved.
class CheckpointFrame final : public SavedTensorHooks, public std::enable_shared_from_this<CheckpointFrame> {
 public:
  CheckpointFrame(CheckpointedFunction function, std::vector<Tensor> inputs)
      : function_(std::move(function)), inputs_(std::move(inputs)) {}

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

  // During recomputation, saved tensors are stored in their slots instead.
  class Recorder final : public SavedTensorHooks {
   public:
    explicit Recorder(std::vector<Tensor>& into) : into_(into) {}
    std::shared_ptr<void> pack(const Tensor& t) override {
      into_.push_back(t.alias());
      return nullptr;
    }
    Tensor unpack(const std::shared_ptr<void>&) override {
      throw std::logic_error("checkpoint: a recomputed graph was differentiated");
    }

   private:
    std::vector<Tensor>& into_;
  };

  void recompute() {
    recomputed_ = true;
    EnableGradGuard grad;
    SavedTensorHooksScope scope(std::make_shared<Recorder>(recomputed_tensors_));
    function_(inputs_);  // outputs (and the recomputed graph) are dropped
  }

  CheckpointedFunction function_;
  std::vector<Tensor> inputs_;
  size_t slots_ = 0;
  bool recomputed_ = false;
  std::vector<Tensor> recomputed_tensors_;
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
