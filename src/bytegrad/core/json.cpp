#include "bytegrad/core/json.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <iterator>

namespace bytegrad::json {

namespace {

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::null: return "null";
    case Value::Kind::boolean: return "a boolean";
    case Value::Kind::number: return "a number";
    case Value::Kind::string: return "a string";
    case Value::Kind::array: return "an array";
    case Value::Kind::object: return "an object";
  }
  return "?";
}

void require(const Value& v, Value::Kind kind, const char* what) {
  if (v.kind != kind) throw Error(fmt::format("JSON: {} where {} was asked for", kind_name(v.kind), what));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value document() {
    Value v = value();
    ws();
    if (pos_ != text_.size()) fail("trailing text");
    return v;
  }

 private:
  Value value() {
    ws();
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::object;
      ++pos_;
      if (!consume('}')) {
        do {
          ws();
          std::string key = string();
          for (const auto& [k, _] : v.members)
            if (k == key) fail("duplicate key \"" + key + "\"");
          expect(':');
          v.members.emplace_back(std::move(key), value());
        } while (consume(','));
        expect('}');
      }
    } else if (c == '[') {
      v.kind = Value::Kind::array;
      ++pos_;
      if (!consume(']')) {
        do v.items.push_back(value());
        while (consume(','));
        expect(']');
      }
    } else if (c == '"') {
      v.kind = Value::Kind::string;
      v.text = string();
    } else if (c == '-' || is_digit(c)) {
      v.kind = Value::Kind::number;
      v.text = number();
    } else if (literal("true")) {
      v.kind = Value::Kind::boolean;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Value::Kind::boolean;
    } else if (!literal("null")) {
      fail("unexpected character");
    }
    return v;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (!digits(/*leading_zero_alone=*/true)) fail("a malformed number");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits(false)) fail("a malformed number");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits(false)) fail("a malformed number");
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  bool digits(bool leading_zero_alone) {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    if (pos_ == start) return false;
    return !(leading_zero_alone && text_[start] == '0' && pos_ - start > 1);
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated string");
      switch (const char e = text_[pos_++]) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case '"':
        case '\\':
        case '/': out += e; break;
        case 'u': append_utf8(out, code_point()); break;
        default: fail("bad escape");
      }
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail("bad \\u escape");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      code <<= 4;
      if (is_digit(h)) code |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<uint32_t>(h - 'A' + 10);
      else fail("bad \\u escape");
    }
    return code;
  }

  // After "\u": one code point, a surrogate pair read as one.
  uint32_t code_point() {
    const uint32_t high = hex4();
    if (high < 0xD800 || high > 0xDFFF) return high;
    if (high > 0xDBFF || text_.substr(pos_, 2) != "\\u") fail("unpaired surrogate");
    pos_ += 2;
    const uint32_t low = hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate");
    return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
  }

  static void append_utf8(std::string& out, uint32_t code) {
    auto byte = [&](uint32_t b) { out += static_cast<char>(b); };
    if (code < 0x80) {
      byte(code);
    } else if (code < 0x800) {
      byte(0xC0 | (code >> 6));
      byte(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      byte(0xE0 | (code >> 12));
      byte(0x80 | ((code >> 6) & 0x3F));
      byte(0x80 | (code & 0x3F));
    } else {
      byte(0xF0 | (code >> 18));
      byte(0x80 | ((code >> 12) & 0x3F));
      byte(0x80 | ((code >> 6) & 0x3F));
      byte(0x80 | (code & 0x3F));
    }
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void ws() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  char peek() {
    ws();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("JSON: " + what + " at offset " + std::to_string(pos_));
  }

  std::string_view text_;
  size_t pos_ = 0;
};

void write(std::string& out, const Value& v, int indent, int depth) {
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  const char* separator = indent < 0 ? ", " : ",";
  auto container = [&](char open, char close, size_t count, auto&& element) {
    out += open;
    for (size_t i = 0; i < count; ++i) {
      if (i) out += separator;
      newline(depth + 1);
      element(i);
    }
    if (count) newline(depth);
    out += close;
  };
  switch (v.kind) {
    case Value::Kind::null: out += "null"; break;
    case Value::Kind::boolean: out += v.boolean ? "true" : "false"; break;
    case Value::Kind::number: out += v.text; break;
    case Value::Kind::string: append_quoted(out, v.text); break;
    case Value::Kind::array:
      container('[', ']', v.items.size(), [&](size_t i) { write(out, v.items[i], indent, depth + 1); });
      break;
    case Value::Kind::object:
      container('{', '}', v.members.size(), [&](size_t i) {
        append_quoted(out, v.members[i].first);
        out += ": ";
        write(out, v.members[i].second, indent, depth + 1);
      });
      break;
  }
}

}  // namespace

int64_t Value::integer() const {
  if (!is_integer()) throw Error("JSON: not an integer: " + (is_number() ? text : std::string(kind_name(kind))));
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE) throw Error("JSON: integer out of range: " + text);
  return n;
}

uint64_t Value::unsigned_integer() const {
  if (!is_integer() || text[0] == '-')
    throw Error("JSON: not a non-negative integer: " + (is_number() ? text : std::string(kind_name(kind))));
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE) throw Error("JSON: integer out of range: " + text);
  return n;
}

double Value::number() const {
  require(*this, Kind::number, "a number");
  return std::strtod(text.c_str(), nullptr);
}

const std::string& Value::string() const {
  require(*this, Kind::string, "a string");
  return text;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::object) return nullptr;
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

const Value& Value::operator[](std::string_view key) const {
  if (kind != Kind::object)
    throw Error(fmt::format("JSON: {} where an object with \"{}\" was asked for", kind_name(kind), key));
  if (const Value* v = find(key)) return *v;
  throw Error(fmt::format("JSON: no key \"{}\"", key));
}

const Value& Value::operator[](size_t i) const {
  require(*this, Kind::array, "an array");
  if (i >= items.size()) throw Error(fmt::format("JSON: index {} of an array of {}", i, items.size()));
  return items[i];
}

Value& Value::add(std::string key, Value value) {
  require(*this, Kind::object, "an object");
  members.emplace_back(std::move(key), std::move(value));
  return *this;
}

Value& Value::push_back(Value value) {
  require(*this, Kind::array, "an array");
  items.push_back(std::move(value));
  return *this;
}

Value null() { return Value{}; }

Value boolean(bool b) {
  Value v;
  v.kind = Value::Kind::boolean;
  v.boolean = b;
  return v;
}

Value integer(int64_t n) {
  Value v;
  v.kind = Value::Kind::number;
  v.text = std::to_string(n);
  return v;
}

Value string(std::string s) {
  Value v;
  v.kind = Value::Kind::string;
  v.text = std::move(s);
  return v;
}

Value array() {
  Value v;
  v.kind = Value::Kind::array;
  return v;
}

Value object() {
  Value v;
  v.kind = Value::Kind::object;
  return v;
}

Value parse(std::string_view text) { return Parser(text).document(); }

std::string dump(const Value& value, int indent) {
  std::string out;
  write(out, value, indent, 0);
  return out;
}

void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        else out += c;  // UTF-8 bytes pass through
    }
  }
  out += '"';
}

std::string quoted(std::string_view text) {
  std::string out;
  append_quoted(out, text);
  return out;
}

}  // namespace bytegrad::json
