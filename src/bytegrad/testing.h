// Test helpers for exact memory assertions:
//   bytegrad::testing::FreshDevice fresh(bytegrad::kSim);   // an empty allocator for this scope
//   bytegrad::testing::MemoryProbe probe(bytegrad::kSim);   // deltas from here on
//   ...
//   CHECK(probe.allocated_delta_is(4096));                  // on failure: expected, actual, ops that differ
// Link bytegrad::testing. No test framework is assumed: the checks are values that convert to bool and
// print themselves, which doctest, Catch2 and GoogleTest all show on failure.
#pragma once

#include "bytegrad/testing/fresh_device.h"
#include "bytegrad/testing/memory_probe.h"
#include "bytegrad/testing/stream_work.h"
#include "bytegrad/testing/timed_marks.h"
