#!/usr/bin/env bash
# What the memory ledger (the category book: memory_category.h, block_categories.h, MemoryRole) costs per
# training step: this commit against the same commit with the book switched off (bench/ledger_off.patch
# makes the allocator's category hooks and the roles return at once), bench_training's seed MLP step at
# n=256 on meta (the engine's own cost) and on cuda when a GPU is present, in alternating rounds
# (bench/compare_builds.sh); with valgrind, also instructions per step on meta, which noise does not move.
# Usage (from the repository root, after building into build/): bench/ledger_cost.sh OUT_DIR [ROUNDS]
set -uo pipefail
out=${1:?usage: bench/ledger_cost.sh OUT_DIR [ROUNDS]}
rounds=${2:-8}
base=.baseline-ledger-off
rm -rf "$base" && mkdir -p "$base" "$out"
git archive HEAD | tar -x -C "$base" && patch -s -p1 -d "$base" <bench/ledger_off.patch || exit 1
benches=("bench_training meta 256 20000")
command -v nvidia-smi >/dev/null 2>&1 && benches+=("bench_training cuda 256 2000")
bench/compare_builds.sh "$base" "$out" "$rounds" "${benches[@]}" >/dev/null
python3 - "$out/compare.log" <<'PY'
import re, statistics, sys
times = {}
which = None
for line in open(sys.argv[1]):
    m = re.match(r"=== round \d+ (\w+) bench_training (\w+)", line)
    if m:
        which = (m.group(1), m.group(2))
    elif which and (m := re.match(r"\s+256\s+([\d.]+)", line)):
        times.setdefault(which, []).append(float(m.group(1)))
for device in sorted({d for _, d in times}):
    off, on = times[("baseline", device)], times[("current", device)]
    print(f"{device}: ledger off {statistics.median(off):.1f} us, on {statistics.median(on):.1f} us "
          f"(medians of {len(on)} rounds), ratio {statistics.median(on) / statistics.median(off):.3f}")
PY
if command -v valgrind >/dev/null 2>&1; then
  per_step() {  # instructions of 1000 more steps, per step
    local a b
    a=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" meta 256 1000 2>&1 | awk '/Collected/ {print $4}')
    b=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" meta 256 2000 2>&1 | awk '/Collected/ {print $4}')
    echo $(((b - a) / 1000))
  }
  off=$(per_step "$base/build/bench/bench_training")
  on=$(per_step build/bench/bench_training)
  echo "meta instructions per step: ledger off $off, on $on (+$(((on - off) * 1000 / off / 10)).$(((on - off) * 1000 / off % 10))%)"
fi
