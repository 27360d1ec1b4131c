"""``oplib``: what is installed and registered. Every command takes ``--json``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import _introspect as introspect
from ._explain import explain
from ._factories import ones
from ._lookup import resolve
from ._tensor import Tensor
from .errors import AmbiguousOperatorError, OplibError, UnknownOperatorError
from .plugins import HOST

__all__ = ["main"]


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    lines = [fmt.format(*headers).rstrip(), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row).rstrip() for row in rows]
    return "\n".join(lines)


def _dist(name: Any, version: Any) -> str:
    if not name:
        return "-"
    return f"{name} {version}" if version else str(name)


def _backends_list(args: argparse.Namespace) -> int:
    rows = introspect.backend_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no backends installed (pip install oplib-cpu)")
        return 0
    table = [
        [
            r["name"],
            r["key"],
            _dist(r["distribution"], r["version"]),
            "yes" if r["available"] else f"no: {r['reason']}",
            str(r["device_count"]),
            str(r["ops"]),
        ]
        for r in rows
    ]
    print(_table(table, ["backend", "key", "distribution", "available", "devices", "ops"]))
    failed = [p for p in introspect.plugin_rows() if p["status"] == "failed"]
    for p in failed:
        print(
            f"\nplugin {p['name']!r} ({_dist(p['distribution'], p['version'])}) failed to "
            f"load: {p['error']}"
        )
    return 0


def _plugins_list(args: argparse.Namespace) -> int:
    rows = introspect.plugin_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        [
            r["name"],
            _dist(r["distribution"], r["version"]),
            r["status"]
            + (f": {r['error']}" if r["error"] else "")
            + "".join(f"; overrides {o}" for o in r.get("overrides") or ()),
            ", ".join(h.removeprefix("oplib_") for h in r["hooks"]) or "-",
            f"{r['load_ms']:.1f}",
            r["module"] or "-",
        ]
        for r in rows
    ]
    print(_table(table, ["plugin", "distribution", "status", "hooks", "ms", "module"]))
    notes = []
    if not HOST.autoload:
        notes.append("OPLIB_PLUGINS_AUTOLOAD=0: entry points were not loaded")
    if HOST.disabled:
        notes.append(f"OPLIB_DISABLE_PLUGINS={','.join(sorted(HOST.disabled))}")
    for n in notes:
        print(n)
    return 0


def _ops_list(args: argparse.Namespace) -> int:
    rows = introspect.op_rows(args.namespace)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        [
            r["qualname"],
            ", ".join(r["keys"]) or "-",
            "yes" if r["fake"] else "-",
            "yes" if r["autograd"] else "-",
        ]
        for r in rows
    ]
    print(_table(table, ["op", "kernels", "fake", "autograd"]))
    return 0


def _no_operator(e: UnknownOperatorError | AmbiguousOperatorError, given: str) -> int:
    if isinstance(e, AmbiguousOperatorError):
        print(f"oplib: {e}", file=sys.stderr)
        return 2
    hint = ""
    if e.suggestions:
        hint = "; did you mean " + " or ".join(repr(s) for s in e.suggestions) + "?"
    print(f"oplib: no operator {given!r} (see 'oplib ops list'){hint}", file=sys.stderr)
    return 2


def _ops_show(args: argparse.Namespace) -> int:
    try:
        d = introspect.op_detail(args.qualname)
    except (UnknownOperatorError, AmbiguousOperatorError) as e:
        return _no_operator(e, args.qualname)
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    print(f"{d['qualname']}\n  schema:  {d['schema']}\n  defined: {d['defined_at']}")
    if d["tags"]:
        print(f"  tags:    {', '.join(d['tags'])}")

    def origin(k: dict[str, Any]) -> str:
        who = (
            f"plugin {k['plugin']} ({_dist(k['distribution'], k['version'])})"
            if k["plugin"]
            else "runtime"
        )
        return f"{k['source']}  [{who}]"

    rows = [
        [
            k["key"],
            k["status"]
            + (f" (overrides {k['overrides_owner']})" if k.get("overrides_owner") else "")
            + (" (override)" if k["overrides"] and not k.get("overrides_owner") else ""),
            origin(k),
        ]
        for k in d["kernels"]
    ]
    for label in ("fake", "autograd"):
        k = d[label]
        rows.append([label, "live" if k else "-", origin(k) if k else "not registered"])
    print(_table(rows, ["key", "status", "source"]))
    return 0


def _sample_tensor(device: str, requires_grad: bool) -> Tensor:
    # Made on cpu and moved: a backend need not have a kernel for oplib::ones to be explained.
    t = ones(2)
    if device != "cpu":
        t = t.to(device)
    return t.requires_grad_(requires_grad)


def _sample_argument(arg: Any, device: str, requires_grad: bool) -> Any:
    base = str(arg.type).rstrip("?")
    if base == "Tensor":
        return _sample_tensor(device, requires_grad)
    if base == "Tensor[]":
        return [_sample_tensor(device, requires_grad)] * 2
    if arg.has_default:
        return arg.default_value
    samples = {
        "int": 0,
        "SymInt": 1,
        "float": 1.0,
        "bool": False,
        "str": "",
        "Scalar": 1.0,
        "int[]": [0],
        "SymInt[]": [2],
        "ScalarType": "float32",
        "Device": device,
    }
    if base in samples:
        return samples[base]
    raise ValueError(f"cannot make a sample for argument {arg.name!r} of type {arg.type}")


def _ops_explain(args: argparse.Namespace) -> int:
    try:
        op = resolve(args.qualname, "ops explain")
    except (UnknownOperatorError, AmbiguousOperatorError) as e:
        return _no_operator(e, args.qualname)
    call_args, call_kwargs = [], {}
    for a in op.schema.arguments:
        value = _sample_argument(a, args.device, args.requires_grad)
        if a.kwarg_only:
            call_kwargs[a.name] = value
        else:
            call_args.append(value)
    result = explain(op, *call_args, **call_kwargs)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(
            f"sample call: tensors of shape (2,) on {args.device}"
            f"{', requiring grad' if args.requires_grad else ''}"
        )
        print(result)
    return 0


def _short(text: str, width: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def _check(args: argparse.Namespace) -> int:
    # only this command needs the checking machinery
    from .testing._checks import CHECKS, FAIL, SKIP
    from .testing._runner import UnknownName, check_ops

    qualnames = []
    for given in args.qualname:  # any spelling lookup takes; check_ops wants qualified names
        try:
            qualnames.append(resolve(given, "check").name())
        except (UnknownOperatorError, AmbiguousOperatorError) as e:
            return _no_operator(e, given)
    try:
        report = check_ops(qualnames or None, args.backend or None)
    except UnknownName as e:
        if e.kind == "backend":
            print(
                f"oplib: no backend {e.name!r} is installed (see 'oplib backends list')",
                file=sys.stderr,
            )
        else:
            print(f"oplib: no operator {e.name!r} (see 'oplib ops list')", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 1 if report.failed else 0
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for r in report.rows:
        cells.setdefault((r.op, r.backend), {})[r.check] = r
    checks = [c for c in CHECKS if any(c in v for v in cells.values())]
    table = []
    for (op, backend), by_check in cells.items():
        notes = [
            f"{c.removeprefix('test_')}: {_short(r.reason, 80)}"
            for c, r in by_check.items()
            if r.status == FAIL
        ]
        skips = {r.reason for r in by_check.values() if r.status == SKIP and r.reason}
        if len(skips) == 1 and all(r.status == SKIP for r in by_check.values()):
            notes.append(_short(next(iter(skips)), 80))
        table.append(
            [op, backend]
            + [by_check[c].status if c in by_check else "-" for c in checks]
            + ["; ".join(notes)]
        )
    headers = ["op", "backend", *(c.removeprefix("test_") for c in checks), "notes"]
    print(_table(table, headers))
    failures = [r for r in report.rows if r.status == FAIL]
    if failures:
        print("\nfailures:")
        for r in failures:
            sample = f" (sample {r.sample})" if r.sample else ""
            print(f"- {r.op} on {r.backend}, {r.check}{sample}:\n    {r.reason}")
    skip_reasons: dict[str, int] = {}
    for r in report.rows:
        if r.status == SKIP and r.reason:
            skip_reasons[r.reason] = skip_reasons.get(r.reason, 0) + 1
    if skip_reasons:
        print("\nskipped:")
        for reason, n in sorted(skip_reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {n:4d} x {_short(reason)}")
    for name, reason in report.unavailable.items():
        if not args.backend:
            print(f"backend {name!r} not checked: {reason}")
    if report.no_samples:
        print(
            f"{len(report.no_samples)} op(s) have no sample inputs (a plugin's "
            f"oplib_sample_inputs hook gives them): {', '.join(report.no_samples)}"
        )
    c = report.counts()
    print(
        f"\n{len({r.op for r in report.rows})} ops x {len(report.backends)} backends "
        f"({', '.join(report.backends)}): {c['PASS']} passed, {c['FAIL']} failed, "
        f"{c['SKIP']} skipped in {report.seconds:.1f}s"
    )
    return 1 if report.failed else 0


_COMMANDS = ("backends", "plugins", "ops", "check")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree, or (``only``) just one top-level command: each argparse
    parser costs about a millisecond to build, a tenth of ``oplib backends list``."""
    parser = argparse.ArgumentParser(prog="oplib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def leaf(parent: Any, name: str, help: str, fn: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, help=help)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(fn=fn)
        return p

    def wanted(name: str) -> bool:
        return only is None or only == name

    def group(name: str, help: str) -> Any:
        return sub.add_parser(name, help=help).add_subparsers(dest="sub", required=True)

    if wanted("backends"):
        leaf(
            group("backends", "installed device backends"), "list", "list backends", _backends_list
        )
    if wanted("plugins"):
        leaf(
            group("plugins", "installed plugins"),
            "list",
            "list plugins and their status",
            _plugins_list,
        )
    if wanted("ops"):
        ops = group("ops", "registered operators")
        lst = leaf(ops, "list", "list operators", _ops_list)
        lst.add_argument("--namespace", "-n", help="only this namespace")
        show = leaf(ops, "show", "one operator: schema, kernels and their origins", _ops_show)
        show.add_argument("qualname", help="e.g. oplib::add or acme::scaled_add.out")
        exp = leaf(ops, "explain", "how a call with sample tensors would dispatch", _ops_explain)
        exp.add_argument("qualname", help="e.g. oplib::add")
        exp.add_argument("--device", default="cpu", help="where the sample tensors live")
        exp.add_argument("--requires-grad", action="store_true", help="sample tensors require grad")
    if wanted("check"):
        chk = leaf(
            sub, "check", "run opcheck on every op with sample inputs, on every backend", _check
        )
        chk.add_argument("qualname", nargs="*", help="ops to check (default: all with samples)")
        chk.add_argument(
            "--backend", "-b", action="append", default=[], help="only this backend (repeatable)"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argv[0] if argv else None
    args = build_parser(first if first in _COMMANDS else None).parse_args(argv)
    try:
        return int(args.fn(args))
    except OplibError as e:  # a user's or a plugin's mistake: one line, not a traceback
        print(f"oplib: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # ``oplib ops list | head``: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
