"""The GPU check's parts, on any machine: scripts/gpu_wheelhouse.py (what the wheelhouse
holds), scripts/gpu_report.py (the report), bench/gpu.py (its sections on the cpu backend,
and "no GPU: skipped" with the devices hidden), the shell scripts' argument errors; and,
slow (CI runs it: it downloads from PyPI), scripts/gpu-wheelhouse.sh then
scripts/gpu-check.sh --cpu for real."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
NO_DEVICE = {"CUDA_VISIBLE_DEVICES": ""}  # cupy and torch then see no device
needs_toml = pytest.mark.skipif(
    not any(importlib.util.find_spec(m) for m in ("tomllib", "tomli")),
    reason="reading pyproject.toml needs Python 3.11+ (tomllib) or tomli",
)


def _load(path: Path) -> types.ModuleType:
    name = f"_gpu_check_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


wheelhouse = _load(SCRIPTS / "gpu_wheelhouse.py")
report = _load(SCRIPTS / "gpu_report.py")
bench = _load(ROOT / "bench" / "gpu.py")


def _names(reqs: list[Any]) -> dict[str, Any]:
    return {str(r.name).lower().replace("_", "-"): r for r in reqs}


# -- scripts/gpu_wheelhouse.py -------------------------------------------------------------


@needs_toml
def test_wanted_holds_every_dependency_and_test_tool_but_no_oplib_distribution():
    wanted = _names(wheelhouse.wanted(ROOT, "3.12"))
    # the core's, the dask plugin's (with its extra), the test tools, the build backend
    for name in ("pluggy", "numpy", "array-api-compat", "dask", "distributed", "jax"):
        assert name in wanted
    for name in ("pytest", "hypothesis", "pydot", "array-api-strict", "pytest-xdist"):
        assert name in wanted
    assert str(wanted["setuptools"].specifier) == ">=77"
    assert wanted["dask"].extras == {"array"}
    # specifiers of one project from several places are merged
    assert Version("2.2") not in wanted["array-api-strict"].specifier
    assert not any(name.startswith("oplib") for name in wanted)
    # what a GPU run leaves out: the lint/type/dist tools, cupy, jax's cpu build
    assert not {"ruff", "mypy", "basedpyright", "twine", "build"} & set(wanted)
    assert not any(name.startswith("cupy") for name in wanted)
    assert wanted["jax"].extras == set()


@needs_toml
def test_wanted_evaluates_markers_for_the_target_python():
    assert "typing-extensions" in _names(wheelhouse.wanted(ROOT, "3.10"))
    assert "typing-extensions" not in _names(wheelhouse.wanted(ROOT, "3.12"))
    with pytest.raises(ValueError, match=r"--python: expected a version such as 3.12, got '312'"):
        wheelhouse.wanted(ROOT, "312")


def test_read_have_takes_pip_freeze_and_bare_names(tmp_path):
    have = tmp_path / "have.txt"
    have.write_text(
        textwrap.dedent("""\
            # a comment
            NumPy==2.5.2
            ml_dtypes==0.5.1
            -e /work/main
            cupy-cuda13x @ file:///wheels/cupy.whl
            rich
            odd==not-a-version
        """)
    )
    assert wheelhouse.read_have(have) == {
        "numpy": Version("2.5.2"),
        "ml-dtypes": Version("0.5.1"),
        "cupy-cuda13x": None,
        "rich": None,
        "odd": None,
    }


def test_the_image_list_names_what_the_gpu_machine_has():
    have = wheelhouse.read_have(None)
    assert have["cupy-cuda13x"] == Version("14.2.0") and have["numpy"] == Version("2.5.2")
    assert "pytest-xdist" in have and "torch" in have
    # what the brief says the image lacks
    assert not {"dask", "distributed", "array-api-compat", "array-api-strict"} & set(have)


@needs_toml
def test_requirements_leave_out_what_the_target_has_at_a_version_that_fits():
    have: dict[str, Version | None] = {
        "numpy": Version("2.5.2"),  # fits >=1.24
        "pluggy": Version("1.0"),  # too old for >=1.3
        "rich": None,  # there, version unknown: taken as fitting
        "setuptools": Version("80"),  # always carried: the offline build needs >=77
    }
    lines = wheelhouse.requirements("3.12", have, ROOT)
    names = _names([Requirement(line) for line in lines])
    assert "numpy" not in names and "rich" not in names
    assert str(names["pluggy"].specifier) == ">=1.3"
    assert "setuptools" in names
    assert "dask" in names  # not in have
    assert any(line.startswith("dask[array]>=") for line in lines)


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        # a vendored project's metadata, deeper down, is not the wheel's own
        z.writestr(f"{name}/_vendor/other-1.0.dist-info/METADATA", "Name: other\n")
    return path


@needs_toml
def test_keep_moves_only_the_wheels_the_target_lacks(tmp_path):
    staging, dest = tmp_path / "staging", tmp_path / "dest"
    staging.mkdir()
    _wheel(staging, "dask", "2026.8.0", ("toolz>=0.12", "partd>=1.4", 'numpy>=2; extra == "array"'))
    _wheel(staging, "partd", "1.4.2", ("locket",))
    _wheel(staging, "locket", "1.0.0")
    _wheel(staging, "toolz", "1.2.0")  # there at 1.2: fits >=0.12
    _wheel(staging, "numpy", "2.5.5")  # there at 1.26: too old for dask[array]'s numpy>=2
    have = {"toolz": Version("1.2"), "numpy": Version("1.26"), "locket": None}
    kept, skipped = wheelhouse.keep(staging, dest, "3.12", have, ROOT)
    assert sorted(w.name.split("-")[0] for w in kept) == ["dask", "numpy", "partd"]
    assert sorted(p.name.split("-")[0] for p in dest.iterdir()) == ["dask", "numpy", "partd"]
    assert skipped == [
        "locket-1.0.0-py3-none-any.whl: the target has locket",
        "toolz-1.2.0-py3-none-any.whl: the target has toolz 1.2",
    ]


def _bash(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


def test_the_wheelhouse_script_does_not_empty_a_folder_it_did_not_fill(tmp_path):
    (tmp_path / "mine-1.0-py3-none-any.whl").write_text("")
    r = _bash("gpu-wheelhouse.sh", str(tmp_path))
    assert r.returncode == 2
    assert "holds wheels this script did not put there; name another folder" in r.stderr
    assert (tmp_path / "mine-1.0-py3-none-any.whl").exists()
    assert _bash("gpu-wheelhouse.sh", "--frobnicate").returncode == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "soon"], "--budget takes whole seconds, got soon"),
        (["--gpu"], "unknown argument --gpu (see --help)"),
    ],
)
def test_the_check_script_refuses_bad_arguments(args, message):
    r = _bash("gpu-check.sh", *args)
    assert r.returncode == 2 and message in r.stderr


def test_the_check_script_reports_steps_its_budget_left_no_time_for(tmp_path):
    """With no time for the install, nothing runs, and the report (in $OUT) says why."""
    out = tmp_path / "out"
    out.mkdir()
    r = _bash("gpu-check.sh", "--cpu", "--budget", "5", OUT=str(out), PYTHON=sys.executable)
    assert r.returncode == 1, r.stdout + r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.txt", "steps.log"]
    data = json.loads((out / "report.json").read_text())
    assert data["verdict"] == "FAIL" and data["mode"] == "cpu" and data["budget_s"] == 5
    assert [(s["step"], s["result"], s["command"]) for s in data["steps"]] == [
        ("install", "not run", "not run: the budget was spent"),
        ("cuda", "not run", "not run: the install failed"),
        ("check", "not run", "not run: the install failed"),
        ("bench", "not run", "not run: the install failed"),
        ("calls", "not run", "not run: the install failed"),
        ("suite", "not run", "not run: the install failed"),
    ]
    assert r.stdout.endswith((out / "report.txt").read_text())
    assert "card" in data and data["python"] == "{}.{}.{}".format(*sys.version_info[:3])


def test_the_check_script_says_how_to_use_it():
    r = _bash("gpu-check.sh", "--help")
    assert r.returncode == 0
    assert "--cpu, --dry-run" in r.stdout and "--budget SECONDS" in r.stdout


# -- scripts/gpu_report.py -----------------------------------------------------------------


@pytest.fixture(scope="module")
def pytest_run(tmp_path_factory) -> tuple[Path, Path]:
    """A real pytest run (one pass, one failure, two skips): its JUnit XML and its log."""
    where = tmp_path_factory.mktemp("pytest-run")
    (where / "test_some.py").write_text(
        textwrap.dedent("""\
            import pytest
            def test_ok(): pass
            def test_bad(): assert 1 == 2, "one is not two"
            @pytest.mark.parametrize("n", [1, 2])
            def test_skipped(n): pytest.skip("no device here")
        """)
    )
    xml = where / "run.xml"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:oplib"),
            *(f"--junitxml={xml}", "--rootdir", str(where), str(where / "test_some.py")),
        ],
        capture_output=True,
        text=True,
        cwd=where,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    log = where / "run.log"
    log.write_text(proc.stdout)
    return xml, log


def test_pytest_counts_from_junit(pytest_run):
    xml, log = pytest_run
    counts = report.pytest_counts(xml, log)
    assert counts["source"] == "junit"
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (1, 1, 2)
    assert counts["skip_reasons"] == {"no device here": 2}
    (failed,) = counts["failed_tests"]
    assert failed.startswith("test_some::test_bad: AssertionError: one is not two")


def test_pytest_counts_from_the_log_when_the_xml_is_missing(pytest_run, tmp_path):
    _, log = pytest_run
    counts = report.pytest_counts(tmp_path / "absent.xml", log)
    assert counts["source"] == "log"
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (1, 1, 2)
    assert counts["failed_tests"] == ["test_some.py::test_bad"]


def test_check_summary_reads_oplib_check_json(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "oplib_core", "check", "--backend", "cpu", "--json", "oplib::add"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    data["results"].append(
        {"op": "oplib::add", "backend": "cpu", "check": "test_x", "status": "FAIL", "reason": "r"}
    )
    path = tmp_path / "check.json"
    path.write_text(json.dumps(data))
    summary = report.check_summary(path)
    assert summary["backends"] == ["cpu"] and summary["pass"] == data["summary"]["pass"] > 0
    assert summary["failed_rows"] == ["oplib::add on cpu, test_x: r"]
    assert "no_samples" not in summary
    assert report.check_summary(tmp_path / "absent.json")["error"].startswith("absent.json: ")


def _work(tmp_path: Path, pytest_run: tuple[Path, Path], suite_rc: int) -> tuple[Path, Path]:
    work, results = tmp_path / "work", tmp_path / "results"
    work.mkdir()
    results.mkdir()
    xml, _ = pytest_run
    (work / "cuda.xml").write_bytes(xml.read_bytes())
    (work / "suite.log").write_text("5 passed, 1 skipped in 3.00s\n")
    (work / "install.log").write_text("Successfully installed oplib-core-0.1.0 dask-2026.8.0\n")
    (work / "bench.json").write_text(json.dumps({"skipped": "no GPU: none here"}))
    (results / "check.json").write_text(
        json.dumps({"summary": {"ops": 2, "backends": ["cuda"], "pass": 8, "fail": 0, "skip": 1}})
    )
    (work / "env.json").write_text(
        json.dumps(
            {
                "date": "2026-11-28 07:00 UTC",
                "card": {
                    "name": "NVIDIA H200",
                    "memory_mib": 143771,
                    "driver": "580.1",
                    "count": 1,
                    "source": "nvidia-smi",
                },
                "versions": {"cupy-cuda13x": "14.2.0"},
            }
        )
    )
    rows = [
        ("install", 0, "30.5", 150, "bash -c install_all"),
        ("cuda", 1, "12.0", 90, "pytest -m cuda"),
        ("check", 0, "20.0", 90, "oplib check --backend cuda --json"),
        ("bench", 0, "1.0", 120, "bench/gpu.py"),
        ("suite", suite_rc, "100.0", 150, "pytest -m 'not slow'"),
    ]
    (work / "steps.tsv").write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    return work, results


def test_summarize_writes_the_report_and_says_what_failed(tmp_path, pytest_run):
    work, results = _work(tmp_path, pytest_run, suite_rc=124)
    data = report.summarize(work, results, "gpu", 360)
    assert data["verdict"] == "FAIL"
    assert [s["result"] for s in data["steps"]] == ["pass", "FAIL", "pass", "pass", "TIMEOUT"]
    assert json.loads((results / "report.json").read_text())["card"]["name"] == "NVIDIA H200"
    text = (results / "report.txt").read_text()
    assert text.startswith("oplib GPU check: FAIL (2026-11-28 07:00 UTC, gpu mode, 164 s of a 360")
    assert "card: NVIDIA H200 (1), 143771 MiB, driver 580.1 (from nvidia-smi)" in text
    assert "installed oplib-core-0.1.0 dask-2026.8.0" in text
    assert "1 passed, 1 failed, 2 skipped" in text  # the cuda tests, from their XML
    assert "2 ops on cuda: 8 passed, 0 failed, 1 skipped" in text
    assert "no GPU: none here" in text
    assert "TIMEOUT" in text and "5 passed, 0 failed, 1 skipped" in text  # from the log
    assert "cuda tests, failed:\n  test_some::test_bad: AssertionError" in text
    assert "cuda tests, skipped:\n  2 x no device here" in text


def test_the_summary_exits_0_only_when_every_step_passed(tmp_path, pytest_run, capsys):
    work, results = _work(tmp_path, pytest_run, suite_rc=0)
    with pytest.raises(SystemExit) as failed:  # the cuda tests failed
        report.main(["summarize", str(work), str(results), "--mode", "gpu", "--budget", "360"])
    assert failed.value.code == 1
    assert capsys.readouterr().out == (results / "report.txt").read_text()
    (work / "steps.tsv").write_text(
        "install\t0\t3.0\t150\tbash -c install_all\ncuda\t-\t0\t90\tnot run: the budget was spent\n"
    )
    (work / "cuda.xml").unlink()
    data = report.summarize(work, results, "cpu", 10)
    assert [s["result"] for s in data["steps"]] == ["pass", "not run"]
    assert data["verdict"] == "FAIL"
    assert "cuda tests     not run" in (results / "report.txt").read_text()
    assert "not run: the budget was spent" in (results / "report.txt").read_text()


def test_a_pytest_step_that_collected_nothing_passed_and_other_codes_failed():
    def result(step: str, rc: int) -> str:
        return report._result({"step": step, "rc": rc})

    assert result("cuda", 5) == "pass" and result("suite", 5) == "pass"
    assert result("check", 5) == "FAIL" and result("suite", 1) == "FAIL"
    assert result("bench", 124) == "TIMEOUT" and result("suite", 137) == "TIMEOUT"


def test_the_install_note_says_what_was_installed_and_what_was_not(tmp_path):
    log = tmp_path / "install.log"
    log.write_text(
        "Successfully installed oplib-core-0.1.0\nRequirement already satisfied: numpy\n"
        "Successfully installed pydot-4.0.1\n"
        "gpu-check.sh: could not install array-api-strict>=2.3\n"
    )
    assert report.installed(log) == (
        "installed oplib-core-0.1.0 pydot-4.0.1; could not install array-api-strict>=2.3"
    )
    assert report.installed(tmp_path / "absent.log") == ""


def test_the_card_comes_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"  # what nvidia-smi prints for the query, on a 1-GPU machine
    smi.write_text(
        "#!/bin/sh\n"
        'test "$*" = "--query-gpu=name,memory.total,driver_version '
        '--format=csv,noheader,nounits" || exit 9\n'
        "echo 'NVIDIA H200, 143771, 580.159.04'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert report.card() == {
        "name": "NVIDIA H200",
        "memory_mib": 143771,
        "driver": "580.159.04",
        "count": 1,
        "source": "nvidia-smi",
    }


def test_a_check_on_an_unavailable_backend_says_why(tmp_path):
    step = {
        "step": "check",
        "counts": {
            "ops": 0,
            "backends": [],
            "unavailable": {"cuda": "cupy not installed"},
            "pass": 0,
            "fail": 0,
            "skip": 0,
        },
    }
    assert report._what(step) == (
        "0 ops on no backend: 0 passed, 0 failed, 0 skipped; cuda unavailable: cupy not installed"
    )


def test_env_names_no_card_where_no_device_is_seen(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()  # a PATH without nvidia-smi
    env = {**os.environ, **NO_DEVICE, "PATH": str(empty)}
    subprocess.run(
        [sys.executable, str(SCRIPTS / "gpu_report.py"), "env", str(tmp_path)],
        env=env,
        check=True,
        timeout=120,
    )
    data = json.loads((tmp_path / "env.json").read_text())
    assert data["card"]["name"] is None
    assert data["card"]["source"] == "no nvidia-smi, and cupy saw no device"
    assert data["versions"]["oplib-core"] and data["versions"]["numpy"] == np.__version__
    assert Path(data["oplib_core_at"]).name == "oplib_core"
    assert data["environment"]["CUDA_VISIBLE_DEVICES"] == ""


# -- bench/gpu.py --------------------------------------------------------------------------

TINY = bench.Sizes(
    number=5,
    repeats=2,
    chain_n=64,
    chain_repeats=2,
    bandwidth_bytes=1 << 16,  # 64 KiB: float32 GB/s well above the 0 that 4 KiB could round to
    bandwidth_reps=1,
    loop_ops=20,
    loop_repeats=1,
    matmul_k=8,
    matmul_reps=1,
)


def test_bench_says_no_gpu_and_exits_0_without_a_device(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--json", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, **NO_DEVICE},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("no GPU: skipped (")
    assert json.loads(out.read_text())["skipped"].startswith("no GPU: ")


def test_bench_sections_run_through_oplib_on_the_cpu_backend(tmp_path):
    """The sections' oplib side (ops, Tensors, autograd, factories) on numpy arrays: what
    a GPU run does with cupy's, less the device; the figures themselves mean nothing here."""
    results = bench.Results(path=tmp_path / "bench.json")
    rig = bench.Rig(xp=np, device="cpu", sync=lambda: None)
    assert bench.run(rig, TINY, results) is True
    data = json.loads((tmp_path / "bench.json").read_text())
    assert "errors" not in data
    assert set(data["per_call_us"]) == {"neg", "add", "mul", "sum", "matmul 1x1", "zeros", "cat"}
    times = [v for row in data["per_call_us"].values() for k, v in row.items() if "over" not in k]
    assert all(v > 0 for v in times)
    assert set(data["per_call_us"]["neg"]) == {
        "cupy",
        "oplib",
        "oplib Tensor",
        "oplib over cupy",
        "oplib Tensor over cupy",
    }
    assert data["autograd_ms"]["oplib fwd+bwd"] > 0
    assert data["peak_memory_MiB"] == {}  # not measured on the cpu
    assert set(data["bandwidth_GBps"]) == {"float32", "float16", "int32"}
    assert set(data["small_ops_per_s"]) == {"cupy", "oplib", "oplib Tensor"}
    assert "own_kernels_by_size_us" not in data  # cupy's RawKernels: on a cuda rig only
    assert set(data["matmul_TFLOPs"]) == {"cupy", "oplib", "oplib Tensor"}
    summary = "\n".join(data["summary"])
    # (a signed difference: the cached call may measure below cupy's own within the noise)
    assert re.search(
        r"per call, µs over cupy \(native/Tensor; budget \+0\.5/\+1\.5\): neg [+-]\d", summary
    )
    assert "autograd 50x(mul, tanh) on 64 float32, fwd+bwd: oplib " in summary
    assert "add int32, 0 MiB arrays: oplib" in summary and "20 small ops" in summary
    # one op of each family of oplib-cuda's own kernels, each with the kernel that served it
    for family in (
        "neg float32",
        "mul by 2 float16",
        "lt int32",
        "add bias float32",
        "sub 0-d int32",
        "sub per row float16",
        "clamp int32",
        "where float32",
    ):
        assert f"{family}, 0 MiB arrays: oplib " in summary, family
    row = data["bandwidth_GBps"]["float32"]
    for op in (
        "add",
        "neg",
        "mul by 2",
        "lt",
        "add bias",
        "sub 0-d",
        "sub per row",
        "clamp",
        "where",
    ):
        assert row[f"oplib {op} served by"] == "cupy" and row[f"oplib {op}"] > 0  # (no cupy)


class _NoMatmul:
    """numpy, but its matmul raises: a section that fails."""

    def __getattr__(self, name: str) -> Any:
        if name == "matmul":
            raise AttributeError("this array module has no matmul")
        return getattr(np, name)


def test_a_failing_section_is_reported_and_the_others_still_run(tmp_path, capsys):
    results = bench.Results(path=tmp_path / "bench.json")
    rig = bench.Rig(xp=_NoMatmul(), device="cpu", sync=lambda: None)
    assert bench.run(rig, TINY, results) is False
    data = json.loads((tmp_path / "bench.json").read_text())
    assert set(data["errors"]) == {"per_call_us matmul 1x1", "matmul_TFLOPs"}
    assert data["errors"]["matmul_TFLOPs"] == "AttributeError: this array module has no matmul"
    assert "matmul 1x1" not in data["per_call_us"] and "neg" in data["per_call_us"]
    assert "autograd_ms" in data and "small_ops_per_s" in data
    assert "matmul_TFLOPs: raised AttributeError" in "\n".join(data["summary"])
    assert "this array module has no matmul" in capsys.readouterr().err


# -- the whole thing, offline, from a wheelhouse ------------------------------------------


def _copy_checkout(dest: Path) -> Path:
    """What a GPU machine receives: the tracked files and the untracked ones git does not
    ignore (the editable install builds the compiled fast call in place: not in ROOT, whose
    copy other processes have loaded)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # (a tracked file deleted in the working tree is not)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.mark.slow
@needs_toml
def test_gpu_check_cpu_mode_installs_from_the_wheelhouse_and_reports(tmp_path):
    """scripts/gpu-wheelhouse.sh for this interpreter (what it lacks, from PyPI), then
    scripts/gpu-check.sh --cpu in a copy of the checkout: the scratch venv, the offline
    install, every step."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("copying the checkout as a GPU machine receives it needs git and .git")
    checkout = _copy_checkout(tmp_path / "checkout")
    have = tmp_path / "have.txt"
    freeze = [sys.executable, "-m", "pip", "list", "--format=freeze"]
    have.write_text(subprocess.run(freeze, capture_output=True, text=True, check=True).stdout)
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    version = "{}.{}".format(*sys.version_info[:2])
    houses = tmp_path / "wheels"
    filled = subprocess.run(
        [
            *("bash", str(SCRIPTS / "gpu-wheelhouse.sh"), "--python", version),
            *("--have", str(have), str(houses)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert filled.returncode == 0, filled.stdout + filled.stderr
    assert f"{houses}: " in filled.stdout and " MiB" in filled.stdout
    assert (houses / ".oplib-wheelhouse").exists()
    results = tmp_path / "results"
    proc = subprocess.run(
        [
            *("bash", str(checkout / "scripts" / "gpu-check.sh"), "--cpu"),
            *("--wheelhouse", str(houses)),
            *("--results", str(results), "--budget", "300", "--tests", "tests/test_cuda.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    text = (results / "report.txt").read_text()
    assert proc.returncode == 0, text + proc.stderr
    assert text.startswith("oplib GPU check: pass (") and "cpu mode" in text
    assert sorted(p.name for p in results.iterdir()) == [
        "calls.json",
        "check.json",
        "report.json",
        "report.txt",
        "steps.log",
    ]
    data = json.loads((results / "report.json").read_text())
    steps = {s["step"]: s for s in data["steps"]}
    assert list(steps) == ["install", "cuda", "check", "bench", "calls", "suite"]
    assert json.loads((results / "calls.json").read_text())["skipped"].startswith("no GPU: ")
    assert all(s["result"] == "pass" for s in steps.values())
    assert "oplib-core-0.1.0" in steps["install"]["note"]
    # the device hidden: the cuda tests ran and skipped, the bench said so
    cuda = steps["cuda"]["counts"]
    assert cuda["skipped"] > 0 and cuda["passed"] == cuda["failed"] == 0
    assert steps["check"]["counts"]["backends"] == ["cpu"]
    assert steps["check"]["counts"]["fail"] == 0 and steps["check"]["counts"]["pass"] > 0
    assert steps["bench"]["bench"]["skipped"].startswith("no GPU: ")
    assert steps["suite"]["counts"]["passed"] > 0
    # installed (editable) in the scratch venv, from the copy
    assert "oplib-gpu-check." in data["oplib_core_installed_in"]
    assert data["oplib_core_at"] == str(checkout / "oplib_core")
    assert data["environment"]["CUDA_VISIBLE_DEVICES"] == ""
    log = (results / "steps.log").read_text()
    assert "== install" in log and "== suite" in log


def test_crossover_is_where_the_own_kernel_stops_being_slower_for_good():
    def row(*extra: float) -> dict[str, dict[str, float]]:
        return {str(n): {"own over cupy": e} for n, e in zip(bench.BY_SIZE, extra, strict=True)}

    assert bench.crossover(row(0.9, 0.5, 0.2, -0.1, -3.0, -40.0)) == 1 << 20
    assert bench.crossover(row(0.9, -0.1, 0.2, -0.1, -3.0, -40.0)) == 1 << 20  # not for good
    assert bench.crossover(row(-0.1, -0.1, 0.0, -0.1, -3.0, -40.0)) == 1 << 10
    assert bench.crossover(row(-0.1, -0.1, -0.1, -0.1, -3.0, 0.4)) is None


def test_the_summary_puts_each_own_kernel_beside_min_elements():
    us = {
        "1024": {"cupy": 9.0, "own": 10.5},
        "16777216": {"cupy": 60.0, "own": 41.25},
    }
    data = {
        "own_kernels_by_size_us": {
            "MIN_ELEMENTS": 1 << 22,
            "tanh": {"us": us, "own no slower from": 16777216},
            "add": {"us": us, "own no slower from": None},
        }
    }
    assert bench.summary(data) == [
        "own kernel against cupy, tanh float32, µs per call cupy/own: 1,024 9.0/10.5, "
        "16,777,216 60.0/41.2; own no slower from 16,777,216 elements (MIN_ELEMENTS 4,194,304)",
        "own kernel against cupy, add float32, µs per call cupy/own: 1,024 9.0/10.5, "
        "16,777,216 60.0/41.2; own slower at every size (MIN_ELEMENTS 4,194,304)",
    ]
