// Helpers of the distributed suite: fresh allocators for every rank's device, PyTorch's default cuBLAS
// workspaces, the distributed probes' recordings and figures, and parameters copied to the host.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/core/json.h"
#include "bytegrad/distributed/threads.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/testing/fresh_device.h"
#include "tests/support/error_text.h"

namespace bytegrad::testing {

// The card the suite's devices model: 16 GiB instead of the H100's 80, so that a sim device reserves
// 64 GiB of address space rather than four times the card. Several sim devices at once would otherwise
// exhaust what ThreadSanitizer leaves a program (./test.sh --thread-sanitize). No figure here depends on it.
inline SimulatedCapacity small_card() {
  SimulatedCapacity capacity;
  capacity.total_bytes = size_t{16} << 30;
  return capacity;
}

// An empty allocator, and the stream pool's round robin at its start, on each rank's device (sim:r or
// meta:r) for the scope; nothing for cpu.
class FreshRankDevices {
 public:
  FreshRankDevices(int world_size, DeviceType type) {
    if (type == DeviceType::cpu) return;
    for (int r = 0; r < world_size; ++r)
      fresh_.push_back(std::make_unique<FreshDevice>(distributed::threads_rank_device(type, r), small_card()));
  }

 private:
  std::vector<std::unique_ptr<FreshDevice>> fresh_;
};

// The distributed probes' figures (tools/probes/ddp_probe.py, fsdp_probe.py) and the memory_stats keys
// they come from.
inline const std::vector<std::pair<const char*, const char*>>& probe_figure_keys() {
  static const std::vector<std::pair<const char*, const char*>> keys = {
      {"allocated", "allocated_bytes.all.current"},
      {"reserved", "reserved_bytes.all.current"},
      {"max_allocated", "allocated_bytes.all.peak"},
      {"max_reserved", "reserved_bytes.all.peak"},
      {"active", "active_bytes.all.current"},
      {"segments", "segment.all.current"},
      {"blocks", "allocation.all.current"},
      {"requested", "requested_bytes.all.current"},
      {"inactive_split", "inactive_split_bytes.all.current"},
      {"num_device_alloc", "num_device_alloc"},
      {"num_device_free", "num_device_free"}};
  return keys;
}

// A distributed probe's recording of one rank's run, parsed: tests/data/pytorch_probes/<probe>_n<world>/
// <program>.n<world>.run<run>.rank<rank>.json, probe "ddp" or "fsdp".
inline json::Value probe_recording(const std::string& probe, const std::string& program, int world, int run, int rank) {
  const std::string n = "n" + std::to_string(world);
  const std::string path = std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/" + probe + "_" + n + "/" + program +
                           "." + n + ".run" + std::to_string(run) + ".rank" + std::to_string(rank) + ".json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// A mark's figures under probe_figure_keys' names: a recorded mark's, and the device's memory_stats now.
inline std::map<std::string, int64_t> recorded_figures(const json::Value& mark) {
  std::map<std::string, int64_t> figures;
  for (const auto& [name, key] : probe_figure_keys()) figures[name] = mark[name].integer();
  return figures;
}
inline std::map<std::string, int64_t> figures_now(Device device) {
  std::map<std::string, int64_t> stats = memory_stats(device), figures;
  for (const auto& [name, key] : probe_figure_keys()) figures[name] = stats[key];
  return figures;
}

// PyTorch's default cuBLAS workspaces (the probes set no CUBLAS_WORKSPACE_CONFIG) for the scope, the
// variable restored afterwards.
class DefaultWorkspaces {
 public:
  DefaultWorkspaces() {
    if (const char* old = std::getenv("CUBLAS_WORKSPACE_CONFIG")) saved_ = old;
    unsetenv("CUBLAS_WORKSPACE_CONFIG");
  }
  ~DefaultWorkspaces() {
    if (!saved_.empty()) setenv("CUBLAS_WORKSPACE_CONFIG", saved_.c_str(), 1);
  }
  DefaultWorkspaces(const DefaultWorkspaces&) = delete;
  DefaultWorkspaces& operator=(const DefaultWorkspaces&) = delete;

 private:
  std::string saved_;
};

// Every parameter's values as doubles on the host, in order (float32 parameters).
inline std::vector<std::vector<double>> parameter_values(const std::vector<Tensor>& parameters) {
  std::vector<std::vector<double>> values;
  for (const Tensor& p : parameters) {
    const Tensor host = p.detach().cpu().contiguous();
    const auto* data = static_cast<const float*>(host.data_ptr());
    values.emplace_back(data, data + host.numel());
  }
  return values;
}

}  // namespace bytegrad::testing
