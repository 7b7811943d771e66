#!/usr/bin/env python3
"""More programs in the style of shared/golden/scenarios.py, recorded in real PyTorch on a CUDA GPU.

They exercise what the seed documents do not: optimizers over several steps, gradient accumulation,
no_grad/detach, in-place ops, LayerNorm, masked attention, cross-entropy over a vocabulary, retain_graph.
bytegrad replays the same programs in C++ (programs/extra_programs/) and its tests (tests/programs/)
compare every mark.

Usage: python3 pytorch_extra_scenarios.py --all OUTDIR   (each program in a fresh process)
       python3 pytorch_extra_scenarios.py NAME OUTDIR
Set CUBLAS_WORKSPACE_CONFIG=:0:0 to record without the cuBLAS workspaces, as shared/golden/scenarios does.
"""
import json
import os
import subprocess
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda"


class Recorder:
    def __init__(self):
        self.steps = []
        self.events = []
        self.seen = 0

    def mark(self, label):
        torch.cuda.synchronize()
        if os.environ.get("TRACE_EVENTS"):  # the allocator events since the previous mark, in order
            trace = torch.cuda.memory._snapshot()["device_traces"][0]
            events = [[e["action"], e["size"], e["addr"]] for e in trace[self.seen:]
                      if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free")]
            self.seen = len(trace)
            self.events.append(dict(label=label, events=events))
        st = torch.cuda.memory_stats()
        self.steps.append(dict(
            label=label,
            allocated=torch.cuda.memory_allocated(),
            reserved=torch.cuda.memory_reserved(),
            max_allocated=torch.cuda.max_memory_allocated(),
            max_reserved=torch.cuda.max_memory_reserved(),
            segments=st.get("segment.all.current", 0),
            blocks=st.get("allocation.all.current", 0),
            requested=st.get("requested_bytes.all.current", 0),
            inactive_split=st.get("inactive_split_bytes.all.current", 0)))


PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


def mlp(sizes, inplace=False):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU(inplace=inplace))
    return nn.Sequential(*layers).to(DEV)


@program
def x_mlp_adam_train(r):
    model = mlp([256, 512, 10])
    r.mark("model")
    x = torch.randn(128, 256, device=DEV)
    y = torch.randint(0, 10, (128,), device=DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    r.mark("data")
    for it in range(3):
        out = model(x)
        r.mark(f"forward{it}")
        loss = F.cross_entropy(out, y)
        r.mark(f"loss{it}")
        loss.backward()
        r.mark(f"backward{it}")
        opt.step()
        r.mark(f"step{it}")
        opt.zero_grad()
        r.mark(f"zero_grad{it}")


@program
def x_mlp_sgd_momentum_mse(r):
    model = mlp([300, 700, 700, 5])
    x = torch.randn(200, 300, device=DEV)
    t = torch.randn(200, 5, device=DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    r.mark("setup")
    for it in range(3):
        loss = F.mse_loss(model(x), t)
        r.mark(f"loss{it}")
        loss.backward()
        r.mark(f"backward{it}")
        opt.step()
        r.mark(f"step{it}")
        opt.zero_grad(set_to_none=True)
        r.mark(f"zero_grad{it}")


@program
def x_grad_accumulation(r):
    model = mlp([512, 512, 1])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    batches = [torch.randn(64, 512, device=DEV) for _ in range(4)]
    r.mark("setup")
    for rnd in range(2):
        for i, xb in enumerate(batches):
            loss = model(xb).mean() / 4
            loss.backward()
            r.mark(f"round{rnd}_micro{i}")
        opt.step()
        r.mark(f"round{rnd}_step")
        opt.zero_grad(set_to_none=False)
        r.mark(f"round{rnd}_zero_grad_keep")
    del loss
    r.mark("del_loss")


@program
def x_no_grad_and_detach(r):
    lin1 = nn.Linear(1024, 2048).to(DEV)
    lin2 = nn.Linear(2048, 16).to(DEV)
    x = torch.randn(256, 1024, device=DEV)
    r.mark("setup")
    with torch.no_grad():
        out = lin2(torch.relu(lin1(x)))
    r.mark("no_grad_forward")
    del out
    r.mark("no_grad_del")
    h = torch.relu(lin1(x)).detach()
    r.mark("detached_hidden")
    out = lin2(h)
    r.mark("head_forward")
    out.sum().backward()
    r.mark("head_backward")
    del h, out
    r.mark("del_all")
    out = lin2(torch.relu(lin1(x)))
    r.mark("full_forward")
    out.pow(2).mean().backward()
    r.mark("full_backward")
    lin1.weight.grad = None
    lin1.bias.grad = None
    lin2.weight.grad = None
    lin2.bias.grad = None
    r.mark("grads_none")


@program
def x_inplace_ops(r):
    lin1 = nn.Linear(512, 1024, bias=False).to(DEV)
    lin2 = nn.Linear(1024, 1, bias=False).to(DEV)
    x = torch.randn(1024, 512, device=DEV)
    r.mark("setup")
    h = lin1(x)
    r.mark("hidden")
    h.mul_(0.5)
    r.mark("mul_inplace")
    h.add_(1.0)
    r.mark("add_inplace")
    h.relu_()
    r.mark("relu_inplace")
    loss = lin2(h).sum()
    r.mark("loss")
    loss.backward()
    r.mark("backward")
    x.add_(1.0)
    r.mark("leaf_input_add_inplace")
    with torch.no_grad():
        lin1.weight.mul_(0.9)
    r.mark("weight_mul_inplace_no_grad")
    del h, loss
    r.mark("del")


@program
def x_retain_graph(r):
    lin1 = nn.Linear(256, 1024).to(DEV)
    lin2 = nn.Linear(1024, 1).to(DEV)
    x = torch.randn(512, 256, device=DEV)
    r.mark("setup")
    loss = torch.sigmoid(lin2(torch.tanh(lin1(x)))).sum()
    r.mark("forward")
    loss.backward(retain_graph=True)
    r.mark("backward_retain")
    loss.backward(retain_graph=True)
    r.mark("backward_retain_again")
    loss.backward()
    r.mark("backward_free")
    del loss
    r.mark("del_loss")


@program
def x_checkpoint_deep(r):
    from torch.utils.checkpoint import checkpoint_sequential
    model = mlp([512, 1024, 1024, 1024, 1024, 256])
    x = torch.randn(512, 512, device=DEV)
    t = torch.randn(512, 256, device=DEV)
    r.mark("setup")
    out = model(x)
    r.mark("plain_forward")
    F.mse_loss(out, t).backward()
    r.mark("plain_backward")
    del out
    model.zero_grad()
    torch.cuda.reset_peak_memory_stats()
    r.mark("reset")
    out = checkpoint_sequential(model, 3, x, use_reentrant=False)
    r.mark("ckpt_forward")
    F.mse_loss(out, t).backward()
    r.mark("ckpt_backward")


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc1 = nn.Linear(c, 4 * c)
        self.fc2 = nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, l, c = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q = q.reshape(b, l, h, c // h).transpose(1, 2)
        k = k.reshape(b, l, h, c // h).transpose(1, 2)
        v = v.reshape(b, l, h, c // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // h) ** 0.5)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, l, c)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


@program
def x_tiny_transformer_adamw(r):
    vocab, c, heads, b, l = 1000, 128, 4, 8, 64
    emb = nn.Embedding(vocab, c).to(DEV)
    block = Block(c, heads).to(DEV)
    ln_f = nn.LayerNorm(c).to(DEV)
    head = nn.Linear(c, vocab, bias=False).to(DEV)
    params = list(emb.parameters()) + list(block.parameters()) + list(ln_f.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    r.mark("model")
    idx = torch.randint(0, vocab, (b, l), device=DEV)
    tgt = torch.randint(0, vocab, (b, l), device=DEV)
    mask = torch.triu(torch.ones(l, l, dtype=torch.bool, device=DEV), diagonal=1)
    r.mark("data")
    for it in range(2):
        x = block(emb(idx), mask)
        r.mark(f"block{it}")
        logits = head(ln_f(x))
        r.mark(f"logits{it}")
        loss = F.cross_entropy(logits.reshape(b * l, vocab), tgt.reshape(b * l))
        r.mark(f"loss{it}")
        loss.backward()
        r.mark(f"backward{it}")
        opt.step()
        r.mark(f"step{it}")
        opt.zero_grad()
        del x, logits, loss
        r.mark(f"end{it}")


@program
def x_layernorm_mlp(r):
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.GELU(), nn.Linear(512, 256),
                          nn.LayerNorm(256), nn.Tanh(), nn.Linear(256, 1)).to(DEV)
    x = torch.randn(1024, 256, device=DEV)
    r.mark("setup")
    out = model(x)
    r.mark("forward")
    out.mean().backward()
    r.mark("backward")
    with torch.no_grad():
        out = model(x)
    r.mark("no_grad_forward")


@program
def x_mean_sum_reductions(r):
    x = torch.randn(4096, 1024, device=DEV, requires_grad=True)
    w = torch.randn(1024, device=DEV, requires_grad=True)
    r.mark("setup")
    y = (x * w).sum(dim=0)
    r.mark("sum_dim0")
    z = (x + w).mean(dim=1)
    r.mark("mean_dim1")
    s = y.sum() + z.mean() + x.sum()
    r.mark("scalars")
    s.backward()
    r.mark("backward")
    del y, z, s
    r.mark("del")


@program
def x_seed_mlp_bias_adam_default(r):
    # the seed MLP with biases and Adam's default (foreach) path
    lin1 = nn.Linear(1024, 1024).to(DEV)
    lin2 = nn.Linear(1024, 1).to(DEV)
    opt = torch.optim.Adam(list(lin1.parameters()) + list(lin2.parameters()), lr=1e-3)
    x = torch.ones(1024, 1024, device=DEV)
    r.mark("setup")
    for it in range(2):
        loss = lin2(lin1(x)).sum()
        loss.backward()
        r.mark(f"backward{it}")
        opt.step()
        r.mark(f"step{it}")
        opt.zero_grad()
        r.mark(f"zero_grad{it}")


def run_one(name, outdir):
    r = Recorder()
    torch.cuda.init()
    if os.environ.get("TRACE_EVENTS"):
        torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    torch.manual_seed(0)
    notes = {}
    try:
        PROGRAMS[name](r)
        notes["ok"] = True
    except Exception:
        notes["ok"] = False
        notes["error"] = traceback.format_exc()[-2000:]
    notes["torch"] = torch.__version__
    notes["device"] = torch.cuda.get_device_name(0)
    notes["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(dict(name=name, steps=r.steps, notes=notes), f, indent=1)
    if r.events:
        with open(os.path.join(outdir, name + ".events.json"), "w") as f:
            json.dump(r.events, f)


if __name__ == "__main__":
    if sys.argv[1] == "--all":
        outdir = sys.argv[2]
        os.makedirs(outdir, exist_ok=True)
        for n in PROGRAMS:
            p = subprocess.run([sys.executable, __file__, n, outdir], capture_output=True, text=True, timeout=300)
            print(n, "rc", p.returncode, p.stderr[-500:] if p.returncode else "")
    else:
        run_one(sys.argv[1], sys.argv[2])
