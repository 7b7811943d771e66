"""Allocator events of scaled_dot_product_attention where PyTorch 2.11 on the H100 runs its MEMORY-EFFICIENT
backend: 16-bit q/k/v with head dims above 256 (cuDNN and flash refuse them), causal calls with one key and
several queries (cuDNN refuses Sk == 1, flash refuses causal Sq != Sk), and float32 at head dims above 64
(the backward kernel's block sizes there were an assumption), forward and backward, for bytegrad's
memory-efficient rules (src/bytegrad/tensor/ops_attention.cpp) and their replay tests (tests/nn/sdpa_flash.cpp).

  python3 sdpa_efficient_probe.py OUTDIR

Writes OUTDIR/efficient.events in sdpa_flash_probe.py's format (each case `tagged` under the op-naming
dispatch mode and `plain` without it; `# case ...` header with torch._fused_sdp_choice, `# mark` lines,
`# strides` lines) and OUTDIR/env.txt.
"""
import os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_flash_probe import Recorder, env, run_case  # noqa: E402

bf, fp, f32 = torch.bfloat16, torch.float16, torch.float32
# name, B, H, Sq, Sk, D, dtype, causal, layout, grad, nograd_mode
CASES = [
    # 16-bit, head dims above 256: the backward's 128x64 k65536 kernel (dK/dV accumulated in float32 in the
    # workspace, key splits), the forward's 32x128 gmem kernel (a float32 output accumulator)
    ("split_d320_bf16_causal", 2, 2, 50, 50, 320, bf, True, "split", True, False),
    ("split_d384_fp16_causal_t256", 1, 2, 256, 256, 384, fp, True, "split", True, False),
    ("contig_d264_bf16_q37k90", 2, 2, 37, 90, 264, bf, False, "contig", True, False),
    ("contig_d512_fp16_t200", 1, 1, 200, 200, 512, fp, False, "contig", True, False),
    ("split_d384_bf16_causal_b8h2t128", 8, 2, 128, 128, 384, bf, True, "split", True, False),
    ("contig_d320_bf16_b64h4_t64", 64, 4, 64, 64, 320, bf, False, "contig", True, False),
    ("contig_d288_bf16_q300k700", 1, 1, 300, 700, 288, bf, False, "contig", True, False),
    ("contig_d272_fp16_b20h12_t200", 20, 12, 200, 200, 272, fp, False, "contig", True, False),
    ("nograd_contig_d320_bf16_q37k90", 2, 2, 37, 90, 320, bf, False, "contig", False, False),
    ("nogradmode_split_d320_bf16_causal", 2, 2, 50, 50, 320, bf, True, "split", True, True),
    # causal with one key and several queries
    ("contig_d64_bf16_causal_q16k1", 2, 2, 16, 1, 64, bf, True, "contig", True, False),
    ("contig_d32_bf16_causal_q16k1", 2, 2, 16, 1, 32, bf, True, "contig", True, False),
    ("contig_d96_fp16_causal_q40k1", 1, 3, 40, 1, 96, fp, True, "contig", True, False),
    ("contig_d128_fp16_causal_q40k1", 1, 3, 40, 1, 128, fp, True, "contig", True, False),
    ("contig_d160_bf16_causal_q70k1", 2, 2, 70, 1, 160, bf, True, "contig", True, False),
    ("contig_d256_bf16_causal_q33k1", 1, 2, 33, 1, 256, bf, True, "contig", True, False),
    ("nograd_contig_d160_bf16_causal_q70k1", 2, 2, 70, 1, 160, bf, True, "contig", False, False),
    # float32 above head dim 64
    ("contig_d128_f32_t100", 1, 2, 100, 100, 128, f32, False, "contig", True, False),
    ("split_d96_f32_causal_t77", 2, 2, 77, 77, 96, f32, True, "split", True, False),
    ("contig_d160_f32_q37k50", 2, 1, 37, 50, 160, f32, False, "contig", True, False),
    ("contig_d256_f32_causal_t64", 1, 2, 64, 64, 256, f32, True, "contig", True, False),
    ("contig_d320_f32_q40k70", 1, 2, 40, 70, 320, f32, False, "contig", True, False),
]

if __name__ == "__main__":
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    env(os.path.join(outdir, "env.txt"))
    torch.cuda.empty_cache()
    rec = Recorder()
    for case in CASES:
        for tagged in (True, False):
            try:
                run_case(rec, case, tagged)
            except Exception as e:
                rec.note(f"# error {case[0]} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                torch.cuda.empty_cache()
    rec.write(os.path.join(outdir, "efficient.events"))
