// JSON (RFC 8259) for every file bytegrad reads or writes: the golden scenarios, PyTorch's recorded probes,
// the memory_viz export. A value is a small tree; numbers keep their literal text, so integers of any size
// read back exactly and are converted only when asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bytegrad::json {

// Malformed text, or a value asked for as what it is not. Parse errors name the offset.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;  // a string's value, or a number's literal
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;  // in document order

  // Declared so that clang (before 16, with libstdc++ 12) does not check std::pair<std::string, Value>
  // for a default constructor while Value is still incomplete, which it rejects.
  Value() = default;

  bool is_number() const { return kind == Kind::number; }
  bool is_integer() const { return is_number() && text.find_first_of(".eE") == std::string::npos; }
  // The accessors throw Error when the value is not of the kind asked for.
  int64_t integer() const;
  uint64_t unsigned_integer() const;
  double number() const;
  const std::string& string() const;
  const Value* find(std::string_view key) const;  // nullptr when absent (or not an object)
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const Value& operator[](std::string_view key) const;
  const Value& operator[](size_t i) const;
  size_t size() const { return kind == Kind::array ? items.size() : members.size(); }

  // Building: add appends a member to an object, push_back an item to an array.
  Value& add(std::string key, Value value);
  Value& push_back(Value value);
};

Value null();
Value boolean(bool b);
Value integer(int64_t n);
Value string(std::string s);
Value array();
Value object();

// Strict: one value, nothing but whitespace after it; duplicate keys are an error. \u escapes are decoded
// to UTF-8.
Value parse(std::string_view text);

// As Python's json.dumps: indent < 0 writes one line with ", " and ": " between items; indent >= 0 puts
// each item on its own line, indented by that many spaces per level.
std::string dump(const Value& value, int indent = -1);

// `text` as a JSON string literal, quotes included (control characters escaped, UTF-8 passed through).
void append_quoted(std::string& out, std::string_view text);
std::string quoted(std::string_view text);

}  // namespace bytegrad::json
