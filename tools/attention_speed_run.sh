#!/usr/bin/env bash
# One device call for the attention speed work: build, the attention tests, bench_sdpa (first kernels, current,
# current with 3 dk/dv blocks per SM) beside PyTorch's, the bf16 + SDPA GPT-2 step both ways beside PyTorch's,
# then (PHASES) profiles. Logs under $OUT.   tools/attention_speed_run.sh [PHASES: build,test,fulltest,sdpa,step,prof,ncu]
set -uo pipefail
phases=${1:-build,test,sdpa,step,prof,ncu}
log=$OUT/main.log
has() { [[ ",$phases," == *",$1,"* ]]; }
say() { echo "== $* ($(date +%T))" | tee -a "$log"; }
if has build; then
  say build
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1
  targets="test_cuda bench_sdpa bench_gpt2"
  has fulltest && targets="$targets bytegrad-walkthrough"
  if ! cmake --build build -j16 --target $targets >>"$OUT/build.log" 2>&1; then grep -B5 -A20 "error" "$OUT/build.log" | head -80; exit 1; fi
fi
if has test; then
  say attention tests
  timeout 240 ./build/tests/test_cuda -tc="*attention*" >"$OUT/test.log" 2>&1; echo "test_cuda attention rc $?" | tee -a "$log"
  tail -4 "$OUT/test.log" | tee -a "$log"
fi
if has variants; then
  say bench_sdpa forward variants
  for v in 0 1 2 3; do echo "-- forward variant $v"; BYTEGRAD_ATTENTION_FWD_VARIANT=$v timeout 60 ./build/bench/bench_sdpa 20 2>&1 | grep "x64  bf"; done | tee -a "$log"
  echo "-- backward with 2 blocks"; BYTEGRAD_ATTENTION_BWD_BLOCKS=2 timeout 60 ./build/bench/bench_sdpa 20 2>&1 | grep "x64  bf" | tee -a "$log"
  timeout 90 python3 bench/pytorch_sdpa.py 20 2>&1 | grep "x64  bf" | tee -a "$log"
fi
if has stepnow; then
  say gpt2 bf16_sdpa step, current beside PyTorch
  { timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa
    timeout 120 python3 bench/pytorch_gpt2_step.py 10 bf16_sdpa
    ${STEP_ENV:-} timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa; } 2>&1 | tee -a "$log"
fi
if has profnow; then
  say profile
  BYTEGRAD_PROFILE_KERNELS=1 timeout 90 ./build/bench/bench_gpt2 cuda 5 bf16_sdpa >"$OUT/prof_bytegrad.log" 2>&1
fi
if has unittests; then
  say test_cuda, all cases
  timeout ${UNIT_TIMEOUT:-150} ./build/tests/test_cuda >"$OUT/test_all.log" 2>&1; echo "test_cuda rc $?" | tee -a "$log"
  grep -B3 -A12 "ERROR\|FAILED" "$OUT/test_all.log" | head -60 | tee -a "$log"; tail -4 "$OUT/test_all.log" | tee -a "$log"
fi
if has final; then
  say bench_sdpa, final
  { echo "-- first kernels"; BYTEGRAD_ATTENTION_FIRST_KERNELS=1 timeout 60 ./build/bench/bench_sdpa 20
    echo "-- current"; timeout 60 ./build/bench/bench_sdpa 20
    timeout 90 python3 bench/pytorch_sdpa.py 20
    echo "-- current again"; timeout 60 ./build/bench/bench_sdpa 20
  } 2>&1 | grep -v "fp32\|float32" | tee -a "$log"
  say gpt2 bf16_sdpa step, final
  { echo "-- first kernels"; BYTEGRAD_ATTENTION_FIRST_KERNELS=1 timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa
    echo "-- current"; timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa
    timeout 120 python3 bench/pytorch_gpt2_step.py 10 bf16_sdpa
    echo "-- current again"; timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa
  } 2>&1 | tee -a "$log"
fi
if has sdpa; then
  say bench_sdpa
  { echo "-- first kernels"; BYTEGRAD_ATTENTION_FIRST_KERNELS=1 timeout 60 ./build/bench/bench_sdpa 20
    echo "-- current"; timeout 60 ./build/bench/bench_sdpa 20
    timeout 90 python3 bench/pytorch_sdpa.py 20
    echo "-- current again"; timeout 60 ./build/bench/bench_sdpa 20; } 2>&1 | grep -v "fp32\|float32" | tee -a "$log"
fi
if has step; then
  say gpt2 bf16_sdpa step
  { echo "-- first kernels"; BYTEGRAD_ATTENTION_FIRST_KERNELS=1 timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa
    echo "-- current"; timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa
    timeout 120 python3 bench/pytorch_gpt2_step.py 10 bf16_sdpa
    echo "-- current again"; ${STEP_ENV:-} timeout 90 ./build/bench/bench_gpt2 cuda 10 bf16_sdpa; } 2>&1 | tee -a "$log"
fi
if has prof; then
  say profiles
  BYTEGRAD_PROFILE_KERNELS=1 timeout 90 ./build/bench/bench_gpt2 cuda 5 bf16_sdpa >"$OUT/prof_bytegrad.log" 2>&1
  timeout 120 python3 bench/pytorch_gpt2_profile.py 5 bf16_sdpa 8x1024 >"$OUT/prof_pytorch.log" 2>&1
fi
if has ncu; then
  say ncu
  export PATH=/usr/local/cuda/bin:$PATH
  {
  # bench_sdpa 5: per shape 8 forward launches then 8 forward+backward; the 8x12x1024x64 bf16 shape is the second
  for k in flash_forward2_kernel flash_backward_dkdv2_kernel; do
    skip=16; [[ $k == *dkdv* ]] && skip=8
    timeout 90 ncu --set full -k regex:"$k" --launch-skip $skip --launch-count 1 ./build/bench/bench_sdpa 5 2>&1 | grep -v "^==PROF==\|^ *bf16\|^ *float" | grep -v "^\s*$"
  done
  for k in "flash_forward_kernel" "flash_backward_dkdv_kernel"; do
    skip=16; [[ $k == *dkdv* ]] && skip=8
    BYTEGRAD_ATTENTION_FIRST_KERNELS=1 timeout 60 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats -k regex:"$k" --launch-skip $skip --launch-count 1 ./build/bench/bench_sdpa 5 2>&1 | grep -v "^==PROF==" | grep -v "^\s*$"
  done
  } >"$OUT/ncu.log" 2>&1
fi
if has fulltest; then
  say ctest -L gpu
  (cd build && timeout ${CTEST_TIMEOUT:-400} ctest -L gpu ${CTEST_ARGS:-} --output-on-failure) >"$OUT/ctest.log" 2>&1; echo "ctest rc $?" | tee -a "$log"
  grep -E "tests passed|Failed|\*\*\*|Test +#" "$OUT/ctest.log" | tail -60 | tee -a "$log"
fi
say done
