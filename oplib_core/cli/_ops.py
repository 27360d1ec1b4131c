"""``oplib ops list|show|explain|matrix``: registered operators."""

from __future__ import annotations

import argparse
from typing import Any

from .. import _introspect as introspect
from .._explain import explain
from .._factories import ones
from .._higher_order._operator import HigherOrderOperator
from .._higher_order._pytree import tree_map
from .._tensor.tensor import Tensor
from . import _matrix
from ._errors import UsageError
from ._names import device_arg, namespace, op_name, operator_or_hop
from ._parsers import group, leaf
from ._render import Output, dist_label

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    ops = group(sub, "ops", "registered operators")
    lst = leaf(ops, "list", "list operators", ops_list)
    lst.add_argument("--namespace", "-n", help="only this namespace")
    show = leaf(ops, "show", "one operator: schema, kernels and their origins", ops_show)
    show.add_argument("qualname", help="e.g. oplib::add or acme::scaled_add.out")
    exp = leaf(ops, "explain", "how a call with sample tensors would dispatch", ops_explain)
    exp.add_argument("qualname", help="e.g. oplib::add")
    exp.add_argument("--device", default="cpu", help="where the sample tensors live")
    exp.add_argument("--requires-grad", action="store_true", help="sample tensors require grad")
    exp.add_argument(
        "--format",
        choices=("text", "dot", "mermaid"),
        default="text",
        help="text, or the decision as a graph (Graphviz dot, Mermaid)",
    )
    _matrix.add_parser(
        leaf(ops, "matrix", "ops x backends: what serves each op where", _matrix.run)
    )


def ops_list(args: argparse.Namespace, out: Output) -> int:
    ns = None if args.namespace is None else namespace(args.namespace)
    rows = introspect.op_rows(ns)
    if args.json:
        out.json(rows)
        return 0
    out.table(
        ["op", "kernels", "fake", "autograd"],
        [
            [
                r["qualname"] + (" (higher-order)" if r["kind"] == "hop" else ""),
                ", ".join(r["keys"]) or "-",
                "yes" if r["fake"] else "-",
                "yes" if r["autograd"] else "-",
            ]
            for r in rows
        ],
        wide=("kernels",),
    )
    return 0


def _origin(k: dict[str, Any]) -> str:
    who = (
        f"plugin {k['plugin']} ({dist_label(k['distribution'], k['version'])})"
        if k["plugin"]
        else "runtime"
    )
    return f"{k['source']}  [{who}]"


def _override_mark(k: dict[str, Any]) -> str:
    if k.get("overrides_owner"):
        return f" (overrides {k['overrides_owner']})"
    return " (override)" if k["overrides"] else ""


def _waiting_show(d: dict[str, Any], out: Output) -> None:
    out.text(
        f"{d['qualname']}\n  not defined: no installed package defines it; these kernels "
        "wait for it and go live when it is defined"
    )
    rows = [
        [k["key"], f"waiting for op{' (' + k['error'] + ')' if k['error'] else ''}", _origin(k)]
        for k in d["kernels"]
    ]
    out.table(["key", "status", "source"], rows, wide=("status", "source"))


def ops_show(args: argparse.Namespace, out: Output) -> int:
    waiting = introspect.waiting_detail(args.qualname)
    if waiting is not None:
        if args.json:
            out.json(waiting)
        else:
            _waiting_show(waiting, out)
        return 0
    d = introspect.op_detail(op_name(args.qualname, "ops show"))
    if args.json:
        out.json(d)
        return 0
    kind = "  (higher-order operator: handlers per key)" if d["kind"] == "hop" else ""
    out.text(f"{d['qualname']}{kind}\n  schema:  {d['schema']}\n  defined: {d['defined_at']}")
    if d["tags"]:
        out.text(f"  tags:    {', '.join(d['tags'])}")
    rows = [[k["key"], k["status"] + _override_mark(k), _origin(k)] for k in d["kernels"]]
    for label in ("fake", "autograd"):
        k = d[label]
        rows.append([label, "live" if k else "-", _origin(k) if k else "not registered"])
    out.table(["key", "status", "source"], rows, wide=("source",))
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


def _hop_sample_call(
    hop: HigherOrderOperator, device: str, requires_grad: bool
) -> tuple[list[Any], dict[str, Any]]:
    from ..testing._hop_samples import hop_samples

    samples = hop_samples(hop, device_arg(device))
    if not samples:
        raise UsageError(
            f"no sample call for {hop.qualname}: only the built-in higher-order operators "
            "have samples (explain it from Python: oplib.explain(hop, *args))"
        )
    s = samples[0]
    if not requires_grad:
        return list(s.args), dict(s.kwargs)

    def grad(x: Any) -> Any:
        floating = isinstance(x, Tensor) and x.dtype.kind in "fc"
        return x.detach().requires_grad_(True) if floating else x

    return tree_map(grad, list(s.args)), tree_map(grad, dict(s.kwargs))


def ops_explain(args: argparse.Namespace, out: Output) -> int:
    op = operator_or_hop(args.qualname, "ops explain")
    device = str(device_arg(args.device))
    call_args: list[Any] = []
    call_kwargs: dict[str, Any] = {}
    if isinstance(op, HigherOrderOperator):
        call_args, call_kwargs = _hop_sample_call(op, device, args.requires_grad)
    else:
        for a in op.schema.arguments:
            value = _sample_argument(a, device, args.requires_grad)
            if a.kwarg_only:
                call_kwargs[a.name] = value
            else:
                call_args.append(value)
    result = explain(op, *call_args, **call_kwargs)
    if args.json:
        out.json(result.to_json())
    elif args.format == "dot":
        out.text(result.to_dot())
    elif args.format == "mermaid":
        out.text(result.to_mermaid())
    elif isinstance(op, HigherOrderOperator):
        out.text(f"sample call: oplib check's first sample on {device}\n{result}")
    else:
        out.text(
            f"sample call: tensors of shape (2,) on {device}"
            f"{', requiring grad' if args.requires_grad else ''}\n{result}"
        )
    return 0
