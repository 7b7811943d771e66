#include "bytegrad/tensor/safetensors.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/device_backend.h"

namespace bytegrad::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

namespace {

// The reference implementation's limit on the header (MAX_HEADER_SIZE in safetensors/src/tensor.rs).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kLengthBytes = 8;

struct DtypeEntry {
  ScalarType dtype;
  std::string_view name;
  // The position in the reference's Dtype enum, which is in increasing alignment: save_file writes wider
  // dtypes first (BOOL 0 < U8 < ... < F16 < BF16 < I32 < ... < F32 < ... < F64 < I64).
  int alignment_rank;
};

constexpr std::array<DtypeEntry, 8> kDtypes{{
    {ScalarType::bool_, "BOOL", 0},
    {ScalarType::uint8, "U8", 1},
    {ScalarType::float16, "F16", 2},
    {ScalarType::bfloat16, "BF16", 3},
    {ScalarType::int32, "I32", 4},
    {ScalarType::float32, "F32", 5},
    {ScalarType::float64, "F64", 6},
    {ScalarType::int64, "I64", 7},
}};

// Dtypes a safetensors file may hold that bytegrad has no tensor type for.
constexpr std::array<std::string_view, 14> kForeignDtypes{"F4",      "F6_E2M3", "F6_E3M2",     "I8",          "F8_E5M2",
                                                          "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
                                                          "U16",     "U32",     "C64",         "U64"};

const DtypeEntry& entry_for(ScalarType dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e;
  throw std::logic_error("safetensors: a ScalarType without a safetensors name");
}

std::string known_dtype_names() {
  std::string out;
  for (const auto& e : kDtypes) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

// One tensor of a file's header.
struct HeaderEntry {
  std::string name;
  ScalarType dtype = ScalarType::float32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the data section
};

struct Header {
  uint64_t header_bytes = 0;  // N
  uint64_t file_bytes = 0;
  Metadata metadata;
  std::vector<HeaderEntry> entries;  // in the order of their data
  uint64_t data_start() const { return kLengthBytes + header_bytes; }
};

class LoadError {
 public:
  explicit LoadError(const std::string& path) : path_(path) {}
  [[noreturn]] void operator()(const std::string& problem) const {
    throw Error(fmt::format("safetensors: cannot load '{}': {}", path_, problem));
  }

 private:
  const std::string& path_;
};

std::string offsets_str(const HeaderEntry& e) { return fmt::format("[{}, {}]", e.begin, e.end); }

HeaderEntry parse_entry(const std::string& name, const json::Value& info, const LoadError& fail) {
  if (info.kind != json::Value::Kind::object)
    fail(fmt::format("the header's entry for '{}' is not an object with dtype, shape and data_offsets", name));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!info.has(field)) fail(fmt::format("the header's entry for '{}' has no \"{}\"", name, field));
  HeaderEntry entry;
  entry.name = name;

  const json::Value& dtype = info["dtype"];
  if (dtype.kind != json::Value::Kind::string) fail(fmt::format("the dtype of '{}' is not a string", name));
  const auto known = std::find_if(kDtypes.begin(), kDtypes.end(), [&](const auto& e) { return e.name == dtype.text; });
  if (known == kDtypes.end()) {
    if (std::find(kForeignDtypes.begin(), kForeignDtypes.end(), dtype.text) != kForeignDtypes.end())
      fail(fmt::format("'{}' has dtype {}, which bytegrad has no tensor type for (it has {})", name, dtype.text,
                       known_dtype_names()));
    fail(fmt::format("'{}' has the unknown dtype \"{}\" (safetensors' names bytegrad reads: {})", name, dtype.text,
                     known_dtype_names()));
  }
  entry.dtype = known->dtype;

  // Sizes and offsets are JSON integers >= 0 (a float, a negative or an oversized one is refused).
  auto read_unsigned = [&](const json::Value& v, const char* what) -> uint64_t {
    if (!v.is_integer() || v.text.starts_with('-'))
      fail(fmt::format("the {} of '{}' holds {}, not an integer >= 0", what, name, json::dump(v)));
    try {
      return v.unsigned_integer();
    } catch (const json::Error&) {
      fail(fmt::format("the {} of '{}' holds {}, too large", what, name, v.text));
    }
  };
  const json::Value& shape = info["shape"];
  if (shape.kind != json::Value::Kind::array) fail(fmt::format("the shape of '{}' is not a list", name));
  uint64_t numel = 1;
  bool overflow = false, has_zero = false;  // a size 0 makes any product 0, overflowing or not
  for (const json::Value& size : shape.items) {
    const uint64_t s = read_unsigned(size, "shape");
    if (s > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(fmt::format("the shape of '{}' holds {}, too large", name, s));
    entry.shape.push_back(static_cast<int64_t>(s));
    if (s == 0) has_zero = true;
    else if (numel > std::numeric_limits<uint64_t>::max() / s) overflow = true;
    else numel *= s;
  }
  const uint64_t width = element_size(entry.dtype);
  if (has_zero) {
    numel = 0;
    overflow = false;
  }
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / width ||
      numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(fmt::format("the shape {} of '{}' has more bytes than 2^64", shape_str(entry.shape), name));

  const json::Value& offsets = info["data_offsets"];
  if (offsets.kind != json::Value::Kind::array || offsets.size() != 2)
    fail(fmt::format("the data_offsets of '{}' are not a list [begin, end]", name));
  entry.begin = read_unsigned(offsets[0], "data_offsets");
  entry.end = read_unsigned(offsets[1], "data_offsets");
  if (entry.end < entry.begin)
    fail(fmt::format("'{}' has data_offsets {}: its end is before its beginning", name, offsets_str(entry)));
  const uint64_t nbytes = numel * width;
  if (entry.end - entry.begin != nbytes)
    fail(fmt::format("'{}' is {} of shape {}: {} elements * {} bytes = {} bytes, but its data_offsets {} span {}", name,
                     dtype.text, shape_str(entry.shape), numel, width, nbytes, offsets_str(entry),
                     entry.end - entry.begin));
  return entry;
}

std::ifstream open_for_reading(const std::string& path, uint64_t& file_bytes, const LoadError& fail) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) fail("no such file");
  if (!std::filesystem::is_regular_file(status)) fail("it is not a regular file");
  file_bytes = std::filesystem::file_size(path, ec);
  if (ec) fail("its size cannot be read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("it cannot be opened for reading");
  return in;
}

void read_exactly(std::ifstream& in, uint64_t offset, char* out, uint64_t bytes, const LoadError& fail,
                  const std::string& what) {
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(out, static_cast<std::streamsize>(bytes));
  if (!in || static_cast<uint64_t>(in.gcount()) != bytes)
    fail(fmt::format("reading {} ({} bytes at byte {}) failed: the file changed or cannot be read", what, bytes,
                     offset));
}

Header read_header(std::ifstream& in, uint64_t file_bytes, const LoadError& fail) {
  Header header;
  header.file_bytes = file_bytes;
  if (file_bytes < kLengthBytes)
    fail(fmt::format("the file is {} bytes, shorter than the 8-byte header length a safetensors file starts with",
                     file_bytes));
  std::array<unsigned char, kLengthBytes> length{};
  read_exactly(in, 0, reinterpret_cast<char*>(length.data()), kLengthBytes, fail, "the header length");
  for (size_t i = 0; i < kLengthBytes; ++i) header.header_bytes |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (header.header_bytes > kMaxHeaderBytes)
    fail(fmt::format("the header length {} is over safetensors' limit of 100000000 bytes (not a safetensors file?)",
                     header.header_bytes));
  if (header.data_start() > file_bytes)
    fail(fmt::format("the header length {} reaches past the end of the file ({} bytes): the file is truncated",
                     header.header_bytes, file_bytes));

  std::string text(header.header_bytes, '\0');
  read_exactly(in, kLengthBytes, text.data(), header.header_bytes, fail, "the header");
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const json::Error& e) {
    const std::string what = e.what();
    if (what.find("duplicate key") != std::string::npos) fail("the header names a tensor twice (" + what + ")");
    fail("the header is not valid JSON (" + what + ")");
  }
  if (root.kind != json::Value::Kind::object) fail("the header is not a JSON object");

  for (const auto& [name, value] : root.members) {
    if (name == "__metadata__") {
      if (value.kind != json::Value::Kind::object) fail("the header's __metadata__ is not an object");
      for (const auto& [key, text_value] : value.members) {
        if (text_value.kind != json::Value::Kind::string)
          fail(fmt::format("the header's __metadata__ maps '{}' to {}, not a string", key, json::dump(text_value)));
        header.metadata.emplace(key, text_value.text);
      }
      continue;
    }
    header.entries.push_back(parse_entry(name, value, fail));
  }

  // The data section must be covered by the tensors back to back, in some order, and end with the file.
  std::stable_sort(header.entries.begin(), header.entries.end(),
                   [](const auto& a, const auto& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  uint64_t covered = 0;
  const HeaderEntry* previous = nullptr;
  for (const HeaderEntry& e : header.entries) {
    if (e.begin < covered)
      fail(fmt::format("'{}' (data_offsets {}) overlaps '{}' (data_offsets {})", e.name, offsets_str(e), previous->name,
                       offsets_str(*previous)));
    if (e.begin > covered)
      fail(
          fmt::format("the data has a gap of {} bytes before '{}' (data_offsets {}): bytes {} to {} belong to no "
                      "tensor",
                      e.begin - covered, e.name, offsets_str(e), covered, e.begin));
    covered = e.end;
    previous = &e;
  }
  const uint64_t data_bytes = file_bytes - header.data_start();
  if (covered > data_bytes)
    fail(fmt::format("the tensors' data needs {} bytes after the header but the file has {}: the file is truncated",
                     covered, data_bytes));
  if (covered < data_bytes)
    fail(
        fmt::format("the file has {} bytes after the header but the tensors' data covers only {}: {} bytes belong "
                    "to no tensor",
                    data_bytes, covered, data_bytes - covered));
  return header;
}

void check_bools(const std::byte* bytes, uint64_t count, const HeaderEntry& e, const LoadError& fail) {
  for (uint64_t i = 0; i < count; ++i)
    if (const auto b = static_cast<unsigned>(bytes[i]); b > 1)
      fail(fmt::format("'{}' is BOOL but element {} is the byte {}: a bool is stored as 0 or 1", e.name, i, b));
}

// A tensor's byte range inside its storage, for the overlap check.
struct Extent {
  uint64_t begin, end;
  const std::string* name;
};

Extent extent_of(const std::string& name, const Tensor& t) {
  const uint64_t width = t.element_size();
  const auto begin = static_cast<uint64_t>(t.storage_offset()) * width;
  if (t.numel() == 0) return {begin, begin, &name};
  int64_t last = 0;  // the farthest element's offset from element 0
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * std::max<int64_t>(t.stride(d), 0);
  return {begin, begin + (static_cast<uint64_t>(last) + 1) * width, &name};
}

void check_no_shared_memory(const TensorDict& tensors) {
  std::unordered_map<const StorageImpl*, std::vector<Extent>> by_storage;
  for (const auto& [name, t] : tensors)
    if (t.storage() && t.storage()->nbytes() != 0) by_storage[t.storage().get()].push_back(extent_of(name, t));
  std::vector<std::string> clashes;
  for (auto& [storage, extents] : by_storage) {
    if (extents.size() < 2) continue;
    std::sort(extents.begin(), extents.end(),
              [](const Extent& a, const Extent& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
    const Extent* reach = &extents[0];  // the extent reaching farthest so far
    for (size_t i = 1; i < extents.size(); ++i) {
      if (extents[i].begin < reach->end && extents[i].begin < extents[i].end)
        clashes.push_back(fmt::format("'{}' and '{}'", *reach->name, *extents[i].name));
      if (extents[i].end > reach->end) reach = &extents[i];
    }
  }
  if (clashes.empty()) return;
  std::sort(clashes.begin(), clashes.end());
  throw std::invalid_argument(fmt::format(
      "safetensors: save_file: these tensors share memory: {}. Saved, the shared bytes would be stored twice and "
      "load as separate tensors; save a clone of one, or save a module with nn::save_model, which keeps one name "
      "for each shared tensor",
      fmt::join(clashes, ", ")));
}

std::string header_json(const TensorDict& tensors, const std::vector<size_t>& order, const Metadata& metadata) {
  std::string out = "{";
  bool first = true;
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (!first) out += ',';
      first = false;
      json::append_quoted(out, key);
      out += ':';
      json::append_quoted(out, value);
    }
    out += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const size_t i : order) {
    const auto& [name, t] = tensors.items()[i];
    if (!first) out += ',';
    first = false;
    json::append_quoted(out, name);
    const uint64_t nbytes = t.nbytes();
    fmt::format_to(std::back_inserter(out), R"(:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})",
                   entry_for(t.dtype()).name, fmt::join(t.sizes(), ","), offset, offset + nbytes);
    offset += nbytes;
  }
  out += '}';
  out.resize((out.size() + kLengthBytes - 1) / kLengthBytes * kLengthBytes, ' ');  // 8-byte alignment
  return out;
}

std::string temporary_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.tmp-{}-{}", path, static_cast<long>(getpid()), counter.fetch_add(1));
}

}  // namespace

std::string_view dtype_name(ScalarType dtype) { return entry_for(dtype).name; }

void save_file(const TensorDict& tensors, const std::string& path, const Metadata& metadata) {
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__")
      throw std::invalid_argument(
          "safetensors: save_file: a tensor can't be named \"__metadata__\" (the header's key for the metadata)");
    if (!t.defined()) throw std::invalid_argument(fmt::format("safetensors: save_file: '{}' is undefined", name));
    if (t.is_meta())
      throw std::invalid_argument(fmt::format(
          "safetensors: save_file: '{}' is a meta tensor ({}): it has no values to save", name, describe(t)));
  }
  check_no_shared_memory(tensors);

  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& [name_a, ta] = tensors.items()[a];
    const auto& [name_b, tb] = tensors.items()[b];
    const int rank_a = entry_for(ta.dtype()).alignment_rank, rank_b = entry_for(tb.dtype()).alignment_rank;
    return rank_a != rank_b ? rank_a > rank_b : name_a < name_b;
  });
  const std::string header = header_json(tensors, order, metadata);
  if (header.size() > kMaxHeaderBytes)
    throw std::invalid_argument(fmt::format(
        "safetensors: save_file: the header would be {} bytes, over safetensors' limit of 100000000", header.size()));

  const std::string temporary = temporary_path_for(path);
  auto fail = [&](const std::string& problem) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error(fmt::format("safetensors: cannot save '{}': {}", path, problem));
  };
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(fmt::format("'{}' cannot be created beside it", temporary));
    std::array<char, kLengthBytes> length{};
    for (size_t i = 0; i < kLengthBytes; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    out.write(length.data(), kLengthBytes);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    std::vector<std::byte> host;
    for (const size_t i : order) {
      const Tensor& t = tensors.items()[i].second;
      if (t.numel() == 0) continue;
      // Any strides and any device: copy_to_host writes the elements row-major into the host buffer.
      host.resize(t.nbytes());
      backend_for(t.device()).copy_to_host(host, t.view_for_kernels());
      out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(host.size()));
    }
    out.flush();
    if (!out) fail("writing failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) fail(fmt::format("renaming '{}' onto it failed: {}", temporary, ec.message()));
}

TensorDict load_file(const std::string& path, Device device) {
  const LoadError fail(path);
  uint64_t file_bytes = 0;
  std::ifstream in = open_for_reading(path, file_bytes, fail);
  const Header header = read_header(in, file_bytes, fail);

  TensorDict out;
  std::vector<std::byte> host;
  for (const HeaderEntry& e : header.entries) {
    Tensor t;
    {
      AllocationScope scope("load_file");
      t = empty(e.shape, TensorOptions{e.dtype, device});
    }
    const uint64_t nbytes = e.end - e.begin;
    const uint64_t offset = header.data_start() + e.begin;
    const std::string what = fmt::format("the data of '{}'", e.name);
    if (nbytes != 0 && device.type == DeviceType::cpu) {
      auto* data = static_cast<std::byte*>(t.data_ptr());
      read_exactly(in, offset, reinterpret_cast<char*>(data), nbytes, fail, what);
      if (e.dtype == ScalarType::bool_) check_bools(data, nbytes, e, fail);
    } else if (nbytes != 0 && !t.is_meta()) {
      host.resize(nbytes);
      read_exactly(in, offset, reinterpret_cast<char*>(host.data()), nbytes, fail, what);
      if (e.dtype == ScalarType::bool_) check_bools(host.data(), nbytes, e, fail);
      backend_for(device).copy_from_host(t.view_for_kernels(), host);
    }
    out.insert_or_assign(e.name, t);
  }
  return out;
}

Metadata load_metadata(const std::string& path) {
  const LoadError fail(path);
  uint64_t file_bytes = 0;
  std::ifstream in = open_for_reading(path, file_bytes, fail);
  return read_header(in, file_bytes, fail).metadata;
}

}  // namespace bytegrad::safetensors
