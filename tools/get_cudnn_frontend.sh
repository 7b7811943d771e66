#!/usr/bin/env bash
# Puts NVIDIA's cuDNN C++ frontend (header-only; PyPI's nvidia-cudnn-frontend wheel carries its headers) under
# external/cudnn_frontend/include, where CMake looks for it (BYTEGRAD_CUDNN_FRONTEND_INCLUDE overrides). With
# it and cuDNN itself (libcudnn and cudnn.h, beside the CUDA toolkit or PyTorch's nvidia-cudnn package) the
# cuda device runs attention on cuDNN's fused kernels; without them, on bytegrad's own (docs/speed.md).
# The GPU machine reaches no registry: run this here and let the device tool carry external/cudnn_frontend.
set -euo pipefail
version=${1:-1.17.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/external/cudnn_frontend
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --timeout 15 --retries 1 --dest "$tmp" "nvidia-cudnn-frontend==$version"
rm -rf "$dest"
mkdir -p "$dest"
python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/"):
            z.extract(name, sys.argv[2])
PY
echo "$version" >"$dest/VERSION"
echo "cuDNN frontend $version headers in $dest/include"
