#!/usr/bin/env bash
# Builds bytegrad as an outside project would use it, from a clean checkout's build directory:
#   1. `cmake --install` to a temporary prefix: the programs in bin/ run (the walkthrough with the goldens
#      installed in share/bytegrad), then examples/ and tests/consumer/ built against it with find_package,
#      and run;
#   2. tests/consumer/ with FetchContent (SOURCE_DIR = this checkout) and 3. with add_subdirectory:
#      configured (CMake checks there that every target the consumer links exists); with --full, the
#      FetchContent consumer is also built (the libraries compiled again, CPU only: minutes on 2 cores)
#      and run.
# Usage: tools/check_consumer.sh [--full] BUILD_DIR   (an already built bytegrad build directory). .ci/run
# runs it without --full: the same sources and CMake files were just built and tested in BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
if [ "${1:-}" = "--full" ]; then
  full=1
  shift
fi
build_dir="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(-G Ninja -Wno-dev)
command -v ccache >/dev/null && common+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

echo "== install to $work/prefix"
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/bytegrad/bytegrad.h"
test -f "$work/prefix/lib/cmake/bytegrad/bytegradConfig.cmake" || test -f "$work/prefix/lib64/cmake/bytegrad/bytegradConfig.cmake"

echo "== the installed programs: bytegrad-estimate, bytegrad-walkthrough (with its goldens), bytegrad-replay"
bin="$work/prefix/bin"
"$bin/bytegrad-estimate" --help | grep -- "--card SIZE|NAME" >/dev/null  # not -q: an early exit SIGPIPEs the writer under pipefail
"$bin/bytegrad-estimate" mlp --batch 4 --card 24GB | grep -x "fits yes"
test -f "$work/prefix/share/bytegrad/golden/scenarios/seed001_mlp_estimate.json"
"$bin/bytegrad-walkthrough" seed001_mlp_estimate --device meta | grep "marks equal PyTorch's"
"$bin/bytegrad-replay" shared/golden/traces/w_mlp_adam.trace --check shared/golden/traces/w_mlp_adam.golden | grep "^OK: "
test -x "$bin/bytegrad-launch"

echo "== examples/ with find_package"
cmake -S examples -B "$work/examples" "${common[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/examples" >/dev/null
"$work/examples/training_loop" meta | tail -2
"$work/examples/inplace_and_no_grad" meta
"$work/examples/memory_test"

echo "== tests/consumer with find_package"
cmake -S tests/consumer -B "$work/find_package" "${common[@]}" -DHOW=find_package -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/find_package" >/dev/null
ctest --test-dir "$work/find_package" --output-on-failure --no-tests=error | grep "tests passed"

echo "== tests/consumer with FetchContent (CUDA off to save time; built and run with --full)"
cmake -S tests/consumer -B "$work/fetchcontent" "${common[@]}" -DHOW=fetchcontent -DBYTEGRAD_SOURCE="$PWD" \
      -DBYTEGRAD_WITH_CUDA=OFF >/dev/null
if [ "$full" = 1 ]; then
  cmake --build "$work/fetchcontent" >/dev/null
  ctest --test-dir "$work/fetchcontent" --output-on-failure --no-tests=error | grep "tests passed"
fi

echo "== tests/consumer with add_subdirectory (configure)"
cmake -S tests/consumer -B "$work/subdirectory" "${common[@]}" -DHOW=add_subdirectory -DBYTEGRAD_SOURCE="$PWD" \
      -DBYTEGRAD_WITH_CUDA=OFF >/dev/null
echo "consumer checks passed"
