// torch.amp.GradScaler (grad_scaler.h), call for call as torch/amp/grad_scaler.py in PyTorch 2.11.
#include "bytegrad/optim/grad_scaler.h"

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

GradScaler::GradScaler(DeviceType device, double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval, bool enabled)
    : device_(device),
      init_scale_(init_scale),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval),
      enabled_(enabled) {
  if (!enabled_) return;
  if (!(growth_factor > 1.0)) throw std::invalid_argument("GradScaler: The growth factor must be > 1.0.");
  if (!(backoff_factor < 1.0)) throw std::invalid_argument("GradScaler: The backoff factor must be < 1.0.");
}

void GradScaler::check_scale_made(const char* function) const {
  if (!scale_.defined())
    throw std::runtime_error(
        fmt::format("GradScaler: Attempted {} but _scale is None.  This may indicate your script did not use "
                    "scaler.scale(loss or outputs) earlier in the iteration.",
                    function));
}

GradScaler::OptimizerRecord& GradScaler::record_for(const Optimizer& optimizer) {
  for (OptimizerRecord& r : per_optimizer_)
    if (r.optimizer == &optimizer) return r;
  per_optimizer_.push_back(OptimizerRecord{&optimizer, Stage::ready, {}});
  return per_optimizer_.back();
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  if (!outputs.defined()) throw std::invalid_argument("GradScaler.scale: the outputs are an undefined tensor");
  AllocationScope scope("GradScaler.scale");
  if (!scale_.defined()) {  // _lazy_init_scale_growth_tracker
    scale_ = full({}, init_scale_, TensorOptions{ScalarType::float32, outputs.device()});
    growth_tracker_ =
        full({}, static_cast<double>(init_growth_tracker_), TensorOptions{ScalarType::int32, outputs.device()});
  }
  return outputs * scale_.to(outputs.device());
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!enabled_) return;
  check_scale_made("unscale_");
  OptimizerRecord& record = record_for(optimizer);
  if (record.stage == Stage::unscaled)
    throw std::runtime_error("unscale_() has already been called on this optimizer since the last update().");
  if (record.stage == Stage::stepped) throw std::runtime_error("unscale_() is being called after step().");
  // Refused before anything is allocated, as _unscale_grads_ refuses it before its first copy.
  for (const Tensor& p : optimizer.params())
    if (p.grad().defined() && p.grad().dtype() == ScalarType::float16)
      throw std::invalid_argument("GradScaler: Attempting to unscale FP16 gradients.");

  NoGradGuard no_grad;
  AllocationScope scope("GradScaler.unscale_");
  // The reciprocal in float64 (PyTorch: float32 division can be imprecise under some compile options);
  // each temporary goes as soon as the next exists, as in Python's chained call.
  Tensor inv_scale;
  {
    Tensor as_double = scale_.to(ScalarType::float64);
    Tensor reciprocal_double = reciprocal(as_double);
    as_double = Tensor();
    inv_scale = reciprocal_double.to(ScalarType::float32);
  }
  Tensor found_inf = full({}, 0.0, TensorOptions{ScalarType::float32, scale_.device()});

  // _unscale_grads_: the gradients by device and then dtype, in first-seen order; each device gets its own
  // copies of found_inf and inv_scale (found_inf's first), made when its first list is checked.
  struct DeviceGrads {
    Device device;
    std::vector<std::pair<ScalarType, std::vector<Tensor>>> by_dtype;
  };
  std::vector<DeviceGrads> grads;
  for (const Tensor& p : optimizer.params()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    auto d = std::find_if(grads.begin(), grads.end(), [&](const DeviceGrads& x) { return x.device == g.device(); });
    if (d == grads.end()) d = grads.insert(grads.end(), DeviceGrads{g.device(), {}});
    auto t = std::find_if(d->by_dtype.begin(), d->by_dtype.end(), [&](const auto& x) { return x.first == g.dtype(); });
    if (t == d->by_dtype.end()) t = d->by_dtype.insert(d->by_dtype.end(), {g.dtype(), {}});
    t->second.push_back(g);
  }
  auto replica = [](const Tensor& master, Device device) {
    return master.device() == device ? master.clone() : master.to(device);  // .to(device, copy=True)
  };
  std::vector<std::pair<Device, Tensor>> found_inf_copies, inv_scale_copies;
  for (const DeviceGrads& d : grads) {
    for (const auto& [dtype, list] : d.by_dtype) {
      auto copy_for = [&](std::vector<std::pair<Device, Tensor>>& copies, const Tensor& master) -> const Tensor& {
        for (const auto& [device, t] : copies)
          if (device == d.device) return t;
        copies.emplace_back(d.device, replica(master, d.device));
        return copies.back().second;
      };
      const Tensor& device_found_inf = copy_for(found_inf_copies, found_inf);
      const Tensor& device_inv_scale = copy_for(inv_scale_copies, inv_scale);
      amp_foreach_non_finite_check_and_unscale_(list, device_found_inf, device_inv_scale);
    }
  }
  // Leaving _unscale_grads_ frees the inv_scale copies; leaving unscale_ frees inv_scale, then found_inf.
  while (!inv_scale_copies.empty()) inv_scale_copies.erase(inv_scale_copies.begin());
  grads.clear();
  record.found_inf_per_device = std::move(found_inf_copies);
  record.stage = Stage::unscaled;
  inv_scale = Tensor();
  found_inf = Tensor();
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_scale_made("step");
  if (record_for(optimizer).stage == Stage::stepped)
    throw std::runtime_error("step() has already been called since the last update().");
  if (record_for(optimizer).stage == Stage::ready) unscale_(optimizer);
  OptimizerRecord& record = record_for(optimizer);
  if (record.found_inf_per_device.empty()) throw std::runtime_error("No inf checks were recorded for this optimizer.");
  double found = 0;
  for (const auto& [device, t] : record.found_inf_per_device)
    if (!t.is_meta()) found += t.item();
  const bool stepping = found == 0;
  if (stepping) optimizer.step();
  record_for(optimizer).stage = Stage::stepped;
  return stepping;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!enabled_) return;
  check_scale_made("update");
  NoGradGuard no_grad;
  AllocationScope scope("GradScaler.update");
  if (new_scale) {
    scale_.fill_(*new_scale);
  } else {
    std::vector<Tensor> found_infs;
    for (const OptimizerRecord& r : per_optimizer_)
      for (const auto& [device, t] : r.found_inf_per_device) found_infs.push_back(t.to(scale_.device()));
    if (found_infs.empty()) throw std::runtime_error("No inf checks were recorded prior to update.");
    const Tensor& combined = found_infs.front();
    for (size_t i = 1; i < found_infs.size(); ++i) combined.add_(found_infs[i]);
    amp_update_scale_(scale_, growth_tracker_, combined, growth_factor_, backoff_factor_, growth_interval_);
    found_infs.clear();
  }
  // A fresh record per optimizer: the found_inf copies go, optimizer by optimizer, device by device.
  while (!per_optimizer_.empty()) {
    auto& copies = per_optimizer_.front().found_inf_per_device;
    while (!copies.empty()) copies.erase(copies.begin());
    per_optimizer_.erase(per_optimizer_.begin());
  }
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  if (!scale_.defined() || scale_.is_meta()) return init_scale_;
  return scale_.item();
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  if (!growth_tracker_.defined() || growth_tracker_.is_meta()) return init_growth_tracker_;
  return static_cast<int64_t>(growth_tracker_.item());
}

json::Value GradScaler::state_dict() const {
  json::Value out = json::object();
  if (!enabled_) return out;
  out.add("scale", json_number(get_scale()));
  out.add("growth_factor", json_number(growth_factor_));
  out.add("backoff_factor", json_number(backoff_factor_));
  out.add("growth_interval", json::integer(growth_interval_));
  out.add("_growth_tracker", json::integer(get_growth_tracker()));
  return out;
}

void GradScaler::load_state_dict(const json::Value& state) {
  if (!enabled_) return;
  if (state.kind != json::Value::Kind::object)
    throw std::invalid_argument("GradScaler.load_state_dict: the state must be a JSON object");
  if (state.size() == 0)
    throw std::runtime_error(
        "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler.");
  auto number = [&](const char* key) {
    const json::Value* v = state.find(key);
    if (!v || !v->is_number())
      throw std::invalid_argument(fmt::format("GradScaler.load_state_dict: \"{}\" is missing or not a number", key));
    return v;
  };
  const double scale = number("scale")->number();
  const double growth_factor = number("growth_factor")->number();
  const double backoff_factor = number("backoff_factor")->number();
  const json::Value* interval = number("growth_interval");
  const json::Value* tracker = number("_growth_tracker");
  if (!interval->is_integer() || !tracker->is_integer())
    throw std::invalid_argument(
        "GradScaler.load_state_dict: \"growth_interval\" and \"_growth_tracker\" must be integers");
  init_scale_ = scale;
  growth_factor_ = growth_factor;
  backoff_factor_ = backoff_factor;
  growth_interval_ = interval->integer();
  init_growth_tracker_ = tracker->integer();
  if (scale_.defined()) scale_.fill_(scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(static_cast<double>(init_growth_tracker_));
}

}  // namespace bytegrad::optim
