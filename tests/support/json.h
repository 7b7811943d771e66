// JSON in tests (recorded PyTorch data in tests/data, golden-style files, memory_viz exports): core/json.h's
// strict parser, failing the running test on malformed text; its accessors throw (failing the test) when a
// value is not of the kind asked for.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "bytegrad/core/json.h"

namespace bytegrad::testing {

using Json = json::Value;

inline Json parse_json(const std::string& text) {
  Json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  return doc;
}

}  // namespace bytegrad::testing
