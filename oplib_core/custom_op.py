"""``custom_op``: define an operator from a Python function (its schema inferred from the
annotations), as ``torch.library.custom_op`` does."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, overload

from ._dispatch import FastCall, OpOverload
from ._infer_schema import infer_schema
from ._registry.handle import Handle
from ._registry.registry import FAKE, REGISTRY, op_named
from ._registry.startup import fork_safe
from ._schema import FunctionSchema, parse_signature
from ._tags import Tag
from ._tensor.pickling import Where, find, where_defined
from .autograd._registration import register_autograd
from .errors import InvalidNameError, SchemaError
from .library import (
    Library,
    _check_vmap_schema,
    _KernelT,
    _normalize_types,
    _register_many,
    add_vmap_rule,
    register_autocast,
)

__all__ = ["CustomOpDef", "custom_op"]


class _KwargOnlyTensorError(SchemaError, NotImplementedError):
    """A custom op with keyword-only Tensor arguments: a SchemaError, and the
    NotImplementedError torch raises for it."""


#: The Library of the live custom op of each qualified name: defining a custom op of the same
#: name again destroys it first (torch's ``get_library_allowing_overwrite``). Weak: a custom
#: op nobody holds still goes with its Library.
_LIBS: weakref.WeakValueDictionary[str, Library] = weakref.WeakValueDictionary()
_LIBS_LOCK = fork_safe(threading.Lock())  # (held while defining: see fork_safe)
#: The live custom op of each qualified name (what unpickling one gives), under _LIBS_LOCK.
_DEFS: weakref.WeakValueDictionary[str, CustomOpDef] = weakref.WeakValueDictionary()


def _validate(qualname: str, schema: str, given: bool, mutates_args: Iterable[str] | str) -> None:
    """Refuse, before anything is defined, what torch's custom_op refuses: keyword-only
    Tensor arguments, and a given schema whose mutable arguments differ from
    ``mutates_args``."""
    # "ns::f.overload" is an overload of the packet ns::f, as in torch's custom_op
    base, _, overload = qualname.partition(".")
    parsed = parse_signature(schema, name=base, overload_name=overload)
    kw_tensors = [a.name for a in parsed.kwarg_only if a.type.is_tensor_like()]
    if kw_tensors:
        raise _KwargOnlyTensorError(
            f"custom_op({qualname!r}): keyword-only Tensor argument(s) {kw_tensors} are not "
            "supported (torch: 'custom_op with kwarg-only Tensor args. Please make your "
            "tensors not kwarg-only.'); make them positional",
            str(parsed),
        )
    if not given:
        return
    expected = set(parsed.mutated_arguments)
    declared = {mutates_args} if isinstance(mutates_args, str) else set(mutates_args)
    if expected != declared:
        differ = sorted(expected ^ declared)
        raise SchemaError(
            f"custom_op({qualname!r}): attempted to create a custom op with "
            f"mutates_args={sorted(declared)} and schema={schema!r}. The schema suggests that "
            f"the op mutates {_set_text(expected)}, which is different from what was provided "
            f"in mutates_args (they disagree about argument(s) {differ}). Please make these "
            "consistent: declare a mutated argument 'Tensor(a!) name' in the schema and list "
            "it in mutates_args",
            str(parsed),
        )


def _set_text(names: set[str]) -> str:
    """A set of names as torch prints it (``{'x'}``, ``set()``), in a stable order."""
    return "{" + ", ".join(map(repr, sorted(names))) + "}" if names else "set()"


class CustomOpDef(FastCall):
    """An operator made by :func:`custom_op`. Call it like the function; add kernels with
    ``register_kernel``, a fake kernel with ``register_fake``, a gradient formula with
    ``register_autograd``. Its registrations live as long as this object's Library."""

    # Calls take the op's own fast path (same plan and cache), with no extra call layer.
    __slots__ = ("__dict__", "__weakref__")  # (FastCall holds the fast path's fields)

    def __init__(
        self,
        namespace: str,
        name: str,
        schema: str,
        fn: Callable[..., Any],
        tags: Iterable[Tag] = (),
    ) -> None:
        self._namespace = namespace
        self._name = name
        self._init_fn = fn
        self._lib = Library(namespace, "FRAGMENT")
        with _LIBS_LOCK:
            # As torch: a custom op of a name already made by custom_op replaces it (re-run
            # modules and notebooks); a name defined otherwise stays a conflict.
            old = _LIBS.pop(f"{namespace}::{name}", None)
            if old is not None:
                old._destroy()
            try:
                qualname = self._lib.define(f"{name}{schema}", tags=tuple(tags))
            except BaseException:
                self._lib._destroy()
                raise
            _LIBS[qualname] = self._lib
        self._qualname = qualname
        self._opoverload: OpOverload = op_named(qualname)
        self._follow(self._opoverload)
        self.__name__ = name
        self.__qualname__ = qualname
        self.__doc__ = fn.__doc__
        self.__module__ = getattr(fn, "__module__", __name__)
        with _LIBS_LOCK:  # once complete: unpickling may read it from another thread
            if _LIBS.get(qualname) is self._lib:
                _DEFS[qualname] = self

    @property
    def schema(self) -> FunctionSchema:
        """The op's schema (inferred from the function's annotations, or given)."""
        return self._opoverload.schema

    @property
    def _schema(self) -> FunctionSchema:  # torch.library's CustomOpDef has this name
        return self._opoverload.schema

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._qualname})>"

    def __reduce__(self) -> tuple[Any, ...]:
        # By reference, as a function pickles: the qualified name and the function's module
        # (imported by a process that lacks the op), never the Library or the caches.
        where = where_defined(self._opoverload.origin, self.__module__)
        return (_custom_op_named, (self._qualname, where))

    def _call_slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._opoverload._call_slow(args, kwargs)

    @overload
    def register_kernel(
        self,
        device_types: str | Sequence[str] | None,
        fn: None = None,
        /,
        *,
        allow_override: bool = False,
    ) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def register_kernel(
        self,
        device_types: str | Sequence[str] | None,
        fn: _KernelT,
        /,
        *,
        allow_override: bool = False,
    ) -> _KernelT: ...
    def register_kernel(
        self,
        device_types: str | Sequence[str] | None,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        allow_override: bool = False,
    ) -> Any:
        """Register ``fn`` for ``device_types`` (``"cpu"``, ``["cpu", "cuda"]``; ``None``
        means every device). Usable as a decorator."""
        keys = _normalize_types(device_types, "register_kernel")

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            _register_many(self._qualname, keys, f, self._lib, "register_kernel", allow_override)
            return f

        return register if fn is None else register(fn)

    @overload
    def register_fake(self, fn: None = None, /) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def register_fake(self, fn: _KernelT, /) -> _KernelT: ...
    def register_fake(self, fn: Callable[..., Any] | None = None, /) -> Any:
        """Register the fake kernel (output metadata from data-less inputs)."""

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            self._lib._register(REGISTRY.add_kernel(self._qualname, FAKE, f, api="register_fake"))
            return f

        return register if fn is None else register(fn)

    def register_autograd(
        self, backward: Callable[..., Any], /, *, setup_context: Callable[..., Any] | None = None
    ) -> None:
        """Register the gradient formula (see :func:`oplib_core.register_autograd`)."""
        register_autograd(self._opoverload, backward, setup_context=setup_context, lib=self._lib)

    def register_autocast(self, device_type: str, cast_inputs: Any, /) -> Handle:
        """Cast this op's floating inputs on ``device_type`` to ``cast_inputs`` under an
        enabled ``oplib.autocast`` (see :func:`oplib_core.library.register_autocast`); the
        rule lives as long as the op."""
        return register_autocast(self._opoverload, device_type, cast_inputs, lib=self._lib)

    @overload
    def register_vmap(self, func: None = None, /) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def register_vmap(self, func: _KernelT, /) -> _KernelT: ...
    def register_vmap(self, func: Callable[..., Any] | None = None, /) -> Any:
        """Register the batching rule ``func(info, in_dims, *args, **kwargs) -> (output,
        out_dims)`` that ``oplib.vmap`` runs for this op (see
        :func:`oplib_core.library.register_vmap`); a later rule replaces this one, as in
        torch. Usable as a decorator."""
        _check_vmap_schema(self._opoverload, "register_vmap")

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            # the earlier rule's handle then undoes nothing (the table holds the new origin)
            add_vmap_rule(self._opoverload, f, self._lib, "register_vmap", replace=True)
            return f

        return register if func is None else register(func)

    def _destroy(self) -> None:
        with _LIBS_LOCK:
            if _LIBS.get(self._qualname) is self._lib:
                del _LIBS[self._qualname]
            if _DEFS.get(self._qualname) is self:
                del _DEFS[self._qualname]
        self._lib._destroy()


def _custom_op_named(qualname: str, where: Where) -> CustomOpDef:
    """Unpickling a ``CustomOpDef``: this process's live custom op ``qualname``."""

    def get() -> CustomOpDef | None:
        found = _DEFS.get(qualname)
        return found if found is not None and found._opoverload.defined else None

    return find("custom op", qualname, where, get)


@overload
def custom_op(
    name: str,
    fn: None = None,
    /,
    *,
    mutates_args: Iterable[str] | str,
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    tags: Iterable[Tag] | Tag = (),
) -> Callable[[Callable[..., Any]], CustomOpDef]: ...
@overload
def custom_op(
    name: str,
    fn: Callable[..., Any],
    /,
    *,
    mutates_args: Iterable[str] | str,
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    tags: Iterable[Tag] | Tag = (),
) -> CustomOpDef: ...
def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: Iterable[str] | str,
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
    tags: Iterable[Tag] | Tag = (),
) -> CustomOpDef | Callable[[Callable[..., Any]], CustomOpDef]:
    """Wrap ``fn`` into operator ``name`` (``"mylib::op"``). The schema comes from ``fn``'s
    annotations unless given; ``mutates_args`` names the arguments ``fn`` writes to (``()``
    for none). ``fn`` becomes the kernel for ``device_types`` (every device when None) and
    receives native arrays. Usable as a decorator."""
    if not isinstance(name, str) or "::" not in name:
        raise InvalidNameError(
            f"custom_op(): expected a qualified name 'namespace::op_name', got {name!r}", name
        )
    namespace, _, opname = name.partition("::")
    tag_tuple = (tags,) if isinstance(tags, Tag) else tuple(tags)

    def inner(f: Callable[..., Any]) -> CustomOpDef:
        schema_str = schema if schema is not None else infer_schema(f, mutates_args=mutates_args)
        _validate(name, schema_str, schema is not None, mutates_args)
        op = CustomOpDef(namespace, opname, schema_str, f, tag_tuple)
        try:
            op.register_kernel(device_types, f)
        except BaseException:
            op._destroy()
            raise
        return op

    return inner if fn is None else inner(fn)
