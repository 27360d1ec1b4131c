"""Registration and dispatch from several threads at once: nothing is lost, nothing raises,
results are always right, and a cache is never left stale by a concurrent registration."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY

from helpers import drop_namespace, unique_ns
from subproc import run_python


@pytest.fixture(autouse=True)
def fast_switching():
    """Switch threads often, so that interleavings the GIL would hide actually happen."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(saved)


def run_threads(targets: list[Callable[[], None]], timeout: float = 60.0) -> list[BaseException]:
    """Start every target together; return the exceptions they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                barrier.wait()
                fn()
            except BaseException as e:
                errors.append(e)

        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def _callers(stop: threading.Event, n: int) -> list[Callable[[], None]]:
    """Threads calling core ops on native arrays and Tensors, checking every result."""

    def call_core(seed: int) -> Callable[[], None]:
        def run() -> None:
            a = np.full(3, float(seed))
            t = oplib.tensor(a)
            count = 0
            while not stop.is_set() or count < 50:
                np.testing.assert_array_equal(oplib.ops.oplib.add(a, a), a * 2)
                np.testing.assert_array_equal(oplib.ops.oplib.mul.Scalar(a, 3), a * 3)
                out = t + 1.0
                assert type(out) is oplib.Tensor
                np.testing.assert_array_equal(out.numpy(), a + 1.0)
                count += 1

        return run

    return [call_core(i) for i in range(n)]


def test_registering_in_distinct_namespaces_while_calling():
    n_writers, n_ops = 6, 15
    namespaces = [unique_ns("thr") for _ in range(n_writers)]
    libraries: dict[str, list[oplib.Library]] = {ns: [] for ns in namespaces}
    stop = threading.Event()
    done = threading.Semaphore(0)

    def writer(w: int) -> Callable[[], None]:
        ns = namespaces[w]

        def run() -> None:
            try:
                for i in range(n_ops):
                    lib = oplib.Library(ns, "FRAGMENT")
                    libraries[ns].append(lib)
                    lib.define(f"f{i}(Tensor x) -> Tensor")
                    offset = w * 1000 + i
                    lib.impl(f"f{i}", lambda x, offset=offset: x + offset, "cpu")
                    op = getattr(getattr(oplib.ops, ns), f"f{i}")
                    assert op(np.zeros(1))[0] == offset
                    assert op(oplib.tensor([0.0])).item() == offset
                    # the functional API, sharing the namespace's keep-alive Library
                    qn = oplib.define(f"{ns}::g{i}", "(Tensor x) -> Tensor")
                    oplib.impl(qn, "default", lambda x, offset=offset: x - offset)
                    assert getattr(getattr(oplib.ops, ns), f"g{i}")(np.zeros(1))[0] == -offset
                # destroy every other Library: exactly its op must go
                for i, lib in enumerate(libraries[ns]):
                    if i % 2:
                        lib._destroy()
            finally:
                done.release()

        return run

    def stopper() -> None:
        for _ in range(n_writers):
            done.acquire()
        stop.set()

    try:
        errors = run_threads([writer(w) for w in range(n_writers)] + _callers(stop, 4) + [stopper])
        assert errors == [], errors[:3]
        for w, ns in enumerate(namespaces):
            packets = getattr(oplib.ops, ns)
            for i in range(n_ops):
                qn = f"{ns}::f{i}"
                if i % 2:
                    assert qn not in REGISTRY.ops
                    assert not hasattr(packets, f"f{i}")
                else:
                    assert getattr(packets, f"f{i}")(np.zeros(1))[0] == w * 1000 + i
                assert getattr(packets, f"g{i}")(np.zeros(1))[0] == -(w * 1000 + i)
    finally:
        for ns in namespaces:
            for lib in libraries[ns]:
                lib._destroy()
            drop_namespace(ns)
    for ns in namespaces:
        assert not any(q.startswith(f"{ns}::") for q in REGISTRY.ops)


def _yield(value):
    """Give other threads the GIL mid-kernel: widens the window between a reader resolving
    a kernel and filling the cache with it."""
    time.sleep(0)
    return value


def test_override_never_leaves_a_stale_cache(lib, ns):
    """A thread installing and removing an override (allow_override) must see its own change
    on its very next call, while readers only ever see the old or the new kernel."""
    lib.define("f(Tensor x) -> Tensor")
    lib.define("h(Tensor x, Tensor y) -> Tensor")
    lib.impl("f", lambda x: _yield(x + 1), "cpu")
    lib.impl("h", lambda x, y: _yield(x + y + 1), "cpu")
    f = getattr(oplib.ops, ns).f
    h = getattr(oplib.ops, ns).h
    stop = threading.Event()
    x = np.zeros(2)
    tx = oplib.tensor(x)
    seen: set[float] = set()

    def overrider() -> None:
        try:
            for _ in range(150):
                override = oplib.Library(ns, "IMPL")
                override.impl("f", lambda x: _yield(x + 2), "cpu", allow_override=True)
                override.impl("h", lambda x, y: _yield(x + y + 2), "CPU", allow_override=True)
                assert f(x)[0] == 2.0
                assert f(tx).numpy()[0] == 2.0
                assert f.default(x)[0] == 2.0
                assert h(x, x)[0] == 2.0
                override._destroy()
                assert f(x)[0] == 1.0
                assert f(tx).numpy()[0] == 1.0
                assert f.default(x)[0] == 1.0
                assert h(x, x)[0] == 1.0
        finally:
            stop.set()

    def reader(use_tensor: bool) -> Callable[[], None]:
        def run() -> None:
            while not stop.is_set():
                for out in (
                    f(tx).numpy() if use_tensor else f(x),
                    f.default(x),
                    h(tx, tx).numpy() if use_tensor else h(x, x),
                ):
                    value = float(out[0])
                    assert value in (1.0, 2.0), value
                    assert out[0] == out[1]  # never half of one kernel and half of another
                    seen.add(value)

        return run

    errors = run_threads([overrider, reader(False), reader(True), reader(False), reader(True)])
    assert errors == [], errors[:3]
    assert seen == {1.0, 2.0}
    assert f(x)[0] == 1.0 and f(tx).numpy()[0] == 1.0 and h(x, x)[0] == 1.0


def test_concurrent_duplicate_define_has_exactly_one_winner(ns):
    n = 8
    winners: list[int] = []
    losers: list[BaseException] = []

    def definer(i: int) -> Callable[[], None]:
        def run() -> None:
            try:
                oplib.define(f"{ns}::same", f"(Tensor x, int n={i}) -> Tensor")
                winners.append(i)
            except oplib.RegistrationError as e:
                losers.append(e)

        return run

    errors = run_threads([definer(i) for i in range(n)])
    assert errors == []
    assert len(winners) == 1 and len(losers) == n - 1
    assert all("already defined" in str(e) for e in losers)
    schema = str(getattr(oplib.ops, ns).same.default._schema)
    assert schema == f"{ns}::same(Tensor x, int n={winners[0]}) -> Tensor"


def test_concurrent_kernel_registration_has_exactly_one_winner(lib, ns):
    lib.define("f(Tensor x) -> Tensor")
    n = 8
    winners: list[int] = []
    losers: list[BaseException] = []
    libs = [oplib.Library(ns, "IMPL") for _ in range(n)]

    def registerer(i: int) -> Callable[[], None]:
        def run() -> None:
            try:
                libs[i].impl("f", lambda x, i=i: x + i, "cpu")
                winners.append(i)
            except oplib.RegistrationError as e:
                losers.append(e)

        return run

    try:
        errors = run_threads([registerer(i) for i in range(n)])
        assert errors == []
        assert len(winners) == 1 and len(losers) == n - 1
        assert getattr(oplib.ops, ns).f(np.zeros(1))[0] == winners[0]
        assert len(REGISTRY.ops[f"{ns}::f"].kernels["cpu"]) == 1
    finally:
        for lib_ in libs:
            lib_._destroy()
    assert REGISTRY.ops[f"{ns}::f"].kernels.get("cpu") is None


def test_a_mode_in_one_thread_does_not_affect_others(lib, ns):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, "cpu")
    f = getattr(oplib.ops, ns).f
    stop = threading.Event()

    class Replacer(oplib.DispatchMode):
        def __oplib_dispatch__(self, op, args, kwargs):
            return "replaced"

    def moder() -> None:
        try:
            for _ in range(300):
                with Replacer():
                    assert f(np.zeros(1)) == "replaced"
                assert f(np.zeros(1))[0] == 1.0
        finally:
            stop.set()

    def caller() -> None:
        x = np.zeros(1)
        while not stop.is_set():
            out = f(x)
            assert isinstance(out, np.ndarray) and out[0] == 1.0

    errors = run_threads([moder, caller, caller])
    assert errors == [], errors[:3]


BUILD_SEEN_FROM_ANOTHER_THREAD = """
import threading
import numpy as np
import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY

oplib.ops.oplib.add(np.ones(1), np.ones(1))  # the plugins load; oplib::sin stays pending
OUT["pending_before"] = "oplib::sin" in REGISTRY.ops.pending
seen = {}

def listener(event, entry):
    # runs in the building thread, the op defined but its kernels not placed yet
    if event != "defined" or entry.qualname != "oplib::sin" or "published" in seen:
        return
    seen["published"] = dict.get(REGISTRY.ops, "oplib::sin") is not None
    seen["own_view"] = REGISTRY.ops.get("oplib::sin") is entry  # the builder sees it

    def reader():
        e = REGISTRY.ops.get("oplib::sin")
        seen["reader"] = [e is entry, e.overload is not None, e.has_kernel("cpu"),
                          e.has_kernel("Autograd"), e.has_kernel("Fake")]

    t = seen["thread"] = threading.Thread(target=reader)
    t.start()
    t.join(0.3)
    seen["reader_waited"] = t.is_alive()

REGISTRY.add_listener(listener)
entry = REGISTRY.ops["oplib::sin"]
seen.pop("thread").join(10)
OUT.update(seen)
OUT["pending_after"] = "oplib::sin" in REGISTRY.ops.pending
OUT["staged_after"] = dict(REGISTRY.ops.staged)
"""


def test_an_op_being_built_is_seen_by_other_threads_only_once_complete():
    """A core op built on first use (``_op_table``) is staged while it is built: the
    building thread's listeners see it, another thread asking for it waits, and gets it
    with its dispatcher and its kernels (cpu, autograd formula, fake) in place."""
    out = run_python(BUILD_SEEN_FROM_ANOTHER_THREAD)
    assert out == {
        "pending_before": True,
        "published": False,
        "own_view": True,
        "reader_waited": True,
        "reader": [True, True, True, True, True],
        "pending_after": False,
        "staged_after": {},
    }


def test_reading_the_whole_table_while_building_an_op_sees_the_others_built():
    """A listener of the building thread reading the table whole (``keys()`` builds every
    pending op) builds the others and leaves the one being built staged."""
    out = run_python(
        """
        import numpy as np
        import oplib_core as oplib
        from oplib_core._registry.registry import REGISTRY

        oplib.ops.oplib.add(np.ones(1), np.ones(1))
        seen = {}

        def listener(event, entry):
            if event == "defined" and entry.qualname == "oplib::sin" and not seen:
                seen["keys"] = len(REGISTRY.ops.keys())
                seen["pending"] = sorted(REGISTRY.ops.pending)

        REGISTRY.add_listener(listener)
        REGISTRY.ops["oplib::sin"]
        OUT.update(seen)
        OUT["all"] = len(REGISTRY.ops.names())
        OUT["built"] = "oplib::sin" in dict(REGISTRY.ops.items())
        """
    )
    assert out["pending"] == ["oplib::sin"]
    assert out["keys"] == out["all"] - 1
    assert out["built"]
