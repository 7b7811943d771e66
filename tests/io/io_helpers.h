// Helpers of the save/load tests: tensors from exact bit patterns, their bytes back, scratch files.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::testing {

// A tensor holding exactly these values' bytes (each value is one element's bit pattern, little-endian).
template <typename Bits>
Tensor tensor_from_bits(const std::vector<Bits>& bits, const Shape& shape, ScalarType dtype, Device device) {
  REQUIRE(sizeof(Bits) == element_size(dtype));
  Tensor t = empty(shape, TensorOptions{dtype, device});
  std::vector<std::byte> bytes(bits.size() * sizeof(Bits));
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  backend_for(device).copy_from_host(t.view_for_kernels(), bytes);
  return t;
}

// The elements' bytes, row-major (any strides, any device but meta).
inline std::vector<std::byte> bytes_of(const Tensor& t) {
  std::vector<std::byte> out(t.nbytes());
  backend_for(t.device()).copy_to_host(out, t.view_for_kernels());
  return out;
}

template <typename Bits>
std::vector<std::byte> bytes_of_bits(const std::vector<Bits>& bits) {
  std::vector<std::byte> out(bits.size() * sizeof(Bits));
  std::memcpy(out.data(), bits.data(), out.size());
  return out;
}

// A file path in a per-process scratch folder, removed with it.
class ScratchDir {
 public:
  ScratchDir() : dir_(std::filesystem::temp_directory_path() / ("bytegrad_io_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

inline std::vector<unsigned char> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and a data section (the header padded as given, not by us).
inline std::vector<unsigned char> safetensors_bytes(const std::string& header, const std::vector<unsigned char>& data) {
  std::vector<unsigned char> out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>((n >> (8 * i)) & 0xff));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The deterministic tensors every dtype round trip uses, and which tools/probes/safetensors_interop.py
// builds the same way in PyTorch (its PATTERNS table): exact bit patterns, NaN payloads, -0.0, subnormals.
struct PatternTensor {
  std::string name;
  ScalarType dtype;
  Shape shape;
  std::vector<std::byte> bytes;
};

inline std::vector<PatternTensor> pattern_tensors() {
  std::vector<PatternTensor> out;
  // float32: 0, -0, the smallest subnormal, -(largest subnormal), 1, -pi, inf, -inf, quiet NaN, a NaN with a
  // payload, a negative signalling NaN with a payload, the largest finite.
  out.push_back({"float32",
                 ScalarType::float32,
                 {3, 4},
                 bytes_of_bits<uint32_t>({0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x3f800000, 0xc0490fdb,
                                          0x7f800000, 0xff800000, 0x7fc00000, 0x7fc12345, 0xffa00001, 0x7f7fffff})});
  out.push_back(
      {"float64",
       ScalarType::float64,
       {2, 4},
       bytes_of_bits<uint64_t>({0x0000000000000000, 0x8000000000000000, 0x0000000000000001, 0x3ff0000000000000,
                                0x7ff0000000000000, 0xfff8000000000001, 0x7ff4000000000abc, 0x000fffffffffffff})});
  out.push_back({"float16",
                 ScalarType::float16,
                 {12},
                 bytes_of_bits<uint16_t>({0x0000, 0x8000, 0x0001, 0x83ff, 0x3c00, 0x7c00, 0xfc00, 0x7e00, 0x7e2a,
                                          0xfd01, 0x7bff, 0xc248})});
  out.push_back({"bfloat16",
                 ScalarType::bfloat16,
                 {4, 3},
                 bytes_of_bits<uint16_t>({0x0000, 0x8000, 0x0001, 0x807f, 0x3f80, 0x7f80, 0xff80, 0x7fc0, 0x7fc1,
                                          0xff81, 0x7f7f, 0xc049})});
  out.push_back({"int64",
                 ScalarType::int64,
                 {6},
                 bytes_of_bits<uint64_t>(
                     {0x8000000000000000, 0xffffffffffffffff, 0, 1, 0x7fffffffffffffff, 0x0123456789abcdef})});
  out.push_back({"int32",
                 ScalarType::int32,
                 {2, 3},
                 bytes_of_bits<uint32_t>({0x80000000, 0xffffffff, 0, 1, 0x7fffffff, 0x01234567})});
  out.push_back({"uint8", ScalarType::uint8, {6}, bytes_of_bits<uint8_t>({0, 1, 127, 128, 254, 255})});
  out.push_back({"bool", ScalarType::bool_, {5}, bytes_of_bits<uint8_t>({1, 0, 0, 1, 1})});
  out.push_back({"scalar", ScalarType::float32, {}, bytes_of_bits<uint32_t>({0x40490fdb})});
  out.push_back({"empty", ScalarType::float32, {0, 3}, {}});
  return out;
}

inline Tensor tensor_from_bytes(const PatternTensor& p, Device device) {
  Tensor t = empty(p.shape, TensorOptions{p.dtype, device});
  if (!p.bytes.empty()) backend_for(device).copy_from_host(t.view_for_kernels(), p.bytes);
  return t;
}

}  // namespace bytegrad::testing
