// A device names where a tensor's bytes live and which allocator accounts for them.
#pragma once

#include <string>
#include <string_view>

namespace bytegrad {

enum class DeviceType {
  cpu,   // plain host memory, counted but not cached (like PyTorch's CPU allocator)
  cuda,  // a real GPU through cudaMalloc
  sim,   // a GPU simulated in host memory: same caching allocator, CPU kernels
  meta,  // accounting only: addresses without memory
};

struct Device {
  DeviceType type = DeviceType::sim;
  int index = 0;

  friend bool operator==(const Device&, const Device&) = default;
  friend auto operator<=>(const Device&, const Device&) = default;  // by type, then index: a map key
  std::string str() const;                                          // "cuda:0", "sim", "meta", "cpu"
  // Parses "cuda", "cuda:1", "sim", "meta", "cpu"; throws std::invalid_argument naming the text.
  static Device parse(std::string_view text);
  // Devices whose memory goes through the caching allocator.
  bool uses_caching_allocator() const { return type != DeviceType::cpu; }
};

std::string_view device_type_name(DeviceType type);

// The devices by name (torch::kCPU, torch::kCUDA, ...): index 0 of each type.
inline constexpr Device kCpu{DeviceType::cpu, 0};
inline constexpr Device kCuda{DeviceType::cuda, 0};
inline constexpr Device kSim{DeviceType::sim, 0};
inline constexpr Device kMeta{DeviceType::meta, 0};

}  // namespace bytegrad
