"""The report of ``scripts/gpu-check.sh``: what machine and versions it ran on, and what each
step gave. Standard library only (it also runs where the install failed).

    python scripts/gpu_report.py env WORK            # WORK/env.json: card, driver, versions
    python scripts/gpu_report.py summarize WORK RESULTS --mode gpu --budget 360

``summarize`` reads what the steps left in WORK (``steps.tsv``: one ``name rc seconds limit
command`` line per step; pytest's ``NAME.xml``, ``NAME.log``; ``bench.json``) and RESULTS
(``check.json``), writes ``RESULTS/report.txt`` and ``RESULTS/report.json``, prints the text,
and exits 0 when every step passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

STEPS = {
    "install": "install",
    "cuda": "cuda tests",
    "check": "oplib check",
    "bench": "bench/gpu.py",
    "calls": "bench/gpu_calls.py",
    "suite": "suite",
}
PACKAGES = (
    "oplib-core",
    "numpy",
    "cupy-cuda13x",
    "cupy-cuda12x",
    "cupy",
    "torch",
    "jax",
    "jaxlib",
    "ml-dtypes",
    "dask",
    "distributed",
    "pytest",
    "pytest-xdist",
    "hypothesis",
)
TIMED_OUT = (124, 137)  # timeout(1): the limit passed; 137: killed after the grace period
SHOWN = 20  # failures listed per step


def _run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def card() -> dict[str, Any]:
    """The GPU: from nvidia-smi, else from cupy; ``{"name": None, ...}`` when neither sees
    one."""
    smi = shutil.which("nvidia-smi")
    if smi:
        query = "--query-gpu=name,memory.total,driver_version"
        r = _run([smi, query, "--format=csv,noheader,nounits"])
        if r is not None and r.returncode == 0 and r.stdout.strip():
            rows = [[c.strip() for c in line.split(",")] for line in r.stdout.strip().splitlines()]
            name, memory, driver = (rows[0] + ["", "", ""])[:3]
            return {
                "name": name,
                "memory_mib": int(memory) if memory.isdigit() else memory,
                "driver": driver,
                "count": len(rows),
                "source": "nvidia-smi",
            }
    probe = (
        "import json, cupy as cp; n = cp.cuda.runtime.getDeviceCount(); "
        "p = cp.cuda.runtime.getDeviceProperties(0); "
        "print(json.dumps({'name': p['name'].decode(), 'memory_mib': p['totalGlobalMem'] >> 20, "
        "'driver': cp.cuda.runtime.driverGetVersion(), 'count': n}))"
    )
    r = _run([sys.executable, "-c", probe], timeout=60)
    if r is not None and r.returncode == 0:
        return {**json.loads(r.stdout), "source": "cupy"}
    why = "no nvidia-smi, and cupy saw no device" if smi is None else "nvidia-smi saw no device"
    return {"name": None, "memory_mib": None, "driver": None, "count": 0, "source": why}


def versions() -> dict[str, str]:
    """Versions of the packages that matter to the run, those installed."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def environment() -> dict[str, Any]:
    spec = find_spec("oplib_core")
    try:  # the installation pip made (editable: its files point at the checkout)
        installed_at = str(metadata.distribution("oplib-core").locate_file(""))
    except metadata.PackageNotFoundError:
        installed_at = None
    oplib = Path(sys.executable).parent / "oplib"
    banner = _run([str(oplib), "--version"]) if oplib.exists() else None
    fast_call = None
    if banner is not None and banner.returncode == 0:
        m = re.search(r"native fast call: ([^)]*)\)", banner.stdout)
        fast_call = m.group(1) if m else None
    probe = (
        "import oplib_core._dispatch as d; "
        "print(f'compiled ({d.COMPILED_MODULE})' if d.COMPILED else 'Python')"
    )
    ran = _run([sys.executable, "-c", probe])
    cached = ran.stdout.strip() if ran is not None and ran.returncode == 0 else None
    git = _run(["git", "describe", "--always", "--dirty"]) if shutil.which("git") else None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "card": card(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "oplib_core_at": str(Path(spec.origin).parent) if spec and spec.origin else None,
        "oplib_core_installed_in": installed_at,
        "native_fast_call": fast_call,
        # the dispatcher's cached call (oplib_core/_dispatch/_ccall.c): compiled (which
        # build: _ccall312 is called by vectorcall), or Python
        "cached_call": cached,
        "versions": versions(),
        "commit": git.stdout.strip() if git is not None and git.returncode == 0 else None,
        "cpus": os.cpu_count(),
        "environment": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("XLA_PYTHON_CLIENT_", "CUDA_VISIBLE_DEVICES", "OPLIB_"))
        },
    }


def pytest_counts(xml: Path, log: Path) -> dict[str, Any]:
    """Counts, failed test ids with their first message line, and skip reasons, from
    pytest's JUnit XML; from the log's summary line where the XML is missing (a run cut
    off before pytest wrote it)."""
    if xml.exists():
        try:
            return _from_junit(ET.parse(xml).getroot())
        except ET.ParseError:
            pass
    counts: dict[str, Any] = {"source": "log"}
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in reversed(text.splitlines()):
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)\b", line)
        if found and re.search(r"\bin [\d.]+s\b", line):
            for n, word in found:
                key = "errors" if word.startswith("error") else word
                counts[key] = counts.get(key, 0) + int(n)
            break
    counts["failed_tests"] = [
        m.group(1) for m in re.finditer(r"^(?:FAILED|ERROR) (\S+)", text, re.M)
    ][:SHOWN]
    return counts


def _from_junit(root: ET.Element) -> dict[str, Any]:
    cases = root.iter("testcase")
    counts: Counter[str] = Counter()
    failed: list[str] = []
    skips: Counter[str] = Counter()
    for case in cases:
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        if problem is not None:
            counts["failed" if problem.tag == "failure" else "errors"] += 1
            message = (problem.get("message") or "").strip().splitlines()
            failed.append(f"{test}: {message[0][:200]}" if message else test)
        elif skipped is not None:
            counts["skipped"] += 1
            skips[(skipped.get("message") or "").strip()[:160]] += 1
        else:
            counts["passed"] += 1
    return {
        "source": "junit",
        **{k: counts.get(k, 0) for k in ("passed", "failed", "errors", "skipped")},
        "failed_tests": failed[:SHOWN],
        "failed_total": len(failed),
        "skip_reasons": dict(skips.most_common(10)),
    }


def installed(log: Path) -> str:
    """What pip installed (its "Successfully installed" lines), and what it could not."""
    text = log.read_text(errors="replace") if log.exists() else ""
    names = [
        n for line in re.findall(r"^Successfully installed (.+)$", text, re.M) for n in line.split()
    ]
    note = f"installed {' '.join(names)}" if names else ""
    missing = re.findall(r"^gpu-check.sh: could not install (.+)$", text, re.M)
    return "; ".join([note, *(f"could not install {m}" for m in missing)]).strip("; ")


def check_summary(path: Path) -> dict[str, Any]:
    """``oplib check --json``'s summary, its failing rows and its skip reasons."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {"error": f"{path.name}: {e}"}
    summary = {k: v for k, v in report.get("summary", {}).items() if k != "no_samples"}
    rows = report.get("results", [])
    fails = [r for r in rows if r.get("status") == "FAIL"]
    skips = Counter(str(r.get("reason", ""))[:160] for r in rows if r.get("status") == "SKIP")
    summary["failed_rows"] = [
        f"{r.get('op')} on {r.get('backend')}, {r.get('check')}: {str(r.get('reason', ''))[:200]}"
        for r in fails[:SHOWN]
    ]
    summary["skip_reasons"] = dict(skips.most_common(10))
    return summary


def _steps(work: Path) -> list[dict[str, Any]]:
    rows = []
    path = work / "steps.tsv"
    for line in path.read_text().splitlines() if path.exists() else ():
        name, rc, seconds, limit, command = line.split("\t", 4)
        rows.append(
            {
                "step": name,
                "rc": int(rc) if rc.lstrip("-").isdigit() else None,
                "seconds": float(seconds),
                "limit": int(limit),
                "command": command,
            }
        )
    return rows


def _result(step: dict[str, Any]) -> str:
    if step["rc"] is None:
        return "not run"
    # pytest's 5: nothing collected (a --tests selection without cuda tests)
    if step["rc"] == 0 or (step["rc"] == 5 and step["step"] in ("cuda", "suite")):
        return "pass"
    return "TIMEOUT" if step["rc"] in TIMED_OUT else "FAIL"


def summarize(work: Path, results: Path, mode: str, budget: int) -> dict[str, Any]:
    env_path = work / "env.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else {}
    steps = _steps(work)
    for step in steps:
        step["result"] = _result(step)
        name = step["step"]
        if name in ("cuda", "suite"):
            step["counts"] = pytest_counts(work / f"{name}.xml", work / f"{name}.log")
        elif name == "check":
            step["counts"] = check_summary(results / "check.json")
        elif name == "install":
            step["note"] = installed(work / "install.log")
        elif name == "bench":
            try:
                step["bench"] = json.loads((work / "bench.json").read_text())
            except (OSError, ValueError) as e:
                step["bench"] = {"error": str(e)}
    ran = [s for s in steps if s["result"] != "not run"]
    ok = bool(ran) and all(s["result"] == "pass" for s in steps)
    report = {
        "verdict": "pass" if ok else "FAIL",
        "mode": mode,
        "budget_s": budget,
        "seconds": round(sum(s["seconds"] for s in steps), 1),
        **env,
        "steps": steps,
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (results / "report.txt").write_text(render(report))
    return report


def _what(step: dict[str, Any]) -> str:
    counts = step.get("counts", {})
    if step["step"] in ("cuda", "suite") and counts:
        parts = [f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped")]
        if counts.get("errors"):
            parts.append(f"{counts['errors']} errors")
        return ", ".join(parts)
    if step["step"] == "check" and "pass" in counts:
        on = ", ".join(counts.get("backends", [])) or "no backend"
        missing = "".join(
            f"; {name} unavailable: {why}" for name, why in counts.get("unavailable", {}).items()
        )
        return (
            f"{counts.get('ops', 0)} ops on {on}: {counts['pass']} passed, "
            f"{counts.get('fail', 0)} failed, {counts.get('skip', 0)} skipped{missing}"
        )
    if step["step"] == "bench":
        bench = step.get("bench", {})
        return str(bench.get("skipped") or bench.get("error") or "figures below")
    return str(step.get("note", ""))


def render(report: dict[str, Any]) -> str:
    card = report.get("card") or {}
    lines = [
        f"oplib GPU check: {report['verdict']} ({report.get('date', '?')}, {report['mode']} "
        f"mode, {report['seconds']:.0f} s of a {report['budget_s']} s budget)",
    ]
    if card.get("name"):
        lines.append(
            f"card: {card['name']} ({card.get('count', 1)}), {card.get('memory_mib')} MiB, "
            f"driver {card.get('driver')} (from {card.get('source')})"
        )
    else:
        lines.append(f"card: none ({card.get('source', 'not looked for')})")
    if report.get("python"):
        lines.append(
            f"python {report['python']} ({report.get('executable')}), oplib-core from "
            f"{report.get('oplib_core_at')}, installed in {report.get('oplib_core_installed_in')}"
            f" (native fast call: {report.get('native_fast_call')}, cached call: "
            f"{report.get('cached_call')})"
        )
    if report.get("versions"):
        lines.append(", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    if report.get("commit"):
        lines.append(f"checkout: {report['commit']}")
    if report.get("environment"):
        lines.append("set: " + " ".join(f"{k}={v}" for k, v in report["environment"].items()))
    lines += ["", f"{'step':14s} {'result':8s} {'seconds':>13s}  what"]
    for step in report["steps"]:
        took = f"{step['seconds']:.0f} / {step['limit']}"
        what = _what(step) if step["result"] != "not run" else step["command"]
        lines.append(
            f"{STEPS.get(step['step'], step['step']):14s} {step['result']:8s} {took:>13s}  {what}"
        )
    for step in report["steps"]:
        counts = step.get("counts", {})
        failed = counts.get("failed_tests") or counts.get("failed_rows") or []
        if failed:
            lines += ["", f"{STEPS.get(step['step'], step['step'])}, failed:"]
            lines += [f"  {f}" for f in failed]
        if step["step"] == "cuda" and counts.get("skip_reasons"):
            lines += ["", "cuda tests, skipped:"]
            lines += [f"  {n} x {why}" for why, n in counts["skip_reasons"].items()]
        if step.get("bench", {}).get("summary"):
            lines += ["", "bench/gpu.py, same run:"]
            lines += [f"  {line}" for line in step["bench"]["summary"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env")
    env.add_argument("work", type=Path)
    s = sub.add_parser("summarize")
    s.add_argument("work", type=Path)
    s.add_argument("results", type=Path)
    s.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    s.add_argument("--budget", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "env":
        (args.work / "env.json").write_text(json.dumps(environment(), indent=1) + "\n")
        return
    report = summarize(args.work, args.results, args.mode, args.budget)
    print((args.results / "report.txt").read_text(), end="")
    sys.exit(0 if report["verdict"] == "pass" else 1)


if __name__ == "__main__":
    main()
