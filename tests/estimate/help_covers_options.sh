#!/bin/sh
# bytegrad-estimate --help: every option its usage lines name is explained, on a line of its own that starts
# with it (or lists it with others: "  --n-layer N, --n-head N, ...").
set -eu
help=$("$1" --help)
usage=$(printf '%s\n' "$help" | sed '/^$/q')
missing=""
for option in $(printf '%s\n' "$usage" | grep -oE -- '--[a-z0-9-]+' | sort -u); do
  printf '%s\n' "$help" | sed '1,/^$/d' | grep -qE -- "^  (--[a-z0-9-]+[^,]*, )*${option}( |,|\$)" || missing="$missing $option"
done
if [ -n "$missing" ]; then
  echo "bytegrad-estimate --help explains no line for:$missing"
  exit 1
fi
echo "every option explained"
