#!/usr/bin/env bash
# Builds bytegrad and runs every test. Tests labelled `gpu` skip (with a message) when no GPU is present.
#   ./test.sh              builds into build/ and runs every ctest entry (extra arguments go to ctest)
#   ./test.sh --sanitize   the CPU suites built with AddressSanitizer + UndefinedBehaviorSanitizer into
#                          build-sanitize/ (CUDA off; sim's cached bytes poisoned for ASan): every suite,
#                          about an hour on 2 cores
#   ./test.sh --sanitize --quick   only the library's own suites under the sanitizers (what CI runs): the
#                          allocator, tensor, autograd, optimizer, stream, fuzz, bad-input, ledger and
#                          thread suites, not those that run whole programs on sim (programs, nn,
#                          distributed_programs, distributed_fsdp, ...) nor the tools' tests
#   ./test.sh --thread-sanitize   the suites labelled `threads` (tests/threads, tests/distributed) built
#                          with ThreadSanitizer into build-tsan/ (CUDA off); any report fails it
set -euo pipefail
cd "$(dirname "$0")"
# ctest runs as many tests at once as there are processors (CI's 2 cores; tests needing the whole machine are
# RUN_SERIAL), unless CTEST_PARALLEL_LEVEL or a -j argument says otherwise.
export CTEST_PARALLEL_LEVEL="${CTEST_PARALLEL_LEVEL:-$(nproc)}"
# The quick set: its ctest names, and the test programs they run (the two lists name the same suites).
sanitize_quick_tests='^(memory|conformance|conformance_expandable|tensor|autograd|losses|optim|streams|fuzz_.*|bad_inputs|ledger|global_tensor_at_exit|threads|distributed)$'
sanitize_quick_targets="test_memory test_conformance test_tensor test_autograd test_losses test_optim test_streams test_fuzz test_bad_inputs test_ledger test_global_tensor_at_exit test_threads test_distributed"
quick_args=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export BYTEGRAD_BUILD_DIR=build-sanitize
  export BYTEGRAD_CMAKE_ARGS="-DBYTEGRAD_SANITIZE=ON -DBYTEGRAD_WITH_CUDA=OFF -DBYTEGRAD_NATIVE=OFF ${BYTEGRAD_CMAKE_ARGS:-}"
  if [ "${1:-}" = "--quick" ]; then
    shift
    export BYTEGRAD_BUILD_TARGETS="$sanitize_quick_targets"
    quick_args=(-R "$sanitize_quick_tests")
  fi
elif [ "${1:-}" = "--thread-sanitize" ]; then
  shift
  export BYTEGRAD_BUILD_DIR=build-tsan
  export BYTEGRAD_CMAKE_ARGS="-DBYTEGRAD_THREAD_SANITIZE=ON -DBYTEGRAD_WITH_CUDA=OFF -DBYTEGRAD_NATIVE=OFF ${BYTEGRAD_CMAKE_ARGS:-}"
  # Only the suites labelled threads are built and run: the rest is single-threaded, and building it all
  # under TSan costs CI's time. (The packages are those ./test.sh installs.)
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE="${BYTEGRAD_BUILD_TYPE:-Release}" $BYTEGRAD_CMAKE_ARGS >/dev/null
  cmake --build build-tsan -j "$(nproc)" --target test_threads test_distributed
  exec ctest --test-dir build-tsan --output-on-failure --no-tests=error -L '^threads$' "$@"
fi
tools/build.sh
# What the tests need beyond the build: Debian's chromium (the `html` entry renders the HTML memory report
# in it headless; fonts-dejavu-core so its screenshot has legible text). Installed when missing; without it
# that entry is skipped with a message.
if ! command -v chromium >/dev/null 2>&1 || ! dpkg -s fonts-dejavu-core >/dev/null 2>&1; then
  echo "installing: chromium fonts-dejavu-core (for the html test)"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  { $sudo_cmd apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; } ||
    echo "could not install chromium: the html test will be skipped"
fi
ctest --test-dir "${BYTEGRAD_BUILD_DIR:-build}" --output-on-failure --no-tests=error "${quick_args[@]}" "$@"
