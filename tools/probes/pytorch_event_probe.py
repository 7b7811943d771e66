#!/usr/bin/env python3
"""Records, in real PyTorch on a CUDA GPU, the caching-allocator events each small case makes.

Usage: python3 pytorch_event_probe.py OUT.jsonl [GROUP...]   (groups: reduce, layernorm, ops, optim,
op_table, composite, gqa16, promotion; the first four are tests/data/pytorch_probes/events.jsonl, op_table is
op_table_events.jsonl: ops added with the op table, docs/adding-an-op.md; promotion: operands of two dtypes,
not yet recorded)
One JSON object per line: {"group", "case", "events": [["alloc"|"free", requested_bytes], ...],
"output_bytes"} for the events made by the case's `run` step only (inputs are built before recording
starts). Used to derive and check the rules bytegrad follows for PyTorch's kernel-internal allocations
(reduction scratch, layer-norm statistics, loss temporaries, optimizer temporaries).
"""
import json
import sys

import torch
import torch.nn.functional as F

DEV = "cuda"


def events_of(fn):
    """Runs fn() with memory history on; returns (events, result)."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=1000000)
    before = len(torch.cuda.memory._snapshot()["device_traces"][0])
    result = fn()
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in trace:
        if e["action"] == "alloc":
            ev.append(["alloc", e["size"]])
        elif e["action"] in ("free_completed",):
            ev.append(["free", e["size"]])
    return ev, result


def nbytes(r):
    if isinstance(r, torch.Tensor):
        return r.untyped_storage().nbytes()
    if isinstance(r, (tuple, list)):
        return [nbytes(x) for x in r]
    return None


CASES = []


def case(group, name):
    def deco(fn):
        CASES.append((group, name, fn))
        return fn
    return deco


# ------------------------------------------------------------------ reductions
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
      "i64": torch.int64, "i32": torch.int32, "bool": torch.bool, "u8": torch.uint8}


def make(shape, dt, transpose=False):
    if DT[dt].is_floating_point:
        x = torch.randn(shape, device=DEV, dtype=torch.float32).to(DT[dt])
    else:
        x = torch.randint(0, 3, shape, device=DEV).to(DT[dt])
    if transpose:
        x = x.t()
    return x


def add_reduce(op, shape, dims, dt="f32", transpose=False, keepdim=False):
    name = f"{op} {list(shape)}{'.t()' if transpose else ''} dims={dims} {dt}"

    def fn():
        x = make(shape, dt, transpose)
        f = {
            "sum": lambda: x.sum() if dims is None else x.sum(dims, keepdim=keepdim),
            "mean": lambda: x.mean() if dims is None else x.mean(dims, keepdim=keepdim),
            "prod": lambda: x.prod() if dims is None else x.prod(dims[0]),
            "amax": lambda: x.amax() if dims is None else x.amax(dims),
            "max": lambda: x.max() if dims is None else x.max(dims[0]),
            "min": lambda: x.min() if dims is None else x.min(dims[0]),
            "argmax": lambda: x.argmax() if dims is None else x.argmax(dims[0]),
            "norm": lambda: x.norm() if dims is None else x.norm(dim=dims),
            "var": lambda: x.var() if dims is None else x.var(dims),
        }[op]
        ev, r = events_of(f)
        return ev, r
    CASES.append(("reduce", name, fn))


def reduce_cases():
    sizes_1d = [1, 7, 100, 1000, 2048, 4096, 8192, 10000, 16384, 32768, 65536, 100000, 131072, 262144,
                500000, 1 << 20, 3000001, 1 << 22, 1 << 24, 50000000]
    for n in sizes_1d:
        add_reduce("sum", (n,), None)
    for n in [1000, 65536, 1 << 20, 1 << 24]:
        for op in ["mean", "amax", "max", "argmax", "prod", "norm", "min"]:
            add_reduce(op, (n,), None)
        for dt in ["f16", "bf16", "f64", "i64", "i32", "bool", "u8"]:
            add_reduce("sum", (n,), None, dt)
    dims2 = [1, 3, 16, 32, 64, 100, 128, 256, 512, 1000, 1024, 2048, 4096, 8192, 16384]
    for m in dims2:
        for n in dims2:
            if m * n > (1 << 26):
                continue
            add_reduce("sum", (m, n), (0,))
            add_reduce("sum", (m, n), (1,))
    for m, n in [(1024, 512), (64, 4096), (4096, 64), (1024, 1024), (16384, 256), (100, 100000), (100000, 100),
                 (3, 1 << 20), (1 << 20, 3)]:
        add_reduce("sum", (m, n), None)
        add_reduce("sum", (m, n), (0, 1))
        add_reduce("sum", (m, n), (0,), transpose=True)
        add_reduce("sum", (m, n), (1,), transpose=True)
        for op in ["mean", "amax", "max", "argmax", "var", "norm"]:
            add_reduce(op, (m, n), (0,))
            add_reduce(op, (m, n), (1,))
        for dt in ["f16", "bf16", "f64", "i64"]:
            add_reduce("sum", (m, n), (0,), dt)
            add_reduce("sum", (m, n), (1,), dt)
    for shape in [(16, 64, 256), (16, 4, 64, 64), (8, 1024, 512), (64, 64, 64), (2, 3, 100000), (100000, 3, 2),
                  (512, 16, 512)]:
        nd = len(shape)
        dimsets = [(d,) for d in range(nd)] + [(a, b) for a in range(nd) for b in range(a + 1, nd)]
        for ds in dimsets:
            add_reduce("sum", shape, ds)
        add_reduce("mean", shape, (nd - 1,))
        add_reduce("mean", shape, (0,))
        add_reduce("amax", shape, (nd - 1,))


# ------------------------------------------------------------------ layer norm
def layernorm_cases():
    shapes = [((4, 16), 16), ((64, 256), 256), ((16, 64, 256), 256), ((1024, 512), 512), ((4096, 1024), 1024),
              ((8192, 4096), 4096), ((3, 5, 7), 7), ((2, 3, 100), (3, 100)), ((100000, 64), 64), ((32, 8192), 8192),
              ((65536, 128), 128), ((128, 65536), 65536)]
    for shape, norm in shapes:
        for affine, bias in [(True, True), (True, False), (False, False)]:
            for dt in ["f32", "bf16"]:
                for xgrad in [True, False]:
                    if not affine and not xgrad:
                        continue
                    name = f"layernorm {list(shape)} norm={norm} affine={affine} bias={bias} {dt} xgrad={xgrad}"

                    def fn(shape=shape, norm=norm, affine=affine, bias=bias, dt=dt, xgrad=xgrad):
                        ln = torch.nn.LayerNorm(norm, elementwise_affine=affine, bias=bias, device=DEV, dtype=DT[dt])
                        x = torch.randn(shape, device=DEV, dtype=DT[dt], requires_grad=xgrad)
                        g = torch.randn(shape, device=DEV, dtype=DT[dt])
                        fwd, y = events_of(lambda: ln(x))
                        bwd, _ = events_of(lambda: y.backward(g))
                        nog = []
                        with torch.no_grad():
                            nog, _ = events_of(lambda: ln(x))
                        return {"forward": fwd, "backward": bwd, "no_grad_forward": nog}, None
                    CASES.append(("layernorm", name, fn))


# ------------------------------------------------------------------ other ops, forward + backward
def fb(make_inputs, op, grad_like=True):
    """Events of op(*inputs) and of backward with a ones-like grad (made before recording)."""
    def fn():
        inputs = make_inputs()
        fwd, y = events_of(lambda: op(*inputs))
        out = {"forward": fwd}
        if y.requires_grad:
            g = torch.ones_like(y)
            bwd, _ = events_of(lambda: y.backward(g))
            out["backward"] = bwd
        return out, None
    return fn


def rg(*shape, dt=torch.float32):
    return torch.randn(*shape, device=DEV, dtype=dt, requires_grad=True)


def ops_cases():
    C = []
    for n, c in [(64, 10), (1024, 1000), (4096, 32000), (1, 5), (512, 50257)]:
        def tgt(n=n, c=c):
            return torch.randint(0, c, (n,), device=DEV)
        C.append((f"cross_entropy mean [{n},{c}]", fb(lambda n=n, c=c, tgt=tgt: (rg(n, c), tgt()), lambda x, t: F.cross_entropy(x, t))))
        C.append((f"cross_entropy sum [{n},{c}]", fb(lambda n=n, c=c, tgt=tgt: (rg(n, c), tgt()), lambda x, t: F.cross_entropy(x, t, reduction="sum"))))
        C.append((f"cross_entropy none [{n},{c}]", fb(lambda n=n, c=c, tgt=tgt: (rg(n, c), tgt()), lambda x, t: F.cross_entropy(x, t, reduction="none"))))
        C.append((f"nll_loss mean [{n},{c}]", fb(lambda n=n, c=c, tgt=tgt: (rg(n, c), tgt()), lambda x, t: F.nll_loss(x, t))))
        C.append((f"log_softmax [{n},{c}]", fb(lambda n=n, c=c: (rg(n, c),), lambda x: F.log_softmax(x, -1))))
        C.append((f"softmax [{n},{c}]", fb(lambda n=n, c=c: (rg(n, c),), lambda x: F.softmax(x, -1))))
    for shape in [(4,), (64, 10), (1024, 1024), (16, 64, 256), (3000, 3000)]:
        C.append((f"mse_loss mean {list(shape)}", fb(lambda s=shape: (rg(*s), torch.randn(s, device=DEV)), lambda x, t: F.mse_loss(x, t))))
        C.append((f"mse_loss sum {list(shape)}", fb(lambda s=shape: (rg(*s), torch.randn(s, device=DEV)), lambda x, t: F.mse_loss(x, t, reduction="sum"))))
        C.append((f"sum {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: x.sum())))
        C.append((f"mean {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: x.mean())))
    for (n, i, o) in [(1024, 256, 512), (1024, 512, 1), (64, 1024, 1024), (16 * 64, 256, 768), (4096, 4096, 4096), (3, 5, 7)]:
        C.append((f"linear bias [{n},{i}]->{o}", fb(lambda n=n, i=i, o=o: (rg(n, i), rg(o, i), rg(o)), lambda x, w, b: F.linear(x, w, b))))
        C.append((f"linear nobias [{n},{i}]->{o}", fb(lambda n=n, i=i, o=o: (rg(n, i), rg(o, i)), lambda x, w: F.linear(x, w))))
    for (b, l, c) in [(16, 64, 256), (2, 10, 8), (8, 128, 512)]:
        C.append((f"linear3d bias [{b},{l},{c}]", fb(lambda b=b, l=l, c=c: (rg(b, l, c), rg(c, c), rg(c)), lambda x, w, bb: F.linear(x, w, bb))))
    for (v, d, n) in [(1000, 64, 100), (50257, 768, 4096), (1000, 64, 3072), (1000, 64, 3073), (10, 4, 7)]:
        C.append((f"embedding [{v},{d}] idx={n}", fb(lambda v=v, d=d, n=n: (torch.randint(0, v, (n,), device=DEV), rg(v, d)), lambda i, w: F.embedding(i, w))))
    for (b, h, l, d) in [(16, 4, 64, 64), (2, 2, 8, 4), (4, 8, 256, 64)]:
        def mask(l=l):
            return torch.triu(torch.ones(l, l, dtype=torch.bool, device=DEV), 1)
        C.append((f"masked_fill causal [{b},{h},{l},{l}]", fb(lambda b=b, h=h, l=l, mask=mask: (rg(b, h, l, l), mask()), lambda s, m: s.masked_fill(m, float("-inf")).softmax(-1))))
        C.append((f"add float mask [{b},{h},{l},{l}]", fb(lambda b=b, h=h, l=l: (rg(b, h, l, l), torch.zeros(l, l, device=DEV).masked_fill(mask(l), float("-inf"))), lambda s, m: (s + m).softmax(-1))))
        C.append((f"sdpa causal [{b},{h},{l},{d}]", fb(lambda b=b, h=h, l=l, d=d: (rg(b, h, l, d), rg(b, h, l, d), rg(b, h, l, d)), lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))))
        C.append((f"masked_fill_ inplace [{b},{h},{l},{l}]", fb(lambda b=b, h=h, l=l, mask=mask: (rg(b, h, l, l), mask()), lambda s, m: (s * 1.0).masked_fill_(m, float("-inf")).softmax(-1))))
    for shape in [(1024, 1024), (16, 64, 256)]:
        C.append((f"gelu {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: F.gelu(x))))
        C.append((f"relu {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: F.relu(x))))
        C.append((f"dropout {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: F.dropout(x, 0.1, True))))
        C.append((f"sigmoid {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.sigmoid(x))))
        C.append((f"tanh {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.tanh(x))))
        C.append((f"bias broadcast add {list(shape)}", fb(lambda s=shape: (rg(*s), rg(s[-1])), lambda x, b: x + b)))
        C.append((f"mul broadcast {list(shape)}", fb(lambda s=shape: (rg(*s), rg(s[-1])), lambda x, b: x * b)))
    for name, fn in C:
        CASES.append(("ops", name, fn))


def op_table_cases():
    """Ops added since the op table (docs/adding-an-op.md): named as ops_cases() names them."""
    C = []
    for shape in [(1024, 1024), (16, 64, 256), (7,)]:
        C.append((f"expm1 {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.expm1(x))))
        C.append((f"exp {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.exp(x))))
        C.append((f"silu {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.nn.functional.silu(x))))
    for shape in [(1024, 1024), (16, 64, 256), (7,)]:
        C.append((f"reciprocal {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.reciprocal(x))))
        C.append((f"clamp_min {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.clamp_min(x, -0.5))))
        C.append((f"clamp_max {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.clamp_max(x, 0.5))))
        C.append((f"clamp {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.clamp(x, -0.5, 0.5))))
        C.append((f"rsqrt {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.rsqrt(x))))
        C.append((f"cos {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.cos(x))))
        C.append((f"sin {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: torch.sin(x))))
        C.append((f"leaky_relu {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x: F.leaky_relu(x, 0.01))))
        for red in ["mean", "sum", "none"]:
            C.append((f"binary_cross_entropy_with_logits {red} {list(shape)}",
                      fb(lambda s=shape: (rg(*s), torch.rand(*s, device=DEV)),
                         lambda x, t, red=red: F.binary_cross_entropy_with_logits(x, t, reduction=red))))
    # Along one dimension. cumsum: 2-d and 3-d scans (no scratch), a 1-d one (CUB's temporary storage) and an
    # int32 input (its int64 copy). sort and topk: dimensions of at most 4096 (the in-place small sort) and
    # single-block topk (TensorTopK.cu's should_use_multiblock false), forward and backward.
    for shape, dim in [((1024, 1024), 1), ((1024, 1024), 0), ((16, 64, 256), 1), ((7,), 0), ((1 << 20,), 0)]:
        C.append((f"cumsum dim={dim} {list(shape)}", fb(lambda s=shape: (rg(*s),), lambda x, d=dim: torch.cumsum(x, d))))
    C.append(("cumsum dim=1 i32 [64, 1000]",
              fb(lambda: (torch.randint(0, 5, (64, 1000), device=DEV, dtype=torch.int32),), lambda x: torch.cumsum(x, 1))))
    for shape, dim, desc in [((1024, 1000), 1, False), ((64, 4096), 1, True), ((1000, 64), 0, False), ((7,), 0, True)]:
        C.append((f"sort dim={dim} desc={int(desc)} {list(shape)}",
                  fb(lambda s=shape: (rg(*s),), lambda x, d=dim, de=desc: torch.sort(x, d, de).values)))
    for shape, k, dim, largest in [((64, 1000), 5, 1, True), ((16, 64, 256), 10, 2, False), ((7,), 3, 0, True)]:
        C.append((f"topk k={k} dim={dim} largest={int(largest)} {list(shape)}",
                  fb(lambda s=shape: (rg(*s),), lambda x, k=k, d=dim, l=largest: torch.topk(x, k, d, l).values)))
    # linalg.vector_norm with ord=inf (AbsMaxOps) and ord=1 (NormOneOps), forward only (no grad in bytegrad):
    # the output, then the reduction's staging buffer and semaphores when the launch splits the input.
    for shape in [(1000, 300), (4096, 4096), (7,)]:
        for o, word in [(float("inf"), "inf"), (1.0, "one")]:
            C.append((f"norm {list(shape)} ord={word}",
                      fb(lambda s=shape: (torch.randn(*s, device=DEV),), lambda x, o=o: torch.linalg.vector_norm(x, o))))
    for n in [5, 4096, 1 << 20]:
        C.append((f"dot [{n}]", fb(lambda n=n: (rg(n), rg(n)), lambda a, b: torch.matmul(a, b))))
    for (m, n) in [(3, 4), (1024, 512), (4096, 4096)]:
        C.append((f"mv [{m},{n}]", fb(lambda m=m, n=n: (rg(m, n), rg(n)), lambda a, v: torch.matmul(a, v))))
    # nll_loss with class weights (rand(C), no grad, made before recording), every reduction.
    for n, c in [(64, 10), (1024, 1000)]:
        for red in ["mean", "sum", "none"]:
            C.append((f"nll_loss weight {red} [{n},{c}]",
                      fb(lambda n=n, c=c: (rg(n, c), torch.randint(0, c, (n,), device=DEV), torch.rand(c, device=DEV)),
                         lambda x, t, w, red=red: F.nll_loss(x, t, weight=w, reduction=red))))
    # rms_norm (on CUDA _fused_rms_norm: output, rstd; backward grad_input, grad_weight), over the last
    # norm= dims, with and without a weight; (70000, 32) takes the weight gradient's partial-rows path
    # (M > 65536, N / 32 < SMs / 2: an (R, N) block reduced with sum(0)).
    for shape, dims, affine in [((1024, 1024), 1, True), ((16, 64, 256), 1, True), ((16, 64, 256), 2, False),
                                ((70000, 32), 1, True), ((7,), 1, True)]:
        C.append((f"fused_rms_norm {'weight' if affine else 'noweight'} norm={dims} {list(shape)}",
                  fb(lambda s=shape, k=dims, a=affine: (rg(*s),) + ((rg(*s[len(s) - k:]),) if a else ()),
                     lambda x, *w, k=dims: F.rms_norm(x, x.shape[x.dim() - k:], w[0] if w else None))))
    # masked_select: every other element selected (mask i % 2 == 1, made before recording), forward and backward.
    # nonzero's CUB count (one tile up to 4096 items, else the even-share grid) and select scratch, the int64
    # positions, the output; backward's zeros, int64 prefix sums and CUB scan scratch. A broadcast mask ([256]
    # over [4, 256]) is copied contiguous first.
    for shape, mshape in [((1024,), (1024,)), ((4, 256), (256,)), ((64, 1000), (64, 1000)), ((1 << 20,), (1 << 20,)),
                          ((7,), (7,))]:
        C.append((f"masked_select {list(shape)} mask={list(mshape)}",
                  fb(lambda s=shape, m=mshape: (rg(*s), torch.arange(m[0] if len(m) == 1 else m[0] * m[1],
                                                                     device=DEV).view(m) % 2 == 1),
                     lambda x, m: torch.masked_select(x, m))))
    for name, fn in C:
        CASES.append(("op_table", name, fn))


def composite_cases():
    """Ops PyTorch composes from others (no node of their own): cross_entropy with label_smoothing, one_hot,
    repeat_interleave, SDPA with enable_gqa (math backend), and randperm (a factory)."""
    C = []
    for n, c in [(64, 10), (1024, 1000)]:
        def tgt(n=n, c=c):
            return torch.randint(0, c, (n,), device=DEV)
        for red in ["mean", "sum", "none"]:
            C.append((f"cross_entropy ls=0.1 {red} [{n},{c}]",
                      fb(lambda n=n, c=c, tgt=tgt: (rg(n, c), tgt()),
                         lambda x, t, red=red: F.cross_entropy(x, t, reduction=red, label_smoothing=0.1))))
    # Class weights (rand(C), made before recording): plain, and with label_smoothing for every reduction (mean
    # with both divides by weight.gather(0, target.masked_select(~ignore_mask).flatten()).sum()).
    for n, c in [(64, 10), (1024, 1000)]:
        def tgt_w(n=n, c=c):
            return rg(n, c), torch.randint(0, c, (n,), device=DEV), torch.rand(c, device=DEV)
        for red in ["mean", "sum", "none"]:
            C.append((f"cross_entropy weight {red} [{n},{c}]",
                      fb(tgt_w, lambda x, t, w, red=red: F.cross_entropy(x, t, weight=w, reduction=red))))
        for red in ["mean", "sum", "none"]:
            C.append((f"cross_entropy weight ls=0.1 {red} [{n},{c}]",
                      fb(tgt_w, lambda x, t, w, red=red: F.cross_entropy(x, t, weight=w, reduction=red,
                                                                         label_smoothing=0.1))))
    # one_hot: num_classes given (zeros + scatter_) and inferred (x.max() first, read by .item()).
    for n, c, given in [(64, 10, True), (4096, 1000, True), (64, 10, False), (4096, 1000, False)]:
        C.append((f"one_hot classes={c if given else -1} [{n}]",
                  fb(lambda n=n, c=c: (torch.arange(n, device=DEV) % c,),
                     lambda t, c=c, given=given: F.one_hot(t, c if given else -1))))
    for shape, repeats, dim in [((64, 32), 2, 1), ((1024, 1024), 3, 0), ((7,), 4, 0)]:
        C.append((f"repeat_interleave r={repeats} dim={dim} {list(shape)}",
                  fb(lambda s=shape: (rg(*s),), lambda x, r=repeats, d=dim: torch.repeat_interleave(x, r, dim=d))))
    # SDPA with enable_gqa, float32 [B, Hq, Hkv, L, D]: fewer key/value heads rule out the memory-efficient
    # kernel, so PyTorch runs the math backend, which repeat_interleaves key then value to Hq heads.
    for b, hq, hk, l, d in [(2, 8, 2, 64, 64), (1, 4, 1, 33, 16)]:
        for causal in [False, True]:
            C.append((f"sdpa gqa{' causal' if causal else ''} [{b},{hq},{hk},{l},{d}]",
                      fb(lambda b=b, hq=hq, hk=hk, l=l, d=d: (rg(b, hq, l, d), rg(b, hk, l, d), rg(b, hk, l, d)),
                         lambda q, k, v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                                      enable_gqa=True))))
    # randperm on the GPU (Randperm.cu): the result, arange(n), random keys (int32 up to 32 bits, else int64)
    # and their sorted copy, CUB's radix-sort scratch; forward only.
    for n in [5, 1000, 30000, 65536, 1 << 20]:
        C.append((f"randperm [{n}]", fb(lambda: (), lambda n=n: torch.randperm(n, device=DEV))))
    for name, fn in C:
        CASES.append(("composite", name, fn))


def gqa16_cases():
    """SDPA with enable_gqa in bfloat16 and float16, 4-d [B, Hq, Hkv, L, D]: PyTorch 2.11 picks a fused
    backend (flash or cuDNN take grouped heads natively); the case name records the node of the output
    (the backend chosen), and the events forward and backward."""
    C = []
    for dt, dn in [(torch.bfloat16, "bf16"), (torch.float16, "f16")]:
        for b, hq, hk, l, d in [(2, 8, 2, 64, 64), (1, 4, 1, 33, 16), (2, 12, 4, 256, 64), (1, 8, 8, 128, 128),
                                (4, 16, 2, 1024, 64)]:
            for causal in [False, True]:
                def mk(b=b, hq=hq, hk=hk, l=l, d=d, dt=dt):
                    return (rg(b, hq, l, d, dt=dt), rg(b, hk, l, d, dt=dt), rg(b, hk, l, d, dt=dt))

                def op(q, k, v, causal=causal):
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                    BACKEND.append(type(y.grad_fn).__name__ if y.grad_fn is not None else "")
                    return y
                C.append((f"sdpa gqa {dn}{' causal' if causal else ''} [{b},{hq},{hk},{l},{d}]", fb(mk, op)))
    for name, fn in C:
        CASES.append(("gqa16", name, fn))


BACKEND = []


# ------------------------------------------------------------------ type promotion
def promotion_cases():
    """Operands of two dtypes (bytegrad's tests/tensor/promotion.cpp and tests/autograd/promotion.cpp hold
    the same sequences as arithmetic): binary ops allocate only their output; where converts an operand of
    another dtype with .to() first; backward converts each gradient to its input's dtype after sum_to."""
    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16

    def z(*shape, dt=f32):
        return torch.zeros(*shape, device=DEV, dtype=dt)

    def fwd(make_inputs, op):
        def fn():
            inputs = make_inputs()
            ev, y = events_of(lambda: op(*inputs))
            return {"forward": ev, "dtype": str(y.dtype)}, None
        return fn

    C = []
    C.append(("add f32 + bf16 [4,64,64]", fwd(lambda: (z(4, 64, 64), z(4, 64, 64, dt=bf16)), lambda a, b: a + b)))
    C.append(("add f16 + bf16 [4,64,64]", fwd(lambda: (z(4, 64, 64, dt=f16), z(4, 64, 64, dt=bf16)), lambda a, b: a + b)))
    C.append(("add bf16 [4,64,64] + f32 0-d", fwd(lambda: (z(4, 64, 64, dt=bf16), z(())), lambda a, b: a + b)))
    C.append(("lt f32 < bf16 [4,64,64]", fwd(lambda: (z(4, 64, 64), z(4, 64, 64, dt=bf16)), lambda a, b: a < b)))
    C.append(("add_ bf16 += f32 [4,64,64]", fwd(lambda: (z(4, 64, 64, dt=bf16), z(4, 64, 64)), lambda a, b: a.add_(b))))
    C.append(("where f32, bf16 [64,64]", fwd(lambda: (z(64, 64, dt=torch.bool), z(64, 64), z(64, 64, dt=bf16)),
                                             lambda c, a, b: torch.where(c, a, b))))
    C.append(("where f16 [64], bf16 [64,64]", fwd(lambda: (z(64, 64, dt=torch.bool), z(64, dt=f16), z(64, 64, dt=bf16)),
                                                  lambda c, a, b: torch.where(c, a, b))))

    def bwd(x_grad, y_shape):
        def fn():
            x = torch.zeros(64, 64, device=DEV, requires_grad=x_grad)
            y = torch.zeros(*y_shape, device=DEV, dtype=bf16, requires_grad=True)
            w = z(64, 64)
            loss = ((x + y) * w).sum()
            ev, _ = events_of(lambda: loss.backward())
            return {"backward": ev, "y_grad_dtype": str(y.grad.dtype)}, None
        return fn
    C.append(("backward sum((x f32 + y bf16) * w) [64,64] both grad", bwd(True, (64, 64))))
    C.append(("backward sum((x f32 + y bf16) * w) [64,64] y grad only", bwd(False, (64, 64))))
    C.append(("backward sum((x f32 [64,64] + bias bf16 [64]) * w)", bwd(True, (64,))))
    for name, fn in C:
        CASES.append(("promotion", name, fn))


# ------------------------------------------------------------------ optimizers
def optim_cases():
    shapes = [[(1024, 256), (1024,), (1, 1024), (1,)], [(4096, 4096)], [(10,), (3, 3)]]
    for shapes_i, shape_list in enumerate(shapes):
        for opt_name, make_opt in [
            ("sgd", lambda p: torch.optim.SGD(p, lr=0.1)),
            ("sgd_momentum", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
            ("sgd_momentum_foreach", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True)),
            ("sgd_momentum_wd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=False)),
            ("adam_single", lambda p: torch.optim.Adam(p, lr=1e-3, foreach=False)),
            ("adam_default", lambda p: torch.optim.Adam(p, lr=1e-3)),
            ("adam_single_wd", lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=0.01, foreach=False)),
            ("adam_single_amsgrad", lambda p: torch.optim.Adam(p, lr=1e-3, amsgrad=True, foreach=False)),
            ("adamw_single", lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False)),
            ("adamw_default", lambda p: torch.optim.AdamW(p, lr=1e-3)),
        ]:
            def fn(shape_list=shape_list, make_opt=make_opt):
                ps = [torch.randn(s, device=DEV, requires_grad=True) for s in shape_list]
                for p in ps:
                    p.grad = torch.randn_like(p)
                opt = make_opt(ps)
                s1, _ = events_of(opt.step)
                s2, _ = events_of(opt.step)
                z, _ = events_of(lambda: opt.zero_grad())
                return {"step1": s1, "step2": s2, "zero_grad": z}, None
            CASES.append(("optim", f"{opt_name} params={shape_list}", fn))


def main():
    out_path = sys.argv[1]
    groups = set(sys.argv[2:]) or {"reduce", "layernorm", "ops", "optim"}
    props = torch.cuda.get_device_properties(0)
    reduce_cases()
    layernorm_cases()
    ops_cases()
    op_table_cases()
    composite_cases()
    gqa16_cases()
    promotion_cases()
    optim_cases()
    with open(out_path, "w") as f:
        f.write(json.dumps({"device": props.name, "multi_processor_count": props.multi_processor_count,
                            "max_threads_per_multi_processor": props.max_threads_per_multi_processor,
                            "torch": torch.__version__}) + "\n")
        for group, name, fn in CASES:
            if group not in groups:
                continue
            try:
                BACKEND.clear()
                ev, r = fn()
                row = {"group": group, "case": name, "events": ev}
                if BACKEND:
                    row["node"] = BACKEND[0]
                if r is not None:
                    row["output_bytes"] = nbytes(r)
            except Exception as e:  # record and go on: one odd case must not lose the rest
                row = {"group": group, "case": name, "error": f"{type(e).__name__}: {e}"}
            f.write(json.dumps(row) + "\n")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
