#!/usr/bin/env bash
# Runs clang-tidy with the checks of .clang-tidy (every one an error) and fails on any finding.
#   tools/check_tidy.sh            every check over the library (src/) and the programs (programs/, tools/):
#                                  what CI runs (about 20 CPU-minutes)
#   tools/check_tidy.sh --fast     the same files without the static analyzer (clang-analyzer-*), which is
#                                  two thirds of the time
#   tools/check_tidy.sh [--fast] FILE...   only these .cpp files (they must be in the compile database)
#   tools/check_tidy.sh --all      every file, ignoring .ci/tidy-clean
# Without FILE arguments a file is skipped when .ci/tidy-clean holds its key: the hash of what clang-tidy
# reads for it (tools/tidy_cache.py: the preprocessed file with comments, flags, .clang-tidy, clang-tidy's
# version), recorded when a full run found it clean. A full run that finds nothing rewrites .ci/tidy-clean
# with every file's key: commit it, and CI checks only what changed since (a header change reaches every
# file that includes it).
# Installs Debian's clang-tidy (clang-tidy 14, with run-clang-tidy) when missing. The compile database
# comes from a CPU-only configure into build-tidy/ (BYTEGRAD_WITH_CUDA=OFF): clang cannot read the .cu files
# nor, without nvcc's headers, the cuda/*.cpp files beside them, so the CUDA kernels are not checked. Nothing
# is compiled. The tests, bench/ and examples/ are not checked: clang 14 rejects C++20 code GCC accepts in
# the tests (lambdas capturing structured bindings), and they would double the run.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-tidy >/dev/null 2>&1 || ! command -v run-clang-tidy >/dev/null 2>&1 ||
   ! command -v clang++ >/dev/null 2>&1; then
  echo "installing: clang-tidy clang (clang++ -E makes the keys of .ci/tidy-clean)"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends clang-tidy clang
fi

build_dir=build-tidy
# The library, programs/ and tools/ only (no tests, bench, examples: nor doctest needed); fmt and Eigen as
# tools/build.sh installs them.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBYTEGRAD_WITH_CUDA=OFF \
      -DBYTEGRAD_BUILD_TESTS=OFF -DBYTEGRAD_BUILD_BENCH=OFF -DBYTEGRAD_BUILD_EXAMPLES=OFF \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null

extra_args=()
fast=0
use_cache=1
if [ "${1:-}" = "--fast" ]; then
  shift
  fast=1
  extra_args+=(-checks=-clang-analyzer-*)
elif [ "${1:-}" = "--all" ]; then
  shift
  use_cache=0
fi
# run-clang-tidy takes regular expressions; anchor each file so that it names that file only.
anchor() { echo "^$(realpath "$1" | sed 's/[.[\*^$+?(){}|]/\\&/g')\$"; }
manifest=.ci/tidy-clean
patterns=()
if [ $# -gt 0 ]; then
  use_cache=0
  for file in "$@"; do patterns+=("$(anchor "$file")"); done
else
  keys=$(mktemp)
  trap 'rm -f "$keys"' EXIT
  python3 tools/tidy_cache.py keys "$build_dir" "^$PWD/(src|programs|tools)/" >"$keys"
  total=$(wc -l <"$keys")
  while read -r key file; do
    if [ "$use_cache" = 1 ] && [ -f "$manifest" ] && grep -q "^$key " "$manifest"; then continue; fi
    patterns+=("$(anchor "$file")")
  done <"$keys"
  echo "tidy: $((total - ${#patterns[@]})) of $total files as .ci/tidy-clean found them clean; checking ${#patterns[@]}"
fi
# run-clang-tidy prints each file's findings and exits non-zero when any file has one (WarningsAsErrors).
# Its per-file tallies ("N warnings generated", suppressed counts) are dropped.
noise='^[0-9]+ (warnings?|errors?)( and [0-9]+ errors?)? generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter'
status=0
if [ ${#patterns[@]} -gt 0 ]; then
  run-clang-tidy -p "$build_dir" -j "$(nproc)" -quiet "${extra_args[@]}" "${patterns[@]}" 2>&1 |
    { grep -vE "$noise" || true; } || status=$?
fi
if [ "$status" -ne 0 ]; then
  echo "clang-tidy found problems (above); see docs/testing.md, \"Formatting and lint\""
  exit 1
fi
echo "tidy: no findings"
if [ $# -eq 0 ] && [ "$fast" = 0 ]; then
  # Every file is now known clean: record each one's key (paths relative to the checkout, for reading).
  sed "s| $PWD/| |" "$keys" | sort -k2 >"$manifest"
  echo "tidy: wrote $manifest (commit it with the change it covers)"
fi
