"""safetensors interop between bytegrad and PyTorch (needs torch and safetensors; no GPU needed).

  python3 tools/probes/safetensors_interop.py write DIR   PyTorch writes DIR/pytorch_patterns.safetensors
                                                          (safetensors.torch.save_file), every dtype
  python3 tools/probes/safetensors_interop.py check DIR   PyTorch reads the files bytegrad wrote into DIR:
      bytegrad_patterns.safetensors (safetensors.torch.load_file, compared bit for bit with PATTERNS) and
      bytegrad_gpt_tiny.safetensors (safetensors.torch.load_model into nanoGPT's GPT, strict, compared with
      the parameter pattern); writes PyTorch's state_dict keys of that model to
      DIR/pytorch_gpt_tiny_state_dict_keys.txt.

bytegrad writes its two files with
  BYTEGRAD_SAFETENSORS_INTEROP_DIR=DIR build/tests/test_io -tc='*interop*'
and reads pytorch_patterns.safetensors from tests/data/safetensors/ (test "a file PyTorch wrote ...").
PATTERNS is the table of tests/io/io_helpers.h's pattern_tensors(): exact bit patterns (NaN payloads, -0.0,
subnormals) viewed as each dtype.
"""
import os
import sys

import torch
from safetensors.torch import load_file, load_model, save_file


def signed(bits, width):
    return [b - (1 << width) if b >= 1 << (width - 1) else b for b in bits]


def patterns():
    f32 = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x3F800000, 0xC0490FDB,
           0x7F800000, 0xFF800000, 0x7FC00000, 0x7FC12345, 0xFFA00001, 0x7F7FFFFF]
    f64 = [0x0000000000000000, 0x8000000000000000, 0x0000000000000001, 0x3FF0000000000000,
           0x7FF0000000000000, 0xFFF8000000000001, 0x7FF4000000000ABC, 0x000FFFFFFFFFFFFF]
    f16 = [0x0000, 0x8000, 0x0001, 0x83FF, 0x3C00, 0x7C00, 0xFC00, 0x7E00, 0x7E2A, 0xFD01, 0x7BFF, 0xC248]
    bf16 = [0x0000, 0x8000, 0x0001, 0x807F, 0x3F80, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0xFF81, 0x7F7F, 0xC049]
    i64 = [0x8000000000000000, 0xFFFFFFFFFFFFFFFF, 0, 1, 0x7FFFFFFFFFFFFFFF, 0x0123456789ABCDEF]
    i32 = [0x80000000, 0xFFFFFFFF, 0, 1, 0x7FFFFFFF, 0x01234567]
    return {
        "float32": torch.tensor(signed(f32, 32), dtype=torch.int32).view(torch.float32).reshape(3, 4),
        "float64": torch.tensor(signed(f64, 64), dtype=torch.int64).view(torch.float64).reshape(2, 4),
        "float16": torch.tensor(signed(f16, 16), dtype=torch.int16).view(torch.float16).reshape(12),
        "bfloat16": torch.tensor(signed(bf16, 16), dtype=torch.int16).view(torch.bfloat16).reshape(4, 3),
        "int64": torch.tensor(signed(i64, 64), dtype=torch.int64).reshape(6),
        "int32": torch.tensor(signed(i32, 32), dtype=torch.int32).reshape(2, 3),
        "uint8": torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, False, True, True]),
        "scalar": torch.tensor(0x40490FDB, dtype=torch.int32).view(torch.float32).reshape(()),
        "empty": torch.empty(0, 3, dtype=torch.float32),
    }


def raw_bytes(t):
    """The tensor's bytes (bit patterns, so NaNs compare exactly)."""
    return t.contiguous().view(-1).view(torch.uint8).tolist() if t.numel() else []


def check_patterns(path):
    loaded = load_file(path)
    expected = patterns()
    failures = []
    if sorted(loaded) != sorted(expected):
        failures.append(f"names: {sorted(loaded)} != {sorted(expected)}")
    for name, want in expected.items():
        got = loaded.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or raw_bytes(got) != raw_bytes(want):
            failures.append(f"{name}: got {got.dtype} {tuple(got.shape)} {raw_bytes(got)}, "
                            f"expected {want.dtype} {tuple(want.shape)} {raw_bytes(want)}")
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        if f.metadata() != {"source": "bytegrad"}:
            failures.append(f"metadata {f.metadata()}")
    return failures


def check_gpt(path, out_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "shared", "golden", "gpt2"))
    from gpt2_scenarios import GPT, TINY  # nanoGPT's model, the one bytegrad's nn::GPT follows

    model = GPT(TINY)
    keys = list(model.state_dict().keys())
    with open(os.path.join(out_dir, "pytorch_gpt_tiny_state_dict_keys.txt"), "w") as f:
        f.write("\n".join(keys) + "\n")
    failures = []
    missing, unexpected = load_model(model, path, strict=True)
    if missing or unexpected:
        failures.append(f"missing {missing}, unexpected {unexpected}")
    for k, (name, p) in enumerate(model.named_parameters()):
        i = torch.arange(p.numel(), dtype=torch.int64)
        want = (((7 * i + 13 * k) % 64 - 32).to(torch.float32) / 64).reshape(p.shape)
        if not torch.equal(p.detach(), want):
            failures.append(f"{name}: values differ from the pattern")
    return failures


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    command, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    if command == "write":
        path = os.path.join(out_dir, "pytorch_patterns.safetensors")
        save_file(patterns(), path, metadata={"source": "pytorch"})
        print(f"wrote {path} (torch {torch.__version__})")
        return
    failures = check_patterns(os.path.join(out_dir, "bytegrad_patterns.safetensors"))
    failures += check_gpt(os.path.join(out_dir, "bytegrad_gpt_tiny.safetensors"), out_dir)
    for f in failures:
        print("FAIL", f)
    print("ok: PyTorch read both bytegrad files exactly" if not failures else f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
