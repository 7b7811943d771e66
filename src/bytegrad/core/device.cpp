#include "bytegrad/core/device.h"

#include <charconv>
#include <stdexcept>

namespace bytegrad {

std::string_view device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::sim: return "sim";
    case DeviceType::meta: return "meta";
  }
  return "unknown";
}

std::string Device::str() const {
  std::string name(device_type_name(type));
  if (type == DeviceType::cuda || index != 0) name += ":" + std::to_string(index);
  return name;
}

Device Device::parse(std::string_view text) {
  auto colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  Device device;
  if (kind == "cpu") device.type = DeviceType::cpu;
  else if (kind == "cuda") device.type = DeviceType::cuda;
  else if (kind == "sim") device.type = DeviceType::sim;
  else if (kind == "meta") device.type = DeviceType::meta;
  else
    throw std::invalid_argument("unknown device '" + std::string(text) + "': expected cpu, cuda[:N], sim[:N] or meta");
  if (colon != std::string_view::npos) {
    std::string_view digits = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device.index);
    if (ec != std::errc() || end != digits.data() + digits.size() || device.index < 0)
      throw std::invalid_argument("bad device index in '" + std::string(text) + "'");
  }
  return device;
}

}  // namespace bytegrad
