"""Allocator events of scaled_dot_product_attention where PyTorch runs its FLASH backend (16-bit q/k/v with a
head dim cuDNN refuses: not a multiple of 8, or above 128; or a key length of 1), forward and backward, for
bytegrad's flash-backend memory rules (src/bytegrad/tensor/ops_attention.cpp) and their replay tests
(tests/nn/sdpa_flash.cpp).

  python3 sdpa_flash_probe.py OUTDIR [main|splits]

Writes
  OUTDIR/flash.events   every case twice: `tagged` under a TorchDispatchMode that writes `# op <aten op>` before
                        the events each op made (as gpt2_op_events.py), and `plain` without it (the mode holds
                        Python references to every tensor it sees, which can move frees); each case opens with
                        `# case name=.. B=.. H=.. Sq=.. Sk=.. D=.. dtype=.. causal=0|1 layout=split|contig grad=0|1
                        nograd_mode=0|1 mode=tagged|plain choice=<torch._fused_sdp_choice> backend=<name>`, then
                        `alloc N` / `free_completed N` / `segment_*` lines and `# mark <label> allocated=..
                        reserved=.. peak=..` at start, forward, backward (grad cases), freed; `# strides ..` lines
                        give the output's and the gradients' sizes and strides.
  OUTDIR/flash_splits.events   the same for CASES_SPLITS (`splits`: key-split forwards, larger head dims).
  OUTDIR/flash_choices.txt   torch._fused_sdp_choice over a grid of dtypes, head dims, causal flags and sequence
                        lengths (contiguous (B, H, S, D) inputs): `dtype D causal Sq Sk choice name`.
  OUTDIR/flash_choices_dv.txt   (splits) the choice with q/k's and v's head dims apart (bfloat16, 16x16).
  OUTDIR/env.txt        torch / CUDA / cuDNN versions, the device, its SM count.
Layouts: `split` is nanoGPT's: q, k, v the (B, T, H, D) views of a split (B, T, 3C) leaf, transposed to
(B, H, T, D); `contig` is three contiguous (B, H, S, D) leaves. Backward is y.backward(torch.ones_like(y)).
"""
import contextlib, os, sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

try:
    from torch.nn.attention import SDPBackend
except Exception:  # pragma: no cover
    SDPBackend = None


def event_count():
    s = torch.cuda.memory_stats()
    return (s.get("allocation.all.allocated", 0) + s.get("allocation.all.freed", 0) +
            s.get("segment.all.allocated", 0) + s.get("segment.all.freed", 0))


class Recorder(TorchDispatchMode):
    """Notes lines at event indices; `with rec:` also notes each aten op (the tagged mode)."""

    def __init__(self):
        super().__init__()
        self.notes = []
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10**7)
        self.start = event_count()

    def note(self, line):
        self.notes.append((event_count() - self.start, line))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.note(f"# op {func}")
        return func(*args, **(kwargs or {}))

    def mark(self, label):
        self.note(f"# mark {label} allocated={torch.cuda.memory_allocated()} "
                  f"reserved={torch.cuda.memory_reserved()} peak={torch.cuda.max_memory_allocated()}")

    def write(self, path):
        trace = [e for e in torch.cuda.memory._snapshot()["device_traces"][0]
                 if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free")]
        lines, n = [], 0
        for index, line in self.notes + [(len(trace), None)]:
            while n < index and n < len(trace):
                e = trace[n]
                lines.append(f"{e['action']} {e['size']}")
                n += 1
            if line:
                lines.append(line)
        open(path, "w").write("\n".join(lines) + "\n")


def backend_name(choice):
    if SDPBackend is not None:
        try:
            return SDPBackend(choice).name
        except Exception:
            pass
    return {0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION", 3: "CUDNN_ATTENTION"}.get(choice, "?")


def fused_choice(q, k, v, causal):
    try:
        return int(torch._fused_sdp_choice(q, k, v, None, 0.0, causal))
    except Exception as e:  # pragma: no cover
        return f"error:{type(e).__name__}"


# name, B, H, Sq, Sk, D, dtype, causal, layout, grad, nograd_mode (requires_grad on but under torch.no_grad())
bf, fp = torch.bfloat16, torch.float16
CASES = [
    ("split_d20_bf16_causal", 2, 3, 50, 50, 20, bf, True, "split", True, False),
    ("split_d60_fp16_causal", 2, 3, 77, 77, 60, fp, True, "split", True, False),
    ("split_d160_bf16_causal", 2, 2, 64, 64, 160, bf, True, "split", True, False),
    ("split_d256_bf16_causal", 1, 2, 40, 40, 256, bf, True, "split", True, False),
    ("split_d20_bf16_full", 2, 3, 50, 50, 20, bf, False, "split", True, False),
    ("split_d160_fp16_causal_t300", 1, 2, 300, 300, 160, fp, True, "split", True, False),
    ("split_d60_bf16_causal_t128", 2, 4, 128, 128, 60, bf, True, "split", True, False),
    ("contig_d20_bf16_causal", 2, 3, 50, 50, 20, bf, True, "contig", True, False),
    ("contig_d160_fp16_full", 1, 2, 64, 64, 160, fp, False, "contig", True, False),
    ("contig_d60_bf16_q37k50", 1, 2, 37, 50, 60, bf, False, "contig", True, False),
    ("contig_d256_fp16_q37k90", 2, 2, 37, 90, 256, fp, False, "contig", True, False),
    ("contig_d160_bf16_causal_t512", 1, 2, 512, 512, 160, bf, True, "contig", True, False),
    ("contig_d64_bf16_k1", 2, 2, 16, 1, 64, bf, False, "contig", True, False),
    ("contig_d20_bf16_k1", 2, 2, 8, 1, 20, bf, False, "contig", True, False),
    ("contig_d64_bf16_q1k1_causal", 2, 2, 1, 1, 64, bf, True, "contig", True, False),
    ("nograd_split_d20_bf16_causal", 2, 3, 50, 50, 20, bf, True, "split", False, False),
    ("nograd_contig_d160_fp16_q37k50", 1, 2, 37, 50, 160, fp, False, "contig", False, False),
    ("nograd_contig_d160_bf16_causal_t512", 1, 2, 512, 512, 160, bf, True, "contig", False, False),
    ("nogradmode_split_d256_bf16_causal", 1, 2, 40, 40, 256, bf, True, "split", True, True),
    ("nogradmode_contig_d60_bf16_k1", 2, 2, 16, 1, 60, bf, False, "contig", True, True),
]

# Second recording: flash calls whose forward splits the keys (mha_fwd's num_splits_heuristic on the H100's 132
# SMs: out_accum and softmax_lse_accum), head dims above 128 that are padded or rounded, and many heads.
CASES_SPLITS = [
    ("splits_contig_d60_bf16_causal_t1024", 1, 2, 1024, 1024, 60, bf, True, "contig", True, False),
    ("splits_contig_d100_fp16_t512", 1, 1, 512, 512, 100, fp, False, "contig", True, False),
    ("splits_contig_d200_bf16_q37k300", 2, 1, 37, 300, 200, bf, False, "contig", True, False),
    ("splits_nograd_contig_d20_bf16_q1k600", 2, 3, 1, 600, 20, bf, False, "contig", False, False),
    ("splits_split_d140_bf16_causal_t256", 2, 2, 256, 256, 140, bf, True, "split", True, False),
    ("splits_nogradmode_contig_d100_bf16_causal_t512", 1, 1, 512, 512, 100, bf, True, "contig", True, True),
    ("split_d20_bf16_causal_b8h12t256", 8, 12, 256, 256, 20, bf, True, "split", True, False),
    ("contig_d200_bf16_q64k1", 1, 2, 64, 1, 200, bf, False, "contig", True, False),
]


def shape(t):
    return f"{tuple(t.shape)}:{tuple(t.stride())}"


def run_case(rec, case, tagged):
    name, B, H, Sq, Sk, D, dt, causal, layout, grad, nograd_mode = case
    torch.manual_seed(0)
    leaves = []
    if layout == "split":
        assert Sq == Sk
        C = H * D
        qkv = torch.randn(B, Sq, 3 * C, device="cuda", dtype=dt, requires_grad=grad)
        leaves.append(qkv)
    else:
        q0 = torch.randn(B, H, Sq, D, device="cuda", dtype=dt, requires_grad=grad)
        k0 = torch.randn(B, H, Sk, D, device="cuda", dtype=dt, requires_grad=grad)
        v0 = torch.randn(B, H, Sk, D, device="cuda", dtype=dt, requires_grad=grad)
        leaves += [q0, k0, v0]
    ctx = rec if tagged else contextlib.nullcontext()
    with ctx:
        if layout == "split":
            q, k, v = leaves[0].split(H * D, dim=2)
            q = q.view(B, Sq, H, D).transpose(1, 2)
            k = k.view(B, Sk, H, D).transpose(1, 2)
            v = v.view(B, Sk, H, D).transpose(1, 2)
        else:
            q, k, v = leaves
        choice = fused_choice(q, k, v, causal)
        rec.note(f"# case name={name} B={B} H={H} Sq={Sq} Sk={Sk} D={D} dtype={str(dt).split('.')[1]} "
                 f"causal={int(causal)} layout={layout} grad={int(grad)} nograd_mode={int(nograd_mode)} "
                 f"mode={'tagged' if tagged else 'plain'} choice={choice} backend={backend_name(choice)}")
        torch.cuda.reset_peak_memory_stats()
        rec.mark("start")
        if nograd_mode:
            with torch.no_grad():
                y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        rec.mark("forward")
        rec.note(f"# strides y={shape(y)} grad_fn={type(y.grad_fn).__name__ if y.grad_fn else None}")
        if grad and not nograd_mode:
            y.backward(torch.ones_like(y))
            rec.mark("backward")
            rec.note("# strides " + " ".join(f"grad{i}={shape(t.grad)}" for i, t in enumerate(leaves)))
        del q, k, v, y
        leaves.clear()
        if layout == "split":
            del qkv
        else:
            del q0, k0, v0
        rec.mark("freed")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def choices(path):
    lines = []
    for dt in (bf, fp):
        for D in (8, 12, 20, 24, 60, 64, 96, 120, 128, 136, 160, 192, 200, 256, 264, 512):
            for causal in (False, True):
                for Sq, Sk in ((16, 16), (16, 1), (1, 1), (1, 16), (16, 32), (32, 16)):
                    q = torch.empty(2, 2, Sq, D, device="cuda", dtype=dt)
                    k = torch.empty(2, 2, Sk, D, device="cuda", dtype=dt)
                    v = torch.empty(2, 2, Sk, D, device="cuda", dtype=dt)
                    c = fused_choice(q, k, v, causal)
                    lines.append(f"{str(dt).split('.')[1]} {D} {int(causal)} {Sq} {Sk} {c} {backend_name(c)}")
    open(path, "w").write("\n".join(lines) + "\n")


def choices_dv(path):
    """Head dims of q/k and of v apart (cuDNN's and flash's head-dim rules when D != Dv)."""
    lines = []
    for D in (20, 64, 128, 160, 192, 256):
        for Dv in (20, 64, 128, 160, 192, 256):
            for causal in (False, True):
                q = torch.empty(2, 2, 16, D, device="cuda", dtype=bf)
                k = torch.empty(2, 2, 16, D, device="cuda", dtype=bf)
                v = torch.empty(2, 2, 16, Dv, device="cuda", dtype=bf)
                c = fused_choice(q, k, v, causal)
                lines.append(f"bfloat16 D={D} Dv={Dv} causal={int(causal)} 16x16 {c} {backend_name(c)}")
    open(path, "w").write("\n".join(lines) + "\n")


def env(path):
    p = torch.cuda.get_device_properties(0)
    lines = [f"torch {torch.__version__}", f"cuda {torch.version.cuda}", f"cudnn {torch.backends.cudnn.version()}",
             f"device {p.name}", f"multi_processor_count {p.multi_processor_count}",
             f"flash_sdp_enabled {torch.backends.cuda.flash_sdp_enabled()}",
             f"cudnn_sdp_enabled {torch.backends.cuda.cudnn_sdp_enabled()}",
             f"mem_efficient_sdp_enabled {torch.backends.cuda.mem_efficient_sdp_enabled()}",
             f"CUBLAS_WORKSPACE_CONFIG {os.environ.get('CUBLAS_WORKSPACE_CONFIG')}"]
    open(path, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    which = sys.argv[2] if len(sys.argv) > 2 else "main"
    env(os.path.join(outdir, "env.txt"))
    if which == "main":
        choices(os.path.join(outdir, "flash_choices.txt"))
    else:
        choices_dv(os.path.join(outdir, "flash_choices_dv.txt"))
    torch.cuda.empty_cache()
    rec = Recorder()
    for case in (CASES if which == "main" else CASES_SPLITS):
        for tagged in (True, False):
            try:
                run_case(rec, case, tagged)
            except Exception as e:
                rec.note(f"# error {case[0]} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                torch.cuda.empty_cache()
    rec.write(os.path.join(outdir, "flash.events" if which == "main" else "flash_splits.events"))
