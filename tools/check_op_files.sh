#!/usr/bin/env bash
# Fails when adding an op takes more library files than docs/adding-an-op.md says: silu (an activation
# with a fused backward) may be named in at most 2 files under src/bytegrad/ (its op table row and its
# math), exp (a unary op with a formula and an autocast policy) in at most 3 (row, math, formula).
# A file names an op when it mentions the op's name, its _backward op, its module or its node, other than
# as the C math function or an abbreviation: std::exp, a call exp(...) (::exp(x), exp(x - max) in a softmax
# comment, the CUDA device exp) and "exp." do not count; a definition exp(const ...) and a qualified
# UnaryOp::exp do. Run by ctest (entry `op_files`).
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0
check() {
  local op=$1 limit=$2 names=$3
  # not std::op or x.op, not followed by "." and not a call unless a definition's "(const"
  local pattern="(?<!std::)(?<![.\\w])(${names})\\b(?!\\.)(?!\\((?!const\\b))"
  local files
  files=$(grep -rlP "$pattern" src/bytegrad || true)
  local count
  count=$(grep -c . <<<"$files" || true)
  echo "$op: named in $count library files (at most $limit):"
  sed 's/^/  /' <<<"$files"
  if [ "$count" -gt "$limit" ]; then
    echo "FAIL: $op is named in more than $limit library files (docs/adding-an-op.md)"
    failed=1
  fi
}

check silu 2 'silu|silu_backward|SiLU|SiluBackward0'
check exp 3 'exp|ExpBackward0'
check rsqrt 3 'rsqrt|RsqrtBackward0'  # a unary row with a formula, added after the doc was written
exit $failed
