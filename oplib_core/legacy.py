"""The legacy custom-op API of ``torch._custom_ops``, for code written against it.

``custom_op(qualname, func_or_schema)`` defines an op (from a schema string, or from the
annotations of a function whose body is never called); ``impl`` registers kernels per
device type; ``impl_abstract`` the fake kernel; ``impl_save_for_backward`` +
``impl_backward`` the gradient formula, in the dict-of-gradients form::

    @legacy.impl_save_for_backward("mylib::mul3")
    def save(inputs, output):            # inputs: a namedtuple of the op's arguments
        return inputs.x

    @legacy.impl_backward("mylib::mul3")
    def backward(ctx, saved, grad):      # returns {input name: gradient or None}
        return {"x": grad * 3}

Both of the last two must be registered; the op's Autograd kernel raises until they are.
New code should use :func:`oplib_core.custom_op` and :func:`oplib_core.register_autograd`.
"""

from __future__ import annotations

import collections
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ._dispatch import OpOverload
from ._infer_schema import infer_schema
from ._registry.entry import _caller_location, _location_of
from ._registry.lookup import resolve
from ._registry.registry import AUTOGRAD, COMPOSITE_IMPLICIT, REGISTRY, Handle, op_named
from ._schema import BaseType, ListType, parse_signature
from ._tensor.tensor import Tensor
from .autograd._registration import Formula
from .errors import InvalidArgumentError, InvalidNameError, RegistrationError
from .fake import get_ctx
from .library import Library, _register_many, register_fake

__all__ = [
    "custom_op",
    "get_ctx",
    "impl",
    "impl_abstract",
    "impl_backward",
    "impl_save_for_backward",
]

_lock = threading.Lock()
#: qualname -> the legacy op (as torch's ``global_registry``); an op leaves it when its
#: Library is destroyed.
_OPS: dict[str, LegacyOp] = {}


def _split(qualname: str, api: str) -> tuple[str, str]:
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise InvalidNameError(
            f"{api}(qualname={qualname!r}): expected a qualified name 'namespace::name'",
            qualname,
        )
    ns, name = qualname.split("::")
    if "." in name:
        raise InvalidNameError(
            f"{api}(qualname={qualname!r}): the legacy custom op APIs do not handle "
            "overloads, i.e. operator names with '.' in them. Please name your operator "
            f"something like ns::foo. Got: {qualname} (torch._custom_ops refuses them too; "
            "oplib.custom_op and Library.define take overload names)",
            qualname,
        )
    return ns, name


class _Impl:
    __slots__ = ("func", "location")

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.location = _location_of(func) or repr(func)


def _tuple_factory(name: str, fields: list[str]) -> Callable[..., tuple[Any, ...]]:
    """A namedtuple class made at run time (to type checkers, something that makes tuples)."""
    return collections.namedtuple(name, fields)


class LegacyOp:
    """An operator defined through the legacy API and its registrations."""

    def __init__(self, lib: Library, qualname: str) -> None:
        self._lib = lib
        self._qualname = qualname
        self._opoverload: OpOverload = op_named(qualname)
        self._schema = self._opoverload._schema
        self._impls: dict[str, _Impl] = {}
        self._output_differentiability: list[bool] | None = None
        self._autograd_handle: Handle | None = None
        self._formula: Formula | None = None
        names = [a.name for a in self._schema.arguments]
        self._args_tuple = _tuple_factory(f"{qualname.replace('::', '_')}_args", names)

    def __repr__(self) -> str:
        return f"<LegacyOp(op={self._qualname!r})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._opoverload(*args, **kwargs)

    def _destroy(self) -> None:
        with _lock:
            if _OPS.get(self._qualname) is self:
                del _OPS[self._qualname]
        self._lib._destroy()

    # -- registrations ----------------------------------------------------------------------
    def _register_impl(self, kind: str, func: Callable[..., Any]) -> None:
        if kind in self._impls:
            raise RegistrationError(
                f"Attempting to register a {kind} impl for operator {self._qualname} that "
                f"already has a {kind} impl registered from Python at "
                f"{self._impls[kind].location}. This is not supported.",
                op=self._qualname,
                existing=self._impls[kind].location,
            )
        self._impls[kind] = _Impl(func)

    def _check_can_register_backward(self) -> None:
        schema = self._schema

        def error(detail: str) -> None:
            raise RegistrationError(
                f"Cannot use legacy.impl_save_for_backward/impl_backward to register a "
                f"backward formula for {detail}. Got operator {self._qualname} with schema: "
                f"{schema}",
                op=self._qualname,
            )

        if schema.is_mutable:
            error("non-functional operator")
        if not schema.returns:
            error("operator with no returns")
        if any(r.annotation is not None for r in schema.returns):
            error("operator that returns views")
        for r in schema.returns:
            t = r.type
            ok = (
                isinstance(t, BaseType) and t.name in ("Tensor", "int", "SymInt", "bool", "float")
            ) or (
                isinstance(t, ListType) and isinstance(t.elem, BaseType) and t.elem.name == "Tensor"
            )
            if not ok:
                error(
                    "operator with return not in ['int', 'SymInt', 'bool', 'float', 'Tensor', "
                    f"'List[Tensor]'] (got {t})"
                )

    def _check_doesnt_have_library_autograd_impl(self) -> None:
        if self._autograd_handle is not None:
            return
        implicit = REGISTRY.ops[self._qualname].kernel(COMPOSITE_IMPLICIT)
        if implicit is not None:
            raise RegistrationError(
                f"impl_backward/impl_save_for_backward: the operator {self._qualname} already "
                "has an implementation via a pre-existing registration to "
                f"CompositeImplicitAutograd (at {implicit.origin}). CompositeImplicitAutograd "
                "operators do not need an autograd formula; instead, the operator will "
                "decompose into its constituents and those can have autograd formulas defined "
                "on them.",
                op=self._qualname,
                existing=str(implicit.origin),
            )
        k = REGISTRY.ops[self._qualname].kernel(AUTOGRAD)
        if k is not None:
            raise RegistrationError(
                f"impl_backward/impl_save_for_backward: the operator {self._qualname} already "
                f"has an Autograd kernel registered at {k.origin} (through register_autograd "
                "or Library.impl). Use one or the other, not both.",
                op=self._qualname,
                existing=str(k.origin),
            )

    def _ensure_autograd_kernel(self) -> None:
        if self._autograd_handle is None:
            handle = REGISTRY.add_kernel(
                self._qualname, AUTOGRAD, self._autograd_kernel, api="impl_backward"
            )
            self._lib._register(handle)
            self._autograd_handle = handle

    # -- the Autograd kernel ----------------------------------------------------------------
    def _autograd_kernel(self, *args: Any, **kwargs: Any) -> Any:
        save = self._impls.get("save_for_backward")
        backward = self._impls.get("backward")
        if save is None or backward is None:
            missing = "save_for_backward" if save is None else "backward"
            found = "backward" if save is None else "save_for_backward"
            assert (save or backward) is not None
            raise RegistrationError(
                f"We found a '{found}' registration for {self._qualname} at "
                f"{(save or backward).location} but were unable to find a '{missing}' "  # type: ignore[union-attr]
                "registration. To use the legacy API to register a backward formula, please "
                "provide both a backward function and a 'save for backward' function via "
                "`impl_backward` and `impl_save_for_backward` respectively.",
                op=self._qualname,
            )
        formula = self._formula
        assert formula is not None
        return formula.kernel(*args, **kwargs)


def _make_formula(op: LegacyOp) -> Formula:
    """The legacy contract on top of ``register_autograd``'s machinery."""
    schema = op._schema
    save_fn = op._impls["save_for_backward"].func
    backward_fn = op._impls["backward"].func
    backward_loc = op._impls["backward"].location
    diff = op._output_differentiability
    arg_names = [a.name for a in schema.arguments]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        args = op._args_tuple(*inputs)
        ctx.set_materialize_grads(True)
        ctx.legacy_saved = save_fn(args, output)
        ctx.legacy_args_info = op._args_tuple(
            *([type(x) for x in a] if isinstance(a, (list, tuple)) else type(a) for a in inputs)
        )
        if diff is not None:
            outs = output if isinstance(output, tuple) else (output,)
            nondiff: list[Tensor] = []
            for idx, (d, out) in enumerate(zip(diff, outs, strict=True)):
                if isinstance(out, Tensor):
                    if not d:
                        nondiff.append(out)
                    continue
                if isinstance(out, list):
                    if not d:
                        nondiff.extend(out)
                    continue
                if d:
                    raise RuntimeError(
                        f"With output_differentiability={diff}. At idx {idx}, we received an "
                        f"object of type {type(out).__name__} that is not a Tensor, so it "
                        "cannot be marked as differentiable in output_differentiability."
                    )
            if nondiff:
                ctx.mark_non_differentiable(*(t for t in nondiff if t.grad_fn is ctx))

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        result = backward_fn(object(), ctx.legacy_saved, *grads)
        _validate_grad_inputs_dict(result, op, ctx.legacy_args_info, backward_loc)
        return tuple(result.get(name) for name in arg_names)

    formula = Formula(op._opoverload, backward, setup_context)
    formula.location = backward_loc
    return formula


def _validate_grad_inputs_dict(
    grad_inputs_dict: Any, op: LegacyOp, args_info: Any, location: str
) -> None:
    """torch's ``validate_grad_inputs_dict``: one entry per Tensor-like input, each None or a
    Tensor (a list of those for a Tensor[] input)."""

    def error(what: str) -> None:
        raise RuntimeError(
            f"In the backward function defined for {op._qualname} at {location} using the "
            f"legacy CustomOp API (impl_backward), {what}"
        )

    if not isinstance(grad_inputs_dict, dict):
        error(
            "expected the output of the backward function to be a dict but got "
            f"{type(grad_inputs_dict).__name__}"
        )
    expected_keys = {a.name for a in op._schema.arguments if a.type.is_tensor_like()}
    actual_keys = set(grad_inputs_dict.keys())
    if expected_keys != actual_keys:
        error(
            f"expected the returned grad_input dict to have keys {sorted(expected_keys)} but "
            f"got {sorted(actual_keys)}. The backward function must return a gradient (can "
            "be None) for each arg to the CustomOp that may be a Tensor or Sequence[Tensor]. "
            "Args declared to be non-Tensor-like types should not appear in the grad_input "
            "dict"
        )
    for name, grad in grad_inputs_dict.items():
        arg_info = getattr(args_info, name)
        if isinstance(arg_info, list):
            if not isinstance(grad, (tuple, list)):
                error(
                    f"for input '{name}' expected the grad_input dict to hold a list of "
                    f"gradients but got object of type {type(grad).__name__}."
                )
            if len(grad) != len(arg_info):
                error(
                    f"for input '{name}' expected the grad_input dict to hold a list of "
                    f"{len(arg_info)} gradients but got {len(grad)}"
                )
            for idx, (g, info) in enumerate(zip(grad, arg_info, strict=True)):
                if g is None:
                    continue
                if not isinstance(g, Tensor):
                    error(
                        f"for input '{name}' expected the grad_input dict to hold a list of "
                        f"None or Tensor gradients but got object of {type(g).__name__} at "
                        f"index {idx}"
                    )
                if not issubclass(info, Tensor):
                    error(
                        f"for input '{name}', got a Tensor as the gradient for the {idx}-th "
                        f"value but expected None because the {idx}-th value was not a Tensor "
                        f"(it was type {info.__name__})"
                    )
            continue
        if grad is None:
            continue
        if not isinstance(grad, Tensor):
            error(
                f"got object of type {type(grad).__name__} as the gradient for input "
                f"'{name}', but expected the gradient to be either None or a Tensor"
            )
        if not issubclass(arg_info, Tensor):
            error(
                f"got a Tensor as the gradient for input '{name}' but expected None as the "
                f"gradient because input '{name}' was not a Tensor (it was type "
                f"{arg_info.__name__})."
            )


def _find(qualname: Any, api: str) -> LegacyOp:
    """The legacy op ``qualname`` names (any spelling :func:`oplib_core.lookup` takes). An
    op defined otherwise (``Library.define``, ``define``, ``custom_op``) gets a legacy
    wrapper on first use, as torch's ``custom_op_from_existing`` does; its registrations
    live in a Library of its own."""
    overload = resolve(qualname, api)
    name = overload.name()
    with _lock:
        op = _OPS.get(name)
        if op is not None and op._opoverload is overload:
            return op
    lib = Library(name.partition("::")[0], "FRAGMENT")
    op = LegacyOp(lib, name)
    with _lock:
        current = _OPS.get(name)
        if current is not None and current._opoverload is overload:
            winner = current  # another thread wrapped it first
        else:
            _OPS[name] = winner = op
    if winner is not op:
        lib._destroy()
    return winner


def _define(qualname: str, schema: str) -> LegacyOp:
    """Define the op, after torch's ``validate_schema``: refused, with nothing defined, when
    the schema is not functional or names an argument ``self``, or when the op exists."""
    ns, name = _split(qualname, "custom_op")
    parsed = parse_signature(schema, name=name)
    if (
        parsed.is_mutable
        or not parsed.returns
        or any(r.annotation is not None for r in parsed.returns)
    ):
        raise InvalidArgumentError(
            f"custom_op({qualname!r}): custom_op only supports functional operators (ops that "
            "do not mutate any inputs, do not return views of the inputs, and has at least one "
            f"return). Got the following non-functional schema: {parsed}",
            api="custom_op",
            argument="schema",
            value=schema,
        )
    if any(a.name == "self" for a in parsed.arguments):
        raise InvalidArgumentError(
            f"custom_op({qualname!r}): custom_op does not support arguments named 'self'. "
            f"Please rename your argument. Got: {parsed}",
            api="custom_op",
            argument="schema",
            value=schema,
        )
    with _lock:
        old = _OPS.get(qualname)
        entry = REGISTRY.ops.get(qualname)
        if old is not None and (entry is None or entry.overload is not old._opoverload):
            del _OPS[qualname]  # a wrapper of an op that is gone
            entry = None
    if entry is not None:
        first = entry.origin.source
        raise RegistrationError(
            f"custom_op(): tried to register an operator ({ns}::{parsed}) with "
            "the same name and overload name multiple times. Each overload's schema should "
            "only be registered with a single call to custom_op (or define). Duplicate "
            f"registration: registered at {_caller_location()}. Original registration: "
            f"registered at {first}",
            op=qualname,
            existing=first,
        )
    lib = Library(ns, "FRAGMENT")
    try:
        lib.define(str(parsed))
        op = LegacyOp(lib, qualname)
    except BaseException:
        lib._destroy()
        raise
    with _lock:
        _OPS[qualname] = op
    return op


def custom_op(qualname: str, func_or_schema: Callable[..., Any] | str | None = None) -> Any:
    """Define a legacy custom op from a schema string (returns the op) or, as a decorator,
    from a function's annotations (the function is only a declaration; returns the op)."""
    _split(qualname, "custom_op")
    name = qualname.split("::")[1]

    def inner(func: Callable[..., Any]) -> LegacyOp:
        if not inspect.isfunction(func):
            raise InvalidArgumentError(
                f"custom_op(...)(func): expected `func` to be a Python function, got: "
                f"{type(func).__name__}",
                api="custom_op",
                argument="func",
                value=func,
            )
        if func.__name__ != name:
            raise InvalidArgumentError(
                f"custom_op(qualname={qualname!r}, ...)(func): expected `func` to have name "
                f"{name!r} but got {func.__name__!r}. Please either change the name of `func` "
                "or the qualname that is passed to `custom_op`",
                api="custom_op",
                argument="func",
                value=func,
            )
        return _define(qualname, infer_schema(func, mutates_args=()))

    if func_or_schema is None:
        return inner
    if isinstance(func_or_schema, str):
        return _define(qualname, func_or_schema)
    return inner(func_or_schema)


def impl(
    qualname: str,
    *,
    device_types: str | Sequence[str] = ("cpu", "cuda"),
    func: Callable[..., Any] | None = None,
) -> Any:
    """Register ``func`` as the kernel of ``qualname`` for ``device_types``."""
    types = (device_types,) if isinstance(device_types, str) else tuple(device_types)

    def inner(f: Callable[..., Any]) -> Callable[..., Any]:
        op = _find(qualname, "impl")
        _register_many(op._qualname, types, f, op._lib, "impl", allow_override=False)
        return f

    return inner if func is None else inner(func)


def impl_abstract(qualname: str, *, func: Callable[..., Any] | None = None) -> Any:
    """Register the fake (abstract) kernel of ``qualname``."""

    def inner(f: Callable[..., Any]) -> Callable[..., Any]:
        op = _find(qualname, "impl_abstract")
        register_fake(op._qualname, f, lib=op._lib)
        return f

    return inner if func is None else inner(func)


def impl_save_for_backward(qualname: str, *, func: Callable[..., Any] | None = None) -> Any:
    """Register ``func(inputs, output) -> saved`` for the legacy backward formula."""

    def inner(f: Callable[..., Any]) -> Callable[..., Any]:
        op = _find(qualname, "impl_save_for_backward")
        op._check_can_register_backward()
        op._check_doesnt_have_library_autograd_impl()
        op._register_impl("save_for_backward", f)
        _refresh(op)
        return f

    return inner if func is None else inner(func)


def impl_backward(
    qualname: str,
    output_differentiability: list[bool] | None = None,
    *,
    func: Callable[..., Any] | None = None,
) -> Any:
    """Register ``func(ctx, saved, *grads) -> {input name: grad}``; ``output_differentiability``
    (one bool per return) marks outputs that get no gradient."""
    op = _find(qualname, "impl_backward")
    if output_differentiability is not None:

        def yell() -> None:
            raise RegistrationError(
                "impl_backward(output_differentiability): expected output_differentiability "
                "to be a list of bools with length equal to the number of outputs of this "
                f"CustomOp got: {output_differentiability}",
                op=op._qualname,
            )

        if not isinstance(output_differentiability, list):
            yell()
        for d in output_differentiability:
            if not isinstance(d, bool):
                yell()
        if len(op._schema.returns) != len(output_differentiability):
            yell()

    def inner(f: Callable[..., Any]) -> Callable[..., Any]:
        op._check_can_register_backward()
        op._check_doesnt_have_library_autograd_impl()
        op._register_impl("backward", f)
        op._output_differentiability = output_differentiability
        _refresh(op)
        return f

    return inner if func is None else inner(func)


def _refresh(op: LegacyOp) -> None:
    """Install the Autograd kernel: an error-raising one until both halves exist."""
    op._ensure_autograd_kernel()
    if "save_for_backward" in op._impls and "backward" in op._impls:
        op._formula = _make_formula(op)
