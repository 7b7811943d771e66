#!/usr/bin/env python3
"""A generated sweep of GPT-2-style training runs (issue 31's yardstick): COUNT configurations a user might
pick, drawn from a seeded RNG, each recorded in PyTorch in fresh processes, with both cuBLAS workspace
settings, TRIALS times (2: what PyTorch itself varies on), on several GPUs at once.

  python3 tools/probes/gpt2_generated.py SEED COUNT OUTDIR [--gpus N] [--per-gpu K] [--budget SECONDS]
                                         [--trials T] [--segments] [--dry-run] [--only C1,C2,...]
                                         [--mmap-trace SO]
  A run whose file exists in OUTDIR is not run again: a later call with the same OUTDIR goes on where one stopped.
  (the same as tools/probes/gpt2_sweep.py --generate SEED COUNT OUTDIR ...)

Draws (random.Random(SEED), so the same seed gives the same list): layers 1-12; heads 1-12 with the width
heads x head dim (head dim among 16..128); vocabulary 50..50304 (odd ones, nanoGPT's 50304, GPT-2's 50257,
65, ...); block size 64..1024 and a sequence of 16 tokens up to the block (the block itself, a power of two
or any length); batch 1-16; fp32, bf16 autocast
(slow attention) or bf16 autocast with SDPA; foreach on or off; AdamW, Adam or SGD; every block checkpointed
or not; 2 to 10 steps. A draw is kept when its rough size (parameters, optimizer state, activations and
logits: rough_bytes below) is under 12 GiB, far from an 80 GB H100's limit, and its rough work keeps a run
to a few seconds; the others are drawn again. Every option is one bytegrad-estimate gpt2 has (--steps,
--optimizer, --foreach, --amp, --attention, --checkpoint).

Writes OUTDIR/configs.json (the seed, the count, every case's name and config) first, then one compact JSON
file per run: OUTDIR/t<trial>/x0/<case>.json (CUBLAS_WORKSPACE_CONFIG=:0:0) and OUTDIR/t<trial>/xd/<case>.json
(PyTorch's default workspaces), in gpt2_sweep.py's layout (marks only: "steps", "config", "seconds",
"wall_seconds", "gpu", "torch", "device", "error" when it failed), so each t<trial> folder is one sweep
directory for tests/programs/gpt2_sweep.cpp too. Each run is a fresh Python process (gpt2_sweep.py's child,
gpt2_scenarios.py's train() with `steps` steps) on one GPU (CUDA_VISIBLE_DEVICES): --gpus N runs N at a time,
one per GPU; segment placement is a process's own, so runs side by side do not disturb each other's figures.
Runs go case by case (both settings and both trials of a case before the next case), so a sweep cut short
has whole cases. --budget SECONDS: no run starts after the budget is spent, and a run still going at the
end is stopped (recorded with an error); what finished is on disk. When the first 8 runs all fail (no
torch, no GPU) the sweep stops. --dry-run prints the drawn
configurations, the rejected count and each run's command, and runs nothing.
--segments: each run also records PyTorch's memory history (_record_memory_history, addresses and Python
frames) and keeps of it t<trial>/<x0|xd>/<case>.segments: the `# mark` lines, every segment_alloc and
segment_free with its address, and the request that made each segment (the alloc after it), in
gpt2_memory_events.py's line format: where the driver put each segment, for the placement model
(tools/probes/compare_segments.py). Recording the history is itself host work that can move the driver's
regions: compare the run's marks with a run without it.
--only c013,c017: just the cases whose names start with one of these (the draw is the same).
--mmap-trace SO: each run under tools/probes/mmap_trace.c built as SO (LD_PRELOAD), its log (the driver's
reservations, and the process's anonymous maps of 1 MiB or more after each) gzipped to
t<trial>/<x0|xd>/<case>.mmap.gz: where the host's own mappings left holes for the driver.
Checked by tests/programs/gpt2_generated.cpp (ctest gpt2_generated) once copied to
tests/data/pytorch_probes/gpt2/generated/.
"""
import json, math, os, queue, random, shlex, subprocess, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt2_sweep  # noqa: E402  (the runner: one fresh process per run)

GiB = 1 << 30
HEAD_DIMS = (16, 24, 32, 48, 64, 80, 96, 128)
NAMED_VOCABS = (50257, 50304, 65, 256, 1000, 8000, 32000)
BLOCKS = (64, 128, 256, 512, 1024)
PRECISIONS = ("fp32", "bf16", "bf16sdpa")
MAX_BYTES = 12 * GiB  # rough_bytes' cap: comfortable on an 80 GB card even if the formula is off by 3x
MAX_WORK = 1.2e13     # rough_work's cap (flop-like units): about a second of GPU time a run
MAX_PARAMS = 160e6    # the model is built on the CPU first (seconds for hundreds of millions)


def params(c):
    L, C, V, BL = c["n_layer"], c["n_embd"], c["vocab"], c["block"]
    return V * C + BL * C + L * (12 * C * C + 13 * C) + 2 * C  # wte tied to lm_head


def rough_bytes(c):
    """A generous upper bound on the run's peak (not bytegrad's answer, only a filter)."""
    P, L, H, C, V = params(c), c["n_layer"], c["n_head"], c["n_embd"], c["vocab"]
    B, T = c["batch"], c["seq"]
    state = {"adamw": 2, "adam": 2, "sgd": 1}[c["optimizer"]]
    static = 4 * P * (2 + state + 2)  # parameters, gradients, state, foreach temporaries
    per_layer = 4 * B * T * C * 24
    if c["attention"] == "slow":
        per_layer += 4 * B * H * T * T * 4
    acts = (4 * B * T * C + per_layer) if c["checkpoint"] else per_layer
    layers = L * acts + (per_layer if c["checkpoint"] else 0)
    logits = 4 * B * T * V * 4
    return static + layers + logits + 512 * (1 << 20)


def rough_work(c):
    P, L, C = params(c), c["n_layer"], c["n_embd"]
    B, T, steps = c["batch"], c["seq"], c["steps"]
    dense = 6 * P * B * T * (4 / 3 if c["checkpoint"] else 1)
    attention = 12 * L * B * T * T * C
    work = (dense + attention) * steps
    return work * (1 if c["amp"] is None else 0.4)


def log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 0.5)))))


def draw_one(rng):
    L = rng.randint(1, 12)
    H = rng.randint(1, 12)
    hd = rng.choice(HEAD_DIMS)
    V = rng.choice(NAMED_VOCABS) if rng.random() < 0.35 else min(50304, max(50, log_uniform(rng, 50, 50304)))
    BL = rng.choice(BLOCKS)
    r = rng.random()  # the whole block, a power of two below it, or any length
    T = BL if r < 0.35 else rng.choice([t for t in (16, 32, 64, 128, 256, 512) if t < BL]) if r < 0.6 else \
        rng.randint(16, BL)
    B = max(1, min(16, log_uniform(rng, 1, 16)))
    precision = rng.choice(PRECISIONS)
    r = rng.random()
    optimizer = "adamw" if r < 0.5 else "adam" if r < 0.75 else "sgd"
    return dict(n_layer=L, n_head=H, n_embd=H * hd, vocab=V, block=BL, batch=B, seq=T, optimizer=optimizer,
                foreach=rng.random() < 0.7, amp=None if precision == "fp32" else "bf16",
                attention="sdpa" if precision == "bf16sdpa" else "slow", checkpoint=rng.random() < 0.25,
                limit=0, steps=rng.randint(2, 10))


def case_name(i, c):
    precision = "fp32" if c["amp"] is None else "bf16sdpa" if c["attention"] == "sdpa" else "bf16"
    return (f"c{i:03d}_L{c['n_layer']}H{c['n_head']}D{c['n_embd'] // c['n_head']}_V{c['vocab']}"
            f"_{c['batch']}x{c['seq']}of{c['block']}_{precision}_{c['optimizer']}{'' if c['foreach'] else '1'}"
            f"_s{c['steps']}{'_ck' if c['checkpoint'] else ''}")


def draw(seed, count):
    """COUNT kept configurations [(name, config)] and how many draws were rejected."""
    rng = random.Random(seed)
    cases, rejected = [], 0
    while len(cases) < count:
        c = draw_one(rng)
        if rough_bytes(c) > MAX_BYTES or rough_work(c) > MAX_WORK or params(c) > MAX_PARAMS:
            rejected += 1
            continue
        cases.append((case_name(len(cases), c), c))
    return cases, rejected


def estimate_options(c, default_workspace=True):
    """bytegrad-estimate gpt2's options for a config (what the checker runs on meta)."""
    o = (f"--n-layer {c['n_layer']} --n-head {c['n_head']} --n-embd {c['n_embd']} --vocab {c['vocab']} "
         f"--block {c['block']} --seq {c['seq']} --batch {c['batch']} --steps {c['steps']}")
    if c["optimizer"] != "adamw":
        o += f" --optimizer {c['optimizer']}"
    if not c["foreach"]:
        o += " --foreach off"
    if c["amp"]:
        o += f" --amp {c['amp']}"
    if c["attention"] == "sdpa":
        o += " --attention sdpa"
    if c["checkpoint"]:
        o += " --checkpoint"
    if not default_workspace:
        o += " --no-workspace"
    return o


def write_json(path, doc):
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)


def keep_segment_lines(events_path, out_path):
    """The marks, segment_alloc/segment_free lines and the alloc right after each segment_alloc (its request)."""
    kept, after_segment = [], False
    with open(events_path) as f:
        for line in f:
            action = line.split(" ", 1)[0]
            if line.startswith("# mark") or action in ("segment_alloc", "segment_free") or \
                    (after_segment and action == "alloc"):
                kept.append(line.rstrip("\n"))
            after_segment = action == "segment_alloc"
    with open(out_path, "w") as f:
        f.write("\n".join(kept) + "\n")


def main(argv):
    if len(argv) < 3 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    try:
        seed, count = int(argv[0]), int(argv[1])
    except ValueError:
        print(f"gpt2_generated: SEED and COUNT must be integers, got {argv[0]!r} {argv[1]!r}", file=sys.stderr)
        return 2
    outdir, rest = argv[2], argv[3:]
    gpus, per_gpu, budget, trials, dry, segments = 1, 1, 0.0, 2, False, False
    only, mmap_so = None, None
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("--only", "--mmap-trace") and i + 1 < len(rest):
            if a == "--only":
                only = tuple(x for x in rest[i + 1].split(",") if x)
            else:
                mmap_so = os.path.abspath(rest[i + 1])
            i += 2
            continue
        if a in ("--dry-run", "--segments"):
            dry = dry or a == "--dry-run"
            segments = segments or a == "--segments"
            i += 1
            continue
        if a not in ("--gpus", "--per-gpu", "--budget", "--trials") or i + 1 >= len(rest):
            print(f"gpt2_generated: unknown option or missing value: {a!r}", file=sys.stderr)
            return 2
        try:
            v = float(rest[i + 1])
        except ValueError:
            print(f"gpt2_generated: {a} needs a number, got {rest[i + 1]!r}", file=sys.stderr)
            return 2
        if a == "--gpus":
            gpus = int(v)
        elif a == "--per-gpu":
            per_gpu = int(v)
        elif a == "--budget":
            budget = v
        else:
            trials = int(v)
        i += 2
    if count < 1 or gpus < 1 or per_gpu < 1 or trials < 1 or budget < 0:
        print("gpt2_generated: COUNT, --gpus, --per-gpu and --trials must be at least 1, --budget not negative",
              file=sys.stderr)
        return 2

    cases, rejected = draw(seed, count)
    all_cases = cases
    if only:
        cases = [(n, c) for n, c in cases if n.startswith(only)]
    settings = gpt2_sweep.WORKSPACES  # (("x0", ":0:0"), ("xd", None))
    jobs = [(name, c, t, sub, ws) for name, c in cases for t in range(trials) for sub, ws in settings]
    if dry:
        print(f"seed {seed}: {count} configurations kept, {rejected} drawn and rejected (rough size over "
              f"{MAX_BYTES // GiB} GiB, rough work over {MAX_WORK:.1e} or over {MAX_PARAMS / 1e6:.0f}M parameters)")
        for name, c in cases:
            print(f"{name}  params {params(c) / 1e6:.1f}M  rough {rough_bytes(c) / GiB:.2f} GiB  "
                  f"work {rough_work(c):.1e}\n    bytegrad-estimate gpt2 {estimate_options(c)}")
        print(f"{len(jobs)} runs ({count} cases x {trials} trials x {len(settings)} workspace settings) on "
              f"{gpus} GPU(s), e.g.:")
        for k, (name, c, t, sub, ws) in enumerate(jobs[:4]):
            env = (f"CUBLAS_WORKSPACE_CONFIG={ws} " if ws else "") + f"CUDA_VISIBLE_DEVICES={k % gpus}"
            print(f"  {env} {shlex.quote(sys.executable)} {gpt2_sweep.__file__} - {name} {c['batch']} "
                  f"{os.path.join(outdir, f't{t}', sub, '.' + name + '.tmp.json')} {shlex.quote(json.dumps(c))}")
        return 0

    for t in range(trials):
        for sub, _ in settings:
            os.makedirs(os.path.join(outdir, f"t{t}", sub), exist_ok=True)
    write_json(os.path.join(outdir, "configs.json"),
               dict(seed=seed, count=count, rejected=rejected, trials=trials,
                    generator="tools/probes/gpt2_generated.py", max_rough_bytes=MAX_BYTES, max_rough_work=MAX_WORK,
                    cases=[dict(name=n, config=c) for n, c in all_cases]))
    start = time.time()
    work = queue.Queue()
    for k, job in enumerate(jobs):
        work.put((k, job))
    lock = threading.Lock()
    done, failed, skipped, stop, walls = [0], [], [0], [False], []

    def worker(gpu):
        while True:
            try:
                k, (name, c, t, sub, ws) = work.get_nowait()
            except queue.Empty:
                return
            left = budget - (time.time() - start) if budget else None
            if (left is not None and left < 5) or stop[0]:
                with lock:
                    skipped[0] += 1
                continue
            sub_dir = os.path.join(outdir, f"t{t}", sub)
            if os.path.exists(os.path.join(sub_dir, name + ".json")):  # recorded by an earlier call: go on from there
                continue
            timeout = 240 if left is None else max(5, min(240, left))
            events = os.path.join(sub_dir, f".{name}.events.tmp") if segments else None
            trace = os.path.join(sub_dir, name + ".mmap") if mmap_so else None
            extra = dict(LD_PRELOAD=mmap_so, MMAP_TRACE_FILE=trace, MMAP_TRACE_MAPS="1") if trace else None
            r = gpt2_sweep.run_child(name, c["batch"], ws, sub_dir, config=c, gpu=gpu, timeout=timeout,
                                     events_path=events, extra_env=extra)
            if trace and os.path.exists(trace):
                subprocess.run(["gzip", "-f", trace], check=False)
            if events and os.path.exists(events):
                keep_segment_lines(events, os.path.join(sub_dir, name + ".segments"))
                os.remove(events)
            doc = dict(case=name, workspace=ws or "default", trial=t, config=c, steps=r["steps"])
            for key in ("error", "seconds", "wall_seconds", "torch", "device", "total_memory"):
                if r.get(key) is not None:
                    doc[key] = r[key]
            doc["gpu"] = gpu
            if r.get("fits") is not True and not doc.get("error"):
                doc["error"] = "did not finish"
            if doc.get("error"):
                doc["error"] = doc["error"][-1500:]
            write_json(os.path.join(sub_dir, name + ".json"), doc)
            peak = max((s["max_allocated"] for s in r["steps"]), default=0)
            with lock:
                done[0] += 1
                walls.append(r.get("wall_seconds") or 0)
                if doc.get("error"):
                    failed.append(f"t{t}/{sub}/{name}")
                if done[0] >= 8 and len(failed) == done[0] and not stop[0]:
                    stop[0] = True  # no torch, no GPU, ...: do not spend the budget on more of the same
                    print("the first 8 runs all failed: stopping", flush=True)
                print(f"[{done[0]:3}/{len(jobs)} {time.time() - start:6.1f}s gpu{gpu}] t{t}/{sub} {name}: "
                      f"{'ERROR' if doc.get('error') else 'ok'} {r.get('wall_seconds')}s "
                      f"(in torch {r.get('seconds', '-')}s) peak_allocated {peak}" +
                      (f"\n      {doc['error'][-400:]}" if doc.get("error") else ""), flush=True)

    # Several processes per GPU: a run is mostly the process starting (import, CUDA context), and each process
    # has its own address space, so its placement is a fresh process's whatever runs beside it.
    threads = [threading.Thread(target=worker, args=(w % gpus,)) for w in range(gpus * per_gpu)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    walls.sort()
    if walls:
        print(f"seconds per run: median {walls[len(walls) // 2]}, max {walls[-1]}, sum {sum(walls):.0f}", flush=True)
    print(f"done: {done[0]} of {len(jobs)} runs in {time.time() - start:.1f}s on {gpus} GPU(s); "
          f"not started (budget or failures): {skipped[0]}; failed: {', '.join(failed) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
