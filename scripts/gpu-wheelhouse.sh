#!/usr/bin/env bash
# Fill the wheelhouse that scripts/gpu-check.sh installs from on a GPU machine with no package
# index. Run it here, where pip reaches an index: it downloads binary wheels, for the target's
# Python and platform, of every dependency of every oplib distribution and of their test tools
# that the target lacks (scripts/gpu_wheelhouse.py says which), and prints their size.
#
#     bash scripts/gpu-wheelhouse.sh [--python 3.12] [--platform TAG ...] [--have FILE] [DIR]
#
#   DIR         where the wheels go (default .wheelhouse/, ignored by git; it travels with the
#               checkout, so keep it small)
#   --python    the target's Python version (default 3.12)
#   --platform  a wheel platform tag of the target, repeatable. pip matches manylinux_2_N
#               exactly, so the default names every N from 17 to 39 (x86-64).
#   --have      `python3 -m pip list --format=freeze` from the target: what it already has
#               (default scripts/gpu-image-packages.txt, the GPU image's list)
#
# PYTHON (default .venv/bin/python, else python3) runs pip here. Wheels left in DIR by an
# earlier run are replaced.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."
abspath() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$here/$1" ;; esac; }

python_version=3.12
platforms=()
have=()
dir=.wheelhouse
while (($#)); do
  case $1 in
    --python) python_version=${2:?--python needs a version such as 3.12}; shift 2 ;;
    --platform) platforms+=("${2:?--platform needs a tag such as manylinux_2_28_x86_64}"); shift 2 ;;
    --have) have=(--have "$(abspath "${2:?--have needs a file}")"); shift 2 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-wheelhouse.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) dir=$(abspath "$1"); shift ;;
  esac
done
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ((${#platforms[@]} == 0)); then
  for n in $(seq 17 39); do platforms+=("manylinux_2_${n}_x86_64"); done
  platforms+=(manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64)
fi
platform_args=()
for p in "${platforms[@]}"; do platform_args+=(--platform "$p"); done

# A marker says the folder is ours: its old wheels may go (two versions of one project would
# leave the choice to pip's resolver on the target).
mkdir -p "$dir"
if compgen -G "$dir/*.whl" >/dev/null && [ ! -f "$dir/.oplib-wheelhouse" ]; then
  echo "gpu-wheelhouse.sh: $dir holds wheels this script did not put there; name another folder" >&2
  exit 2
fi
rm -f "$dir"/*.whl
printf 'filled by scripts/gpu-wheelhouse.sh for Python %s on %s\n' \
  "$python_version" "${platforms[*]}" >"$dir/.oplib-wheelhouse"

mapfile -t reqs < <("$PYTHON" scripts/gpu_wheelhouse.py requirements --python "$python_version" "${have[@]}")
echo "the target lacks: ${reqs[*]:-nothing}"
if ((${#reqs[@]})); then
  staging=$(mktemp -d)
  trap 'rm -rf "$staging"' EXIT
  # with their dependencies: the ones the target has stay behind in the staging folder
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    --implementation cp --python-version "$python_version" --abi "cp${python_version/./}" \
    "${platform_args[@]}" --dest "$staging" "${reqs[@]}"
  "$PYTHON" scripts/gpu_wheelhouse.py keep --python "$python_version" "${have[@]}" "$staging" "$dir"
fi
count=$(find "$dir" -maxdepth 1 -name '*.whl' | wc -l)
size=$(du -sk "$dir" | cut -f1)
echo "$dir: $count wheels, $((size / 1024)).$(((size % 1024) * 10 / 1024)) MiB"
if ((size > 48 * 1024)); then
  echo "gpu-wheelhouse.sh: over 48 MiB: with the checkout it may not fit a 64 MiB transfer" >&2
fi
