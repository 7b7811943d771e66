set -x
for n in g_gpt2_tiny_bf16 g_gpt2_small_bf16 g_gpt2_small_bf16_sdpa g_gpt2_tiny_fp32; do
  CUBLAS_WORKSPACE_CONFIG=:0:0 python3 tools/probes/gpt2_op_events.py $OUT/ws0 $n 2>&1 | tail -3
  python3 tools/probes/gpt2_op_events.py $OUT/wsd $n 2>&1 | tail -3
done
CUBLAS_WORKSPACE_CONFIG=:0:0 python3 tools/probes/gpt2_op_events.py $OUT/ws0 sdpa 2>&1 | tail -3
python3 tools/probes/gpt2_op_events.py $OUT/wsd sdpa 2>&1 | tail -3
ls -la $OUT/*
