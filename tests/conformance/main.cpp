// The conformance suite's entry point: `--device sim|meta|cuda` (repeatable) picks the devices, sim and meta
// by default; the rest goes to doctest. With --device cuda and no GPU it exits 77 (ctest: skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/conformance/conformance.h"

namespace bytegrad::conformance {
std::vector<Device>& devices_under_test() {
  static std::vector<Device> devices;
  return devices;
}
}  // namespace bytegrad::conformance

int main(int argc, char** argv) {
  using bytegrad::Device;
  using bytegrad::DeviceType;
  std::vector<char*> rest;
  auto& devices = bytegrad::conformance::devices_under_test();
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      const char* name = argv[++i];
      if (std::strcmp(name, "sim") == 0) devices.push_back(bytegrad::kSim);
      else if (std::strcmp(name, "meta") == 0) devices.push_back(bytegrad::kMeta);
      else if (std::strcmp(name, "cuda") == 0) devices.push_back(bytegrad::kCuda);
      else {
        std::fprintf(stderr, "--device '%s' is not a device: expected sim, meta or cuda\n", name);
        return 2;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (devices.empty()) devices = {bytegrad::kSim, bytegrad::kMeta};
  for (const Device& device : devices) {
    if (device.type == DeviceType::cuda && !bytegrad::cuda_is_available()) {
      std::fprintf(stderr, "no GPU: the cuda conformance run is skipped\n");
      return 77;
    }
  }
  doctest::Context context(static_cast<int>(rest.size()), rest.data());
  return context.run();
}
