#!/usr/bin/env bash
# The main job: builds bytegrad and runs the seed walkthrough: every seed document's example, mark by
# mark, bytegrad's memory figures against PyTorch 2.11's (shared/golden), with what changed at each
# mark. Runs on cuda where a GPU exists, else on meta (seconds). Arguments go to bytegrad-walkthrough
# (e.g. --device meta, --json, a scenario name).
set -euo pipefail
cd "$(dirname "$0")"
tools/build.sh
exec build/programs/bytegrad-walkthrough "$@"
