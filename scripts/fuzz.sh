#!/usr/bin/env bash
# Runs every Fuzz* target in the tree for the given time each (default 20s).
set -euo pipefail
t="${1:-20s}"
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
  dir=$(dirname "$f")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //' | while read -r fn; do
    echo "fuzz: $dir $fn ($t)"
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$dir"
  done
done
