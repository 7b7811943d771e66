// In an AddressSanitizer build, sim's memory tells ASan which bytes belong to live blocks
// (RawMemory::mark_in_use): a tensor's requested bytes are addressable; the rest of its block, cached
// blocks and unused segment space are poisoned, so a write into a neighbour is reported. Without ASan
// there is nothing to observe and the case says so.
#include <doctest/doctest.h>

#include "helpers.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define BYTEGRAD_TEST_ASAN 1
#endif

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("sim memory: only live blocks' requested bytes are addressable to AddressSanitizer") {
#ifndef BYTEGRAD_TEST_ASAN
  MESSAGE("not an AddressSanitizer build (BYTEGRAD_SANITIZE=ON): poisoning is not observable");
#else
  auto allocator = make_allocator();
  char* a = static_cast<char*>(allocator->malloc(1000));  // a 1024-byte block (512-byte rounding)
  char* b = static_cast<char*>(allocator->malloc(1000));  // carved right after it
  REQUIRE(b == a + 1024);
  CHECK_FALSE(__asan_address_is_poisoned(a));
  CHECK_FALSE(__asan_address_is_poisoned(a + 999));
  CHECK(__asan_address_is_poisoned(a + 1000));  // past the request, inside the block
  CHECK(__asan_address_is_poisoned(a + 1023));
  CHECK_FALSE(__asan_address_is_poisoned(b));
  CHECK(__asan_address_is_poisoned(b + 1024));  // the segment's unused tail
  allocator->free(a);
  CHECK(__asan_address_is_poisoned(a));  // cached, not live
  CHECK_FALSE(__asan_address_is_poisoned(b + 999));
  char* c = static_cast<char*>(allocator->malloc(512));  // reuses a's cached block
  CHECK(c == a);
  CHECK_FALSE(__asan_address_is_poisoned(c + 511));
  CHECK(__asan_address_is_poisoned(c + 512));
  allocator->free(b);
  allocator->free(c);
  allocator->empty_cache();  // the segment goes back; its shadow is clean again
  CHECK_FALSE(__asan_address_is_poisoned(a));
#endif
}
