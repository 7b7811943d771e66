#!/usr/bin/env python3
"""The memory-fraction cap under a given allocator setting, in real PyTorch: a fixed sequence of
allocations and frees (tensor names, byte sizes) under set_per_process_memory_fraction, with the figures
after each step and whether it ran out of memory. tests/memory/fraction_probes.cpp replays the same lines on
sim and compares.

  python3 pytorch_fraction_probe.py OUTFILE [ALLOC_CONF]

Each line: `<op> <args> -> <allocated> <reserved> <num_ooms>`; ops: `fraction F` (F as Python's repr),
`alloc NAME BYTES`, `free NAME`, `empty_cache`. The first line: `# alloc_conf=... total=...`.
"""
import os
import sys

out_path = sys.argv[1]
conf = sys.argv[2] if len(sys.argv) > 2 else ""
if conf:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
import torch  # noqa: E402  (after the setting)

MiB = 1 << 20
total = torch.cuda.get_device_properties(0).total_memory
# A cap of about 110 MiB (110 MiB / total, floored by PyTorch as fraction * total). With expandable
# segments the large pool maps 20 MiB pages; the steps test where the cap is checked: against the request's
# segment size (the source's alloc_size) or the pages actually mapped.
ops = [
    ("fraction", 110 * MiB / total),
    ("alloc", "a", 30 * MiB),   # maps 2 pages (40 MiB)
    ("alloc", "b", 30 * MiB),   # 10 MiB free at the end of the mapping: maps 1 more page
    ("alloc", "c", 22 * MiB),   # 60 + 22 <= 110: maps 2 pages, 18 MiB free at the end
    ("alloc", "d", 19 * MiB),   # no free piece fits; 100 + 20 > 110, nothing whole to unmap: OOM?
    ("alloc", "e", 18 * MiB),   # the free end fits exactly
    ("free", "e"),
    ("free", "c"),              # 40 MiB free at the end of the mapping
    ("alloc", "f", 52 * MiB),   # 100 + 52 > 110: unmap the 2 free pages, 60 + 52 > 110: OOM?
    ("alloc", "g", 48 * MiB),   # 60 + 48 <= 110 by segment size, but 3 pages (60 MiB) are mapped: 120?
    ("alloc", "h", 1 * MiB),    # small pool: 2 MiB more over the cap: OOM?
    ("alloc", "i", 4096),
    ("free", "g"),
    ("empty_cache",),
    ("alloc", "j", 4096),
    ("alloc", "k", 9 * MiB),    # large pool, a 20 MiB segment or page
    ("free", "a"),
    ("free", "b"),
    ("alloc", "l", 70 * MiB),
    ("empty_cache",),
    ("alloc", "m", 70 * MiB),
]

live = {}
lines = [f"# alloc_conf={conf} total={total}"]
for op in ops:
    kind = op[0]
    if kind == "fraction":
        torch.cuda.set_per_process_memory_fraction(op[1])
        text = f"fraction {op[1]!r}"
    elif kind == "alloc":
        try:
            live[op[1]] = torch.empty(op[2], dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            pass
        text = f"alloc {op[1]} {op[2]}"
    elif kind == "free":
        live.pop(op[1], None)
        text = f"free {op[1]}"
    else:
        torch.cuda.empty_cache()
        text = "empty_cache"
    st = torch.cuda.memory_stats()
    lines.append(f"{text} -> {st['allocated_bytes.all.current']} {st['reserved_bytes.all.current']} {st['num_ooms']}")
with open(out_path, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
