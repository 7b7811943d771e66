#!/usr/bin/env python3
"""A sweep of GPT-2 training configurations a reviewer might pick (other sizes, head dims, vocabularies,
sequence lengths and batches, fp32 / bf16 / fp16 autocast, slow attention / SDPA, AdamW / Adam / SGD on the
foreach and single-tensor paths, activation checkpointing) and three max-batch questions, recorded in real
PyTorch for comparison with bytegrad's estimator (programs::estimate_gpt_training, bytegrad-estimate).

  python3 tools/probes/gpt2_sweep.py OUTDIR [--only x0|xd] [CASE...]
  python3 tools/probes/gpt2_sweep.py --events OUTDIR CASE...   allocator events of plain cases
  python3 tools/probes/gpt2_sweep.py --generate SEED COUNT OUTDIR [--gpus N] [--budget S] [--dry-run]
                                      a generated sweep on several GPUs (gpt2_generated.py)

--events writes OUTDIR/{x0,xd}/CASE.events (gpt2_memory_events.py's format: the memory history without an
op recorder, so backward is not perturbed; `# mark` lines between phases) for
compare_gpt2_events.py against bytegrad-estimate --memory-viz of the same case.

Writes OUTDIR/x0/CASE.json (CUBLAS_WORKSPACE_CONFIG=:0:0) and OUTDIR/xd/CASE.json (PyTorch's default
workspaces) in gpt2_heldout_amp.py's layout ({"case", "workspace", "steps"}: the marks of
shared/golden/scenarios.py's Rec) plus "config" (what bytegrad needs to run the same case: the
bytegrad-estimate options), "seconds", "torch", "device", "total_memory", and "error" when the run failed
(its "steps" then hold the marks it reached). Marks only: no op recorder (its dispatch mode changes
backward's in-place gradient sums). Every case and every trial runs sequentially, each in a fresh Python
process (one GPU; segment placement is a fresh process's).

Each run is gpt2_scenarios.py's train() (shared/golden/gpt2, read from this checkout): the model built on the
CPU and moved, nanoGPT's optimizer groups, two steps of forward, backward, step, zero_grad(set_to_none=True).
What train() does not offer is set from this file, in the child process only, as bytegrad's loop
(programs/gpt2_programs/gpt2_training.cpp) does it:
  optimizer adam: torch.optim.Adam with nanoGPT's two groups (weight decay 0.1 on parameters of 2+ dims, 0 on
      the rest), lr 6e-4, betas (0.9, 0.95); sgd: torch.optim.SGD(decay + no_decay params, lr 6e-4,
      momentum 0.9), one group, no weight decay. foreach on: foreach=None (PyTorch's default, the foreach
      path on CUDA); off: foreach=False.
  amp fp16: train()'s autocast region (bf16 there) with dtype float16 (no GradScaler, as bytegrad's loop).
  checkpoint: each Block under torch.utils.checkpoint(use_reentrant=False), as gpt2_heldout_amp.py does.

Max-batch cases answer `bytegrad-estimate gpt2 ... --limit LIMIT --max-batch`: bytegrad caps the allocator
with set_per_process_memory_fraction(min(1, LIMIT / total)) (programs/estimates/training_estimates.cpp) and
asks whether the two steps run without torch.OutOfMemoryError; here each batch tried is a fresh process
under the same cap (total: torch.cuda.mem_get_info()'s, the figure PyTorch's allocator multiplies the
fraction by). The search starts at "hint" (bytegrad's answer when this file was written, so a right answer
costs two runs: hint fits, hint + 1 does not) and gallops / bisects from there to PyTorch's own answer.
Their JSON adds "limit", "max_batch", "trials" ([{batch, fits, steps, error}]) and has as "steps" the marks
of the run at max_batch under the cap.
"""
import json, os, subprocess, sys, time, traceback

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2_DIR = os.path.join(HERE, "..", "..", "shared", "golden", "gpt2")
GiB = 1 << 30

# Model sizes: (n_layer, n_head, n_embd, vocab, block).
SMALL = (12, 12, 768, 50257, 1024)        # GPT-2 small, 124M
SMALL_PAD = (12, 12, 768, 50304, 1024)    # nanoGPT's vocabulary padded to a multiple of 64
MEDIUM = (24, 16, 1024, 50257, 1024)      # GPT-2 medium, 350M
MID = (4, 4, 256, 8000, 512)              # the held-out probes' mid model
TINY = (2, 2, 64, 512, 64)                # the goldens' tiny model
CHAR = (6, 6, 384, 65, 256)               # nanoGPT's shakespeare_char "baby GPT"


def case(model, batch, seq, optimizer="adamw", foreach=True, amp=None, attention="slow", checkpoint=False,
         limit=0, hint=(0, 0)):
    L, H, C, V, BL = model
    assert C % H == 0 and seq <= BL and optimizer in ("adamw", "adam", "sgd") and amp in (None, "bf16", "fp16")
    assert attention in ("slow", "sdpa")
    return dict(n_layer=L, n_head=H, n_embd=C, vocab=V, block=BL, batch=batch, seq=seq, optimizer=optimizer,
                foreach=foreach, amp=amp, attention=attention, checkpoint=checkpoint, limit=limit, hint=hint)


CASES = {
    # GPT-2 small: README's example, batch 1 at full context, padded vocabulary, nanoGPT's bf16 + flash
    # setting, fp16 autocast, the other optimizers.
    "small_8x1024": case(SMALL, 8, 1024),
    "small_4x256": case(SMALL, 4, 256),  # the golden g_gpt2_small_fp32 itself (gpt2_repeat.py runs it again)
    "small_1x1024": case(SMALL, 1, 1024),
    "small_vpad_8x128": case(SMALL_PAD, 8, 128),
    "small_vpad_bf16_sdpa_4x512": case(SMALL_PAD, 4, 512, amp="bf16", attention="sdpa"),
    "small_fp16_4x256": case(SMALL, 4, 256, amp="fp16"),
    "small_adam_4x256": case(SMALL, 4, 256, optimizer="adam"),
    "small_sgd_4x256": case(SMALL, 4, 256, optimizer="sgd"),
    # GPT-2 medium at a short sequence.
    "medium_2x256": case(MEDIUM, 2, 256),
    # 6 layers, 512 wide: head dims 64, 128 and 32; sequence 200; batches 8, 12, 5.
    "w512_vpad_8x256": case((6, 8, 512, 50304, 1024), 8, 256),
    "w512_h4_bf16_12x200": case((6, 4, 512, 50257, 1024), 12, 200, amp="bf16"),
    "w512_h16_sdpa_5x200": case((6, 16, 512, 8000, 256), 5, 200, attention="sdpa"),
    # nanoGPT's shakespeare_char model (vocabulary 65) at its batch 64 x 256 with bf16 + flash, and fp32.
    "char_bf16_sdpa_64x256": case(CHAR, 64, 256, amp="bf16", attention="sdpa"),
    "char_12x256": case(CHAR, 12, 256),
    # The mid model: fp16 SDPA, the single-tensor Adam and SGD paths, SGD under bf16, checkpointing.
    "mid_fp16_sdpa_6x320": case(MID, 6, 320, amp="fp16", attention="sdpa"),
    "mid_adam_single_8x512": case(MID, 8, 512, optimizer="adam", foreach=False),
    "mid_sgd_single_8x512": case(MID, 8, 512, optimizer="sgd", foreach=False),
    "mid_sgd_bf16_8x512": case(MID, 8, 512, optimizer="sgd", amp="bf16"),
    "mid_ckpt_bf16_sdpa_8x512": case(MID, 8, 512, amp="bf16", attention="sdpa", checkpoint=True),
    "mid_ckpt_4x300": case(MID, 4, 300, checkpoint=True),
    # The tiny model: fp16, and Adam with bf16 SDPA (head dim 32) at batch 1 x 37.
    "tiny_fp16_4x64": case(TINY, 4, 64, amp="fp16"),
    "tiny_adam_bf16_sdpa_1x37": case(TINY, 1, 37, optimizer="adam", amp="bf16", attention="sdpa"),
    # Max batch under a cap (`--limit L --max-batch`); hint: bytegrad's answers (x0, xd) when written.
    "mb_small_1024_24GiB": case(SMALL, 0, 1024, limit=24 * GiB, hint=(11, 11)),  # README's example
    "mb_mid_512_1GiB": case(MID, 0, 512, limit=1 * GiB, hint=(7, 7)),
    "mb_char_bf16_sdpa_256_1GiB": case(CHAR, 0, 256, amp="bf16", attention="sdpa", limit=1 * GiB, hint=(35, 28)),
}

WORKSPACES = (("x0", ":0:0"), ("xd", None))  # CUBLAS_WORKSPACE_CONFIG


# ------------------------------------------------------------------------------------------ one run (child)

def child(name, batch, out_path, config=None):
    """Runs CASES[name] (or `config`, a generated case's) at `batch` (under its limit, if any) in this
    process; writes a JSON object with "steps" (the marks reached), "fits" (False on torch.OutOfMemoryError)
    and "error" (any failure's text)."""
    import torch
    import torch.utils.checkpoint
    sys.path.insert(0, GPT2_DIR)
    import gpt2_scenarios as g  # it puts shared/golden on sys.path
    from scenarios import Rec

    c = config if config is not None else CASES[name]
    fe = None if c["foreach"] else False  # None: PyTorch's default, the foreach path on CUDA

    if c["optimizer"] != "adamw":  # train() calls g.make_optimizer(model, foreach) by its module-global name
        def make_optimizer(model, foreach):
            decay = [p for p in model.parameters() if p.dim() >= 2]
            no_decay = [p for p in model.parameters() if p.dim() < 2]
            if c["optimizer"] == "sgd":
                return torch.optim.SGD(decay + no_decay, lr=6e-4, momentum=0.9, foreach=foreach)
            groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
            return torch.optim.Adam(groups, lr=6e-4, betas=(0.9, 0.95), foreach=foreach)
        g.make_optimizer = make_optimizer

    if c["amp"] == "fp16":
        # train() enters torch.autocast(device_type="cuda", dtype=torch.bfloat16), looking `torch` up in its
        # module's globals: give that module a view of torch whose autocast is float16 (nothing else changes;
        # checkpoint's recomputation takes the dtype from the autocast state, float16).
        real_autocast = torch.autocast

        class TorchFp16Autocast:
            def __getattr__(self, attr):
                return getattr(torch, attr)

            @staticmethod
            def autocast(device_type, dtype=None, **kw):
                return real_autocast(device_type=device_type,
                                     dtype=torch.float16 if device_type == "cuda" else dtype, **kw)
        g.torch = TorchFp16Autocast()

    if c["checkpoint"]:
        plain = g.Block.forward
        g.Block.forward = lambda self, x: torch.utils.checkpoint.checkpoint(plain, self, x, use_reentrant=False)

    out = dict(batch=batch, fits=None, error=None)
    r = Rec(name)
    events_path = os.environ.get("GPT2_SWEEP_EVENTS")
    if events_path:
        sys.path.insert(0, HERE)
        from gpt2_memory_events import Events
        events = Events()
        rec_mark = r.mark

        def mark(label):
            events.mark(label)
            rec_mark(label)
        r.mark = mark
    t0 = time.time()
    try:
        torch.cuda.init()
        if c["limit"]:
            total = torch.cuda.mem_get_info(0)[1]
            out["total_for_fraction"] = total
            torch.cuda.set_per_process_memory_fraction(min(1.0, c["limit"] / total), 0)
        g.train(r, g.Cfg(c["n_layer"], c["n_head"], c["n_embd"], c["vocab"], c["block"]), batch, c["seq"], fe,
                c["amp"] is not None, sdpa=c["attention"] == "sdpa", steps=c.get("steps", 2))
        out["fits"] = True
    except torch.OutOfMemoryError as e:
        out["fits"] = False
        out["error"] = str(e)[:600]
    except Exception:
        out["error"] = traceback.format_exc()[-2000:]
    out["seconds"] = round(time.time() - t0, 2)
    if events_path:
        events.flush()
        with open(events_path, "w") as f:
            f.write("\n".join(events.lines) + "\n")
    out["steps"] = r.steps
    out["torch"] = torch.__version__
    try:
        out["device"] = torch.cuda.get_device_name(0)
        out["total_memory"] = torch.cuda.get_device_properties(0).total_memory
    except Exception:
        pass
    with open(out_path, "w") as f:
        json.dump(out, f)


# ------------------------------------------------------------------------------------------ the sweep (parent)

def run_child(name, batch, ws, sub_dir, config=None, gpu=None, timeout=240, events_path=None, extra_env=None):
    """One fresh process (on CUDA_VISIBLE_DEVICES=gpu when given; `config`: a generated case's, passed as
    JSON; `events_path`: also write its allocator events there; `extra_env`: more variables for it); returns
    its JSON object (with "error" when it wrote none)."""
    env = dict(os.environ)
    env.update(extra_env or {})
    if events_path is not None:
        env["GPT2_SWEEP_EVENTS"] = os.path.abspath(events_path)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # bytegrad's defaults: no allocator settings
    env.pop("PYTORCH_ALLOC_CONF", None)
    if ws is not None:
        env["CUBLAS_WORKSPACE_CONFIG"] = ws
    tmp = os.path.join(sub_dir, f".{name}.b{batch}.tmp.json")
    if os.path.exists(tmp):
        os.remove(tmp)
    t0 = time.time()
    try:
        args = [sys.executable, os.path.abspath(__file__), "-", name, str(batch), tmp]
        if config is not None:
            args.append(json.dumps(config))
        p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
        rc, stderr = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, stderr = "timeout", e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    wall = round(time.time() - t0, 2)
    if os.path.exists(tmp):
        with open(tmp) as f:
            out = json.load(f)
        os.remove(tmp)
    else:
        out = dict(batch=batch, fits=None, steps=[], error=f"child rc {rc}: {stderr[-2000:]}")
    if rc != 0 and not out.get("error"):
        out["error"] = f"child rc {rc}: {stderr[-2000:]}"
    out["wall_seconds"] = wall
    return out


def config_of(name):
    c = dict(CASES[name])
    c.pop("hint")
    return c


def plain_case(name, ws, sub_dir):
    r = run_child(name, CASES[name]["batch"], ws, sub_dir)
    doc = dict(case=name, workspace=ws or "default", config=config_of(name), steps=r["steps"])
    for k in ("error", "seconds", "wall_seconds", "torch", "device", "total_memory"):
        if r.get(k) is not None:
            doc[k] = r[k]
    if r.get("fits") is not True and not doc.get("error"):
        doc["error"] = "did not finish"
    peak = max((s["max_allocated"] for s in r["steps"]), default=0)
    return doc, ("ok" if not doc.get("error") else "ERROR") + f" peak_allocated {peak}"


def max_batch_case(name, ws, sub_dir):
    """PyTorch's largest batch whose two steps fit under the case's limit, each batch a fresh process: from
    the hint up by 1, 2, 4, ... while it fits, down by 1, 2, 4, ... while it does not, then bisection
    (monotone, as bytegrad's largest_fitting_batch assumes)."""
    c = CASES[name]
    trials = {}
    good, bad, error = 0, None, None
    probe, up, down = max(1, c["hint"][ws is None]), 1, 1
    while True:
        t = trials[probe] = run_child(name, probe, ws, sub_dir)
        print(f"      batch {probe}: " + ("fits" if t["fits"] else "OOM" if t["fits"] is False else "ERROR"),
              flush=True)
        if t["fits"] is None:
            error = f"batch {probe}: {t.get('error')}"
            break
        if t["fits"]:
            good = max(good, probe)
        else:
            bad = probe if bad is None else min(bad, probe)
        if bad is not None and bad - good <= 1:
            break
        if bad is None:
            probe, up = good + up, up * 2
        elif good == 0:
            probe, down = max(1, bad - down), down * 2
        else:
            probe = (good + bad) // 2
        if len(trials) > 24:
            error = "search did not end in 24 runs"
            break
    cfg = config_of(name)
    cfg["batch"] = good
    at = trials.get(good) or trials.get(1) or {}
    doc = dict(case=name, workspace=ws or "default", config=cfg, limit=c["limit"],
               max_batch=None if error else good, steps=at.get("steps", []),
               trials=[dict(batch=b, fits=t["fits"], error=t.get("error"), steps=t["steps"],
                            seconds=t.get("seconds"), wall_seconds=t.get("wall_seconds"))
                       for b, t in sorted(trials.items())])
    for k in ("torch", "device", "total_memory", "total_for_fraction"):
        if at.get(k) is not None:
            doc[k] = at[k]
    if error:
        doc["error"] = error
    return doc, ("ERROR" if error else f"max_batch {good}") + f" ({len(trials)} runs)"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] == "--generate":  # the generated sweep (gpt2_generated.py), sharing run_child
        sys.path.insert(0, HERE)
        import gpt2_generated
        return gpt2_generated.main(argv[1:])
    if argv[0] == "--events":
        outdir, names = argv[1], argv[2:]
        for name in names:
            for sub, ws in WORKSPACES:
                os.makedirs(os.path.join(outdir, sub), exist_ok=True)
                os.environ["GPT2_SWEEP_EVENTS"] = os.path.abspath(os.path.join(outdir, sub, name + ".events"))
                out = run_child(name, CASES[name]["batch"], ws, os.path.join(outdir, sub))
                print(sub, name, out.get("error") or "ok", flush=True)
        return 0
    outdir, rest = argv[0], argv[1:]
    only = None
    if rest[:1] == ["--only"]:
        only, rest = rest[1], rest[2:]
    names = rest or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print("unknown cases:", *unknown, file=sys.stderr)
        return 2
    settings = [(sub, ws) for sub, ws in WORKSPACES if only in (None, sub)]
    for sub, _ in settings:
        os.makedirs(os.path.join(outdir, sub), exist_ok=True)
    start, n, failed = time.time(), 0, []
    total = len(names) * len(settings)
    for name in names:  # both settings of a case together, so a cut-short sweep still has pairs
        for sub, ws in settings:
            n += 1
            sub_dir = os.path.join(outdir, sub)
            print(f"[{n:2}/{total} {time.time() - start:6.1f}s] {sub} {name}", flush=True)
            t0 = time.time()
            try:
                doc, summary = (max_batch_case if CASES[name]["limit"] else plain_case)(name, ws, sub_dir)
            except Exception:
                doc = dict(case=name, workspace=ws or "default", config=config_of(name), steps=[],
                           error="sweep: " + traceback.format_exc()[-2000:])
                summary = "ERROR in the sweep itself"
            with open(os.path.join(sub_dir, name + ".json"), "w") as f:
                json.dump(doc, f, indent=1)
            if doc.get("error"):
                failed.append(f"{sub}/{name}")
            print(f"      {summary}  ({time.time() - t0:.1f}s)" +
                  (f"\n      {doc['error'][-600:]}" if doc.get("error") else ""), flush=True)
    print(f"done: {n} case runs in {time.time() - start:.1f}s; failed: {', '.join(failed) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "-":  # one run in this process: - CASE BATCH OUT_JSON [CONFIG]
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5]) if len(sys.argv) == 6 else None)
    else:
        sys.exit(main(sys.argv[1:]))
