#!/usr/bin/env bash
# Before and after, in one run on one machine: builds the benchmarks of a baseline source tree (e.g. the
# commit before a refactor, unpacked with `git archive COMMIT | tar -x -C DIR`) beside this tree's build,
# then runs each benchmark from both builds in alternation (baseline, current, baseline, current, ...), so
# machine drift affects both alike. Usage (on the GPU machine, after this tree is built into build/):
#   bench/compare_builds.sh BASELINE_DIR OUT_DIR [ROUNDS] [BENCH...]
# (default: 2 rounds of bench_training bench_attention bench_cuda_kernels bench_replay). A BENCH may carry
# arguments in one quoted word: "bench_training meta 256 5000".
set -uo pipefail
baseline=$(cd "${1:?usage: bench/compare_builds.sh BASELINE_DIR OUT_DIR [ROUNDS] [BENCH...]}" && pwd)
out=${2:?usage: bench/compare_builds.sh BASELINE_DIR OUT_DIR [ROUNDS] [BENCH...]}
rounds=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
benches=("$@")
[ ${#benches[@]} -eq 0 ] && benches=(bench_training bench_attention bench_cuda_kernels bench_replay)
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
here=$(pwd)
(cd "$baseline" && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build -j "$(nproc)" --target $(for b in "${benches[@]}"; do echo "${b%% *}"; done | sort -u)) \
  >"$out/baseline_build.log" 2>&1 ||
  { tail -30 "$out/baseline_build.log"; exit 1; }
for round in $(seq "$rounds"); do
  for which in baseline current; do
    root=$([ "$which" = baseline ] && echo "$baseline" || echo "$here")
    for bench in "${benches[@]}"; do
      echo "=== round $round $which $bench"
      read -r -a words <<<"$bench"
      (cd "$root" && "$root/build/bench/${words[0]}" "${words[@]:1}")
    done
  done
done 2>&1 | tee "$out/compare.log"
