#include "tools/scenario.h"

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <variant>

#include "memory/device_allocators.h"

namespace bytegrad {

const std::vector<StepField>& golden_step_fields() {
  static const std::vector<StepField> fields = {
      {"allocated", &GoldenStep::allocated}, {"reserved", &GoldenStep::reserved},
      {"max_allocated", &GoldenStep::max_allocated}, {"max_reserved", &GoldenStep::max_reserved},
      {"segments", &GoldenStep::segments}, {"blocks", &GoldenStep::blocks},
      {"requested", &GoldenStep::requested}, {"inactive_split", &GoldenStep::inactive_split},
  };
  return fields;
}

std::vector<std::string> step_differences(const GoldenStep& got, const GoldenStep& want) {
  std::vector<std::string> out;
  for (const StepField& f : golden_step_fields())
    if (got.*f.member != want.*f.member)
      out.push_back(std::string(f.name) + ": got " + std::to_string(got.*f.member) + ", want " +
                    std::to_string(want.*f.member));
  return out;
}

// ------------------------------------------------------------------------------------ golden reader

namespace {

// A minimal JSON reader: enough of the grammar to walk any golden file (objects, arrays, strings with
// escapes, numbers, literals), keeping only what a step needs: strings and integers of a step object.
class JsonReader {
 public:
  JsonReader(std::string text, std::string path) : text_(std::move(text)), path_(std::move(path)) {}

  std::vector<GoldenStep> steps() {
    std::vector<GoldenStep> out;
    bool found = false;
    expect('{');
    if (consume('}')) fail("no \"steps\" array");
    do {
      const std::string key = string();
      expect(':');
      if (key == "steps") {
        found = true;
        expect('[');
        if (!consume(']')) {
          do out.push_back(step()); while (consume(','));
          expect(']');
        }
      } else {
        skip_value();
      }
    } while (consume(','));
    expect('}');
    if (!found) fail("no \"steps\" array");
    return out;
  }

 private:
  using Field = std::variant<std::string, int64_t>;

  GoldenStep step() {
    std::map<std::string, Field> fields;
    expect('{');
    if (!consume('}')) {
      do {
        const std::string key = string();
        expect(':');
        ws();
        if (peek() == '"') fields[key] = string();
        else if (peek() == '-' || std::isdigit(static_cast<unsigned char>(peek()))) fields[key] = number();
        else skip_value();
      } while (consume(','));
      expect('}');
    }
    GoldenStep s;
    auto text = [&](const std::string& key) -> const std::string* {
      auto it = fields.find(key);
      return it == fields.end() ? nullptr : std::get_if<std::string>(&it->second);
    };
    if (const std::string* label = text("label")) s.label = *label;
    else fail("a step without a \"label\"");
    if (const std::string* message = text("message")) s.message = *message;
    for (const StepField& f : golden_step_fields()) {
      auto it = fields.find(f.name);
      const int64_t* value = it == fields.end() ? nullptr : std::get_if<int64_t>(&it->second);
      if (!value) fail("step \"" + s.label + "\" has no integer \"" + f.name + "\"");
      s.*f.member = *value;
    }
    return s;
  }

  // A number kept only when it is an integer (the figures); fractions and exponents are read and dropped.
  Field number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    const std::string digits = text_.substr(start, pos_ - start);
    bool integer = true;
    while (pos_ < text_.size() && std::string_view(".eE+-0123456789").find(text_[pos_]) != std::string_view::npos) {
      integer = false;
      ++pos_;
    }
    if (digits.empty() || digits == "-") fail("a malformed number");
    if (!integer) return std::string(text_.substr(start, pos_ - start));
    return static_cast<int64_t>(std::stoll(digits));
  }

  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) break;
        const char e = text_[pos_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case 'u': {  // golden texts are ASCII; a \uXXXX escape beyond it is kept as '?'
            const unsigned code = std::stoul(text_.substr(pos_, 4), nullptr, 16);
            pos_ += 4;
            c = code < 0x80 ? static_cast<char>(code) : '?';
            break;
          }
          default: c = e;  // \" \\ \/
        }
      }
      out += c;
    }
    expect('"');
    return out;
  }

  void skip_value() {
    ws();
    const char c = peek();
    if (c == '"') {
      string();
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (consume(close)) return;
      do {
        if (c == '{') {
          string();
          expect(':');
        }
        skip_value();
      } while (consume(','));
      expect(close);
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      number();
    } else {
      for (const char* literal : {"true", "false", "null"})
        if (text_.compare(pos_, std::char_traits<char>::length(literal), literal) == 0) {
          pos_ += std::char_traits<char>::length(literal);
          return;
        }
      fail("an unexpected character");
    }
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
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("golden scenario " + path_ + ": " + what + " at offset " + std::to_string(pos_));
  }

  std::string text_;
  std::string path_;
  size_t pos_ = 0;
};

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::vector<GoldenStep> read_golden_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("golden scenario " + path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return JsonReader(text.str(), path).steps();
}

std::string golden_scenario_path(const std::string& name, bool default_workspace) {
  const char* folder = default_workspace ? "/golden/scenarios-default-workspace/" : "/golden/scenarios/";
  return std::string(BYTEGRAD_SHARED_DIR) + folder + name + ".json";
}

// ------------------------------------------------------------------------------------------ recorder

ScenarioRecorder::ScenarioRecorder(std::string name, Device device) : name_(std::move(name)), device_(device) {}

void ScenarioRecorder::mark(const std::string& label, const std::string& message) {
  // The keys scenarios.py reads through torch.cuda.memory_allocated() etc. and memory_stats().
  const std::map<std::string, int64_t> stats = caching_allocator(device_).memory_stats();
  auto stat = [&](const char* key) { return stats.at(key); };
  GoldenStep s;
  s.label = label;
  s.allocated = stat("allocated_bytes.all.current");
  s.reserved = stat("reserved_bytes.all.current");
  s.max_allocated = stat("allocated_bytes.all.peak");
  s.max_reserved = stat("reserved_bytes.all.peak");
  s.segments = stat("segment.all.current");
  s.blocks = stat("allocation.all.current");
  s.requested = stat("requested_bytes.all.current");
  s.inactive_split = stat("inactive_split_bytes.all.current");
  s.message = message;
  steps_.push_back(s);
  if (listener_) listener_(steps_.back());
}

std::string ScenarioRecorder::to_json() const {
  std::string out = "{\n \"name\": " + json_string(name_) + ",\n \"device\": " + json_string(device_.str()) +
                    ",\n \"steps\": [";
  for (size_t i = 0; i < steps_.size(); ++i) {
    const GoldenStep& s = steps_[i];
    out += std::string(i ? "," : "") + "\n  {\n   \"label\": " + json_string(s.label);
    for (const StepField& f : golden_step_fields())
      out += ",\n   \"" + std::string(f.name) + "\": " + std::to_string(s.*f.member);
    if (!s.message.empty()) out += ",\n   \"message\": " + json_string(s.message);
    out += "\n  }";
  }
  return out + "\n ]\n}\n";
}

}  // namespace bytegrad
