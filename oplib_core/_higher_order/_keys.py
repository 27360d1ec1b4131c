"""The dispatch keys of a higher-order operator's call, from the tensors anywhere in its
arguments (nested lists, tuples and dicts): ``Autograd`` when grad mode is on and a Tensor
requires grad, and the backend of the arrays. A 0-d cpu array (a predicate, a scalar) defers
to another device's arrays, as 0-d cpu tensors do in op calls; no arrays at all means cpu,
as for factories."""

from __future__ import annotations

from typing import Any

from .._grad_mode import STATE as GRAD
from .._tensor.tensor import Tensor
from ..backends import TABLE, Backend

__all__ = ["call_keys", "describe_arrays"]

_CONTAINERS = (list, tuple, dict)


def call_keys(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Backend, bool]:
    """``(backend, whether Autograd comes first)`` for a call with these arguments."""
    found: list[Any] = [None, False]  # [backend, requires grad]
    _scan(args, found)
    if kwargs:
        _scan(tuple(kwargs.values()), found)
    backend = found[0]
    if backend is None:
        backend = TABLE.get("cpu")
    return backend, found[1] and GRAD.enabled


def _scan(values: Any, found: list[Any]) -> None:
    for v in values:
        t = type(v)
        if t is Tensor:
            if v._rg:
                found[1] = True
            v = v._data
            t = type(v)
        elif t in _CONTAINERS:
            _scan(v.values() if t is dict else v, found)
            continue
        b = TABLE.for_type(t)
        if b is None:
            continue
        current = found[0]
        if current is None or (current.name == "cpu" and b.name != "cpu"):
            found[0] = b


def describe_arrays(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, str]:
    """Where each array of a call is (``"args[3][0]" -> "numpy.ndarray on cpu"``), for
    ``explain``."""
    out: dict[str, str] = {}
    _describe(args, "args", out)
    _describe(kwargs, "kwargs", out)
    return out


def _describe(value: Any, path: str, out: dict[str, str]) -> None:
    t = type(value)
    if t is list or t is tuple:
        for i, v in enumerate(value):
            _describe(v, f"{path}[{i}]", out)
        return
    if t is dict:
        for k, v in value.items():
            _describe(v, f"{path}[{k!r}]", out)
        return
    data = value._data if t is Tensor else value
    b = TABLE.for_type(type(data))
    if b is not None:
        kind = "Tensor of " if t is Tensor else ""
        cls = type(data)
        grad = ", requires grad" if t is Tensor and value._rg else ""
        out[path] = f"{kind}{cls.__module__}.{cls.__name__} on {b.device_of(data)}{grad}"
