#!/usr/bin/env bash
# Create .venv with every oplib distribution installed editable, plus the test tools,
# then run the quickstart demo. Safe to re-run.
#   PYTHON=python3.13 VENV=.venv-py3.13 bash scripts/setup.sh   # another Python, beside .venv
# (.ci/run and noxfile.py make their venvs so; .venv-py*/ is git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# Every distribution in this repo, editable, with the test and documentation tools; cupy is
# not installed (no GPU needed).
dists=(-e ".[test,docs]")
for d in plugins/*/; do
  [ -f "$d/pyproject.toml" ] || continue
  # a plugin's "test" extra holds what its tests need (e.g. distributed for oplib-dask)
  if grep -q '^test *=' "$d/pyproject.toml"; then dists+=(-e "${d%/}[test]"); else dists+=(-e "$d"); fi
done
# editable_mode=compat: plain path entries that mypy, pyright and editors can follow (the
# default import-hook finders are invisible to static analysis)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --config-settings editable_mode=compat "${dists[@]}"
# Byte-compile the editable sources once (pip does this for regular installs), so that
# start-up does not recompile them where PYTHONDONTWRITEBYTECODE is set.
"$VENV/bin/python" -m compileall -q oplib_core plugins >/dev/null
if [ "${OPLIB_SKIP_DEMO:-0}" != "1" ]; then
  "$VENV/bin/python" examples/quickstart.py
fi
