// The safetensors file format (https://huggingface.co/docs/safetensors), as Python's safetensors.torch reads
// and writes it: 8 bytes (little-endian u64) giving the header's length N, N bytes of JSON header
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// padded with spaces to a multiple of 8, then the tensors' bytes, row-major, little-endian, back to back.
// save_file writes what the reference implementation writes, byte for byte: the tensors sorted by dtype
// (widest alignment first, in its Dtype order I64, F64, F32, I32, BF16, F16, U8, BOOL) and then by name, the
// header in that order with no spaces, metadata keys sorted.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bytegrad/core/device.h"
#include "bytegrad/core/scalar_type.h"
#include "bytegrad/tensor/tensor_dict.h"

namespace bytegrad::safetensors {

// A file that cannot be written or read, or is not a valid safetensors file; the message names the file.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Metadata = std::map<std::string, std::string>;

// Writes every tensor (any device but meta; a non-contiguous one is written contiguously, which Python's
// save_file refuses instead), and `metadata` as "__metadata__" when not empty. Refused before anything is
// written: an undefined or meta tensor, the name "__metadata__", and tensors whose bytes overlap in one
// storage (as Python's save_file refuses them: they would be stored twice and load as separate tensors).
// The file is written beside `path` and renamed onto it, so a failed save leaves an existing file as it was.
void save_file(const TensorDict& tensors, const std::string& path, const Metadata& metadata = {});

// Every tensor of the file, in the order of their data (as Python's load_file), each in one new block on
// `device` filled from the file (a host buffer of one tensor's bytes stages it; on cpu it is read in place).
// The whole header is checked before anything is allocated, and a failure while reading frees what was
// loaded: the result is all or nothing. Refused with Error naming the file and the problem: a file shorter
// than 8 bytes, a header length past the end of the file or over the reference's 100,000,000-byte limit,
// a header that is not a JSON object, a duplicate name, an entry without dtype/shape/data_offsets, a dtype
// bytegrad has no counterpart for, a negative or overflowing shape, data_offsets whose span differs from the
// shape's byte count, tensors that overlap or leave a gap, data that does not end exactly at the end of the
// file, and a BOOL element other than 0 or 1.
TensorDict load_file(const std::string& path, Device device = kCpu);

// The header's "__metadata__" (empty when absent), with the same checks of the header as load_file.
Metadata load_metadata(const std::string& path);

// "F32", "BF16", "I64", "BOOL", ...: the file's name for a dtype.
std::string_view dtype_name(ScalarType dtype);

}  // namespace bytegrad::safetensors
