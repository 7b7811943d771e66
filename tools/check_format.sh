#!/usr/bin/env bash
# Fails when a C++ or CUDA file git tracks (src, tests, tools, programs, bench, examples) is not formatted as
# .clang-format says. Installs Debian's clang-format when missing; the style is checked with clang-format 14
# (Debian 12's), and another version may format a few constructs differently.
#   tools/check_format.sh          check; prints each file that differs and the first lines of its diff
#   tools/check_format.sh --fix    format those files in place (clang-format -i)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format >/dev/null 2>&1; then
  echo "installing: clang-format"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends clang-format
fi

mapfile -t files < <(git ls-files -- 'src/*' 'tests/*' 'tools/*' 'programs/*' 'bench/*' 'examples/*' |
                     grep -E '\.(cpp|h|cu|cuh)$')
if [ "${1:-}" = "--fix" ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -P "$(nproc)" -n 16 clang-format -i
  echo "formatted ${#files[@]} files"
  exit 0
fi

unformatted=()
for file in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$file" >/dev/null 2>&1; then
    unformatted+=("$file")
  fi
done
if [ ${#unformatted[@]} -gt 0 ]; then
  for file in "${unformatted[@]}"; do
    echo "not formatted: $file"
    diff -u "$file" <(clang-format "$file") | sed -n '3,12p' || true
  done
  echo "${#unformatted[@]} of ${#files[@]} files differ from .clang-format; fix with tools/check_format.sh --fix"
  echo "(or clang-format -i FILE); see docs/testing.md, \"Formatting and lint\""
  exit 1
fi
echo "format: ${#files[@]} files match .clang-format"
