#!/usr/bin/env bash
# Fails when a library file includes a header from a layer above its own. The layers, bottom to top:
#   core <- memory <- reports, kernels <- tensor <- autograd <- nn, optim, data, testing <- distributed <- programs
# The library layers live in src/bytegrad/<layer>/ and are included as "bytegrad/<layer>/...". A layer
# includes its own folder and the layers below; layers of one rank are side by side (none includes another):
# reports (what prints, renders or exports memory's data) needs only memory, and testing and the programs
# use it, so it sits beside kernels; nn, optim and testing are side by side.
# distributed/ holds process groups and collectives (one file per backend: threads.cpp, fake.cpp, nccl.cpp, store_backend.cpp),
# above nn and optim because data- and model-parallel wrappers take modules and optimizers.
# The umbrella headers src/bytegrad/bytegrad.h and testing.h are not layers. Applications (programs/,
# tools/, bench/, tests/, examples/) may include anything. Run by ctest (entry `layers`).
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A rank=([core]=0 [memory]=1 [reports]=2 [kernels]=2 [tensor]=3 [autograd]=4 [nn]=5 [optim]=5 [data]=5 [testing]=5
                [distributed]=6 [programs]=7)
violations=0
checked=0
for layer in "${!rank[@]}"; do
  if [ "$layer" = programs ]; then dir=programs; else dir=src/bytegrad/$layer; fi
  [ -d "$dir" ] || continue
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    while IFS= read -r line; do
      target=$(sed -E 's/^#include "(bytegrad\/)?([a-z_]+)\/.*/\2/' <<<"$line")
      [ "$target" = "$layer" ] && continue
      if [ -z "${rank[$target]+x}" ]; then
        continue  # not a bytegrad layer (e.g. a third-party path)
      fi
      if [ "${rank[$target]}" -ge "${rank[$layer]}" ]; then
        echo "upward include: $file includes $target/ (layer $layer may include only layers below it)"
        violations=$((violations + 1))
      fi
    done < <(grep -E '^#include "(bytegrad/)?[a-z_]+/' "$file" || true)
  done < <(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0)
done
# Library files name bytegrad's headers by their full path ("bytegrad/tensor/ops.h"), never by a generic
# root ("tensor/ops.h") that could collide with a consumer's own headers.
while IFS= read -r hit; do
  echo "generic include root: $hit (write \"bytegrad/...\")"
  violations=$((violations + 1))
done < <(grep -rnE '^#include "[a-z_]+/' src --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' | grep -v '#include "bytegrad/' || true)
echo "layer check: $checked files, $violations upward includes or generic roots"
[ "$violations" -eq 0 ]
