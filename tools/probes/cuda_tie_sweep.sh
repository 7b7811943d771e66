#!/usr/bin/env bash
# On the GPU machine: each recorded GPT-2 case (tests/data/pytorch_probes/gpt2/<dir>, both workspace
# settings) run on cuda in a process of its own, with best fit's ties broken by the placement model's
# addresses (BYTEGRAD_CUDA_TIE_ADDRESSES=model, the default) and by this process's driver addresses
# (=driver), against PyTorch's figures. Prints one line per case and mode, and the count of exact runs.
#   tools/probes/cuda_tie_sweep.sh [DIR...]      (default: sweep heldout)
set -uo pipefail
cd "$(dirname "$0")/../.."
dirs=("$@")
[ ${#dirs[@]} -eq 0 ] && dirs=(sweep heldout)
for dir in "${dirs[@]}"; do
  cases=$(ls tests/data/pytorch_probes/gpt2/$dir/x0 tests/data/pytorch_probes/gpt2/$dir/xd 2>/dev/null |
          grep '\.json$' | grep -v '\.requests\.json$' | sed 's/\.json$//' | sort -u)
  for mode in model driver; do
    exact=0; total=0
    for c in $cases; do
      out=$(BYTEGRAD_CUDA_TIE_ADDRESSES=$mode BYTEGRAD_GPT2_SWEEP=$dir BYTEGRAD_GPT2_SWEEP_CASE=$c \
            BYTEGRAD_GPT2_SWEEP_DEVICE=cuda build/tests/test_programs -tc='GPT-2 probe sweep*' 2>&1)
      line=$(echo "$out" | grep "exact at every mark")
      echo "$dir $mode $c: $line"
      echo "$out" | grep -E "^ *(x0|xd) " | grep -v " exact$" | sed 's/^/      /'
      exact=$((exact + ${line%% of*})); total=$((total + $(echo "$line" | sed 's/.* of \([0-9]*\).*/\1/')))
    done
    echo "== $dir ties by $mode: $exact of $total exact"
  done
done
