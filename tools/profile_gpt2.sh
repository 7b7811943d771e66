#!/usr/bin/env bash
# Where the GPT-2 small fp32 training step's GPU time goes, bytegrad beside PyTorch: each run under Nsight
# Systems, then its CUDA kernel summary (total time per kernel name). On the GPU machine, from the
# repository root, after building bench_gpt2:  tools/profile_gpt2.sh OUTDIR
set -uo pipefail
out=${1:?usage: tools/profile_gpt2.sh OUTDIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
nsys profile -o "$out/bytegrad" --force-overwrite true ./build/bench/bench_gpt2 cuda 5 >"$out/bytegrad_run.log" 2>&1
nsys profile -o "$out/pytorch" --force-overwrite true python3 bench/pytorch_gpt2_step.py 5 >"$out/pytorch_run.log" 2>&1
for who in bytegrad pytorch; do
  nsys stats --report cuda_gpu_kern_sum --format csv "$out/$who.nsys-rep" >"$out/${who}_kernels.csv" 2>/dev/null
  rm -f "$out/$who.nsys-rep" "$out/$who.sqlite"
done
