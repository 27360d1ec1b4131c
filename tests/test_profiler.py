"""oplib.profile: recorded op calls and backward nodes, the table, the Chrome trace."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.autograd import _engine
from oplib_core.profiler import Event, profile, profile_script


def _contains(outer: dict[str, Any], inner: dict[str, Any]) -> bool:
    return (
        outer["ts"] <= inner["ts"]
        and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3
    )


def test_records_op_backend_key_origin_shapes(lib):
    lib.define("twice(Tensor x) -> Tensor")

    def twice(x):
        return x * 2

    lib.impl("twice", twice, "CPU")
    op = getattr(oplib.ops, lib.ns).twice
    with oplib.profile() as prof:
        out = op(oplib.tensor(np.ones((2, 3), dtype=np.float64)))
    assert out.shape == (2, 3)
    (event,) = [e for e in prof.events() if e.name == f"{lib.ns}::twice"]
    assert event.kind == "op"
    assert event.overload == "default"
    assert event.backend == "cpu"
    assert event.key == "cpu"
    assert event.shapes == ((2, 3),)
    assert event.dtypes == ("float64",)
    assert event.thread == threading.get_ident()
    assert event.parent is None
    assert event.origin is not None and "test_profiler.py" in event.origin
    assert event.duration_ns > 0 and event.self_ns <= event.duration_ns


def test_calls_inside_a_kernel_nest_and_self_time_excludes_them(lib):
    lib.define("inner(Tensor x) -> Tensor")
    lib.define("outer(Tensor x) -> Tensor")
    ns = getattr(oplib.ops, lib.ns)
    lib.impl("inner", lambda x: x + 1, "CPU")
    # a composite: its parts are op calls made while it runs
    lib.impl("outer", lambda x: ns.inner(ns.inner(x)), "CompositeImplicitAutograd")
    with oplib.profile() as prof:
        ns.outer(oplib.tensor([1.0]))
    events = {e.name: e for e in prof.events()}
    outer, inner = events[f"{lib.ns}::outer"], events[f"{lib.ns}::inner"]
    assert outer.key == "CompositeImplicitAutograd"
    kids = [e for e in prof.events() if e.parent is outer]
    assert [e.name for e in kids] == [f"{lib.ns}::inner"] * 2
    assert inner.parent is outer
    assert outer.child_ns == sum(e.duration_ns for e in kids)
    assert outer.self_ns == outer.duration_ns - outer.child_ns


def test_native_array_calls_are_recorded():
    with oplib.profile() as prof:
        oplib.ops.oplib.exp(np.zeros(4))
    (event,) = prof.events()
    assert (event.name, event.backend, event.shapes) == ("oplib::exp", "cpu", ((4,),))


def test_record_shapes_false_records_no_shapes():
    with oplib.profile(record_shapes=False) as prof:
        oplib.ops.oplib.exp(np.zeros(4))
    assert prof.events()[0].shapes == ()
    assert prof.events()[0].dtypes == ()


def test_failed_call_is_recorded_and_raises(lib):
    lib.define("nokernel(Tensor x) -> Tensor")
    with oplib.profile() as prof, pytest.raises(oplib.NoKernelError, match="no kernel"):
        getattr(oplib.ops, lib.ns).nokernel(oplib.tensor([1.0]))
    (event,) = prof.events()
    assert event.name == f"{lib.ns}::nokernel" and event.end_ns >= event.start_ns


def test_backward_nodes_are_recorded_with_their_op_calls():
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    with oplib.profile() as prof:
        (x * x).sum().backward()
    assert np.allclose(x.grad.numpy(), [2.0, 4.0])
    nodes = [e for e in prof.events() if e.kind == "backward"]
    assert {e.name for e in nodes} == {
        "GeneratedBackwardFor_oplib_mul_default",
        "GeneratedBackwardFor_oplib_sum_default",
    }
    mul_node = next(e for e in nodes if "mul" in e.name)
    inside = [e.name for e in prof.events() if e.parent is mul_node]
    assert inside and all(name == "oplib::mul" for name in inside)
    assert "(backward)" in prof.table()


def test_node_hook_is_unset_outside_profiles():
    assert _engine.NODE_HOOK[0] is None
    with oplib.profile():
        assert _engine.NODE_HOOK[0] is not None
        with oplib.profile():
            pass
        assert _engine.NODE_HOOK[0] is not None
    assert _engine.NODE_HOOK[0] is None


def test_backward_outside_a_profile_in_another_thread_is_not_recorded():
    x = oplib.tensor([1.0], requires_grad=True)
    y = (x * x).sum()
    with oplib.profile() as prof:
        worker = threading.Thread(target=y.backward)
        worker.start()
        worker.join()
    assert prof.events() == []
    assert np.allclose(x.grad.numpy(), [2.0])


def test_table_rows_counts_and_sorting():
    a = np.ones(3)
    with oplib.profile() as prof:
        for _ in range(3):
            oplib.ops.oplib.exp(a)
        oplib.ops.oplib.neg(a)
    table = prof.table(sort_by="count")
    lines = table.splitlines()
    assert lines[0].split() == ["name", "backend", "calls", "total", "ms", "self", "ms", "us/call"]
    assert lines[2].split()[:3] == ["oplib::exp", "cpu", "3"]
    assert lines[3].split()[:3] == ["oplib::neg", "cpu", "1"]
    assert lines[-1].startswith("4 events")
    rows = {r.name: r for r in prof.key_averages()}
    assert rows["oplib::exp"].count == 3 and rows["oplib::exp"].backend == "cpu"
    assert rows["oplib::exp"].self_ns == rows["oplib::exp"].total_ns  # no nested calls
    assert len(prof.table(sort_by="name", row_limit=1).splitlines()) == 5
    by_total = prof.table().splitlines()[2:4]
    totals = [float(line.split()[3]) for line in by_total]
    assert totals == sorted(totals, reverse=True)


def test_table_rejects_unknown_sort_key():
    with pytest.raises(ValueError, match=r"sort_by='cpu_time'.*'total', 'self'"):
        oplib.profile().table(sort_by="cpu_time")


def test_fake_mode_entered_inside_the_profile_handles_calls_first():
    # The innermost mode sees a call first; FakeTensorMode runs fake kernels itself, so
    # the profile outside it sees only what it passes on (nothing here).
    x = oplib.tensor(np.ones((2, 2)))
    with oplib.profile() as prof, oplib.FakeTensorMode() as mode:
        out = oplib.ops.oplib.exp(mode.from_real(x))
    assert out.shape == (2, 2)
    assert prof.events() == []


def test_profile_inside_fake_mode_records_the_fake_calls():
    with oplib.FakeTensorMode() as mode, oplib.profile() as prof:
        out = oplib.ops.oplib.exp(mode.from_real(np.ones(3)))
    assert out.shape == (3,)
    (event,) = prof.events()
    assert event.name == "oplib::exp" and event.key == "FakeTensorMode"


def test_profiles_must_exit_in_order():
    outer, inner = oplib.profile(), oplib.profile()
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)
    assert _engine.NODE_HOOK[0] is None


def _check_trace(trace: dict[str, Any]) -> list[dict[str, Any]]:
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for e in calls:
        assert set(e) >= {"name", "cat", "ts", "dur", "pid", "tid", "args"}
        assert e["dur"] >= 0 and e["ts"] >= 0
    # Within a thread, any two events are disjoint or one contains the other.
    for a in calls:
        for b in calls:
            if a is b or a["tid"] != b["tid"]:
                continue
            a_end, b_end = a["ts"] + a["dur"], b["ts"] + b["dur"]
            disjoint = a_end <= b["ts"] + 1e-3 or b_end <= a["ts"] + 1e-3
            assert disjoint or _contains(a, b) or _contains(b, a), (a, b)
    return calls


def test_chrome_trace_nests_per_thread(tmp_path, lib):
    lib.define("pair(Tensor x) -> Tensor")
    ns = getattr(oplib.ops, lib.ns)
    lib.impl("pair", lambda x: oplib.ops.oplib.add(x, x), "CompositeImplicitAutograd")
    prof = oplib.profile()
    barrier = threading.Barrier(3)

    def work() -> None:
        with prof:
            barrier.wait()
            for _ in range(20):
                ns.pair(oplib.tensor([1.0, 2.0]))

    threads = [threading.Thread(target=work, name=f"w{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    calls = _check_trace(trace)
    tids = {e["tid"] for e in calls}
    assert tids == {t.ident for t in threads}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"w0", "w1", "w2"}
    for tid in tids:
        mine = [e for e in calls if e["tid"] == tid]
        outers = [e for e in mine if e["name"] == f"{lib.ns}::pair"]
        adds = [e for e in mine if e["name"] == "oplib::add"]
        assert len(outers) == len(adds) == 20
        assert all(any(_contains(o, a) for o in outers) for a in adds)
    add = next(e for e in calls if e["name"] == "oplib::add")
    assert add["args"]["backend"] == "cpu"
    assert add["args"]["shapes"] == [[2], [2]] and add["args"]["dtypes"] == ["float32"] * 2
    assert add["cat"] == "op" and add["args"]["overload"] == "default"


def test_chrome_trace_of_backward(tmp_path):
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    with oplib.profile() as prof:
        oplib.ops.oplib.exp(x).sum().backward()
    prof.export_chrome_trace(tmp_path / "t.json")
    calls = _check_trace(json.loads((tmp_path / "t.json").read_text()))
    assert {e["cat"] for e in calls} == {"op", "backward"}


def test_events_of_a_profile_still_open_are_the_finished_ones(lib):
    lib.define("peek(Tensor x) -> Tensor")
    seen: list[list[Event]] = []
    prof = oplib.profile()

    def peek(x):
        seen.append(prof.events())
        return x

    lib.impl("peek", peek, "CPU")
    with prof:
        getattr(oplib.ops, lib.ns).peek(np.ones(1))
    assert seen == [[]]
    assert len(prof.events()) == 1


def test_profile_script(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "import numpy as np\n"
        "import oplib_core as oplib\n"
        "assert __name__ == '__main__'\n"
        "for _ in range(int(sys.argv[1])):\n"
        "    oplib.ops.oplib.exp(np.ones(2))\n"
        "sys.exit(0)\n"
    )
    prof = profile_script(script, ["3"])
    assert isinstance(prof, profile)
    assert [r.count for r in prof.key_averages() if r.name == "oplib::exp"] == [3]


def test_profile_script_propagates_failures(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(SystemExit) as info:
        profile_script(script)
    assert info.value.code == 3
    assert _engine.NODE_HOOK[0] is None


def test_top_level_names():
    assert oplib.profile is profile
    assert oplib.profiler.profile_script is profile_script


@pytest.mark.parametrize("requires_grad", [False, True])
def test_repeated_calls_record_what_the_first_one_did(requires_grad):
    # The first calls are planned; later ones run through the fast path's caches, and
    # must be recorded alike (key, backend, origin, shapes).
    x = oplib.tensor(np.ones((2, 3)), requires_grad=requires_grad)
    y = oplib.tensor(np.ones((2, 3)))
    a = np.ones(5, dtype=np.float32)
    with oplib.profile() as prof:
        for _ in range(4):
            oplib.ops.oplib.mul(x, y)
            oplib.ops.oplib.exp(a)
    top = [e for e in prof.events() if e.parent is None]
    muls = [e for e in top if e.name == "oplib::mul"]
    exps = [e for e in top if e.name == "oplib::exp"]
    assert len(muls) == len(exps) == 4
    for events in (muls, exps):
        seen = {(e.key, e.backend, e.origin, e.shapes, e.dtypes) for e in events}
        assert len(seen) == 1, seen
    assert muls[0].key == ("Autograd" if requires_grad else "cpu")
    assert muls[0].shapes == ((2, 3), (2, 3)) and muls[0].dtypes == ("float64", "float64")
    assert exps[0].shapes == ((5,),) and exps[0].dtypes == ("float32",)
    if requires_grad:  # the formula's own call below autograd is recorded inside it
        for m in muls:
            assert [e.key for e in prof.events() if e.parent is m] == ["cpu"]


def test_a_registration_between_calls_is_seen(lib):
    lib.define("swap(Tensor x) -> Tensor")
    ns = getattr(oplib.ops, lib.ns)
    lib.impl("swap", lambda x: x + 1, "CompositeExplicitAutograd")
    x = np.ones(2)
    with oplib.profile() as prof:
        for _ in range(3):
            ns.swap(x)
        lib.impl("swap", lambda x: x + 2, "CPU")
        for _ in range(3):
            out = ns.swap(x)
    assert out.tolist() == [3.0, 3.0]
    keys = [e.key for e in prof.events()]
    assert keys == ["CompositeExplicitAutograd"] * 3 + ["cpu"] * 3


def test_higher_order_operators_are_recorded_with_their_inner_calls():
    x = oplib.tensor(np.linspace(0.0, 1.0, 6).reshape(2, 3), requires_grad=True)
    with oplib.profile() as prof:
        y = oplib.cond(True, lambda t: t.sin(), lambda t: t.cos(), (x,))
        z = oplib.map(lambda row: (row * row).sum(), x)
        (y.sum() + z.sum()).backward()
    events = prof.events()
    (cond,) = [e for e in events if e.name == "higher_order::cond"]
    (mapped,) = [e for e in events if e.name == "higher_order::map"]
    assert (cond.key, cond.backend) == ("Autograd", "cpu")
    assert cond.origin is not None and "_control_flow.py" in cond.origin
    assert cond.shapes == ((2, 3),) and cond.dtypes == ("float64",)
    # the branch's op calls nest inside the cond, the body's inside the map
    (sin,) = [e for e in events if e.name == "oplib::sin" and e.key == "Autograd"]
    assert sin.parent is cond
    assert sum(e.parent is mapped and e.name == "oplib::mul" for e in events) == 2
    rows = {(r.name, r.backend): r.count for r in prof.key_averages()}
    assert rows[("higher_order::cond", "cpu")] == rows[("higher_order::map", "cpu")] == 1
    assert "higher_order::map" in prof.table()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x.detach().numpy()) + 2 * x.detach().numpy())


def test_a_higher_order_operator_under_an_outer_mode_is_that_modes_call():
    with oplib.FakeTensorMode() as mode, oplib.profile() as prof:
        out = oplib.map(lambda r: r.sum(), mode.from_real(np.ones((4, 3))))
    assert out.shape == (4,)
    hop = next(e for e in prof.events() if e.name == "higher_order::map")
    assert hop.key == "FakeTensorMode"
