#!/usr/bin/env bash
# Everything that needs the GPU machine (the device tool's budget favours few, full calls). The CPU
# suites run in CI; here: the build, the gpu-labelled ctest entries (the cuda suite; each golden program
# on cuda in its own process, with both cuBLAS workspace settings), compute-sanitizer memcheck on the
# cuda suite's kernel tests, and the benchmarks with PyTorch's same steps as their baseline.
# Usage (on the GPU machine, from the repository root): tools/gpu_checks.sh OUTDIR STEP...
#   STEP: build | probe_streams | tests | sanitize | bench | bench_speed | bench_ddp | bench_fsdp
#   bench_speed: issue 30's table, GPT-2 small in every mode beside PyTorch eager and torch.compile
#   (bench/pytorch_compile_step.py) in one run, written by bench/speed_table.py to OUTDIR/bench_speed_table.md.
#   (e.g. tools/gpu_checks.sh out build tests bench)
#   bench_ddp: GPT-2 small under DDP on 2 GPUs and, where the machine has 4 or more, on 4, bytegrad
#   (bytegrad-launch) beside PyTorch (torchrun), bf16 + SDPA at 8 x 1024 and fp32 at 4 x 256 tokens per GPU.
#   bench_fsdp: the same for GPT-2 small under FSDP2 (bench_fsdp_gpt2, pytorch_fsdp_step.py), and a table of
#   both (tools/fsdp_bench_summary.py) in OUTDIR/bench_fsdp_summary.md. NCCL_NVLS_ENABLE=0 in every launch.
#   probe_streams records PyTorch's side-stream programs (tools/probes/stream_probe.py) into
#   OUTDIR/streams_h100.jsonl, the recording tests/data/pytorch_probes/streams_h100.jsonl is copied from.
# Logs: OUTDIR/{build,probe_streams,tests,training,sanitizer,bench,bench_speed,bench_ddp,bench_fsdp}.log
set -uo pipefail
out=${1:?usage: tools/gpu_checks.sh OUTDIR build|tests|sanitize|bench...}
shift
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
status=0
# The rank counts the distributed benchmarks run at: 2, and 4 where the machine has 4 GPUs or more.
rank_counts() {  # 2, and 4 where the machine has them; BYTEGRAD_RANK_COUNTS="4" picks others
  local gpus
  if [ -n "${BYTEGRAD_RANK_COUNTS:-}" ]; then tr ' ' '\n' <<<"$BYTEGRAD_RANK_COUNTS"; return; fi
  gpus=$(nvidia-smi -L | wc -l)
  if [ "$gpus" -lt 2 ]; then echo "fewer than 2 GPUs: no distributed benchmark" >&2; return; fi
  echo 2
  if [ "$gpus" -ge 4 ]; then echo 4; fi
}
# bytegrad (bench/bench_KIND_gpt2 under bytegrad-launch) beside PyTorch (bench/pytorch_KIND_step.py) at every
# rank count, bf16 + SDPA at 8 x 1024 and fp32 at 4 x 256 tokens per GPU; KIND is ddp or fsdp.
bench_distributed() {
  local kind=$1 limit=$2 n args
  export NCCL_NVLS_ENABLE=0
  for n in $(rank_counts); do
    for args in "20 bf16_sdpa 8 1024" "20 fp32 4 256"; do
      # shellcheck disable=SC2086
      timeout "$limit" ./build/tools/bytegrad-launch --nproc-per-node "$n" "./build/bench/bench_${kind}_gpt2" $args
      # shellcheck disable=SC2086
      timeout "$limit" python3 "bench/pytorch_${kind}_step.py" "$n" $args 2>&1 | grep -v -e "^W" -e Warning -e "^ *return"
    done
  done
}
for step in "$@"; do
  case $step in
    build)
      { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j "$(nproc)"; } \
        >"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
      # Whether attention runs on cuDNN (external/cudnn_frontend carried here: tools/get_cudnn_frontend.sh).
      grep "cuDNN attention" "$out/build.log" | tee -a "$out/gpu.txt" ;;
    probe_streams)
      python3 tools/probes/stream_probe.py "$out/streams_h100.jsonl" --repeat 2 >"$out/probe_streams.log" 2>&1 || status=1
      tail -3 "$out/probe_streams.log" ;;
    tests)
      (cd build && ctest --output-on-failure -L gpu -j 2) >"$out/tests.log" 2>&1 || status=1
      ./build/tests/test_cuda -tc="*regression*" -s 2>&1 | grep -E "MESSAGE" >"$out/training.log"
      tail -25 "$out/tests.log"; cat "$out/training.log" ;;
    sanitize)
      # memcheck on the kernel tests (the programs on cuda are too slow under it)
      compute-sanitizer --tool memcheck --error-exitcode 3 ./build/tests/test_cuda -tce="*seed*,*regression*" \
        >"$out/sanitizer.log" 2>&1 || status=1
      tail -5 "$out/sanitizer.log" ;;
    bench)
      { ./build/bench/bench_training; ./build/bench/bench_attention; python3 bench/pytorch_training_steps.py;
        for mode in fp32 bf16 bf16_sdpa; do ./build/bench/bench_gpt2 cuda 20 $mode; python3 bench/pytorch_gpt2_step.py 20 $mode; done
        ./build/bench/bench_sdpa; python3 bench/pytorch_sdpa.py; } \
        >"$out/bench.log" 2>&1 || status=1
      cat "$out/bench.log" ;;
    bench_speed)
      # issue 30's table: bytegrad beside PyTorch eager and torch.compile, every mode at both shapes, one run
      rm -f "$out/bench_speed_pytorch.json"
      { for mode in fp32 bf16 bf16_sdpa; do ./build/bench/bench_gpt2 cuda 20 $mode; done
        python3 bench/pytorch_compile_step.py --json "$out/bench_speed_pytorch.json"; } >"$out/bench_speed.log" 2>&1 || status=1
      python3 bench/speed_table.py "$out/bench_speed.log" "$out/bench_speed_pytorch.json" \
        "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" >"$out/bench_speed_table.md" || status=1
      cat "$out/bench_speed_table.md" ;;
    bench_ddp)
      bench_distributed ddp 180 >"$out/bench_ddp.log" 2>&1 || status=1
      cat "$out/bench_ddp.log" ;;
    bench_fsdp)
      bench_distributed fsdp 300 >"$out/bench_fsdp.log" 2>&1 || status=1
      python3 tools/fsdp_bench_summary.py "$out/bench_fsdp.log" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
        >"$out/bench_fsdp_summary.md" || status=1
      cat "$out/bench_fsdp.log" "$out/bench_fsdp_summary.md" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
exit $status
