#!/usr/bin/env bash
# Everything that needs the GPU machine, in one go (the device tool's budget favours few, full calls):
# build, the GPU test suite, compute-sanitizer on the GPU suite, the walkthrough on cuda with both cuBLAS
# workspace settings, the benchmarks and PyTorch's same steps as their baseline.
# The CPU suites run in CI; here only the gpu-labelled ctest entries (the cuda suite and the walkthrough on
# cuda with both workspace settings).
# Usage (on the GPU machine, from the repository root): tools/gpu_checks.sh OUTDIR [sanitize]
# Logs: OUTDIR/{build,tests,training,sanitizer,bench}.log
set -uo pipefail
out=${1:?usage: tools/gpu_checks.sh OUTDIR [sanitize]}
sanitize=${2:-}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
status=0
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j "$(nproc)"; } >"$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
(cd build && ctest --output-on-failure -L gpu) >"$out/tests.log" 2>&1 || status=1
./build/tests/test_cuda -s -d 2>&1 | grep -E "MESSAGE|loss|TEST CASE|sec" >"$out/training.log"
if [ "$sanitize" = sanitize ]; then
  # memcheck on the kernel tests (the golden programs on cuda are too slow under it)
  compute-sanitizer --tool memcheck --error-exitcode 3 ./build/tests/test_cuda -tce="*golden*,*seed*,*regression*" \
    >"$out/sanitizer.log" 2>&1 || status=1
fi
{
  ./build/bench/bench_training
  ./build/bench/bench_attention
  python3 bench/pytorch_training_steps.py
} >"$out/bench.log" 2>&1 || status=1
tail -12 "$out/tests.log"
cat "$out/training.log" "$out/bench.log"
exit $status
