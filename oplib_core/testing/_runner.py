"""``oplib check``: opcheck over every op with sample inputs, on every backend.

For each op and backend, the samples plugins give for that device (for a data-less
backend such as ``meta``: the cpu samples, copied there, so its outputs can be compared with
the real kernel's) are run through :func:`~oplib_core.testing.checks.run_checks`; the
results of all samples fold into one status per op x backend x check: ``FAIL`` if any
sample failed, else ``PASS`` if any passed, else ``SKIP``.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from .._device import Device
from .._higher_order._operator import HOPS, HigherOrderOperator
from .._registry.registry import REGISTRY, op_named
from ..backends import TABLE, Backend
from ._checks import CHECKS, FAIL, PASS, SKIP, CheckResult, run_checks
from ._hop_samples import hop_samples
from ._samples import SampleInput, sample_inputs

__all__ = ["CheckRow", "Progress", "Report", "UnknownName", "check_ops"]


class UnknownName(KeyError):
    """An op or backend ``oplib check`` was asked about does not exist; ``kind`` is
    ``"op"`` or ``"backend"``, ``name`` the name."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(name)


@dataclass
class CheckRow:
    """One op x backend x check: its status, the reason (failure or skip), and the sample
    it concerns. ``skipped_samples`` lists the samples skipped in a row that other samples
    decided (``{"sample": label, "reason": why}``: bfloat16 samples on a backend without
    bfloat16, while its float32 ones passed), so that no skip goes unreported."""

    op: str
    backend: str
    check: str
    status: str = SKIP
    reason: str = ""
    sample: str = ""
    error: BaseException | None = field(default=None, repr=False)
    skipped_samples: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "backend": self.backend,
            "check": self.check,
            "status": self.status,
            "reason": self.reason,
            "sample": self.sample,
            "skipped_samples": self.skipped_samples,
        }

    def fold(self, r: CheckResult, sample: str) -> None:
        """Merge one sample's result: the first FAIL wins, then PASS, then SKIP (every
        skipped sample is kept in ``skipped_samples``)."""
        rank = {SKIP: 0, PASS: 1, FAIL: 2}
        if r.status == SKIP:
            self.skipped_samples.append({"sample": sample, "reason": r.reason})
        if rank[r.status] > rank[self.status] or (
            r.status == self.status == SKIP and not self.reason
        ):
            self.status, self.reason, self.sample, self.error = r.status, r.reason, sample, r.error


@dataclass
class Report:
    rows: list[CheckRow]
    backends: list[str]
    unavailable: dict[str, str]
    no_samples: list[str]
    seconds: float

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, FAIL: 0, SKIP: 0}
        for r in self.rows:
            out[r.status] += 1
        return out

    @property
    def failed(self) -> bool:
        return any(r.status == FAIL for r in self.rows)

    def sample_skips(self) -> dict[str, int]:
        """Reason -> number of samples skipped in rows that other samples decided (a row
        that is a SKIP says its reason itself)."""
        out: dict[str, int] = {}
        for r in self.rows:
            if r.status != SKIP:
                for skipped in r.skipped_samples:
                    out[skipped["reason"]] = out.get(skipped["reason"], 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        c = self.counts()
        return {
            "results": [r.to_json() for r in self.rows],
            "summary": {
                "ops": len({r.op for r in self.rows}),
                "backends": self.backends,
                "unavailable": self.unavailable,
                "no_samples": self.no_samples,
                "pass": c[PASS],
                "fail": c[FAIL],
                "skip": c[SKIP],
                "skipped_samples": sum(self.sample_skips().values()),
                "seconds": round(self.seconds, 3),
            },
        }


def _backends(names: Sequence[str] | None) -> tuple[list[Backend], dict[str, str]]:
    """The backends to check and the unavailable ones (name → reason)."""
    if names:
        found = []
        for n in names:
            b = TABLE.find(n)
            if b is None:
                raise UnknownName("backend", n)
            if b not in found:
                found.append(b)
    else:
        found = TABLE.all()
    unavailable = {b.name: b.status() or "" for b in found if not b.is_available()}
    return [b for b in found if b.is_available()], unavailable


def _samples(op: Any, device: Device) -> list[SampleInput]:
    """Plugins' samples for an op; the built-in samples for a control-flow operator."""
    if isinstance(op, HigherOrderOperator):
        return hop_samples(op, device)
    return sample_inputs(op, device)


def _device(b: Backend) -> Device:
    return Device(b.name, 0 if b.multi_device else None)


#: ``progress(done, total, op, backend)``: called after each op x backend is checked.
Progress = Callable[[int, int, str, str], None]
#: One op on one backend: the backend, a row per check, whether the op had samples there.
Cell = tuple[Backend, list["CheckRow"], bool]


def check_ops(
    qualnames: Iterable[str] | None = None,
    backends: Sequence[str] | None = None,
    test_utils: Sequence[str] = CHECKS,
    *,
    progress: Progress | None = None,
    isolate: bool = False,
) -> Report:
    """Run the checks of ``qualnames`` (default: every op some plugin has samples for) on
    ``backends`` (default: every installed backend; unavailable ones are reported, explicitly
    requested ones get SKIP rows). Unknown ops or backends raise :class:`UnknownName`.

    ``isolate=True`` checks each op in a child process (a new one takes the remaining
    backends after a crash), so a kernel that crashes the process (a segfault,
    ``os._exit``) is a FAIL of that op on that backend instead of the end of the run.
    Children are forked where the platform can (they see in-process registrations);
    elsewhere they are spawned and see the installed plugins only."""
    start = time.perf_counter()
    explicit = qualnames is not None
    names = (
        [*sorted(REGISTRY.ops), *(h.qualname for h in HOPS.all())]
        if qualnames is None
        else list(qualnames)
    )
    for q in names:
        if q not in REGISTRY.ops and HOPS.get(q) is None:
            raise UnknownName("op", q)
    usable, unavailable = _backends(backends)
    cells = _isolated_cells if isolate else _cells
    rows: list[CheckRow] = []
    no_samples: list[str] = []
    done, total = 0, len(names) * len(usable)
    for q in names:
        op_rows: list[CheckRow] = []
        any_samples = False
        for b, cell_rows, has_samples in cells(q, usable, tuple(test_utils)):
            op_rows.extend(cell_rows)
            any_samples = any_samples or has_samples
            done += 1
            if progress is not None:
                progress(done, total, q, b.name)
        if explicit or any_samples:
            rows.extend(op_rows)
            if backends:
                for name, reason in unavailable.items():
                    rows.extend(
                        CheckRow(q, name, c, SKIP, f"backend not available: {reason}")
                        for c in test_utils
                    )
        else:
            no_samples.append(q)
    return Report(
        rows=rows,
        backends=[b.name for b in usable],
        unavailable=unavailable,
        no_samples=no_samples,
        seconds=time.perf_counter() - start,
    )


def _check_cell(q: str, b: Backend, test_utils: tuple[str, ...]) -> tuple[list[CheckRow], bool]:
    """The rows of op ``q`` on backend ``b``, one per check, and whether it had samples
    (or its sample hook raised, which is reported as a failure)."""
    op = op_named(q) if q in REGISTRY.ops else HOPS.get(q)
    per_check = {c: CheckRow(q, b.name, c) for c in test_utils}
    # a data-less backend, or one with fewer dtypes than oplib: the cpu samples, copied there
    restricted = b.dtype_map() is not None
    sample_device = Device("cpu") if b.spec.fake_kernels or restricted else _device(b)
    try:
        samples = _samples(op, sample_device)
    except Exception as e:
        for row in per_check.values():
            row.status, row.error = FAIL, e
            row.reason = f"oplib_sample_inputs raised {type(e).__name__}: {e}"
        return list(per_check.values()), True
    if not samples:
        for row in per_check.values():
            row.reason = f"no sample inputs for {sample_device.type}"
        return list(per_check.values()), False
    for i, s in enumerate(samples):
        label = s.name or f"sample {i}"
        problems = _dtype_problems(b, s) if restricted else []
        if problems:
            for row in per_check.values():
                row.fold(CheckResult(q, row.check, b.name, SKIP, "; ".join(problems)), label)
            continue
        try:
            results = list(
                run_checks(
                    op,
                    s.args,
                    s.kwargs,
                    test_utils=test_utils,
                    backend=b.name,
                    backends=[b.name],
                    compare_values=s.compare_values,
                )
            )
        except Exception as e:
            for row in per_check.values():
                row.fold(
                    CheckResult(q, row.check, b.name, FAIL, f"raised {type(e).__name__}: {e}", e),
                    label,
                )
            continue
        for r in results:
            per_check[r.check].fold(r, label)
    return list(per_check.values()), True


def _dtype_problems(b: Backend, sample: SampleInput) -> list[str]:
    """Why backend ``b`` cannot hold the dtypes in ``sample`` (of its tensors, arrays and
    dtype arguments), one reason per dtype it lacks (``Backend.dtype_problem``)."""
    found: dict[np.dtype, None] = {}

    def visit(v: Any) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
            return
        if isinstance(v, type):  # a numpy scalar type given as a dtype (np.float16)
            d: Any = np.dtype(v) if issubclass(v, np.generic) else None
        else:
            d = v if isinstance(v, np.dtype) else getattr(v, "dtype", None)
        if isinstance(d, np.dtype):
            found[d] = None

    visit(sample.args)
    visit(list(sample.kwargs.values()))
    return [p for p in map(b.dtype_problem, found) if p is not None]


def _cells(q: str, backends: list[Backend], test_utils: tuple[str, ...]) -> Iterator[Cell]:
    """Each backend's rows for op ``q``, as they are checked."""
    for b in backends:
        rows, has_samples = _check_cell(q, b, test_utils)
        yield b, rows, has_samples


def _child(conn: Connection, q: str, backends: list[str], test_utils: tuple[str, ...]) -> None:
    """In a child process: check op ``q`` on ``backends`` in turn, sending each one's rows
    (as JSON dicts) as soon as it is done; a Python exception that escapes is sent as text
    and ends the child."""
    # A crash is reported as that backend's FAIL row; a faulthandler dump inherited from
    # the parent would only scramble the parent's output (the progress bar, one-line errors).
    faulthandler.disable()
    try:
        for name in backends:
            rows, has_samples = _check_cell(q, TABLE.get(name), test_utils)
            conn.send(([r.to_json() for r in rows], has_samples))
    except BaseException as e:  # SystemExit from a kernel, say: that backend's failure
        conn.send(f"the check process raised {type(e).__name__}: {e}")
    finally:
        conn.close()


def _death(code: int | None) -> str:
    code = code or 0
    if code < 0 and -code in signal.valid_signals():
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _isolated_cells(q: str, backends: list[Backend], test_utils: tuple[str, ...]) -> Iterator[Cell]:
    """:func:`_cells` in a child process: one child checks the op on every backend; when
    it dies, the backend it was checking fails and a new child takes the rest."""
    fork = "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork") if fork else multiprocessing.get_context("spawn")
    pending = list(backends)
    while pending:
        receive, send = ctx.Pipe(duplex=False)
        names = [b.name for b in pending]
        child = ctx.Process(target=_child, args=(send, q, names, test_utils), daemon=True)
        child.start()
        send.close()
        done, answer = 0, None
        try:
            while done < len(pending):
                try:
                    answer = receive.recv()
                except EOFError:  # died before answering for pending[done]
                    break
                b, done = pending[done], done + 1
                if isinstance(answer, str):  # raised: that backend fails, the child ends
                    yield b, [CheckRow(q, b.name, c, FAIL, answer) for c in test_utils], True
                    break
                rows, has_samples = answer
                yield b, [CheckRow(**r) for r in rows], has_samples
            else:
                return
        finally:
            receive.close()
            child.join()
        if isinstance(answer, str):
            pending = pending[done:]
            continue
        b = pending[done]
        reason = (
            f"the check process crashed ({_death(child.exitcode)}) while checking {q} on {b.name}"
        )
        yield b, [CheckRow(q, b.name, c, FAIL, reason) for c in test_utils], True
        pending = pending[done + 1 :]
