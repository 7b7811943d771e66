#!/usr/bin/env bash
# Installs what the build needs (Debian packages) when missing, then configures and builds into build/.
# CUDA code is built when nvcc is on PATH (or in /usr/local/cuda/bin); a GPU is not needed to build.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for package in cmake ninja-build g++ libeigen3-dev doctest-dev libfmt-dev; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# cuDNN's C++ frontend (header-only, from PyPI) lets the cuda device run attention on cuDNN's kernels
# (docs/speed.md): fetched once where CUDA and a GPU are present; without it (no network, say) attention runs
# on bytegrad's own kernels.
if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
  [ ! -f external/cudnn_frontend/include/cudnn_frontend.h ]; then
  tools/get_cudnn_frontend.sh || echo "could not fetch cuDNN's frontend: attention runs on bytegrad's own kernels"
fi

build_dir="${BYTEGRAD_BUILD_DIR:-build}"
# The CPU GEMM for this machine's processor (-march=native): several times faster on sim; these binaries
# stay on this machine. BYTEGRAD_CMAKE_ARGS come last and win (./test.sh --sanitize turns it off).
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BYTEGRAD_BUILD_TYPE:-Release}" -DBYTEGRAD_NATIVE=ON \
      ${BYTEGRAD_CMAKE_ARGS:-} >/dev/null
# BYTEGRAD_BUILD_TARGETS (space-separated) builds only those targets (./test.sh --sanitize --quick).
read -r -a targets <<<"${BYTEGRAD_BUILD_TARGETS:-}"
cmake --build "$build_dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
