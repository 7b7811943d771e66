"""What PyTorch does with the inputs of issue 25 (values that do not fit a dtype, overlapping writes, integer
arithmetic, autograd's gradient contract, optimizer arguments, inputs bytegrad refused): for each case, the
exception type and message, or the result. Run on the GPU machine:

    python3 tools/probes/bad_input_probe.py > tests/data/pytorch_probes/bad_inputs/pytorch_2_11.txt

One line per case: `name | raised TYPE: message` or `name | ok: result`.
"""
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"


def show(value):
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)} {value.detach().cpu().tolist()}"
    return repr(value)


def case(name, fn):
    try:
        result = fn()
        text = "ok: " + show(result)
    except Exception as e:  # noqa: BLE001 - we record whatever PyTorch raises
        message = str(e).strip().splitlines()
        text = f"raised {type(e).__name__}: " + (message[0] if message else "")
    print(f"{name} | {text}", flush=True)


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=dev)


# ---- values that do not fit the dtype
case("full 1e39 float32", lambda: torch.full((2,), 1e39, dtype=torch.float32, device=dev))
case("full inf float32", lambda: torch.full((2,), math.inf, dtype=torch.float32, device=dev))
case("full nan float16", lambda: torch.full((2,), math.nan, dtype=torch.float16, device=dev))
case("full 65504 float16", lambda: torch.full((2,), 65504.0, dtype=torch.float16, device=dev))
case("full 65520 float16", lambda: torch.full((2,), 65520.0, dtype=torch.float16, device=dev))
case("full 1e6 float16", lambda: torch.full((2,), 1e6, dtype=torch.float16, device=dev))
case("full 1e39 bfloat16", lambda: torch.full((2,), 1e39, dtype=torch.bfloat16, device=dev))
case("full 300 uint8", lambda: torch.full((2,), 300, dtype=torch.uint8, device=dev))
case("full 255 uint8", lambda: torch.full((2,), 255, dtype=torch.uint8, device=dev))
case("full -1 uint8", lambda: torch.full((2,), -1, dtype=torch.uint8, device=dev))
case("full -255 uint8", lambda: torch.full((2,), -255, dtype=torch.uint8, device=dev))
case("full -256 uint8", lambda: torch.full((2,), -256, dtype=torch.uint8, device=dev))
case("full -1.0 uint8", lambda: torch.full((2,), -1.0, dtype=torch.uint8, device=dev))
case("full 2.5 int64", lambda: torch.full((2,), 2.5, dtype=torch.int64, device=dev))
case("full nan int64", lambda: torch.full((2,), math.nan, dtype=torch.int64, device=dev))
case("full inf int32", lambda: torch.full((2,), math.inf, dtype=torch.int32, device=dev))
case("full 3e9 int32", lambda: torch.full((2,), 3e9, dtype=torch.int32, device=dev))
case("full 3000000000 int32", lambda: torch.full((2,), 3000000000, dtype=torch.int32, device=dev))
case("full 2 bool", lambda: torch.full((2,), 2, dtype=torch.bool, device=dev))
case("full 0.5 bool", lambda: torch.full((2,), 0.5, dtype=torch.bool, device=dev))
case("full nan bool", lambda: torch.full((2,), math.nan, dtype=torch.bool, device=dev))
case("fill_ 1e6 float16", lambda: torch.zeros(2, dtype=torch.float16, device=dev).fill_(1e6))
case("fill_ 300 uint8", lambda: torch.zeros(2, dtype=torch.uint8, device=dev).fill_(300))
case("fill_ -1 uint8", lambda: torch.zeros(2, dtype=torch.uint8, device=dev).fill_(-1))
case("fill_ 1e39 float32", lambda: torch.zeros(2, device=dev).fill_(1e39))
case("masked_fill_ 300 uint8",
     lambda: torch.zeros(2, dtype=torch.uint8, device=dev).masked_fill_(t([True, False], torch.bool), 300))
case("masked_fill 1e39 float32",
     lambda: torch.zeros(2, device=dev).masked_fill(t([True, False], torch.bool), 1e39))
case("add scalar 300 uint8", lambda: torch.zeros(2, dtype=torch.uint8, device=dev) + 300)
case("add scalar -1 uint8", lambda: torch.zeros(2, dtype=torch.uint8, device=dev) + (-1))
case("mul scalar 1e39 float32", lambda: torch.ones(2, device=dev) * 1e39)
case("add scalar 1e6 float16", lambda: torch.ones(2, dtype=torch.float16, device=dev) + 1e6)
case("add scalar 2.5 int64", lambda: torch.ones(2, dtype=torch.int64, device=dev) + 2.5)
case("add_ scalar 2.5 int64", lambda: torch.ones(2, dtype=torch.int64, device=dev).add_(2.5))
case("add scalar 2**40 int32", lambda: torch.ones(2, dtype=torch.int32, device=dev) + 2**40)
case("clamp 1e39 float32", lambda: torch.ones(2, device=dev).clamp(max=1e39))
case("tensor [300] uint8", lambda: torch.tensor([300], dtype=torch.uint8, device=dev))
case("tensor [1e39] float32", lambda: torch.tensor([1e39], dtype=torch.float32, device=dev))
case("arange 0..300 uint8", lambda: torch.arange(0, 300, 100, dtype=torch.uint8, device=dev))
case("arange 0..2.5 int64", lambda: torch.arange(0, 2.5, dtype=torch.int64, device=dev))
case("arange(12) dtype", lambda: torch.arange(12).dtype)
case("randint high 2**40 int32", lambda: torch.randint(0, 2**40, (3,), dtype=torch.int32, device=dev))
case("randint low -5 uint8", lambda: torch.randint(-5, 3, (3,), dtype=torch.uint8, device=dev))
case("randint high 3 bool", lambda: torch.randint(0, 3, (3,), dtype=torch.bool, device=dev))
case("randint high 2 bool", lambda: torch.randint(0, 2, (3,), dtype=torch.bool, device=dev).dtype)
case("randint high 256 uint8", lambda: torch.randint(0, 256, (3,), dtype=torch.uint8, device=dev).dtype)
case("randint high 257 uint8", lambda: torch.randint(0, 257, (3,), dtype=torch.uint8, device=dev))
case("rand int64", lambda: torch.rand(3, dtype=torch.int64, device=dev))
case("randn bool", lambda: torch.randn(3, dtype=torch.bool, device=dev))
case("randn int32", lambda: torch.randn(3, dtype=torch.int32, device=dev))
case("normal_ int64", lambda: torch.zeros(3, dtype=torch.int64, device=dev).normal_())
case("uniform_ int64", lambda: torch.zeros(3, dtype=torch.int64, device=dev).uniform_())

# ---- overlapping writes
def sq():
    return torch.arange(9.0, device=dev).view(3, 3)

case("copy_ x.t()", lambda: (lambda x: x.copy_(x.t()))(sq()))
case("add_ x.t()", lambda: (lambda x: x.add_(x.t()))(sq()))
case("add_ x (full overlap)", lambda: (lambda x: x.add_(x))(sq()))
case("copy_ x (same)", lambda: (lambda x: x.copy_(x))(sq()))
case("copy_ shifted", lambda: (lambda x: x.view(9)[1:].copy_(x.view(9)[:-1]))(sq()))
case("add_ shifted", lambda: (lambda x: x.view(9)[1:].add_(x.view(9)[:-1]))(sq()))
case("mul_ into expanded", lambda: torch.zeros(3, device=dev).expand(2, 3).mul_(2))
case("add_ into expanded", lambda: torch.zeros(3, device=dev).expand(2, 3).add_(1))
case("fill_ expanded", lambda: (lambda b: (b.expand(2, 3).fill_(7), b)[1])(torch.zeros(3, device=dev)))
case("zero_ expanded", lambda: (lambda b: (b.expand(2, 3).zero_(), b)[1])(torch.ones(3, device=dev)))
case("fill_ overlapping empty_strided",
     lambda: torch.empty_strided((2, 3), (1, 1), device=dev).fill_(5))
case("copy_ into expanded", lambda: torch.zeros(3, device=dev).expand(2, 3).copy_(torch.ones(2, 3, device=dev)))
case("masked_fill_ into expanded",
     lambda: torch.zeros(3, device=dev).expand(2, 3).masked_fill_(torch.ones(2, 3, dtype=torch.bool, device=dev), 1))
case("copy_ from expanded source", lambda: torch.zeros(2, 3, device=dev).copy_(torch.ones(3, device=dev).expand(2, 3)))
case("add_ x[0] from x (input overlaps, dest smaller)", lambda: (lambda x: x[0].add_(x[1]))(sq()))
case("index_select out overlapping", lambda: (lambda x: torch.index_select(x, 0, t([0, 1], torch.int64), out=x[1:]))(sq()))
case("mul out=input transposed", lambda: (lambda x: torch.mul(x, 2, out=x.t()))(sq()))
case("mul out=input", lambda: (lambda x: torch.mul(x, 2, out=x))(sq()))

# ---- integer and bool arithmetic
ints = lambda: t([1, 2, 3], torch.int64)
case("int pow scalar -1", lambda: ints() ** -1)
case("int pow_ scalar -2", lambda: ints().pow_(-2))
case("int pow tensor negative", lambda: ints() ** t([-1, -1, -2], torch.int64))
case("int pow tensor negative base 1", lambda: t([1, -1, 2], torch.int64) ** t([-1, -3, 2], torch.int64))
case("scalar pow int tensor negative", lambda: 2 ** t([-1, 1], torch.int64))
case("int pow scalar -1.0 float", lambda: ints() ** -1.0)
case("bool - bool", lambda: t([True, False], torch.bool) - t([True, True], torch.bool))
case("bool - scalar", lambda: t([True, False], torch.bool) - 1)
case("bool - True", lambda: t([True, False], torch.bool) - True)
case("bool + bool", lambda: t([True, False], torch.bool) + t([True, True], torch.bool))
case("bool neg", lambda: -t([True, False], torch.bool))
case("int add alpha 0.5", lambda: torch.add(ints(), ints(), alpha=0.5))
case("int sub alpha 0.5", lambda: torch.sub(ints(), ints(), alpha=0.5))
case("int add alpha 2.0", lambda: torch.add(ints(), ints(), alpha=2.0))
case("bool add alpha 2", lambda: torch.add(t([True], torch.bool), t([True], torch.bool), alpha=2))
case("float add alpha 0.5", lambda: torch.add(t([1.0]), t([1.0]), alpha=0.5))
case("gather int32 index", lambda: torch.arange(6.0, device=dev).view(2, 3).gather(1, t([[0], [1]], torch.int32)))
case("index_select int32 index", lambda: torch.arange(6.0, device=dev).view(2, 3).index_select(1, t([0, 1], torch.int32)))
case("embedding int32 index", lambda: F.embedding(t([0, 1], torch.int32), torch.ones(3, 2, device=dev)))
case("cross_entropy int32 target", lambda: F.cross_entropy(torch.ones(2, 3, device=dev), t([0, 1], torch.int32)))
case("device cpu:1", lambda: torch.zeros(2, device="cpu:1"))
case("device cuda:5", lambda: torch.zeros(2, device="cuda:5"))
case("dropout p nan", lambda: F.dropout(torch.ones(3, device=dev), p=math.nan))
case("dropout p -0.1", lambda: F.dropout(torch.ones(3, device=dev), p=-0.1))
case("nn.Dropout p nan", lambda: torch.nn.Dropout(p=math.nan))
case("unbind 0-d", lambda: torch.tensor(1.0, device=dev).unbind())
case("unbind 0-d dim 0", lambda: torch.tensor(1.0, device=dev).unbind(0))

# ---- autograd's gradient contract
def leaf(dtype=torch.float32, device=dev):
    return torch.ones(2, 3, dtype=dtype, device=device, requires_grad=True)

case("backward gradient on cpu", lambda: (leaf() * 2).backward(torch.ones(2, 3)))
case("backward gradient float64", lambda: (lambda x: ((x * 2).backward(torch.ones(2, 3, dtype=torch.float64, device=dev)), x.grad)[1])(leaf()))
case("backward gradient float16", lambda: (lambda x: ((x * 2).backward(torch.ones(2, 3, dtype=torch.float16, device=dev)), x.grad)[1])(leaf()))
case("backward gradient int64", lambda: (lambda x: ((x * 2).backward(torch.ones(2, 3, dtype=torch.int64, device=dev)), x.grad)[1])(leaf()))
case("backward gradient wrong shape", lambda: (leaf() * 2).backward(torch.ones(3, 2, device=dev)))
case("backward gradient expandable shape", lambda: (leaf() * 2).backward(torch.ones(3, device=dev)))
case("autograd.grad grad_outputs cpu", lambda: torch.autograd.grad((leaf() * 2,), (leaf(),), (torch.ones(2, 3),), allow_unused=True))
def assign(grad):
    x = leaf()
    x.grad = grad
    return x.grad
case("assign grad float64", lambda: assign(torch.ones(2, 3, dtype=torch.float64, device=dev)))
case("assign grad cpu", lambda: assign(torch.ones(2, 3)))
case("assign grad wrong shape", lambda: assign(torch.ones(3, 2, device=dev)))
case("assign grad int64", lambda: assign(torch.ones(2, 3, dtype=torch.int64, device=dev)))
def hook_returns(value):
    x = leaf()
    y = x * 2
    y.register_hook(lambda g: value)
    y.sum().backward()
    return x.grad
case("hook returns float64", lambda: hook_returns(torch.ones(2, 3, dtype=torch.float64, device=dev)))
case("hook returns cpu", lambda: hook_returns(torch.ones(2, 3)))
case("hook returns wrong shape", lambda: hook_returns(torch.ones(3, 2, device=dev)))
def unpack_returns_none():
    x = leaf()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: None):
        y = (x * x).sum()
    y.backward()
case("unpack hook returns None", unpack_returns_none)

# ---- optimizer and module arguments
p = lambda: torch.nn.Parameter(torch.ones(2, device=dev))
case("Adam lr nan", lambda: torch.optim.Adam([p()], lr=math.nan))
case("Adam lr -1", lambda: torch.optim.Adam([p()], lr=-1.0))
case("Adam beta1 nan", lambda: torch.optim.Adam([p()], betas=(math.nan, 0.999)))
case("Adam beta1 1.0", lambda: torch.optim.Adam([p()], betas=(1.0, 0.999)))
case("Adam beta2 -0.1", lambda: torch.optim.Adam([p()], betas=(0.9, -0.1)))
case("Adam eps -1", lambda: torch.optim.Adam([p()], eps=-1.0))
case("Adam eps nan", lambda: torch.optim.Adam([p()], eps=math.nan))
case("Adam weight_decay -1", lambda: torch.optim.Adam([p()], weight_decay=-1.0))
case("Adam weight_decay nan", lambda: torch.optim.Adam([p()], weight_decay=math.nan))
case("AdamW lr nan", lambda: torch.optim.AdamW([p()], lr=math.nan))
case("SGD lr nan", lambda: torch.optim.SGD([p()], lr=math.nan))
case("SGD lr -1", lambda: torch.optim.SGD([p()], lr=-1.0))
case("SGD momentum -1", lambda: torch.optim.SGD([p()], lr=0.1, momentum=-1.0))
case("SGD momentum nan", lambda: torch.optim.SGD([p()], lr=0.1, momentum=math.nan))
case("SGD weight_decay -1", lambda: torch.optim.SGD([p()], lr=0.1, weight_decay=-1.0))
case("SGD dampening nesterov", lambda: torch.optim.SGD([p()], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True))
def overlapping_groups():
    q = p()
    return torch.optim.SGD([{"params": [q]}, {"params": [q]}], lr=0.1)
case("overlapping param groups", overlapping_groups)
case("same param twice in a group", lambda: (lambda q: torch.optim.SGD([q, q], lr=0.1))(p()))
def module_cycle():
    a = torch.nn.Module()
    b = torch.nn.Module()
    a.add_module("b", b)
    b.add_module("a", a)
    return len(list(a.named_modules()))
case("module cycle (named_modules count)", module_cycle)

# ---- valid inputs bytegrad refused
case("cat float32 float64", lambda: torch.cat([t([1.0]), t([2.0], torch.float64)]))
case("cat int64 float16", lambda: torch.cat([t([1], torch.int64), t([2.0], torch.float16)]))
case("cat bool int32", lambda: torch.cat([t([True], torch.bool), t([2], torch.int32)]))
case("cat legacy empty", lambda: torch.cat([torch.ones(2, 3, device=dev), torch.empty(0, device=dev)]))
case("cat legacy empty dim 1", lambda: torch.cat([torch.ones(2, 3, device=dev), torch.empty(0, device=dev)], dim=1))
case("cat only legacy empty", lambda: torch.cat([torch.empty(0, device=dev), torch.empty(0, device=dev)]))
case("cat empty 2-d mismatched", lambda: torch.cat([torch.ones(2, 3, device=dev), torch.empty(0, 2, device=dev)]))
case("linear 1-d weight", lambda: F.linear(torch.arange(6.0, device=dev).view(2, 3), t([1.0, 2.0, 3.0])))
case("linear 1-d weight bias", lambda: F.linear(torch.arange(6.0, device=dev).view(2, 3), t([1.0, 2.0, 3.0]), t(0.5)))
case("linear 1-d input", lambda: F.linear(t([1.0, 2.0, 3.0]), torch.ones(2, 3, device=dev)))
case("sdpa 3-d", lambda: F.scaled_dot_product_attention(*(torch.ones(2, 4, 8, device=dev),) * 3).shape)
case("mha unbatched", lambda: torch.nn.MultiheadAttention(8, 2, device=dev)(*(torch.ones(4, 8, device=dev),) * 3)[0].shape)
case("str of 2**30 expanded", lambda: len(str(torch.zeros(1, device=dev).expand(2**30))))
case("tolist 2**40 expanded",
     lambda: len(torch.zeros(1, device=dev).expand(2**40).tolist()) if False else "skipped (would allocate)")


# ---- the allocator setting in lower case (a fresh process each)
def alloc_conf(setting):
    code = "import torch; torch.ones(1, device='cuda'); print(torch.cuda.memory_reserved())"
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=setting)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    lines = (run.stderr.strip().splitlines() or [""])
    return ("ok: " + run.stdout.strip()) if run.returncode == 0 else ("raised: " + lines[-1])

if dev == "cuda":
    for setting in ["expandable_segments:true", "expandable_segments:True", "expandable_segments:1",
                    "expandable_segments:False", "per_process_memory_fraction:0.5",
                    "pinned_num_register_threads:1024", "pinned_num_register_threads:64",
                    "garbage_collection_threshold:0.5", "release_lock_on_cudamalloc:true"]:
        print(f"PYTORCH_CUDA_ALLOC_CONF={setting} | {alloc_conf(setting)}", flush=True)
    for setting in ["0:0", ":0:0", "garbage", ":4096:8", ":4096:8:16:2", ":4096"]:
        code = "import torch; a=torch.ones(4,4,device='cuda'); a@a; torch.cuda.synchronize(); print(torch.cuda.memory_allocated())"
        env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=setting)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        last = (r.stderr.strip().splitlines() or [""])[-1]
        print(f"CUBLAS_WORKSPACE_CONFIG={setting} | " + (("ok: allocated " + r.stdout.strip()) if r.returncode == 0 else "raised: " + last), flush=True)
    for setting in ["garbage", "-1", "1024", "0"]:
        code = "import torch; a=torch.ones(4,4,device='cuda'); b=torch.ones(4,device='cuda'); torch.addmm(b,a,a); torch.cuda.synchronize(); print(torch.cuda.memory_allocated())"
        env = dict(os.environ, CUBLASLT_WORKSPACE_SIZE=setting)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        last = (r.stderr.strip().splitlines() or [""])[-1]
        print(f"CUBLASLT_WORKSPACE_SIZE={setting} | " + (("ok: allocated " + r.stdout.strip()) if r.returncode == 0 else "raised: " + last), flush=True)
# Last: a NaN probability trips a device-side assertion, which leaves the CUDA context unusable.
case("bernoulli p nan", lambda: torch.bernoulli(torch.full((3,), math.nan, device=dev)))
print("torch", torch.__version__, "device", dev)
