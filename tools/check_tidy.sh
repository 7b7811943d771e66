#!/usr/bin/env bash
# Runs clang-tidy with the checks of .clang-tidy (every one an error) and fails on any finding.
#   tools/check_tidy.sh            every check over the library (src/) and the programs (programs/, tools/):
#                                  what CI runs (about 20 CPU-minutes)
#   tools/check_tidy.sh --fast     the same files without the static analyzer (clang-analyzer-*), which is
#                                  two thirds of the time
#   tools/check_tidy.sh [--fast] FILE...   only these .cpp files (they must be in the compile database)
# Installs Debian's clang-tidy (clang-tidy 14, with run-clang-tidy) when missing. The compile database
# comes from a CPU-only configure into build-tidy/ (BYTEGRAD_WITH_CUDA=OFF): clang cannot read the .cu files
# nor, without nvcc's headers, the cuda/*.cpp files beside them, so the CUDA kernels are not checked. Nothing
# is compiled. The tests, bench/ and examples/ are not checked: clang 14 rejects C++20 code GCC accepts in
# the tests (lambdas capturing structured bindings), and they would double the run.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-tidy >/dev/null 2>&1 || ! command -v run-clang-tidy >/dev/null 2>&1; then
  echo "installing: clang-tidy"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends clang-tidy
fi

build_dir=build-tidy
# The library, programs/ and tools/ only (no tests, bench, examples: nor doctest needed); fmt and Eigen as
# tools/build.sh installs them.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBYTEGRAD_WITH_CUDA=OFF \
      -DBYTEGRAD_BUILD_TESTS=OFF -DBYTEGRAD_BUILD_BENCH=OFF -DBYTEGRAD_BUILD_EXAMPLES=OFF \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null

extra_args=()
if [ "${1:-}" = "--fast" ]; then
  shift
  extra_args+=(-checks=-clang-analyzer-*)
fi
if [ $# -gt 0 ]; then
  # run-clang-tidy takes regular expressions; anchor each file so that it names that file only.
  patterns=()
  for file in "$@"; do patterns+=("^$(realpath "$file" | sed 's/[.[\*^$+?(){}|]/\\&/g')\$"); done
else
  patterns=("^$PWD/(src|programs|tools)/")
fi
# run-clang-tidy prints each file's findings and exits non-zero when any file has one (WarningsAsErrors).
# Its per-file tallies ("N warnings generated", suppressed counts) are dropped.
noise='^[0-9]+ (warnings?|errors?)( and [0-9]+ errors?)? generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter'
status=0
run-clang-tidy -p "$build_dir" -j "$(nproc)" -quiet "${extra_args[@]}" "${patterns[@]}" 2>&1 | { grep -vE "$noise" || true; } || status=$?
if [ "$status" -ne 0 ]; then
  echo "clang-tidy found problems (above); see docs/testing.md, \"Formatting and lint\""
  exit 1
fi
echo "tidy: no findings"
