#!/usr/bin/env bash
# expect_failure.sh STATUS PATTERN COMMAND [ARGS...]: passes when COMMAND exits with exactly STATUS (not
# killed by a signal, so no crash or abort passes) and its stderr contains PATTERN (a fixed string).
# Used by tests/CMakeLists.txt to run the command-line tools on bad input.
set -u
expected_status="$1"
pattern="$2"
shift 2
stderr_file="$(mktemp)"
trap 'rm -f "$stderr_file"' EXIT
"$@" >/dev/null 2>"$stderr_file"
status=$?
cat "$stderr_file" >&2
if [ "$status" -ne "$expected_status" ]; then
  echo "expect_failure: '$*' exited with $status, expected $expected_status" >&2
  exit 1
fi
if ! grep -qF -- "$pattern" "$stderr_file"; then
  echo "expect_failure: stderr of '$*' does not contain '$pattern'" >&2
  exit 1
fi
if [ "$(wc -l <"$stderr_file")" -gt 20 ]; then
  echo "expect_failure: stderr of '$*' is longer than 20 lines" >&2
  exit 1
fi
echo "expect_failure: '$*' failed as expected (status $status)"
