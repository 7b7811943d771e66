"""Where the cuBLASLt workspace's segment lands after a model of N MB was built on the CPU and moved with
.to('cuda'): in a fresh region below every earlier segment, or among them. Asked because in PyTorch 2.11's
GPT-2 recordings with default workspaces it lands in a fresh region, and in seed001's among the earlier
segments. Each N runs in a fresh process, with PyTorch's default cuBLAS workspaces. Recorded on the H100:
docs/evidence/driver_placement/lt_workspace_probe.txt (fresh at 4 and 8 MB, among the earlier
segments from 12 to 256 MB: the amount moved does not explain the GPT-2 recordings).

  python3 lt_workspace_placement_probe.py [N_MB ...]        (prints one line per run)
"""
import subprocess, sys

CHILD = r'''
import sys, torch
mb = float(sys.argv[1])
torch.manual_seed(0)
n = int(mb * 1024 * 1024 / 4)
# Parameters in 4 MiB pieces (as a model's weights), initialised on the CPU as nanoGPT does.
pieces, left = [], n
while left > 0:
    k = min(left, 1 << 20)
    pieces.append(torch.nn.Parameter(torch.empty(k).normal_(0, 0.02)))
    left -= k
torch.cuda.memory._record_memory_history(max_entries=100000)
moved = [p.to("cuda") for p in pieces]
lin = torch.nn.Linear(768, 768).cuda()
x = torch.randn(1024, 768, device="cuda")
# Fill the small-pool segment that holds the bias, so the 1 MiB Lt workspace needs a segment of its own.
filler = torch.empty(1 << 18, device="cuda")
y = lin(x)
torch.cuda.synchronize()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
segs = [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]
# The cuBLAS workspace (32 MiB, first linear) is followed by the cuBLASLt workspace's 2 MiB segment.
ws = next(i for i, (a, s) in enumerate(segs) if s == 32 << 20)
after = [(i, a, s) for i, (a, s) in enumerate(segs) if i > ws and s == 2 << 20]
if not after:
    print(f"{mb:g} MB: no new 2 MiB segment after the workspace (the Lt workspace fit an existing one)")
else:
    i, a, s = after[0]
    lowest = min(sa for sa, _ in segs[:i])
    where = "fresh, below all" if a < lowest else "among earlier segments"
    print(f"{mb:g} MB: Lt segment {i} at {(a - lowest) / 2**20:+.0f} MiB from the lowest earlier segment: {where}")
'''

if __name__ == "__main__":
    sizes = sys.argv[1:] or ["1", "2", "4", "8", "12", "16", "24", "32", "64", "128"]
    for mb in sizes:
        for trial in range(2):
            out = subprocess.run([sys.executable, "-c", CHILD, mb], capture_output=True, text=True)
            print((out.stdout.strip() or out.stderr.strip().splitlines()[-1]), flush=True)
