"""scaled_dot_product_attention with an attn_mask, with dropout_p > 0 and on 3-d inputs, and
nn.MultiheadAttention on unbatched input, as PyTorch 2.11 runs them on the H100: which backend it picks for
each dtype / head dim / mask / dropout / dims combination, the allocator events of forward and backward,
and the errors of the inputs it refuses. For bytegrad's mask, dropout and 3-d rules
(src/bytegrad/tensor/ops_attention.cpp) and their replay tests (tests/nn/sdpa_mask.cpp).

  python3 sdpa_mask_probe.py OUTDIR [all|events]

(`events` records only mask.events; each stretch of cases runs in a child process, and a case that kills it
is written as `# error <name> crashed ...` and skipped.)

Writes
  OUTDIR/mask.events    every case twice (`tagged` under the op-naming dispatch mode of sdpa_flash_probe.py,
                        `plain` without it), in sdpa_flash_probe.py's format; the `# case` line adds
                        dims=3|4 mask=none|bool|float mask_shape=<dims joined by x> mask_grad=0|1 dropout=<p>,
                        and for 3-d inputs B is the leading dim and H=1. Leaves are contiguous q (B, H, Sq, D),
                        k (B, H, Sk, D), v (B, H, Sk, D) (3-d: (B, S, D)), made before the start mark, the mask
                        too (bool: True = take part, random with key 0 always kept; float: randn). Backward is
                        y.backward(torch.ones_like(y)); `# strides` lists y and each leaf's .grad (mask last).
  (then, in mask.events) nn.MultiheadAttention(48, 4, batch_first=True) on unbatched (L, E) input and on (1, L, E),
                        need_weights True and False, and bytegrad's MultiheadSelfAttention decomposition
                        (in_proj, view/permute, matmul, scale, softmax, matmul, out_proj) on x.unsqueeze(0),
                        forward + backward, same format (`# case name=.. kind=..`).
  OUTDIR/mask_choices.txt   torch._fused_sdp_choice over dtype x head dim x mask kind x mask shape x dropout x
                        causal x Sk x requires_grad x dims: `dtype D dims mask shape dropout causal Sq Sk rg
                        choice name`.
  OUTDIR/errors.txt     `name | ExceptionType | first line of the message` (or `ok ...` when accepted) for
                        the refused inputs (mask dtypes, unbroadcastable masks, dropout_p outside [0, 1] or
                        NaN, mask with is_causal, 3-d/4-d mixes, MHA shapes).
  OUTDIR/dropout.txt    keep fractions and determinism of dropout per backend (same seed twice, different
                        seeds), and whether backward uses the forward's mask (gradient of v against the
                        recomputed probabilities).
  OUTDIR/env.txt        versions, the device, the sdp flags; env_math.txt: fp16_bf16_reduction_math_sdp_allowed.
"""
import contextlib, math, os, sys, traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_flash_probe import Recorder, backend_name, env  # noqa: E402

f32, bf, fp, f64 = torch.float32, torch.bfloat16, torch.float16, torch.float64


def dtname(dt):
    return str(dt).split(".")[1]


def mask_shape(code, B, H, L, S, dims):
    return {"LS": (L, S), "11LS": (1, 1, L, S), "B1LS": (B, 1, L, S), "BHLS": (B, H, L, S), "1HLS": (1, H, L, S),
            "HLS": (H, L, S), "1S": (1, S), "BLS": (B, L, S), "1LS": (1, L, S), "S": (S,), "B111": (B, 1, 1, 1),
            "11L1": (1, 1, L, 1)}[code]


def make_mask(kind, shape, dt, grad):
    if kind == "bool":
        m = torch.rand(shape, device="cuda") > 0.4
        m[..., 0] = True  # no row fully masked (fused kernels give NaN there, math 0)
        return m
    m = torch.randn(shape, device="cuda", dtype=dt)
    if grad:
        m.requires_grad_(True)
    return m


def shape_str(t):
    return f"{tuple(t.shape)}:{tuple(t.stride())}"


def choice_of(q, k, v, m, p, causal):
    try:
        return int(torch._fused_sdp_choice(q, k, v, m, p, causal))
    except Exception as e:
        return f"error:{type(e).__name__}"


# name, dims, B, H, Sq, Sk, D, dtype, mask kind, mask shape code, mask_grad, dropout_p, causal, grad, nograd_mode
CASES = [
    # float32 with masks (memory-efficient expected): bool -> float conversion, pad_bias for Sk % 16 != 0,
    # broadcast shapes expanded, mask gradients
    ("m_f32_bool_LS", 4, 2, 3, 40, 40, 64, f32, "bool", "LS", False, 0.0, False, True, False),
    ("m_f32_float_LS", 4, 2, 3, 40, 40, 64, f32, "float", "LS", False, 0.0, False, True, False),
    ("m_f32_bool_B1LS", 4, 2, 3, 40, 48, 64, f32, "bool", "B1LS", False, 0.0, False, True, False),
    ("m_f32_float_BHLS", 4, 2, 3, 40, 48, 64, f32, "float", "BHLS", False, 0.0, False, True, False),
    ("m_f32_float_11LS_s37", 4, 2, 3, 40, 37, 64, f32, "float", "11LS", False, 0.0, False, True, False),
    ("m_f32_bool_LS_s37", 4, 2, 3, 40, 37, 64, f32, "bool", "LS", False, 0.0, False, True, False),
    ("m_f32_float_BHLS_s37", 4, 2, 3, 40, 37, 32, f32, "float", "BHLS", False, 0.0, False, True, False),
    ("m_f32_float_1S", 4, 2, 3, 40, 40, 64, f32, "float", "1S", False, 0.0, False, True, False),
    ("m_f32_float_BHLS_maskgrad", 4, 2, 3, 40, 48, 64, f32, "float", "BHLS", True, 0.0, False, True, False),
    ("m_f32_float_LS_maskgrad_s37", 4, 2, 3, 40, 37, 64, f32, "float", "LS", True, 0.0, False, True, False),
    ("m_f32_float_B1LS_maskgrad", 4, 2, 3, 40, 48, 64, f32, "float", "B1LS", True, 0.0, False, True, False),
    ("m_f32_float_d128_t100", 4, 1, 2, 100, 100, 128, f32, "float", "LS", False, 0.0, False, True, False),
    ("nograd_m_f32_float_B1LS", 4, 2, 3, 40, 48, 64, f32, "float", "B1LS", False, 0.0, False, False, False),
    ("nograd_m_f32_bool_LS_s37", 4, 2, 3, 40, 37, 64, f32, "bool", "LS", False, 0.0, False, False, False),
    ("nogradmode_m_f32_bool_LS", 4, 2, 3, 40, 40, 64, f32, "bool", "LS", False, 0.0, False, True, True),
    # 16-bit with masks
    ("m_bf16_bool_LS", 4, 2, 3, 40, 40, 64, bf, "bool", "LS", False, 0.0, False, True, False),
    ("m_bf16_float_LS", 4, 2, 3, 40, 40, 64, bf, "float", "LS", False, 0.0, False, True, False),
    ("m_bf16_float_BHLS", 4, 2, 3, 40, 48, 64, bf, "float", "BHLS", False, 0.0, False, True, False),
    ("m_f16_float_B1LS_s37", 4, 2, 3, 40, 37, 64, fp, "float", "B1LS", False, 0.0, False, True, False),
    ("m_bf16_bool_B1LS_s37", 4, 2, 3, 40, 37, 64, bf, "bool", "B1LS", False, 0.0, False, True, False),
    ("m_bf16_float_LS_maskgrad", 4, 2, 3, 40, 40, 64, bf, "float", "LS", True, 0.0, False, True, False),
    ("m_bf16_d128_float_11LS", 4, 1, 2, 64, 64, 128, bf, "float", "11LS", False, 0.0, False, True, False),
    ("m_bf16_d20_bool_LS", 4, 2, 3, 40, 40, 20, bf, "bool", "LS", False, 0.0, False, True, False),
    ("m_bf16_d320_float_LS", 4, 1, 2, 40, 40, 320, bf, "float", "LS", False, 0.0, False, True, False),
    ("nograd_m_bf16_float_BHLS", 4, 2, 3, 40, 48, 64, bf, "float", "BHLS", False, 0.0, False, False, False),
    # math with masks
    ("m_f64_float_LS", 4, 2, 3, 40, 40, 64, f64, "float", "LS", False, 0.0, False, True, False),
    ("m_f64_bool_B1LS", 4, 2, 3, 40, 37, 64, f64, "bool", "B1LS", False, 0.0, False, True, False),
    ("m_f32_d6_bool_LS", 4, 2, 3, 40, 40, 6, f32, "bool", "LS", False, 0.0, False, True, False),
    ("m_f32_d6_float_LS_maskgrad", 4, 2, 3, 40, 40, 6, f32, "float", "LS", True, 0.0, False, True, False),
    # math without a mask (4-d baselines)
    ("n_f64", 4, 2, 3, 40, 40, 64, f64, "none", "-", False, 0.0, False, True, False),
    ("n_f64_causal", 4, 2, 3, 40, 40, 64, f64, "none", "-", False, 0.0, True, True, False),
    ("n_f32_d6", 4, 2, 3, 40, 40, 6, f32, "none", "-", False, 0.0, False, True, False),
    ("n_f32_d6_causal", 4, 2, 3, 40, 37, 6, f32, "none", "-", False, 0.0, True, True, False),
    ("nograd_n_f64", 4, 2, 3, 40, 40, 64, f64, "none", "-", False, 0.0, False, False, False),
    # dropout
    ("d_f32", 4, 2, 3, 40, 40, 64, f32, "none", "-", False, 0.1, False, True, False),
    ("d_f32_causal", 4, 2, 3, 40, 40, 64, f32, "none", "-", False, 0.1, True, True, False),
    ("d_f32_s37", 4, 2, 3, 40, 37, 64, f32, "none", "-", False, 0.3, False, True, False),
    ("d_bf16", 4, 2, 3, 40, 40, 64, bf, "none", "-", False, 0.1, False, True, False),
    ("d_bf16_causal", 4, 2, 3, 40, 40, 64, bf, "none", "-", False, 0.1, True, True, False),
    ("d_f16_s48", 4, 2, 3, 40, 48, 64, fp, "none", "-", False, 0.2, False, True, False),
    ("d_bf16_d20", 4, 2, 3, 40, 40, 20, bf, "none", "-", False, 0.1, False, True, False),
    ("d_bf16_d20_causal", 4, 2, 3, 40, 40, 20, bf, "none", "-", False, 0.1, True, True, False),
    ("d_bf16_d320", 4, 1, 2, 40, 40, 320, bf, "none", "-", False, 0.1, False, True, False),
    ("d_bf16_t1024", 4, 1, 2, 1024, 1024, 64, bf, "none", "-", False, 0.1, True, True, False),
    ("d_f64", 4, 2, 3, 40, 40, 64, f64, "none", "-", False, 0.1, False, True, False),
    ("d_f32_d6", 4, 2, 3, 40, 40, 6, f32, "none", "-", False, 0.1, False, True, False),
    ("d_f32_bool_LS", 4, 2, 3, 40, 40, 64, f32, "bool", "LS", False, 0.1, False, True, False),
    ("d_bf16_float_BHLS", 4, 2, 3, 40, 48, 64, bf, "float", "BHLS", False, 0.1, False, True, False),
    ("d_f32_float_B1LS_maskgrad", 4, 2, 3, 40, 48, 64, f32, "float", "B1LS", True, 0.1, False, True, False),
    ("nograd_d_f32", 4, 2, 3, 40, 40, 64, f32, "none", "-", False, 0.1, False, False, False),
    ("nograd_d_bf16", 4, 2, 3, 40, 40, 64, bf, "none", "-", False, 0.1, False, False, False),
    ("nogradmode_d_bf16_d20", 4, 2, 3, 40, 40, 20, bf, "none", "-", False, 0.1, False, True, True),
    ("d1_f32", 4, 2, 3, 40, 40, 64, f32, "none", "-", False, 1.0, False, True, False),
    ("d1_bf16", 4, 2, 3, 40, 40, 64, bf, "none", "-", False, 1.0, False, True, False),
    # 3-d inputs (B here is the leading dim, H unused)
    ("t3_f32", 3, 6, 1, 40, 40, 64, f32, "none", "-", False, 0.0, False, True, False),
    ("t3_f32_causal_q40k50", 3, 6, 1, 40, 50, 64, f32, "none", "-", False, 0.0, True, True, False),
    ("t3_bf16", 3, 6, 1, 40, 40, 64, bf, "none", "-", False, 0.0, False, True, False),
    ("t3_bf16_causal", 3, 6, 1, 40, 40, 64, bf, "none", "-", False, 0.0, True, True, False),
    ("t3_f16_d20", 3, 6, 1, 40, 37, 20, fp, "none", "-", False, 0.0, False, True, False),
    ("t3_f64", 3, 6, 1, 40, 40, 64, f64, "none", "-", False, 0.0, False, True, False),
    ("t3_f32_bool_LS", 3, 6, 1, 40, 40, 64, f32, "bool", "LS", False, 0.0, False, True, False),
    ("t3_bf16_float_BLS", 3, 6, 1, 40, 48, 64, bf, "float", "BLS", False, 0.0, False, True, False),
    ("t3_f32_float_1LS_maskgrad", 3, 6, 1, 40, 40, 64, f32, "float", "1LS", True, 0.0, False, True, False),
    ("t3_f32_dropout", 3, 6, 1, 40, 40, 64, f32, "none", "-", False, 0.1, False, True, False),
    ("t3_bf16_dropout", 3, 6, 1, 40, 40, 64, bf, "none", "-", False, 0.1, False, True, False),
    ("nograd_t3_f32", 3, 6, 1, 40, 40, 64, f32, "none", "-", False, 0.0, False, False, False),
    ("nograd_t3_bf16_causal", 3, 6, 1, 40, 40, 64, bf, "none", "-", False, 0.0, True, False, False),
    ("nogradmode_t3_f32", 3, 6, 1, 40, 40, 64, f32, "none", "-", False, 0.0, False, True, True),
]


def run_case(rec, case, tagged):
    name, dims, B, H, Sq, Sk, D, dt, mkind, mcode, mgrad, p, causal, grad, nograd_mode = case
    torch.manual_seed(0)
    if dims == 4:
        qs, ks = (B, H, Sq, D), (B, H, Sk, D)
    else:
        qs, ks = (B, Sq, D), (B, Sk, D)
    q = torch.randn(qs, device="cuda", dtype=dt, requires_grad=grad)
    k = torch.randn(ks, device="cuda", dtype=dt, requires_grad=grad)
    v = torch.randn(ks, device="cuda", dtype=dt, requires_grad=grad)
    leaves = [q, k, v]
    m = None
    if mkind != "none":
        m = make_mask(mkind, mask_shape(mcode, B, H, Sq, Sk, dims), dt, mgrad)
        if mgrad:
            leaves.append(m)
    mshape = "x".join(str(s) for s in m.shape) if m is not None else "-"
    ctx = rec if tagged else contextlib.nullcontext()
    with ctx:
        choice = choice_of(q, k, v, m, p, causal)
        rec.note(f"# case name={name} B={B} H={H} Sq={Sq} Sk={Sk} D={D} dtype={dtname(dt)} causal={int(causal)} "
                 f"layout=contig grad={int(grad)} nograd_mode={int(nograd_mode)} mode={'tagged' if tagged else 'plain'} "
                 f"choice={choice} backend={backend_name(choice) if isinstance(choice, int) else choice} dims={dims} "
                 f"mask={mkind} mask_shape={mshape} mask_grad={int(mgrad)} dropout={p}")
        torch.cuda.reset_peak_memory_stats()
        rec.mark("start")
        gctx = torch.no_grad() if nograd_mode else contextlib.nullcontext()
        with gctx:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=p, is_causal=causal)
        rec.mark("forward")
        rec.note(f"# strides y={shape_str(y)} grad_fn={type(y.grad_fn).__name__ if y.grad_fn else None}")
        if grad and not nograd_mode:
            y.backward(torch.ones_like(y))
            rec.mark("backward")
            rec.note("# strides " + " ".join(f"grad{i}={shape_str(t.grad)}" for i, t in enumerate(leaves)))
        del q, k, v, y, m
        leaves.clear()
        rec.mark("freed")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


class BytegradMha(torch.nn.Module):
    """bytegrad's nn::MultiheadSelfAttention decomposition (src/bytegrad/nn/attention.cpp)."""

    def __init__(self, E, H):
        super().__init__()
        self.E, self.H = E, H
        self.in_proj = torch.nn.Linear(E, 3 * E)
        self.out_proj = torch.nn.Linear(E, E)

    def forward(self, x):
        B, L, C = x.shape
        H, D = self.H, C // self.H
        qkv = self.in_proj(x).view(B, L, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        del qkv
        s = torch.matmul(q, k.transpose(-2, -1))
        s = s * (1.0 / math.sqrt(D))
        a = torch.softmax(s, -1)
        del s
        out = torch.matmul(a, v).transpose(1, 2).reshape(B, L, C)
        del a, q, k, v
        return self.out_proj(out)


MHA_CASES = [
    # name, kind, L, E, H, unbatched, need_weights, dtype
    ("mha_torch_unbatched_w", "torch", 10, 48, 4, True, True, f32),
    ("mha_torch_unbatched_now", "torch", 10, 48, 4, True, False, f32),
    ("mha_torch_batched1_w", "torch", 10, 48, 4, False, True, f32),
    ("mha_torch_batched1_now", "torch", 10, 48, 4, False, False, f32),
    ("mha_bytegrad_unsqueezed", "bytegrad", 10, 48, 4, True, False, f32),
    ("mha_bytegrad_batched1", "bytegrad", 10, 48, 4, False, False, f32),
    ("mha_bytegrad_unsqueezed_l33", "bytegrad", 33, 64, 8, True, False, f32),
]


def run_mha(rec, case, tagged):
    name, kind, L, E, H, unbatched, need_weights, dt = case
    torch.manual_seed(0)
    if kind == "torch":
        mod = torch.nn.MultiheadAttention(E, H, batch_first=True, device="cuda", dtype=dt)
    else:
        mod = BytegradMha(E, H).to(device="cuda", dtype=dt)
    x = torch.randn((L, E) if unbatched else (1, L, E), device="cuda", dtype=dt, requires_grad=True)
    ctx = rec if tagged else contextlib.nullcontext()
    with ctx:
        rec.note(f"# case name={name} kind={kind} L={L} E={E} H={H} unbatched={int(unbatched)} "
                 f"need_weights={int(need_weights)} dtype={dtname(dt)} mode={'tagged' if tagged else 'plain'}")
        torch.cuda.reset_peak_memory_stats()
        rec.mark("start")
        if kind == "torch":
            y, w = mod(x, x, x, need_weights=need_weights)
            del w
        else:
            y = mod(x.unsqueeze(0) if unbatched else x)
            if unbatched:
                y = y.squeeze(0)
        rec.mark("forward")
        rec.note(f"# strides y={shape_str(y)} grad_fn={type(y.grad_fn).__name__ if y.grad_fn else None}")
        y.backward(torch.ones_like(y))
        rec.mark("backward")
        rec.note(f"# strides grad0={shape_str(x.grad)}")
        del y, x
        rec.mark("freed")
        mod.zero_grad(set_to_none=True)
        rec.mark("params_grads_freed")
        del mod
        rec.mark("module_freed")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def choices(path):
    lines = []
    B, H, L = 2, 3, 16
    for dt in (f32, bf, fp, f64):
        for D in (64, 20, 6, 128, 320):
            for dims in (4, 3):
                for S in (16, 13, 24, 1):
                    for mkind in ("none", "bool", "float"):
                        codes = ["-"] if mkind == "none" else (
                            ["LS", "11LS", "B1LS", "BHLS", "1HLS", "HLS", "1S", "S", "B111", "11L1"] if dims == 4
                            else ["LS", "BLS", "1LS", "1S", "S"])
                        for code in codes:
                            for p in (0.0, 0.1):
                                for causal in ((False, True) if mkind == "none" else (False,)):
                                    for rg in (False, True):
                                        qs = (B, H, L, D) if dims == 4 else (B * H, L, D)
                                        ks = (B, H, S, D) if dims == 4 else (B * H, S, D)
                                        q = torch.empty(qs, device="cuda", dtype=dt, requires_grad=rg)
                                        k = torch.empty(ks, device="cuda", dtype=dt, requires_grad=rg)
                                        v = torch.empty(ks, device="cuda", dtype=dt, requires_grad=rg)
                                        m = None
                                        if mkind != "none":
                                            shp = mask_shape(code, B if dims == 4 else B * H, H, L, S, dims)
                                            m = torch.ones(shp, device="cuda", dtype=torch.bool if mkind == "bool" else dt)
                                        c = choice_of(q, k, v, m, p, causal)
                                        nm = backend_name(c) if isinstance(c, int) else c
                                        lines.append(f"{dtname(dt)} {D} {dims} {mkind} {code} {p} {int(causal)} {L} {S} "
                                                     f"{int(rg)} {c} {nm}")
    open(path, "w").write("\n".join(lines) + "\n")


def errors(path):
    lines = []
    B, H, L, S, D = 2, 3, 8, 8, 16

    def qkv(dt=f32, dims=4):
        shp = (B, H, L, D) if dims == 4 else (B, L, D)
        return [torch.randn(shp, device="cuda", dtype=dt) for _ in range(3)]

    def attempt(name, fn):
        try:
            out = fn()
            desc = ""
            if isinstance(out, torch.Tensor):
                desc = (f"shape={tuple(out.shape)} dtype={dtname(out.dtype)} finite={bool(torch.isfinite(out).all())} "
                        f"abs_sum={float(out.double().abs().sum()):.6g}")
            lines.append(f"{name} | ok | {desc}")
        except Exception as e:
            msg = str(e).strip().splitlines()
            lines.append(f"{name} | {type(e).__name__} | {msg[0] if msg else ''}")
            for extra in msg[1:6]:
                lines.append(f"{name} |   | {extra}")

    q, k, v = qkv()
    sdpa = F.scaled_dot_product_attention
    for mdt in (torch.int64, torch.int32, torch.uint8, torch.float64, torch.float16, torch.bfloat16):
        attempt(f"mask_dtype_{dtname(mdt)}_q_f32", lambda mdt=mdt: sdpa(q, k, v, attn_mask=torch.ones(L, S, device="cuda", dtype=mdt)))
    qb, kb, vb = qkv(bf)
    attempt("mask_dtype_float32_q_bf16", lambda: sdpa(qb, kb, vb, attn_mask=torch.zeros(L, S, device="cuda")))
    attempt("mask_dtype_float32_q_bf16_math_d6", lambda: sdpa(*[t[..., :6] for t in (qb, kb, vb)], attn_mask=torch.zeros(L, S, device="cuda")))
    for shp in ((L, S + 1), (L + 1, S), (3, L, S), (B + 1, H, L, S), (B, H + 1, L, S), (1, B, H, L, S), (S + 3,), (2, 1, 1, 1, 1)):
        attempt(f"mask_shape_{'x'.join(map(str, shp))}_f32", lambda shp=shp: sdpa(q, k, v, attn_mask=torch.zeros(shp, device="cuda")))
        attempt(f"mask_shape_{'x'.join(map(str, shp))}_bool", lambda shp=shp: sdpa(q, k, v, attn_mask=torch.ones(shp, device="cuda", dtype=torch.bool)))
        attempt(f"mask_shape_{'x'.join(map(str, shp))}_bf16", lambda shp=shp: sdpa(qb, kb, vb, attn_mask=torch.zeros(shp, device="cuda", dtype=bf)))
    attempt("mask_cpu_q_cuda", lambda: sdpa(q, k, v, attn_mask=torch.zeros(L, S)))
    for p in (-0.1, 1.5, float("nan"), float("inf"), -0.0, 1.0, 0.999):
        attempt(f"dropout_{p}_f32", lambda p=p: sdpa(q, k, v, dropout_p=p))
        attempt(f"dropout_{p}_bf16", lambda p=p: sdpa(qb, kb, vb, dropout_p=p))
        attempt(f"dropout_{p}_f64", lambda p=p: sdpa(*[t.double() for t in (q, k, v)], dropout_p=p))
    attempt("mask_and_causal_f32", lambda: sdpa(q, k, v, attn_mask=torch.zeros(L, S, device="cuda"), is_causal=True))
    attempt("mask_and_causal_bool_bf16", lambda: sdpa(qb, kb, vb, attn_mask=torch.ones(L, S, device="cuda", dtype=torch.bool), is_causal=True))
    attempt("mask_and_causal_f64", lambda: sdpa(*[t.double() for t in (q, k, v)], attn_mask=torch.zeros(L, S, device="cuda", dtype=f64), is_causal=True))
    q3, k3, v3 = qkv(f32, 3)
    attempt("mask_and_causal_3d_f32", lambda: sdpa(q3, k3, v3, attn_mask=torch.zeros(L, S, device="cuda"), is_causal=True))
    attempt("dims_q3_k4", lambda: sdpa(q3, k, v))
    attempt("dims_2d", lambda: sdpa(q3[0], k3[0], v3[0]))
    attempt("dims_1d", lambda: sdpa(q3[0, 0], k3[0, 0], v3[0, 0]))
    attempt("dims_5d", lambda: sdpa(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)))
    attempt("mask_4d_q_3d", lambda: sdpa(q3, k3, v3, attn_mask=torch.zeros(1, B, L, S, device="cuda")))
    attempt("mask_4d_q_3d_bad", lambda: sdpa(q3, k3, v3, attn_mask=torch.zeros(2, B, L, S, device="cuda")))
    attempt("mask_bool_all_false_f32", lambda: sdpa(q, k, v, attn_mask=torch.zeros(L, S, device="cuda", dtype=torch.bool)))
    attempt("mask_bool_all_false_bf16", lambda: sdpa(qb, kb, vb, attn_mask=torch.zeros(L, S, device="cuda", dtype=torch.bool)))
    attempt("mask_bool_all_false_f64", lambda: sdpa(*[t.double() for t in (q, k, v)], attn_mask=torch.zeros(L, S, device="cuda", dtype=torch.bool)))
    attempt("mask_float_all_neginf_f32", lambda: sdpa(q, k, v, attn_mask=torch.full((L, S), -math.inf, device="cuda")))
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True, device="cuda")
    x2 = torch.randn(L, 16, device="cuda")
    attempt("mha_unbatched_ok", lambda: mha(x2, x2, x2)[0])
    attempt("mha_unbatched_wrong_E", lambda: mha(torch.randn(L, 12, device="cuda"), torch.randn(L, 12, device="cuda"), torch.randn(L, 12, device="cuda"))[0])
    attempt("mha_1d", lambda: mha(x2[0], x2[0], x2[0])[0])
    attempt("mha_4d", lambda: mha(x2[None, None], x2[None, None], x2[None, None])[0])
    attempt("mha_unbatched_mask_LL", lambda: mha(x2, x2, x2, attn_mask=torch.zeros(L, L, device="cuda"))[0])
    attempt("mha_unbatched_mask_3d", lambda: mha(x2, x2, x2, attn_mask=torch.zeros(4, L, L, device="cuda"))[0])
    attempt("mha_unbatched_causal", lambda: mha(x2, x2, x2, attn_mask=torch.nn.Transformer.generate_square_subsequent_mask(L, device="cuda"), is_causal=True)[0])
    open(path, "w").write("\n".join(lines) + "\n")


def dropout_stats(path):
    lines = []
    B, H, L, S = 4, 4, 64, 64
    for dt, D, causal, mk in ((f32, 64, False, None), (bf, 64, False, None), (bf, 20, False, None), (f64, 64, False, None),
                              (bf, 320, False, None), (f32, 64, False, "bool"), (bf, 64, True, None)):
        torch.manual_seed(1)
        q = torch.zeros(B, H, L, D, device="cuda", dtype=dt)  # uniform probabilities 1/S (or 1/(i+1) causal)
        k = torch.randn(B, H, S, D, device="cuda", dtype=dt)
        v = torch.eye(S, D, device="cuda", dtype=dt).expand(B, H, S, D).contiguous() if D >= S else None
        if v is None:
            v = torch.ones(B, H, S, D, device="cuda", dtype=dt)
        m = torch.ones(L, S, device="cuda", dtype=torch.bool) if mk == "bool" else None
        c = choice_of(q, k, v, m, 0.25, causal)
        outs = []
        for seed in (5, 5, 6):
            torch.manual_seed(seed)
            outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=0.25, is_causal=causal).double())
        same = bool(torch.equal(outs[0], outs[1]))
        diff = not bool(torch.equal(outs[0], outs[2]))
        # with v = I (D >= S) the output row is the dropped, rescaled probabilities
        frac = float((outs[0][..., :S] == 0).double().mean()) if D >= S and not causal else float("nan")
        # backward uses the forward's mask: dv = P_dropped^T @ ones; P_dropped from the output (v = I)
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        torch.manual_seed(7)
        y = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=m, dropout_p=0.25, is_causal=causal)
        y.backward(torch.ones_like(y))
        if D >= S:
            pd = y.detach().double()[..., :S]
            expect_dv = pd.transpose(-2, -1) @ torch.ones(B, H, L, D, device="cuda", dtype=torch.float64)
            err = float((vv.grad.double() - expect_dv).abs().max())
        else:
            err = float("nan")
        lines.append(f"dtype={dtname(dt)} D={D} causal={int(causal)} mask={mk} p=0.25 choice={c} "
                     f"backend={backend_name(c) if isinstance(c, int) else c} same_seed_equal={int(same)} "
                     f"other_seed_differs={int(diff)} zero_fraction={frac:.4f} dv_vs_forward_mask_maxerr={err:.3g}")
    open(path, "w").write("\n".join(lines) + "\n")


ALL_CASES = [("sdpa", c) for c in CASES] + [("mha", c) for c in MHA_CASES]


def record_child(outdir, start, part):
    """Records ALL_CASES[start:] into `part`, rewritten after each case; progress.txt names the case running."""
    torch.cuda.empty_cache()
    rec = Recorder()
    for i in range(start, len(ALL_CASES)):
        kind, case = ALL_CASES[i]
        for tagged in (True, False):
            with open(os.path.join(outdir, "progress.txt"), "w") as f:
                f.write(f"{i} {case[0]} {'tagged' if tagged else 'plain'}\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                (run_case if kind == "sdpa" else run_mha)(rec, case, tagged)
            except Exception as e:
                rec.note(f"# error {case[0]} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                torch.cuda.empty_cache()
        rec.write(part)


def record_events(outdir):
    """Each run of cases in a child process; a case that kills its process is noted and skipped."""
    import subprocess
    with open(os.path.join(outdir, "env_math.txt"), "w") as f:
        try:
            f.write(f"fp16_bf16_reduction_math_sdp_allowed {torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()}\n")
        except Exception as e:
            f.write(f"fp16_bf16_reduction_math_sdp_allowed error {e}\n")
    start, parts = 0, []
    while start < len(ALL_CASES):
        part = os.path.join(outdir, f"part{start:03d}.events")
        rc = subprocess.run([sys.executable, os.path.abspath(__file__), outdir, "child", str(start), part]).returncode
        parts.append((part, None))
        if rc == 0:
            break
        index, name, mode = open(os.path.join(outdir, "progress.txt")).read().split()
        parts.append((None, f"# error {name} crashed (exit {rc}) in mode {mode}: the process died; case skipped"))
        print(f"case {name} ({mode}) killed the process: exit {rc}", flush=True)
        start = int(index) + 1
        if sum(1 for _, line in parts if line) >= 8:
            parts.append((None, "# error too many crashes: the remaining cases were not run"))
            break
    with open(os.path.join(outdir, "mask.events"), "w") as out:
        for part, line in parts:
            if line:
                out.write(line + "\n")
            elif os.path.exists(part):
                out.write(open(part).read())
                os.remove(part)


if __name__ == "__main__":
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    if which == "child":
        record_child(outdir, int(sys.argv[3]), sys.argv[4])
        sys.exit(0)
    if which == "all":
        env(os.path.join(outdir, "env.txt"))
        for fn, fname in ((choices, "mask_choices.txt"), (errors, "errors.txt"), (dropout_stats, "dropout.txt")):
            try:
                fn(os.path.join(outdir, fname))
            except Exception:
                open(os.path.join(outdir, fname + ".error"), "w").write(traceback.format_exc())
    record_events(outdir)
    print("done")
