#!/usr/bin/env bash
# On a machine with a GPU and PyTorch: records random workloads through PyTorch's real caching allocator
# under several PYTORCH_CUDA_ALLOC_CONF settings and replays each through bytegrad's allocator with the
# same BYTEGRAD_ALLOC_CONF, comparing every event and the final memory_summary().
# Usage: tools/device_allocator_crosscheck.sh BUILD_DIR OUTDIR [CONFIG...]   (default: the five below;
# e.g. "expandable_segments:True,max_split_size_mb:64" to probe a combination)
set -uo pipefail
build=$1
out=$2
shift 2
mkdir -p "$out"
default_configs=(
  ""
  "max_split_size_mb:64"
  "max_split_size_mb:20,max_non_split_rounding_mb:40"
  "roundup_power2_divisions:4"
  "roundup_power2_divisions:[256:1,512:2,>:8]"
)
if [ $# -gt 0 ]; then configs=("$@"); else configs=("${default_configs[@]}"); fi
status=0
i=0
for conf in "${configs[@]}"; do
  for seed in 1 2; do
    name="random_c${i}_s${seed}"
    python3 "$(dirname "$0")/pytorch_random_trace.py" "$out" "$name" "$seed" 3000 "$conf" || { status=1; continue; }
    echo "== $name  conf='$conf'"
    BYTEGRAD_ALLOC_CONF="$conf" "$build/tools/bytegrad-replay" "$out/$name.trace" --check "$out/$name.golden" \
      --check-summary "$out/$name.summary" || status=1
  done
  i=$((i + 1))
done
exit $status
