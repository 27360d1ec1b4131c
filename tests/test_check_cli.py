"""``oplib check``: the per-op summary, the op x backend x check table (``-v``),
``--json``, exit codes, progress on stderr, ``--isolate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import plugins
from oplib_core.cli import main
from oplib_core.testing import SampleInput

from helpers import FakeTTY

CHECK_COLUMNS = ["schema", "autograd_registration", "faketensor", "backends", "gradcheck"]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["check", *argv])
    return code, capsys.readouterr().out


def test_one_core_op_on_chosen_backends(capsys):
    npu = oplib.backends.get("privateuse1").name
    code, out = run(capsys, "oplib::mul", "--backend", "cpu", "--backend", npu, "-b", "meta")
    assert code == 0
    header, _rule, row, *_ = out.splitlines()
    assert header.split() == ["op", "result", "pass", "fail", "skip", "failing", "on", "notes"]
    assert row.split() == ["oplib::mul", "PASS", "12", "0", "3", "-"]
    assert "1 ops x 3 backends" in out and "0 failed" in out
    code, out = run(capsys, "oplib::mul", "--backend", "cpu", "--backend", npu, "-b", "meta", "-v")
    assert code == 0
    header, _rule, *rest = out.splitlines()
    assert header.split() == ["op", "backend", *CHECK_COLUMNS, "notes"]
    rows = {line.split()[1]: line.split()[2:7] for line in rest[:3]}
    assert rows["cpu"] == ["PASS", "PASS", "PASS", "SKIP", "PASS"]  # cpu is the reference
    assert rows[npu] == ["PASS"] * 5
    assert rows["meta"] == ["PASS", "PASS", "PASS", "SKIP", "SKIP"]  # no data on meta
    assert "cpu is the reference backend" in out and "meta arrays have no data" in out
    assert "1 ops x 3 backends" in out and "0 failed" in out


def test_json_rows_and_summary(capsys):
    code, out = run(capsys, "oplib::add", "oplib::neg", "-b", "cpu", "--json")
    data = json.loads(out)
    assert code == 0
    assert {(r["op"], r["check"]) for r in data["results"]} == {
        (op, f"test_{c}") for op in ("oplib::add", "oplib::neg") for c in CHECK_COLUMNS
    }
    assert set(data["results"][0]) == {
        "op",
        "backend",
        "check",
        "status",
        "reason",
        "sample",
        "skipped_samples",
    }
    s = data["summary"]
    assert (s["ops"], s["backends"], s["fail"]) == (2, ["cpu"], 0)
    assert s["pass"] + s["skip"] == 10


def test_unavailable_backend_named_explicitly_is_skipped(capsys, teardown):
    undo = oplib.backends.register(
        oplib.BackendSpec(name="offline", array_types=(bytearray,), status=lambda: "unplugged")
    )
    teardown(undo)
    code = main(["check", "oplib::neg", "-b", "offline", "--json"])
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["results"]
    assert code == 1 and {r["status"] for r in rows} == {"SKIP"}
    assert "oplib: nothing was checked: every check was skipped" in captured.err
    assert rows[0]["reason"] == "backend not available: unplugged"


def test_only_unavailable_backends_named_says_so_not_that_ops_lack_samples(capsys, teardown):
    undo = oplib.backends.register(
        oplib.BackendSpec(name="offline", array_types=(bytearray,), status=lambda: "unplugged")
    )
    teardown(undo)
    for extra in ([], ["--json"]):
        code = main(["check", "-b", "offline", *extra])
        captured = capsys.readouterr()
        assert code == 1
        assert captured.err == (
            "oplib: no backend asked for is available here, so no op was checked: "
            "offline: unplugged\n"
        )
        if extra:  # the JSON says why too (scripts/gpu-check.sh reads it)
            summary = json.loads(captured.out)["summary"]
            assert summary["unavailable"] == {"offline": "unplugged"}
            assert (summary["ops"], summary["backends"], summary["pass"]) == (0, [], 0)
        else:
            assert captured.out == ""


def test_failure_exits_1_and_names_op_backend_check(capsys, ns):
    q = oplib.define(f"{ns}::bad", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x + 1)
    oplib.register_fake(q, lambda x: x.new_empty((1,)))  # wrong shape

    class Samples:
        @oplib.hookimpl
        def oplib_sample_inputs(self, op, device):
            if op.name() == q:
                return [SampleInput((oplib.ones(2, 3, device=device),), name="ones (2, 3)")]
            return None

    plugins.register(Samples(), name=f"{ns}-samples")
    try:
        code, out = run(capsys, q, "-b", "cpu")
        jcode, jout = run(capsys, "-b", "cpu", "--json")
        vcode, vout = run(capsys, q, "-b", "cpu", "-v")
    finally:
        plugins.unregister(f"{ns}-samples")
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith(q))
    assert row.split()[1:7] == ["FAIL", "1", "1", "3", "cpu", "faketensor"]
    assert "faketensor on cpu: output 0: the fake kernel" in row
    assert vcode == 1
    row = next(line for line in vout.splitlines() if line.startswith(q))
    assert row.split()[1:7] == ["cpu", "PASS", "SKIP", "FAIL", "SKIP", "SKIP"]
    assert "faketensor: output 0: the fake kernel" in row
    assert f"- {q} on cpu, test_faketensor (sample ones (2, 3)):" in out
    assert "gives shape (1,), the real cpu kernel (2, 3)" in out
    # the whole run: every op with samples, this one failing
    assert jcode == 1
    failed = [r for r in json.loads(jout)["results"] if r["status"] == "FAIL"]
    assert [(r["op"], r["check"]) for r in failed] == [(q, "test_faketensor")]


def test_op_without_samples_is_reported(capsys, ns):
    q = oplib.define(f"{ns}::nosamples", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: np.array(x))
    code, out = run(capsys, "-b", "cpu")
    assert code == 0
    assert "have no sample inputs" in out and q in out.split("have no sample inputs")[1]
    code, out = run(capsys, q, "-b", "cpu", "--json")
    assert {r["reason"] for r in json.loads(out)["results"]} == {"no sample inputs for cpu"}
    assert code == 1  # nothing was checked


@pytest.fixture
def samples_for(ns):
    """``samples_for(q, ...)``: a plugin giving each op ``q`` one (2, 3) sample, removed
    after the test."""
    names: list[str] = []

    def add(*qualnames: str) -> None:
        class Samples:
            @oplib.hookimpl
            def oplib_sample_inputs(self, op, device):
                if op.name() in qualnames:
                    return [SampleInput((oplib.ones(2, 3, device=device),), name="ones")]
                return None

        name = f"{ns}-samples-{len(names)}"
        plugins.register(Samples(), name=name)
        names.append(name)

    yield add
    for name in names:
        plugins.unregister(name)


def test_failures_come_first(capsys, ns, samples_for):
    good = oplib.define(f"{ns}::a_good", "(Tensor x) -> Tensor")
    oplib.impl(good, "cpu", lambda x: -x)
    oplib.register_fake(good, lambda x: x.new_empty(x.shape))
    bad = oplib.define(f"{ns}::z_bad", "(Tensor x) -> Tensor")
    oplib.impl(bad, "cpu", lambda x: -x)
    oplib.register_fake(bad, lambda x: x.new_empty((1,)))
    samples_for(good, bad)
    code, out = run(capsys, good, bad, "-b", "cpu")
    assert code == 1
    ops = [line.split()[0] for line in out.splitlines()[2:4]]
    assert ops == [bad, good]


def test_progress_bar_on_a_terminal_summary_line_otherwise(capsys, monkeypatch):
    code = main(["check", "oplib::neg", "-b", "cpu"])
    err = capsys.readouterr().err
    assert code == 0
    assert err == f"1 ops x 1 backends (cpu): {err.split(': ', 1)[1]}"
    assert err.count("\n") == 1 and "passed" in err
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["check", "oplib::neg", "oplib::abs", "-b", "cpu"]) == 0
    drawn = tty.getvalue()
    assert "checking" in drawn and "2/2" in drawn and "passed" not in drawn


@pytest.mark.parametrize(
    ("crash", "how"),
    [("os.abort()", "killed by SIGABRT"), ("os._exit(3)", "exited with status 3")],
)
def test_isolate_reports_a_crashing_kernel_and_goes_on(capsys, ns, samples_for, crash, how):
    def crashing(x):
        eval(crash, {"os": os})  # ends the process that runs it
        return x

    q = oplib.define(f"{ns}::crash", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", crashing)
    oplib.register_fake(q, lambda x: x.new_empty(x.shape))
    samples_for(q)
    code, out = run(capsys, q, "oplib::neg", "-b", "cpu", "--isolate", "--json")
    data = json.loads(out)
    assert code == 1
    crashed = [r for r in data["results"] if r["op"] == q]
    assert {r["status"] for r in crashed} == {"FAIL"}
    assert crashed[0]["reason"] == (f"the check process crashed ({how}) while checking {q} on cpu")
    neg = {r["status"] for r in data["results"] if r["op"] == "oplib::neg"}
    assert neg == {"PASS", "SKIP"}  # the run went on after the crash


def test_isolated_results_match_in_process(capsys):
    _, isolated = run(
        capsys, "oplib::mul", "oplib::sum", "-b", "cpu", "-b", "meta", "--isolate", "--json"
    )
    _, direct = run(capsys, "oplib::mul", "oplib::sum", "-b", "cpu", "-b", "meta", "--json")
    assert json.loads(isolated)["results"] == json.loads(direct)["results"]


def test_unknown_op_or_backend_exit_2(capsys):
    assert main(["check", "nope::x"]) == 2
    assert "no operator 'nope::x'" in capsys.readouterr().err
    assert main(["check", "-b", "nosuch"]) == 2
    assert "no backend 'nosuch'" in capsys.readouterr().err
    assert main(["check", "-b", "cpux"]) == 2
    assert capsys.readouterr().err == (
        "oplib: no backend 'cpux' (see 'oplib backends list'); did you mean 'cpu'?\n"
    )


def test_console_script_checks_the_core_op_set():
    """What CI runs: every core op on cpu, meta and the private-use device."""
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core.cli", "check", "-b", "cpu", "-b", "meta",
         "-b", "privateuse1", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    data = json.loads(r.stdout)
    assert r.returncode == 0, [x for x in data["results"] if x["status"] == "FAIL"]
    assert data["summary"]["ops"] >= 61 and data["summary"]["fail"] == 0
    # quiet: the core's own ops give no warning (the out= samples' ``out`` showed the
    # kernel's write only by chance: 21 to 36 "left it unchanged" warnings a run)
    assert "Warning" not in r.stderr, r.stderr


def test_out_samples_hold_other_values_than_the_result():
    """Every element of an ``out=`` sample's ``out`` differs from the result bit for bit, so
    the declared mutation shows whatever memory ``out`` was made in."""
    from oplib_core._opset import OUT_OPS
    from oplib_core.testing import sample_inputs

    checked = 0
    for core_op in OUT_OPS:
        op = oplib.lookup(f"oplib::{core_op.name}")
        for sample in sample_inputs(op, "cpu"):
            out = sample.kwargs["out"].numpy().copy()
            op(*sample.args, **sample.kwargs)
            after = sample.kwargs["out"].numpy()
            width = after.dtype.itemsize
            was = out.reshape(-1).view(np.uint8).reshape(-1, width)
            now = after.reshape(-1).view(np.uint8).reshape(-1, width)
            assert (was != now).any(axis=1).all(), (op, sample.name, out, after)
            checked += 1
    assert checked >= 2 * len(OUT_OPS)


@pytest.mark.parametrize(
    "env",
    [
        {"OPLIB_PLUGINS_AUTOLOAD": "0"},
        {"OPLIB_DISABLE_PLUGINS": "cpu,meta,privateuse,jax,dask,cuda"},
    ],
    ids=["no-autoload", "backends-blocked"],
)
def test_oplib_core_alone_says_which_distribution_to_install(env):
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core.cli", "check"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )
    assert r.returncode == 1
    assert r.stdout == ""  # no table, no 154 ops "without samples"
    assert r.stderr == (
        "oplib: no backend is installed, so no op can be checked: pip install oplib-cpu "
        "(the reference backend)\n"
    )


def test_no_available_backend_is_said_with_the_reasons():
    from subproc import run_python

    out = run_python(
        """
        import contextlib, io
        import oplib_core as oplib
        from oplib_core.cli import main
        oplib.backends.register(
            oplib.BackendSpec(name="offline", array_types=(bytearray,), status=lambda: "unplugged")
        )
        err, stdout = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
            OUT["code"] = main(["check"])
        OUT["err"], OUT["out"] = err.getvalue(), stdout.getvalue()
        """,
        env={"OPLIB_PLUGINS_AUTOLOAD": "0"},
    )
    assert out == {
        "code": 1,
        "out": "",
        "err": "oplib: no installed backend is available here, so no op was checked: "
        "offline: unplugged\n",
    }


def test_isolate_spawns_where_the_platform_cannot_fork(capsys, monkeypatch):
    # spawned children load the installed plugins themselves: core ops are all they see
    monkeypatch.setattr("multiprocessing.get_all_start_methods", lambda: ["spawn"])
    _, isolated = run(capsys, "oplib::neg", "-b", "cpu", "--isolate", "--json")
    _, direct = run(capsys, "oplib::neg", "-b", "cpu", "--json")
    assert json.loads(isolated)["results"] == json.loads(direct)["results"]


def test_isolate_goes_on_with_the_other_backends_after_a_crash(capsys, ns, samples_for, tmp_path):
    marker = tmp_path / "crashed-once"

    def crashes_once(x):  # the first child dies; the one that takes over does not
        if not marker.exists():
            marker.touch()
            os.abort()
        return -x

    q = oplib.define(f"{ns}::once", "(Tensor x) -> Tensor")
    oplib.impl(q, ["cpu", "privateuse1"], crashes_once)
    oplib.register_fake(q, lambda x: x.new_empty(x.shape))
    samples_for(q)
    npu = oplib.backends.get("privateuse1").name
    code, out = run(capsys, q, "-b", "cpu", "-b", npu, "--isolate", "--json")
    by_backend: dict[str, set[str]] = {}
    for r in json.loads(out)["results"]:
        by_backend.setdefault(r["backend"], set()).add(r["status"])
    assert code == 1
    assert by_backend == {"cpu": {"FAIL"}, npu: {"PASS", "SKIP"}}


_CRASH_WITH_FAULTHANDLER = """
import os, oplib_core as oplib
from oplib_core import plugins
from oplib_core.cli import main
from oplib_core.testing import SampleInput

op = oplib.define("crashfh::abort", "(Tensor x) -> Tensor")
oplib.impl(op, "cpu", lambda x: os.abort())
oplib.register_fake(op, lambda x: x.new_empty(x.shape))

class Samples:
    @oplib.hookimpl
    def oplib_sample_inputs(self, op, device):
        if op.name() == "crashfh::abort":
            return [SampleInput((oplib.ones(2, device=device),))]
        return None

plugins.register(Samples(), name="crashfh-samples")
raise SystemExit(main(["check", "crashfh::abort", "-b", "cpu", "--isolate"]))
"""


def test_isolate_keeps_a_crashing_child_quiet_under_faulthandler():
    """The crash is a row of the report, not a C-level dump over the parent's stderr."""
    r = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _CRASH_WITH_FAULTHANDLER],
        capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "Fatal Python error" not in r.stderr
    assert r.stderr.count("\n") == 1 and "0 passed, 5 failed" in r.stderr
    assert "killed by SIGABRT" in r.stdout
