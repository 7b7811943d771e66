// torch.amp.GradScaler: loss scaling for float16 autocast, with PyTorch 2.11's names, defaults, state and
// device allocations.
//
//   optim::GradScaler scaler(DeviceType::cuda);
//   for (...) {
//     Tensor loss;
//     { AutocastGuard autocast(DeviceType::cuda, ScalarType::float16); loss = model.forward(x, y); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);            // optional: before clip_grad_norm_, to clip the true gradients
//     scaler.step(opt);                // skipped when a gradient is inf or NaN
//     scaler.update();
//     opt.zero_grad();
//   }
//
// Device memory, as PyTorch's (each a one-element tensor in a 512-byte block):
//  - the first scale() makes the scale (float32) and the growth tracker (int32) on the loss's device,
//    kept for the scaler's life; each scale() returns loss * scale (a new tensor of the loss's size);
//  - unscale_ (or step, when unscale_ was not called): inv_scale = scale.double().reciprocal().float()
//    (float64, then its reciprocal, the float64 freed, the float32, the reciprocal freed), found_inf (0.0);
//    then, for each device of the gradients, a copy of found_inf and one of inv_scale
//    (_MultiDeviceReplicator's .to(device, copy=True)), the gradients of each dtype checked and unscaled in
//    place (amp_foreach_non_finite_check_and_unscale_), the inv_scale copies freed, then inv_scale and
//    found_inf themselves: one found_inf copy per device stays until update();
//  - step: the optimizer's step when every found_inf is 0 (reading them allocates nothing; on cuda the check,
//    the unscale and update's scale change run on the device, and step's read of found_inf is the only one);
//  - update: the found_inf copies summed into the first in place, the scale updated in place
//    (amp_update_scale_), then every found_inf copy freed.
// With enabled = false every call passes through (scale returns its argument, step steps).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/optim/optimizer.h"

namespace bytegrad::optim {

class GradScaler {
 public:
  // PyTorch refuses growth_factor <= 1 and backoff_factor >= 1 (std::invalid_argument here).
  explicit GradScaler(DeviceType device = DeviceType::cuda, double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000, bool enabled = true);

  // outputs * scale; the first call makes the scale and growth tracker on outputs' device.
  Tensor scale(const Tensor& outputs);
  // Divides the optimizer's gradients by the scale in place, noting whether any was inf or NaN. Once per
  // optimizer between updates (std::runtime_error otherwise, PyTorch's texts). float16 gradients are
  // refused ("Attempting to unscale FP16 gradients."), as PyTorch refuses them.
  void unscale_(Optimizer& optimizer);
  // unscale_ if not yet called, then optimizer.step() unless a gradient was inf or NaN. Returns whether it
  // stepped. Once per optimizer between updates.
  bool step(Optimizer& optimizer);
  // The scale for the next iteration: backed off after a skipped step, grown after growth_interval
  // successful ones (or set to new_scale), and the per-optimizer records cleared.
  void update(std::optional<double> new_scale = std::nullopt);

  // The current scale (init_scale before the first scale(), 1.0 when disabled); on meta, where no values
  // are computed, the initial scale.
  double get_scale() const;
  double get_growth_factor() const { return growth_factor_; }
  double get_backoff_factor() const { return backoff_factor_; }
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_factor(double value) { growth_factor_ = value; }
  void set_backoff_factor(double value) { backoff_factor_ = value; }
  void set_growth_interval(int64_t value) { growth_interval_ = value; }
  bool is_enabled() const { return enabled_; }
  // The scale and growth tracker tensors (undefined before the first scale()).
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker_tensor() const { return growth_tracker_; }

  // PyTorch's state_dict: {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
  // (an empty object when disabled). load_state_dict refuses an empty one (PyTorch's text) and one missing
  // a key or of the wrong kind (std::invalid_argument naming the key); it fills the tensors in place when
  // they exist (allocating nothing), else sets what the first scale() will make.
  json::Value state_dict() const;
  void load_state_dict(const json::Value& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerRecord {
    const Optimizer* optimizer;
    Stage stage = Stage::ready;
    std::vector<std::pair<Device, Tensor>> found_inf_per_device;
  };
  OptimizerRecord& record_for(const Optimizer& optimizer);
  void check_scale_made(const char* function) const;
  int64_t get_growth_tracker() const;

  DeviceType device_;
  double init_scale_, growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  int64_t init_growth_tracker_ = 0;
  bool enabled_;
  Tensor scale_, growth_tracker_;
  std::vector<OptimizerRecord> per_optimizer_;  // in first-use order, as PyTorch's dict
};

}  // namespace bytegrad::optim
