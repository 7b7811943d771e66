#!/usr/bin/env python3
"""clang-tidy's verdicts, remembered by what clang-tidy reads.

A file's verdict depends only on what the compiler front end sees (the file after preprocessing, comments
kept so that NOLINT marks count, line markers kept so that the header filter and positions count), the
compile flags, the .clang-tidy files and clang-tidy's version. This script hashes exactly those, with the
checkout's path replaced by a placeholder, so the key is the same in any clone on a machine with the same
Debian packages; anything else that differs (another clang, another Eigen) only makes keys miss.

  tidy_cache.py keys BUILD_DIR REGEX...     prints "KEY FILE" for each file of BUILD_DIR's compile
                                            database that matches a regex (preprocessed in parallel)

tools/check_tidy.sh keeps the keys of the files it found clean in .ci/tidy-clean and checks only the files
whose key is not there: a file is skipped only when clang-tidy already passed on input identical to it.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
PLACEHOLDER = "<checkout>"


def common_inputs():
    """What every key shares: clang-tidy's version and every .clang-tidy file in the checkout."""
    h = hashlib.sha256()
    h.update(subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True, check=True).stdout.encode())
    tracked = subprocess.run(["git", "-C", REPO, "ls-files", "*.clang-tidy", ".clang-tidy"], capture_output=True,
                             text=True, check=True).stdout.split()
    for path in sorted(set(tracked)):
        h.update(path.encode())
        with open(os.path.join(REPO, path), "rb") as f:
            h.update(f.read())
    return h.digest()


def front_end_arguments(entry):
    """The compile command's arguments without the compiler, the output and the source file."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    kept, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-c"):
            skip = arg == "-o"
            continue
        if arg == entry["file"] or os.path.realpath(os.path.join(entry["directory"], arg)) == entry["file"]:
            continue
        kept.append(arg)
    return kept


def key(entry, shared):
    args = front_end_arguments(entry)
    # clang++ -E -C: clang-tidy's own front end (same version), comments kept, line markers kept.
    out = subprocess.run(["clang++", *args, "-E", "-C", "-Wno-everything", entry["file"], "-o", "-"],
                         cwd=entry["directory"], capture_output=True, check=True).stdout
    h = hashlib.sha256(shared)
    h.update(" ".join(args).replace(REPO, PLACEHOLDER).encode())
    h.update(entry["file"].replace(REPO, PLACEHOLDER).encode())
    h.update(out.replace(REPO.encode(), PLACEHOLDER.encode()))
    return h.hexdigest()


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "keys":
        sys.exit("usage: tidy_cache.py keys BUILD_DIR REGEX...")
    with open(os.path.join(sys.argv[2], "compile_commands.json")) as f:
        database = json.load(f)
    patterns = [re.compile(p) for p in sys.argv[3:]]
    entries = [e for e in database if any(p.search(e["file"]) for p in patterns)]
    shared = common_inputs()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for entry, k in zip(entries, pool.map(lambda e: key(e, shared), entries)):
            print(k, entry["file"])


if __name__ == "__main__":
    main()
