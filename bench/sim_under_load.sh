#!/usr/bin/env bash
# The seed walkthrough on sim, on an idle machine and on one kept busy: prints each run's seconds, the
# medians and their ratio (issue 30 asks for at most 2x on a 2-core machine running another build).
# The load is this script's own: one busy-looping shell per processor (as a build at -j$(nproc) keeps every
# core taken), started before the busy run and ended right after it. Idle and busy runs alternate, so drift
# in whatever else the machine runs affects both alike.
#   bench/sim_under_load.sh [ROUNDS] [SPINNERS]        (defaults: 3 rounds, $(nproc) spinners)
# WALKTHROUGH=path picks another bytegrad-walkthrough (e.g. a baseline build's); SCENARIOS="name ..." runs
# those instead of all seed programs (e.g. seed000_torch_sum, the GEMM-bound one); TIMEOUT=seconds caps each
# run (default 600: a run cut off there is reported as such, and counted as that many seconds).
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
spinners=${2:-$(nproc)}
walkthrough=${WALKTHROUGH:-build/programs/bytegrad-walkthrough}
limit=${TIMEOUT:-600}
read -r -a scenarios <<<"${SCENARIOS:-all}"
[ -x "$walkthrough" ] || { echo "no $walkthrough: build it first (tools/build.sh)" >&2; exit 2; }

spinner_pids=()
stop_load() {
  for pid in "${spinner_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${spinner_pids[@]}"; do wait "$pid" 2>/dev/null; done
  spinner_pids=()
}
trap stop_load EXIT
start_load() {
  for _ in $(seq "$spinners"); do
    sh -c 'while :; do :; done' &
    spinner_pids+=($!)
  done
}

# Runs the walkthrough once; prints its seconds (wall clock). Fails the script if a mark differs.
run_once() {
  local start end status
  start=$(date +%s.%N)
  timeout "$limit" "$walkthrough" "${scenarios[@]}" --device sim >/dev/null 2>&1
  status=$?
  end=$(date +%s.%N)
  if [ "$status" -eq 124 ]; then
    echo "(cut off at ${limit} s)" >&2
    echo "$limit"
    return
  fi
  [ "$status" -eq 0 ] || { echo "the walkthrough failed (exit $status)" >&2; exit 1; }
  echo "$end - $start" | bc
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "walkthrough: $walkthrough ${scenarios[*]} on sim, $(nproc) processors, ${spinners} spinners for the busy runs, ${rounds} rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
idle_times=() busy_times=()
for round in $(seq "$rounds"); do
  idle=$(run_once)
  start_load
  busy=$(run_once)
  stop_load
  printf 'round %d: idle %.2f s, busy %.2f s\n' "$round" "$idle" "$busy"
  idle_times+=("$idle")
  busy_times+=("$busy")
done
idle_median=$(printf '%s\n' "${idle_times[@]}" | median)
busy_median=$(printf '%s\n' "${busy_times[@]}" | median)
printf 'median: idle %.2f s, busy %.2f s, busy/idle %.2f\n' "$idle_median" "$busy_median" \
  "$(echo "$busy_median / $idle_median" | bc -l)"
