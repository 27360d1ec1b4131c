"""``oplib check``: opcheck over every op with sample inputs, on every backend.

The default output is one row per op, failures first; ``-v`` shows every op x backend
row. A progress bar runs on stderr when it is a terminal and NO_COLOR is unset, else one
line says what was checked. The exit status is 1 when a check failed or when nothing was
checked at all; with no backend installed (oplib-core alone) or none available, that is
all it says."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..backends import TABLE
from ..testing._checks import CHECKS, FAIL, PASS, SKIP
from ..testing._runner import CheckRow, Progress, Report, UnknownName, check_ops
from ._contract import run_contract
from ._errors import CliError
from ._names import INSTALL_A_BACKEND, backend, op_name
from ._parsers import leaf
from ._render import Output

__all__ = ["add_parser", "run_checks"]

_RANK = {FAIL: 0, PASS: 1, SKIP: 2}


class NothingAvailable(CliError):
    """No backend to check is available: the reasons, and the report (``--json`` prints it
    before the error, so that a reader of the JSON learns why too)."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report


def add_parser(sub: Any) -> None:
    p = leaf(sub, "check", "run opcheck on every op with sample inputs, on every backend", run)
    p.add_argument("qualname", nargs="*", help="ops to check (default: all with samples)")
    p.add_argument(
        "--backend", "-b", action="append", default=[], help="only this backend (repeatable)"
    )
    p.add_argument(
        "--verbose", "-v", action="store_true", help="a row per op x backend, not per op"
    )
    p.add_argument(
        "--contract",
        action="store_true",
        help="report what the --backend lacks of the backend contract (array, spec, minimum "
        "op set), without running ops",
    )
    p.add_argument(
        "--isolate",
        action="store_true",
        help="check each op x backend in a child process: a crash is that cell's failure",
    )


@contextmanager
def _progress(out: Output) -> Iterator[Progress]:
    """A progress bar on stderr when it is a terminal; otherwise nothing until the end."""
    if not out.live_progress:
        yield lambda done, total, op, backend: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("checking"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=out.err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def advance(done: int, total: int, op: str, backend: str) -> None:
            bar.update(task, completed=done, total=total, description=f"{op} on {backend}")

        yield advance


def run_checks(
    given_ops: Sequence[str], given_backends: Sequence[str], out: Output, *, isolate: bool
) -> Report:
    """``check_ops`` on names as typed (unknown ones are usage errors), with the progress
    bar; ends with the one-line summary on stderr when that is no terminal."""
    qualnames = [op_name(g, "check") for g in given_ops]
    backends = [backend(b).name for b in given_backends]
    if not backends and not TABLE.all():
        raise CliError(
            f"no backend is installed, so no op can be checked: {INSTALL_A_BACKEND} "
            "(the reference backend)"
        )
    try:
        with _progress(out) as progress:
            report = check_ops(
                qualnames or None, backends or None, progress=progress, isolate=isolate
            )
    except UnknownName as e:  # removed while we looked
        raise CliError(f"no {e.kind} {e.name!r}", 2) from e
    if not report.backends and not report.rows:  # (ops named: SKIP rows, said per row)
        which = "backend asked for" if backends else "installed backend"
        raise NothingAvailable(
            f"no {which} is available here, so no op was checked: "
            + "; ".join(f"{name}: {reason}" for name, reason in report.unavailable.items()),
            report,
        )
    if not out.live_progress:
        out.note(_summary(report))
    return report


def _summary(report: Report) -> str:
    c = report.counts()
    return (
        f"{len({r.op for r in report.rows})} ops x {len(report.backends)} backends "
        f"({', '.join(report.backends)}): {c[PASS]} passed, {c[FAIL]} failed, "
        f"{c[SKIP]} skipped in {report.seconds:.1f}s"
    )


def _status(rows: Sequence[CheckRow]) -> str:
    return min((r.status for r in rows), key=_RANK.__getitem__, default=SKIP)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _notes(rows: Sequence[CheckRow], with_backend: bool) -> str:
    failed = [r for r in rows if r.status == FAIL]
    if failed:
        return "; ".join(
            f"{r.check.removeprefix('test_')}"
            + (f" on {r.backend}" if with_backend else "")
            + f": {_first_line(r.reason)}"
            for r in failed
        )
    skips = {r.reason for r in rows if r.status == SKIP and r.reason}
    if len(skips) == 1 and all(r.status == SKIP for r in rows):
        return _first_line(next(iter(skips)))
    return ""


def _per_op(report: Report, out: Output) -> None:
    by_op: dict[str, list[CheckRow]] = {}
    for r in report.rows:
        by_op.setdefault(r.op, []).append(r)
    order = sorted(by_op, key=lambda op: (_RANK[_status(by_op[op])], op))
    table = []
    for op in order:
        rows = by_op[op]
        n = {s: sum(r.status == s for r in rows) for s in (PASS, FAIL, SKIP)}
        failing = sorted({r.backend for r in rows if r.status == FAIL})
        table.append(
            [
                op,
                _status(rows),
                n[PASS],
                n[FAIL],
                n[SKIP],
                ", ".join(failing) or "-",
                _notes(rows, with_backend=True),
            ]
        )
    out.table(
        ["op", "result", "pass", "fail", "skip", "failing on", "notes"], table, wide=("notes",)
    )


def _per_cell(report: Report, out: Output) -> None:
    cells: dict[tuple[str, str], dict[str, CheckRow]] = {}
    for r in report.rows:
        cells.setdefault((r.op, r.backend), {})[r.check] = r
    checks = [c for c in CHECKS if any(c in v for v in cells.values())]
    order = sorted(cells, key=lambda k: (_RANK[_status(list(cells[k].values()))], k))
    table = [
        [op, b]
        + [cells[op, b][c].status if c in cells[op, b] else "-" for c in checks]
        + [_notes(list(cells[op, b].values()), with_backend=False)]
        for op, b in order
    ]
    headers = ["op", "backend", *(c.removeprefix("test_") for c in checks), "notes"]
    out.table(headers, table, wide=("notes",))


def _details(report: Report, args: argparse.Namespace, out: Output) -> None:
    failures = [r for r in report.rows if r.status == FAIL]
    if failures:
        out.line("\nfailures:", style="bold red")
        for r in failures:
            sample = f" (sample {r.sample})" if r.sample else ""
            out.text(f"- {r.op} on {r.backend}, {r.check}{sample}:\n    {r.reason}")
    skip_reasons: dict[str, int] = {}
    for r in report.rows:
        if r.status == SKIP and r.reason:
            key = _first_line(r.reason)
            skip_reasons[key] = skip_reasons.get(key, 0) + 1
    if skip_reasons:
        out.line("\nskipped:")
        for reason, n in sorted(skip_reasons.items(), key=lambda kv: -kv[1]):
            out.line(f"  {n:4d} x {reason}")
    sample_skips: dict[str, int] = {}
    for reason, n in report.sample_skips().items():
        key = _first_line(reason)
        sample_skips[key] = sample_skips.get(key, 0) + n
    if sample_skips:  # e.g. bfloat16 samples on cuda, where the op's float32 ones ran
        out.line("\nsamples skipped (the op's other samples were checked):")
        for reason, n in sorted(sample_skips.items(), key=lambda kv: -kv[1]):
            out.line(f"  {n:4d} x {reason}")
    if not args.backend:
        for name, reason in report.unavailable.items():
            out.line(f"backend {name!r} not checked: {reason}")
    if report.no_samples:
        out.line(
            f"{len(report.no_samples)} op(s) have no sample inputs (a plugin's "
            f"oplib_sample_inputs hook gives them): {', '.join(report.no_samples)}"
        )
    out.line("\n" + _summary(report), style="bold red" if report.failed else "bold")


def run(args: argparse.Namespace, out: Output) -> int:
    if args.contract:
        return run_contract(args, out)
    try:
        report = run_checks(args.qualname, args.backend, out, isolate=args.isolate)
    except NothingAvailable as e:
        if args.json:
            out.json(e.report.to_json())
        raise
    if args.json:
        out.json(report.to_json())
    else:
        (_per_cell if args.verbose else _per_op)(report, out)
        _details(report, args, out)
    if report.failed:
        return 1
    c = report.counts()
    if c[PASS] == 0:
        raise CliError(
            "nothing was checked: "
            + ("every check was skipped" if report.rows else "no op has sample inputs")
        )
    return 0
