// The tests' JSON reader (recorded PyTorch data in tests/data, golden-style files, memory_viz exports): a
// strict parser of RFC 8259 text (duplicate keys and trailing text fail) into a small tree whose accessors
// fail the running doctest test when the shape is not the one asked for.
#pragma once

#include <doctest/doctest.h>

#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bgjson {


struct Json {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  std::string text;  // a string's value, or a number's literal
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in file order

  bool is_number() const { return kind == Kind::number; }
  bool is_integer() const { return is_number() && text.find_first_of(".eE") == std::string::npos; }
  // The integer a number holds; fails the test for fractions and negative values where unsigned is asked.
  int64_t integer() const {
    REQUIRE_MESSAGE(is_integer(), "not an integer: " << text);
    return std::stoll(text);
  }
  uint64_t unsigned_integer() const {
    REQUIRE_MESSAGE((is_integer() && text[0] != '-'), "not a non-negative integer: " << text);
    return std::stoull(text);
  }
  double number() const {
    REQUIRE(is_number());
    return std::stod(text);
  }
  const std::string& string() const {
    REQUIRE(kind == Kind::string);
    return text;
  }
  const Json* find(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
  bool has(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return true;
    return false;
  }
  const Json& operator[](const std::string& key) const {
    REQUIRE_MESSAGE(kind == Kind::object, "not an object where \"" << key << "\" was looked up");
    for (const auto& [k, v] : members)
      if (k == key) return v;
    FAIL("no key \"" << key << "\"");
    throw std::logic_error("unreachable");
  }
  const Json& operator[](size_t i) const {
    REQUIRE(kind == Kind::array);
    REQUIRE(i < items.size());
    return items[i];
  }
  size_t size() const { return kind == Kind::array ? items.size() : members.size(); }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : text_(text) {}

  Json document() {
    Json value = parse();
    ws();
    if (pos_ != text_.size()) fail("trailing text");
    return value;
  }

 private:
  Json parse() {
    ws();
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::Kind::object;
      ++pos_;
      if (!consume('}')) {
        do {
          ws();
          std::string key = string();
          for (const auto& [k, _] : v.members)
            if (k == key) fail("duplicate key " + key);
          expect(':');
          v.members.emplace_back(std::move(key), parse());
        } while (consume(','));
        expect('}');
      }
    } else if (c == '[') {
      v.kind = Json::Kind::array;
      ++pos_;
      if (!consume(']')) {
        do v.items.push_back(parse()); while (consume(','));
        expect(']');
      }
    } else if (c == '"') {
      v.kind = Json::Kind::string;
      v.text = string();
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      v.kind = Json::Kind::number;
      const size_t start = pos_;
      if (c == '-') ++pos_;
      while (pos_ < text_.size() && std::string_view("0123456789.eE+-").find(text_[pos_]) != std::string_view::npos)
        ++pos_;
      v.text = text_.substr(start, pos_ - start);
      size_t used = 0;
      (void)std::stod(v.text, &used);
      if (used != v.text.size()) fail("bad number " + v.text);
    } else if (text_.compare(pos_, 4, "true") == 0) {
      v.kind = Json::Kind::boolean;
      v.boolean = true;
      pos_ += 4;
    } else if (text_.compare(pos_, 5, "false") == 0) {
      v.kind = Json::Kind::boolean;
      pos_ += 5;
    } else if (text_.compare(pos_, 4, "null") == 0) {
      pos_ += 4;
    } else {
      fail("unexpected character");
    }
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c == '\\') {
        const char e = text_[pos_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case '"': case '\\': case '/': c = e; break;
          case 'u': {
            const unsigned code = std::stoul(text_.substr(pos_, 4), nullptr, 16);
            pos_ += 4;
            if (code >= 0x80) fail("non-ASCII \\u escape (not produced by the exporter)");
            c = static_cast<char>(code);
            break;
          }
          default: fail("bad escape");
        }
      }
      out += c;
    }
    return out;
  }

  void ws() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
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
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
  }

  const std::string& text_;
  size_t pos_ = 0;
};

inline Json parse_json(const std::string& text) {
  Json doc;
  REQUIRE_NOTHROW(doc = JsonParser(text).document());
  return doc;
}

}  // namespace bgjson
