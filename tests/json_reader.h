// A small JSON reader for the tests' recorded data (tests/data/pytorch_probes): objects, arrays, strings,
// numbers; true/false/null read as null. Enough for files written by json.dump, not a validator.
#pragma once

#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace bgjson {

struct Json {
  enum Kind { null, number, string, array, object } kind = null;
  double num = 0;
  std::string str;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
  const Json* find(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json parse() {
    ws();
    Json v;
    char c = s_.at(i_);
    if (c == '{') {
      v.kind = Json::object;
      ++i_;
      ws();
      if (s_[i_] == '}') { ++i_; return v; }
      for (;;) {
        ws();
        std::string key = parse().str;
        ws();
        ++i_;  // ':'
        v.members.emplace_back(key, parse());
        ws();
        if (s_[i_++] == '}') return v;
      }
    }
    if (c == '[') {
      v.kind = Json::array;
      ++i_;
      ws();
      if (s_[i_] == ']') { ++i_; return v; }
      for (;;) {
        v.items.push_back(parse());
        ws();
        if (s_[i_++] == ']') return v;
      }
    }
    if (c == '"') {
      v.kind = Json::string;
      for (++i_; s_[i_] != '"'; ++i_) {
        if (s_[i_] == '\\') ++i_;
        v.str += s_[i_];
      }
      ++i_;
      return v;
    }
    if (s_.compare(i_, 4, "null") == 0 || s_.compare(i_, 4, "true") == 0) { i_ += 4; return v; }
    if (s_.compare(i_, 5, "false") == 0) { i_ += 5; return v; }
    size_t used = 0;
    v.kind = Json::number;
    v.num = std::stod(s_.substr(i_, 32), &used);
    i_ += used;
    return v;
  }

 private:
  void ws() { while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_; }
  const std::string& s_;
  size_t i_ = 0;
};

inline Json parse_json(const std::string& text) { return JsonParser(text).parse(); }

}  // namespace bgjson
