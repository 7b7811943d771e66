// Bad input, one row each, as a new user would type it: every row must throw the named exception type
// with a message naming the problem, and leave the sim device's allocator statistics and the live tensors
// exactly as they were (nothing lost, nothing leaked, nothing half-written).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "tests/bad_inputs/bad_input_rows.h"

using namespace bytegrad;
using namespace bytegrad::testing;
using namespace bytegrad::bad_inputs;

namespace {

const char* expect_name(Expect e) {
  switch (e) {
    case Expect::invalid_argument: return "std::invalid_argument";
    case Expect::out_of_range: return "std::out_of_range";
    case Expect::length_error: return "std::length_error";
    case Expect::runtime_error: return "std::runtime_error";
    case Expect::logic_error: return "std::logic_error";
    case Expect::out_of_memory: return "bytegrad::OutOfMemoryError";
  }
  return "?";
}

// Whether `e` is of the expected type (out_of_range is a logic_error, OutOfMemoryError a runtime_error:
// the most specific type named in the row must match).
bool has_type(const std::exception& e, Expect expect) {
  switch (expect) {
    case Expect::invalid_argument: return dynamic_cast<const std::invalid_argument*>(&e) != nullptr;
    case Expect::out_of_range: return dynamic_cast<const std::out_of_range*>(&e) != nullptr;
    case Expect::length_error: return dynamic_cast<const std::length_error*>(&e) != nullptr;
    case Expect::out_of_memory: return dynamic_cast<const OutOfMemoryError*>(&e) != nullptr;
    case Expect::runtime_error:
      return dynamic_cast<const std::runtime_error*>(&e) != nullptr && !dynamic_cast<const OutOfMemoryError*>(&e);
    case Expect::logic_error:
      return dynamic_cast<const std::logic_error*>(&e) != nullptr && !dynamic_cast<const std::invalid_argument*>(&e) &&
             !dynamic_cast<const std::out_of_range*>(&e) && !dynamic_cast<const std::length_error*>(&e);
  }
  return false;
}

struct DeviceFigures {
  int64_t allocated, reserved, active, requested;
  bool operator==(const DeviceFigures&) const = default;
};

DeviceFigures figures() {
  const auto stats = caching_allocator(kSim).memory_stats();
  return {stats.at("allocated_bytes.all.current"), stats.at("reserved_bytes.all.current"),
          stats.at("active.all.current"), stats.at("requested_bytes.all.current")};
}

std::string text_of(std::function<void()> f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (auto area : {core_rows, scalar_rows, overlap_rows, autograd_rows, tool_rows, attention_rows}) {
    std::vector<Row> more = area();
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return rows;
}

}  // namespace

TEST_CASE("bad input: every row throws its type with a message naming the problem, and nothing changes") {
  fresh(kSim);
  int checked = 0;
  for (const Row& row : all_rows()) {
    const std::string what = row.what;
    CAPTURE(what);
    Fixture fixture;
    const std::vector<std::vector<double>> before_values = fixture.values();
    const DeviceFigures before = figures();
    bool threw = false;
    try {
      row.run(fixture);
    } catch (const std::exception& e) {
      threw = true;
      const std::string message = e.what();
      INFO("threw: " << message);
      CHECK_MESSAGE(has_type(e, row.expect), "expected " << std::string(expect_name(row.expect)));
      CHECK(std::string(e.what()).find(row.fragment) != std::string::npos);
    }
    CHECK_MESSAGE(threw, "nothing was thrown");
    CHECK(figures() == before);
    CHECK(fixture.values() == before_values);
    ++checked;
  }
  CHECK(checked >= 80);
  (void)text_of;
}
