// BYTEGRAD_ASAN: 1 in an AddressSanitizer build (gcc's __SANITIZE_ADDRESS__, clang's feature), with ASan's
// interface included (poisoning regions by hand: the sim device's free blocks).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define BYTEGRAD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BYTEGRAD_ASAN 1
#endif
#endif
#if BYTEGRAD_ASAN
#include <sanitizer/asan_interface.h>
#endif
