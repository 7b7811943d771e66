#!/usr/bin/env bash
# Fails when a library file includes a header from a layer above its own. The layers, bottom to top:
#   core <- memory <- kernels <- tensor <- autograd <- nn, optim <- programs
# A layer includes its own folder and the layers below; nn and optim are side by side (neither includes the
# other). Applications (tools/, bench/, tests/, examples/) may include anything. Run by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A rank=([core]=0 [memory]=1 [kernels]=2 [tensor]=3 [autograd]=4 [nn]=5 [optim]=5 [programs]=6)
violations=0
checked=0
for layer in "${!rank[@]}"; do
  [ -d "$layer" ] || continue
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    while IFS= read -r line; do
      target=$(sed -E 's/^#include "([a-z_]+)\/.*/\1/' <<<"$line")
      [ "$target" = "$layer" ] && continue
      if [ -z "${rank[$target]+x}" ]; then
        continue  # not a bytegrad layer (e.g. a third-party path)
      fi
      if [ "${rank[$target]}" -ge "${rank[$layer]}" ]; then
        echo "upward include: $file includes $target/ (layer $layer may include only layers below it)"
        violations=$((violations + 1))
      fi
    done < <(grep -E '^#include "[a-z_]+/' "$file" || true)
  done < <(find "$layer" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0)
done
echo "layer check: $checked files, $violations upward includes"
[ "$violations" -eq 0 ]
