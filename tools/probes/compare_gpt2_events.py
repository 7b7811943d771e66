"""Compares PyTorch's allocator events (gpt2_memory_events.py's .events) with bytegrad's (the walkthrough's
--memory-viz JSON) event by event: prints the first differences with the PyTorch side's marks and frames.

  python3 compare_gpt2_events.py PYTORCH.events BYTEGRAD_MEMORY_VIZ.json [context] [skip]

skip: PyTorch events to drop first (a later run's .events file starts with the earlier runs' events of the
same process: small.events with tiny's 816).
"""
import difflib, gzip, json, sys

KEEP = ("alloc", "free_completed", "segment_alloc", "segment_free")


def pytorch_events(path):
    events, mark, op = [], "start", "-"
    for line in (gzip.open(path, "rt") if path.endswith(".gz") else open(path)):
        if line.startswith("# mark"):
            mark = line.split()[2]
            continue
        if line.startswith("# op"):  # gpt2_op_events.py's files: the aten op that made the events below
            op = line.split()[2]
            continue
        if line.startswith("#"):
            continue
        action, size, rest = (line.split(" ", 2) + [op])[:3]
        if rest.startswith("0x"):  # files recorded with addresses
            rest = rest.split(" ", 1)[1] if " " in rest else "-"
        if action in KEEP:
            events.append((action, int(size), f"{mark} {rest.strip()}"))
    return events


def bytegrad_events(path):
    trace = json.load(open(path))["device_traces"][0]
    return [(e["action"], int(e["size"]), e["frames"][0]["name"] if e.get("frames") else "-")
            for e in trace if e["action"] in KEEP]


if __name__ == "__main__":
    want, got = pytorch_events(sys.argv[1]), bytegrad_events(sys.argv[2])
    context = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    want = want[int(sys.argv[4]):] if len(sys.argv) > 4 else want
    a = [(x[0], x[1]) for x in want]
    b = [(x[0], x[1]) for x in got]
    print(f"pytorch {len(a)} events, bytegrad {len(b)}")
    shown = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        print(f"--- {tag} pytorch[{i1}:{i2}] bytegrad[{j1}:{j2}]")
        for k in range(max(0, i1 - context), min(len(a), i2 + 2)):
            print("  P", k, *want[k])
        for k in range(max(0, j1 - context), min(len(b), j2 + 2)):
            print("  B", k, *got[k])
        shown += 1
        if shown >= 8:
            break
