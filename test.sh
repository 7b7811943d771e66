#!/usr/bin/env bash
# Builds bytegrad and runs every test. Tests labelled `gpu` skip (with a message) when no GPU is present.
#   ./test.sh              builds into build/ and runs every ctest entry (extra arguments go to ctest)
#   ./test.sh --sanitize   the CPU suites built with AddressSanitizer + UndefinedBehaviorSanitizer into
#                          build-sanitize/ (CUDA off; sim's cached bytes poisoned for ASan)
set -euo pipefail
cd "$(dirname "$0")"
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export BYTEGRAD_BUILD_DIR=build-sanitize
  export BYTEGRAD_CMAKE_ARGS="-DBYTEGRAD_SANITIZE=ON -DBYTEGRAD_WITH_CUDA=OFF -DBYTEGRAD_NATIVE=OFF ${BYTEGRAD_CMAKE_ARGS:-}"
fi
tools/build.sh
ctest --test-dir "${BYTEGRAD_BUILD_DIR:-build}" --output-on-failure --no-tests=error "$@"
