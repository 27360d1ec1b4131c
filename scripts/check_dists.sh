#!/usr/bin/env bash
# Build the sdist and wheel of every distribution in this repository (core, plugins/*,
# examples/*) into OUTDIR (default: dist/), the wheel from the sdist as pip would, then run
# `twine check --strict` on all of them (the README renders, the metadata is complete).
# tests/test_packaging.py runs this (marked slow; CI runs it) and reads the wheels' METADATA.
#     bash scripts/check_dists.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
py=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
for d in . plugins/*/ examples/*/; do
  [ -f "$d/pyproject.toml" ] || continue
  # A distribution that builds against oplib-core (native-ops: oplib.h) is built in this
  # environment, where oplib-core is installed, instead of an isolated one.
  isolation=()
  if grep -q '"oplib-core"\]' "$d/pyproject.toml"; then isolation=(--no-isolation --skip-dependency-check); fi
  log=$("$py" -m build "${isolation[@]}" --outdir "$out" "$d" 2>&1) || { printf "%s\n" "$log" >&2; exit 1; }
done
"$py" -m twine check --strict "$out"/*
