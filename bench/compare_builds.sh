#!/usr/bin/env bash
# Before and after, in one run on one machine: builds the benchmarks of a baseline source tree (e.g. the
# commit before a refactor, unpacked with `git archive COMMIT | tar -x -C DIR`) beside this tree's build,
# then runs each benchmark from both builds in alternation (baseline, current, baseline, current), so
# machine drift affects both alike. Usage: bench/compare_builds.sh BASELINE_DIR OUT_DIR
# (on the GPU machine, after this tree is built into build/).
set -uo pipefail
baseline=${1:?usage: bench/compare_builds.sh BASELINE_DIR OUT_DIR}
out=${2:?usage: bench/compare_builds.sh BASELINE_DIR OUT_DIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
here=$(pwd)
(cd "$baseline" && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build -j "$(nproc)" --target bench_training bench_attention bench_replay bench_cuda_kernels) \
  >"$out/baseline_build.log" 2>&1 || { tail -30 "$out/baseline_build.log"; exit 1; }
for round in 1 2; do
  for which in baseline current; do
    dir=$([ "$which" = baseline ] && echo "$baseline/build" || echo "$here/build")
    for bench in bench_training bench_attention bench_cuda_kernels; do
      echo "=== round $round $which $bench"
      "$dir/bench/$bench"
    done
    echo "=== round $round $which bench_replay"
    (cd "$([ "$which" = baseline ] && echo "$baseline" || echo "$here")" && "$dir/bench/bench_replay")
  done
done 2>&1 | tee "$out/compare.log"
