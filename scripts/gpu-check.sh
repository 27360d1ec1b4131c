#!/usr/bin/env bash
# The GPU verdict in one command, on a GPU machine that may have no package index.
#
#     bash scripts/gpu-check.sh [--cpu | --dry-run] [--results DIR] [--wheelhouse DIR]
#                               [--budget SECONDS] [--tests PATH ...]
#
# Installs every distribution of this checkout, editable as scripts/setup.sh does, into a
# scratch venv under /tmp that sees the packages of the interpreter it is made from (cupy,
# torch, jax), offline: what that interpreter lacks comes from the wheelhouse that
# scripts/gpu-wheelhouse.sh filled beforehand. The compiled fast call builds in place where
# a C compiler is, so run it on a copy of the checkout that no other process imports from.
# Then, each under its own time limit and all within the budget (default 360 s): the tests
# marked cuda, `oplib check --backend cuda --json`, bench/gpu.py --json, bench/gpu_calls.py
# (where a small call's time goes) and the suite without the slow tests (in parallel where
# pytest-xdist is). Writes report.txt, report.json, check.json, calls.json and steps.log
# (every step's output) to the results folder, prints the report, and exits 0 when every
# step passed.
#
#   --cpu, --dry-run  the same steps on a machine without a GPU (the device tests skip; the
#                     check runs on the cpu backend): how CI tests this script
#   --results DIR     default $OUT when set, else gpu-results/
#   --wheelhouse DIR  default .wheelhouse/
#   --budget SECONDS  for the whole run (default 360)
#   --tests PATH      run these test files instead of the whole suite (repeatable)
#
# PYTHON (default python3) is the interpreter whose packages the run uses.
set -uo pipefail
here=$PWD
cd "$(dirname "$0")/.."
root=$PWD
abspath() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$here/$1" ;; esac; }

mode=gpu
results=${OUT:-$root/gpu-results}
wheelhouse=$root/.wheelhouse
budget=360
tests=()
while (($#)); do
  case $1 in
    --cpu | --dry-run) mode=cpu; shift ;;
    --results) results=$(abspath "${2:?--results needs a folder}"); shift 2 ;;
    --wheelhouse) wheelhouse=$(abspath "${2:?--wheelhouse needs a folder}"); shift 2 ;;
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --tests) tests+=("${2:?--tests needs a path}"); shift 2 ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $budget =~ ^[0-9]+$ ]]; then
  echo "gpu-check.sh: --budget takes whole seconds, got $budget" >&2
  exit 2
fi
PYTHON=${PYTHON:-python3}
backend=cuda
if [ "$mode" = cpu ]; then
  # no device, even on a machine that has one: the device tests skip, the bench says so
  backend=cpu
  export CUDA_VISIBLE_DEVICES=""
fi

now_ms() { echo $(($(date +%s%N) / 1000000)); }
start=$(now_ms)
deadline=$((start + budget * 1000))
reserve=15 # seconds kept for the report (and a step's 10 s grace after its limit)
work=$(mktemp -d "${TMPDIR:-/tmp}/oplib-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
venv=$work/venv
py=$venv/bin/python
mkdir -p "$results"
rm -f "$results"/report.txt "$results"/report.json "$results"/check.json
: >"$results/steps.log"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export OPLIB_CACHE_DIR=$work/oplib-cache
export root work venv py wheelhouse PYTHON

# step NAME CAP COMMAND...: run COMMAND under timeout (CAP seconds, less when the budget is
# nearly spent), its output in $work/NAME.log (stdout into $to where that is set), appended to
# steps.log; one line in steps.tsv.
step() {
  local name=$1 cap=$2 limit left t0 rc ms
  shift 2
  left=$(((deadline - $(now_ms)) / 1000 - reserve))
  limit=$((cap < left ? cap : left))
  if ((limit < 5)); then
    skip_step "$name" "$cap" "not run: the budget was spent"
    return 1
  fi
  echo "== $name (at most $limit s): $*" | tee -a "$results/steps.log"
  t0=$(now_ms)
  if [ -n "${to:-}" ]; then
    timeout -s INT -k 10 "$limit" "$@" >"$to" 2>"$work/$name.log"
  else
    timeout -s INT -k 10 "$limit" "$@" >"$work/$name.log" 2>&1
  fi
  rc=$?
  ms=$(($(now_ms) - t0))
  cat "$work/$name.log" >>"$results/steps.log"
  printf '%s\t%d\t%d.%03d\t%d\t%s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) "$limit" "$*" \
    >>"$work/steps.tsv"
  echo "   $name: exit $rc after $((ms / 1000)) s"
  return "$rc"
}
skip_step() { printf '%s\t-\t0\t%s\t%s\n' "$1" "$2" "$3" >>"$work/steps.tsv"; }

# The scratch venv, then everything installed into it without an index.
install_all() {
  set -euo pipefail
  # The venv sees what the interpreter it is made from sees (its site.getsitepackages(),
  # through a .pth file), no more: python3 on the GPU machine is itself a venv, whose
  # packages (cupy, torch, jax) --system-site-packages would miss, while it would add the
  # base interpreter's, which that venv does not see (pytest plugins among them).
  "$PYTHON" -m venv --without-pip "$venv"
  "$PYTHON" - "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" <<'EOF'
import site, sys
lines = [f"import site; site.addsitedir({d!r})" for d in site.getsitepackages()]
with open(f"{sys.argv[1]}/_gpu_check_parent.pth", "w") as f:
    f.write("\n".join(lines) + "\n")
EOF
  "$py" -m pip --version || "$py" -m ensurepip --default-pip
  local version dists reqs listed setuptools
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  listed=$("$py" scripts/gpu_wheelhouse.py requirements --python "$version" --have /dev/null)
  mapfile -t reqs <<<"$listed"
  dists=(-e .)
  for d in plugins/*/; do [ -f "$d/pyproject.toml" ] && dists+=(-e "${d%/}"); done
  setuptools=$(printf '%s\n' "${reqs[@]}" | grep '^setuptools' || echo setuptools)
  # only the wheelhouse: no index, and no pip configuration or PIP_* variable that names
  # another place
  local v pip=("$py" -m pip install --no-index --find-links "$wheelhouse" --no-cache-dir)
  for v in $(compgen -e | grep '^PIP_'); do unset "$v"; done
  export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
  "${pip[@]}" "$setuptools"
  # Editable, as CI installs them: the tests import the checkout (python -m pytest puts it
  # first on sys.path; some import tests.*), so the installed code must be the checkout's.
  # No build isolation: an isolated build would need setuptools from an index.
  "${pip[@]}" --no-build-isolation --config-settings editable_mode=compat "${dists[@]}"
  # The test tools: one missing (not in the wheelhouse, an old version there) costs the
  # tests that need it, not the run. Exit 3: installed, but not all of them.
  "${pip[@]}" "${reqs[@]}" && return 0
  local r missing=()
  for r in "${reqs[@]}"; do "${pip[@]}" "$r" >/dev/null 2>&1 || missing+=("$r"); done
  echo "gpu-check.sh: could not install ${missing[*]:-(each alone did)}" >&2
  return 3
}
export -f install_all

echo "oplib GPU check ($mode mode, budget $budget s): results in $results"
[ -d "$wheelhouse" ] || echo "no wheelhouse at $wheelhouse: the target must already have every dependency"
step install 150 bash -c install_all
case $? in 0 | 3) installed=1 ;; *) installed=0 ;; esac
reporter=$PYTHON
((installed)) && reporter=$py
# the card, the driver, the versions: also when the install failed
timeout 60 "$reporter" scripts/gpu_report.py env "$work" || echo "(gpu_report.py env failed)"
if ((installed)); then
  xdist=()
  "$py" -c "import xdist" 2>/dev/null && xdist=(-n auto)
  pytest=("$py" -m pytest -q --tb=short -p no:cacheprovider)
  step cuda 150 "${pytest[@]}" -m cuda -rs --junitxml="$work/cuda.xml" "${tests[@]}"
  to=$results/check.json step check 90 "$venv/bin/oplib" check --backend "$backend" --json
  step bench 120 "$py" bench/gpu.py --json "$work/bench.json"
  step calls 60 "$py" bench/gpu_calls.py --json "$results/calls.json"
  step suite 300 "${pytest[@]}" -m "not slow" "${xdist[@]}" --junitxml="$work/suite.xml" "${tests[@]}"
else
  for s in cuda check bench calls suite; do skip_step "$s" 0 "not run: the install failed"; done
fi
"$reporter" scripts/gpu_report.py summarize "$work" "$results" --mode "$mode" --budget "$budget"
