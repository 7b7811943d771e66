// safetensors files: the reference implementation's bytes, bit-exact round trips of every dtype on cpu and
// sim, every corruption refused with the file named and nothing returned, and device memory when loading.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/safetensors.h"
#include "bytegrad/testing/memory_probe.h"
#include "io_helpers.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

std::vector<unsigned char> le_floats(std::initializer_list<float> values) {
  std::vector<unsigned char> out(values.size() * 4);
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

std::string load_error(const std::string& path) {
  try {
    (void)safetensors::load_file(path, kSim);
  } catch (const safetensors::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("save_file writes the reference implementation's bytes") {
  ScratchDir dir;
  // safetensors/src/tensor.rs test_serialization: "attn.0", F32 [1, 2, 3] holding 0..5: a 64-byte header
  // (64 bytes of JSON, a multiple of 8: no padding), then 24 bytes of data.
  const std::string path = dir.path("attn.safetensors");
  safetensors::save_file({{"attn.0", tensor({0, 1, 2, 3, 4, 5}).view({1, 2, 3})}}, path);
  const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  CHECK(json.size() == 64);
  CHECK(read_file_bytes(path) == safetensors_bytes(json, le_floats({0, 1, 2, 3, 4, 5})));

  // test_serialization_forced_alignement: "attn0" [1, 1, 2, 3]: 65 bytes of JSON padded with 7 spaces to 72.
  safetensors::save_file({{"attn0", tensor({0, 1, 2, 3, 4, 5}).view({1, 1, 2, 3})}}, path);
  const std::string json0 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  CHECK(json0.size() == 65);
  CHECK(read_file_bytes(path) == safetensors_bytes(json0 + std::string(7, ' '), le_floats({0, 1, 2, 3, 4, 5})));

  // test_empty: no tensors is "{}" padded to 8; metadata {"framework": "pt"} is 35 bytes padded to 40.
  safetensors::save_file({}, path);
  CHECK(read_file_bytes(path) == safetensors_bytes("{}      ", {}));
  safetensors::save_file({}, path, {{"framework", "pt"}});
  CHECK(read_file_bytes(path) == safetensors_bytes(R"({"__metadata__":{"framework":"pt"}})"
                                                   "     ",
                                                   {}));
  CHECK(safetensors::load_metadata(path) == safetensors::Metadata{{"framework", "pt"}});
}

TEST_CASE("save_file orders the tensors as the reference does: widest dtype first, then by name") {
  ScratchDir dir;
  const std::string path = dir.path("order.safetensors");
  // Inserted in another order; the reference's Dtype order is BOOL < U8 < F16 < BF16 < I32 < F32 < F64 <
  // I64, written from the widest down, names ascending within a dtype.
  TensorDict tensors;
  tensors.insert_or_assign("z_bool", ones({2}, dtype(ScalarType::bool_)));
  tensors.insert_or_assign("b_f32", ones({1}));
  tensors.insert_or_assign("a_f32", ones({1}));
  tensors.insert_or_assign("u8", ones({3}, dtype(ScalarType::uint8)));
  tensors.insert_or_assign("i64", ones({1}, dtype(ScalarType::int64)));
  tensors.insert_or_assign("bf16", ones({1}, dtype(ScalarType::bfloat16)));
  tensors.insert_or_assign("f16", ones({1}, dtype(ScalarType::float16)));
  tensors.insert_or_assign("i32", ones({1}, dtype(ScalarType::int32)));
  tensors.insert_or_assign("f64", ones({1}, dtype(ScalarType::float64)));
  safetensors::save_file(tensors, path);
  const std::vector<std::string> expected{"i64", "f64", "a_f32", "b_f32", "i32", "bf16", "f16", "u8", "z_bool"};
  CHECK(safetensors::load_file(path).keys() == expected);
  // Offsets: i64 8, f64 8, a_f32 4, b_f32 4, i32 4, bf16 2, f16 2, u8 3, bool 2 bytes back to back.
  const std::vector<unsigned char> file = read_file_bytes(path);
  const std::string header(file.begin() + 8, file.end() - (8 + 8 + 4 + 4 + 4 + 2 + 2 + 3 + 2));
  CHECK(header.find(R"("i64":{"dtype":"I64","shape":[1],"data_offsets":[0,8]})") != std::string::npos);
  CHECK(header.find(R"("z_bool":{"dtype":"BOOL","shape":[2],"data_offsets":[35,37]})") != std::string::npos);
  CHECK(header.size() % 8 == 0);
}

TEST_CASE("every dtype round-trips bit for bit (NaN payloads, -0.0, subnormals) on cpu and sim") {
  ScratchDir dir;
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    const std::string path = dir.path("patterns.safetensors");
    TensorDict saved;
    for (const auto& p : pattern_tensors()) saved.insert_or_assign(p.name, tensor_from_bytes(p, device));
    safetensors::save_file(saved, path, {{"source", "bytegrad"}});
    for (Device target : {kCpu, kSim}) {
      const TensorDict loaded = safetensors::load_file(path, target);
      REQUIRE(loaded.size() == pattern_tensors().size());
      for (const auto& p : pattern_tensors()) {
        CAPTURE(p.name);
        const Tensor& t = loaded.at(p.name);
        CHECK(t.device() == target);
        CHECK(t.dtype() == p.dtype);
        CHECK(t.sizes() == p.shape);
        CHECK(bytes_of(t) == p.bytes);
      }
    }
  }
}

TEST_CASE("non-contiguous tensors are written contiguously; disjoint parts of one storage are allowed") {
  ScratchDir dir;
  const std::string path = dir.path("views.safetensors");
  Tensor base = arange(12.0, device(kSim)).view({3, 4});
  Tensor transposed = arange(12.0, device(kSim)).view({3, 4}).t();  // (4, 3), strides (1, 4)
  Tensor first_row = base.select(0, 0);                             // bytes 0..15 of the storage
  Tensor last_row = base.select(0, 2);                              // bytes 32..47: no overlap with first_row
  safetensors::save_file({{"t", transposed}, {"first", first_row}, {"last", last_row}}, path);
  const TensorDict loaded = safetensors::load_file(path);
  CHECK(loaded.at("t").is_contiguous());
  CHECK(loaded.at("t").tolist() == transposed.tolist());
  CHECK(loaded.at("first").tolist() == std::vector<double>{0, 1, 2, 3});
  CHECK(loaded.at("last").tolist() == std::vector<double>{8, 9, 10, 11});
}

TEST_CASE("save_file refuses what PyTorch's save_file refuses, before writing") {
  ScratchDir dir;
  const std::string path = dir.path("refused.safetensors");
  Tensor w = ones({4, 4});
  auto message = [&](const TensorDict& d) {
    try {
      safetensors::save_file(d, path);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Tied weights: the same storage under two names.
  CHECK(message({{"lm_head.weight", w}, {"wte.weight", w}}).find("share memory: 'lm_head.weight' and 'wte.weight'") !=
        std::string::npos);
  // Overlapping views of one storage.
  CHECK(message({{"a", w.narrow(0, 0, 3)}, {"b", w.narrow(0, 2, 2)}}).find("'a' and 'b'") != std::string::npos);
  CHECK(message({{"m", empty({2}, device(kMeta))}}).find("meta tensor") != std::string::npos);
  CHECK(message({{"__metadata__", w}}).find("__metadata__") != std::string::npos);
  CHECK(message({{"u", Tensor()}}).find("'u' is undefined") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a corrupt file is refused with its name and the problem, and nothing is loaded") {
  ScratchDir dir;
  const std::string path = dir.path("corrupt.safetensors");
  const std::string good_json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  const std::vector<unsigned char> data = le_floats({1, 2, 3});
  fresh_sim();
  auto refused = [&](const std::vector<unsigned char>& bytes, const std::string& problem) {
    write_file_bytes(path, bytes);
    MemoryProbe probe(kSim);
    const std::string message = load_error(path);
    CAPTURE(message);
    CHECK(message.find("cannot load '" + path + "'") != std::string::npos);
    CHECK(message.find(problem) != std::string::npos);
    // All or nothing: no block is left on the device.
    CHECK(probe.allocated_delta() == 0);
  };
  write_file_bytes(path, safetensors_bytes(good_json, data));
  REQUIRE(safetensors::load_file(path).size() == 2);  // the uncorrupted file loads

  const std::vector<unsigned char> good = safetensors_bytes(good_json, data);
  refused({good.begin(), good.begin() + 5}, "shorter than the 8-byte header length");
  refused({good.begin(), good.end() - 1}, "the file is truncated");  // the last float lost a byte
  refused({good.begin(), good.begin() + 40}, "reaches past the end of the file");
  std::vector<unsigned char> huge = good;
  huge[7] = 0x01;  // a header length of 2^56
  refused(huge, "over safetensors' limit");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],)", data), "not valid JSON");
  refused(safetensors_bytes(R"([1, 2])", {}), "not a JSON object");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            data),
          "names a tensor twice");
  refused(safetensors_bytes(R"({"a":{"dtype":"F33","shape":[3],"data_offsets":[0,12]}})", data),
          "unknown dtype \"F33\"");
  refused(safetensors_bytes(R"({"a":{"dtype":"I16","shape":[6],"data_offsets":[0,12]}})", data),
          "dtype I16, which bytegrad has no tensor type for");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3]}})", data), "has no \"data_offsets\"");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}})", data),
          "not an integer >= 0");
  // 2 * 4 = 8 bytes declared for a shape of 3 floats (12 bytes).
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            data),
          "3 elements * 4 bytes = 12 bytes, but its data_offsets [0, 8] span 8");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                            data),
          "'b' (data_offsets [4, 12]) overlaps 'a' (data_offsets [0, 8])");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            data),
          "a gap of 4 bytes before 'b'");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", data),
          "its end is before its beginning");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
          "4 bytes belong to no tensor");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data),
          "needs 16 bytes after the header but the file has 12");
  refused(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,12]}})", data),
          "more bytes than 2^64");
  refused(safetensors_bytes(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data),
          "__metadata__ maps 'k' to 1, not a string");
  // The last tensor is BOOL holding the byte 2.
  refused(safetensors_bytes(R"({"f":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("m":{"dtype":"BOOL","shape":[4],"data_offsets":[8,12]}})",
                            {0, 0, 128, 63, 0, 0, 0, 64, 1, 0, 2, 1}),
          "'m' is BOOL but element 2 is the byte 2");
  CHECK(load_error(dir.path("absent.safetensors")).find("no such file") != std::string::npos);
  CHECK(load_error(dir.path("")).find("not a regular file") != std::string::npos);
}

TEST_CASE("loading onto sim makes one block per tensor, filled from the file, and no temporaries") {
  ScratchDir dir;
  const std::string path = dir.path("blocks.safetensors");
  // 1000 floats (4000 bytes), 300 doubles (2400 bytes), 7 bf16 (14 bytes), 1 bool, and an empty tensor.
  safetensors::save_file({{"w", ones({10, 100})},
                          {"d", ones({300}, dtype(ScalarType::float64))},
                          {"h", ones({7}, dtype(ScalarType::bfloat16))},
                          {"m", ones({1}, dtype(ScalarType::bool_))},
                          {"e", ones({0})}},
                         path);
  fresh_sim();
  MemoryProbe probe(kSim);
  {
    const TensorDict loaded = safetensors::load_file(path, kSim);
    // Each block is its bytes rounded up to 512: 4000 -> 4096, 2400 -> 2560, 14 -> 512, 1 -> 512; the empty
    // tensor has no block. 4096 + 2560 + 512 + 512 = 7680.
    CHECK(probe.allocated_delta_is(4096 + 2560 + 512 + 512));
    CHECK(probe.peak_allocated_delta_is(4096 + 2560 + 512 + 512));  // nothing was made and freed on the way
    int allocations = 0, frees = 0;
    for (const auto& event : probe.events()) {
      (event.kind == MemoryEvent::Kind::alloc ? allocations : frees) += 1;
      CHECK(event.op == "load_file");
    }
    CHECK(allocations == 4);
    CHECK(frees == 0);
    CHECK(loaded.at("w").sum().item() == 1000);
  }
  CHECK(probe.allocated_delta() == 0);
}

TEST_CASE("a file PyTorch wrote (tools/probes/safetensors_interop.py) loads bit for bit") {
  const std::string path = std::string(BYTEGRAD_TEST_DATA_DIR) + "/safetensors/pytorch_patterns.safetensors";
  if (!std::filesystem::exists(path)) {
    MESSAGE("skipped: " << path
                        << " is absent; make it on a machine with PyTorch and safetensors: python3 "
                           "tools/probes/safetensors_interop.py write tests/data/safetensors");
    return;
  }
  for (Device device : {kCpu, kSim}) {
    const TensorDict loaded = safetensors::load_file(path, device);
    CHECK(loaded.size() == pattern_tensors().size());
    for (const auto& p : pattern_tensors()) {
      CAPTURE(p.name);
      REQUIRE(loaded.contains(p.name));
      CHECK(loaded.at(p.name).dtype() == p.dtype);
      CHECK(loaded.at(p.name).sizes() == p.shape);
      CHECK(bytes_of(loaded.at(p.name)) == p.bytes);
    }
  }
  CHECK(safetensors::load_metadata(path) == safetensors::Metadata{{"source", "pytorch"}});
}

// The files tools/probes/safetensors_interop.py checks in PyTorch: written only when
// BYTEGRAD_SAFETENSORS_INTEROP_DIR names a folder (`BYTEGRAD_SAFETENSORS_INTEROP_DIR=out build/tests/test_io
// -tc='*interop*'`). bytegrad_patterns.safetensors holds pattern_tensors() (the probe builds the same table);
// (bytegrad_gpt_tiny.safetensors is written by the test of the same name in state_dict.cpp.)
TEST_CASE("interop files for PyTorch (written when BYTEGRAD_SAFETENSORS_INTEROP_DIR is set)") {
  const char* out_dir = std::getenv("BYTEGRAD_SAFETENSORS_INTEROP_DIR");
  if (out_dir == nullptr) return;
  std::filesystem::create_directories(out_dir);
  TensorDict patterns;
  for (const auto& p : pattern_tensors()) patterns.insert_or_assign(p.name, tensor_from_bytes(p, kSim));
  safetensors::save_file(patterns, std::string(out_dir) + "/bytegrad_patterns.safetensors", {{"source", "bytegrad"}});
  MESSAGE("wrote " << out_dir << "/bytegrad_patterns.safetensors");
}
