"""The hot path: calling an operator.

``OpOverload.__call__`` handles the common case (positional arguments, every tensor
argument of one array class, no active mode) with a type check and one dict lookup in the
op's cache; everything else goes through ``_call_slow``, which binds arguments to the
schema, picks the backend, runs modes and autograd, resolves the kernel (as torch's
``resolve_key`` does) and fills the cache for next time.
"""

from __future__ import annotations

import functools
import os
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from ._arguments import Binder
from ._device import Device
from ._grad_mode import STATE as GRAD
from ._registry import (
    AUTOGRAD,
    COMPOSITE_EXPLICIT,
    COMPOSITE_IMPLICIT,
    FAKE,
    REGISTRY,
    Kernel,
    OpEntry,
)
from ._schema import BaseType, ListType, OptionalType
from ._tensor import Tensor
from .backends import TABLE, Backend
from .errors import AutogradUnsupportedError, BackendError, DeviceMismatchError, NoKernelError

_new = object.__new__

#: ``OpOverload._call_below_autograd``'s answer when the call must take the full path.
MISS = object()

__all__ = [
    "FAST_FIELDS",
    "DispatchKeySet",
    "DispatchMode",
    "FastCall",
    "OpOverload",
    "active_modes",
]

#: ``OPLIB_LOG_DISPATCH=1``: log every dispatch decision to the ``oplib.dispatch`` logger
#: (calls then always take the slow path, which is where decisions are made).
LOG_DISPATCH = os.environ.get("OPLIB_LOG_DISPATCH", "").strip() not in ("", "0")
if LOG_DISPATCH:  # logging costs start-up time; only when asked for
    import logging

    _log = logging.getLogger("oplib.dispatch")
    _log.setLevel(logging.DEBUG)
    if not _log.handlers and not logging.getLogger().handlers:
        _log.addHandler(logging.StreamHandler())

# Number of modes active in any thread: the hot path's only check for modes.
_active = [0]
_active_lock = threading.Lock()


class _ModeStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[DispatchMode] = []


_MODES = _ModeStack()


def _push(mode: DispatchMode) -> None:
    with _active_lock:
        _MODES.stack.append(mode)
        _active[0] += 1


def _pop() -> DispatchMode:
    with _active_lock:
        mode = _MODES.stack.pop()
        _active[0] -= 1
        return mode


def active_modes() -> tuple[DispatchMode, ...]:
    """The dispatch modes active in this thread, innermost last."""
    return tuple(_MODES.stack)


class DispatchMode:
    """Intercepts every operator call in this thread while active (``with Mode(): ...``).

    Override ``__oplib_dispatch__(op, args, kwargs)``; inside it the mode is inactive, so
    calling ``op(*args, **kwargs)`` runs the operator normally (or reaches the next outer
    mode). ``op.py_impl(ModeClass)`` gives one op its own handler
    ``fn(mode, *args, **kwargs)`` under that mode.
    """

    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return op(*args, **kwargs)

    def __enter__(self) -> DispatchMode:
        _push(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _MODES.stack
        if not stack or stack[-1] is not self:
            raise RuntimeError(
                f"{type(self).__name__}: modes must exit in the reverse order they entered"
            )
        _pop()


class DispatchKeySet:
    """The keys a ``with_keyset=True`` kernel may redispatch to (highest priority first)."""

    __slots__ = ("keys",)

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def highest_priority(self) -> str:
        if not self.keys:
            raise RuntimeError("redispatch(): the key set is empty")
        return self.keys[0]

    def remove(self, key: str) -> DispatchKeySet:
        return DispatchKeySet(tuple(k for k in self.keys if k != key))

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __repr__(self) -> str:
        return f"DispatchKeySet({', '.join(self.keys)})"


def _is_int_sequence(v: Any) -> bool:
    return (type(v) is list or type(v) is tuple) and all(type(e) is int for e in v)


def _int_list(t: Any) -> bool | None:
    """For ``int[]``/``SymInt[]`` (unsized): whether None is allowed; else None."""
    nullable = isinstance(t, OptionalType)
    inner = t.elem if nullable else t
    if (
        isinstance(inner, ListType)
        and inner.size is None
        and isinstance(inner.elem, BaseType)
        and inner.elem.name in ("int", "SymInt")
    ):
        return nullable
    return None


def _is_plain_tensor(t: Any) -> bool:
    return isinstance(t, BaseType) and t.name == "Tensor"


def _tensor_like(t: Any) -> tuple[bool, bool]:
    """(is tensor-like, is a list of tensors)."""
    if isinstance(t, OptionalType):
        return _tensor_like(t.elem)
    if isinstance(t, ListType):
        inner, _ = _tensor_like(t.elem)
        return inner, inner
    return _is_plain_tensor(t), False


_FAST_TYPES: dict[str, frozenset[type]] = {
    "int": frozenset({int}),
    "SymInt": frozenset({int}),
    "float": frozenset({float}),
    "bool": frozenset({bool}),
    "str": frozenset({str}),
    "Scalar": frozenset({int, float, bool}),
}


class _Call:
    """A call after unwrapping: native arguments, where the arrays are, the backend."""

    __slots__ = ("backend", "converted", "found", "nargs", "nkwargs", "requires_grad", "tensors_in")

    def __init__(
        self,
        nargs: list[Any],
        nkwargs: dict[str, Any],
        found: list[Any],
        tensors_in: bool,
        requires_grad: bool,
        backend: Backend,
        converted: bool,
    ) -> None:
        self.nargs = nargs
        self.nkwargs = nkwargs
        self.found = found
        self.tensors_in = tensors_in
        self.requires_grad = requires_grad
        self.backend = backend
        self.converted = converted


class _Slot:
    """Where a tensor-like argument sits in the bound arguments."""

    __slots__ = ("index", "is_list", "kw", "name")

    def __init__(self, name: str, kw: bool, index: Any, is_list: bool) -> None:
        self.name = name
        self.kw = kw
        self.index = index
        self.is_list = is_list


#: What ``FastCall.__call__`` reads; objects that share an op's fast path copy these.
FAST_FIELDS = (
    "_npos",
    "_nmin",
    "_tails",
    "_key0",
    "_key_rest",
    "_checks",
    "_lists",
    "_multi",
    "_cache",
)


class FastCall:
    """The hot path, shared by ``OpOverload`` and single-overload ``OpOverloadPacket``s.

    Subclasses set ``_nmin``/``_npos`` (the positional arities the fast path takes; ``_npos``
    -1 to always take the slow path), ``_tails`` (per arity, the defaults that complete the
    positional arguments), ``_key0``/``_key_rest`` (tensor argument positions), ``_checks``
    (positions of scalar arguments and the exact types accepted without conversion),
    ``_lists`` (positions of ``int[]`` arguments, and whether None is allowed), ``_multi``
    (whether any of the last three is non-empty) and ``_cache`` (the op's cache dict, whose
    kernels already carry keyword-only defaults).
    """

    __slots__ = ()
    _npos: int
    _nmin: int
    _tails: tuple[tuple[Any, ...], ...]
    _key0: int
    _key_rest: tuple[int, ...]
    _checks: tuple[tuple[int, frozenset[type]], ...]
    _lists: tuple[tuple[int, bool], ...]
    _multi: bool
    _cache: dict[Any, Any]
    _call_slow: Callable[[tuple[Any, ...], dict[str, Any]], Any]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        n = len(args)
        if kwargs or _active[0] or n != self._npos:
            if kwargs or _active[0] or n > self._npos or n < self._nmin:
                return self._call_slow(args, kwargs)
            args += self._tails[n]
        t = type(args[self._key0])
        if self._multi:
            for i in self._key_rest:
                if type(args[i]) is not t:
                    return self._call_slow(args, kwargs)
            for i, ok in self._checks:
                if type(args[i]) not in ok:
                    return self._call_slow(args, kwargs)
            for i, nullable in self._lists:
                v = args[i]
                if v is None:
                    if not nullable:
                        return self._call_slow(args, kwargs)
                elif type(v) is list or type(v) is tuple:
                    for e in v:
                        if type(e) is not int:
                            return self._call_slow(args, kwargs)
                else:
                    return self._call_slow(args, kwargs)
        try:
            fn = self._cache[t]
        except KeyError:
            return self._call_slow(args, kwargs)
        return fn(*args)

    def _follow(self, op: OpOverload | None) -> None:
        """Share ``op``'s fast path (its plan and its cache dict); None: always slow."""
        if op is None:
            self._npos, self._nmin = -1, 0
            return
        for name in FAST_FIELDS:
            setattr(self, name, getattr(op, name))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Each class gets its own copy of __call__'s code: the interpreter specialises
        # attribute access per code object, and one code object shared by OpOverload and
        # OpOverloadPacket would keep switching between their layouts (measured: ~40% slower).
        super().__init_subclass__(**kwargs)
        if "__call__" not in cls.__dict__:
            base = FastCall.__call__
            cls.__call__ = types.FunctionType(  # type: ignore[method-assign]
                base.__code__.replace(), base.__globals__, base.__name__, base.__defaults__
            )


class OpOverload(FastCall):
    """One overload of an operator (``ops.mylib.add.default``, ``ops.mylib.add.out``)."""

    __slots__ = (
        "__weakref__",
        "_agcache",
        "_binder",
        "_cache",
        "_checks",
        "_device_arg",
        "_entry",
        "_key0",
        "_key_pos",
        "_key_rest",
        "_kwdefaults",
        "_lists",
        "_multi",
        "_nmin",
        "_npos",
        "_overloadname",
        "_returns",
        "_schema",
        "_single_plain_return",
        "_slots",
        "_tails",
        "_tcache",
        "_tensor_entry",
        "overloadpacket",
    )

    def __init__(self, entry: OpEntry) -> None:
        self._entry = entry
        self._schema = entry.schema
        self._overloadname = entry.schema.overload_name or "default"
        self._cache = entry.cache
        self._tcache = entry.tcache
        self._agcache = entry.agcache
        self._binder = Binder(entry.schema, entry.qualname)
        self.overloadpacket: Any = None
        self._plan()

    def _plan(self) -> None:
        schema = self._schema
        key_pos: list[int] = []
        checks: list[tuple[int, frozenset[type]]] = []
        lists: list[tuple[int, bool]] = []
        tail: list[Any] = []
        kwdefaults: dict[str, Any] = {}
        fast = True
        slots: list[_Slot] = []
        self._device_arg: _Slot | None = None
        pos_i = 0
        nmin = 0
        for a in schema.arguments:
            is_tensor, is_list = _tensor_like(a.type)
            index: Any = a.name if a.kwarg_only else pos_i
            if is_tensor:
                slots.append(_Slot(a.name, a.kwarg_only, index, is_list))
            base = a.type.elem if isinstance(a.type, OptionalType) else a.type
            if isinstance(base, BaseType) and base.name == "Device" and self._device_arg is None:
                self._device_arg = _Slot(a.name, a.kwarg_only, index, False)
            if a.kwarg_only:
                if a.has_default:
                    kwdefaults[a.name] = a.default_value
                else:
                    fast = False
                continue
            if a.has_default:
                tail.append(a.default_value)
            else:
                nmin = pos_i + 1
            int_list = _int_list(a.type)
            if _is_plain_tensor(a.type):
                key_pos.append(pos_i)
            elif isinstance(a.type, BaseType) and a.type.name in _FAST_TYPES:
                checks.append((pos_i, _FAST_TYPES[a.type.name]))
            elif int_list is not None:
                lists.append((pos_i, int_list))
            else:
                fast = False
            pos_i += 1
        if not key_pos:
            fast = False
        self._slots = tuple(slots)
        self._key_pos = tuple(key_pos)
        self._key0 = key_pos[0] if key_pos else 0
        self._key_rest = tuple(key_pos[1:])
        self._checks = tuple(checks)
        self._lists = tuple(lists)
        self._multi = bool(self._key_rest or self._checks or self._lists)
        self._npos = pos_i if fast else -1
        self._nmin = nmin if fast else 0
        defaults = tuple(tail)
        first_default = pos_i - len(defaults)
        self._tails = tuple(defaults[max(0, n - first_default) :] for n in range(pos_i + 1))
        self._kwdefaults = kwdefaults
        self._returns = _return_plan(schema)
        rets = schema.returns
        self._single_plain_return = (
            len(rets) == 1 and _is_plain_tensor(rets[0].type) and rets[0].annotation is None
        )
        self._tensor_entry = self._call_tensors
        if self._single_plain_return and pos_i == 1:
            self._tensor_entry = self._call_tensor1
        elif self._single_plain_return and pos_i == 2 and len(key_pos) == 2:
            self._tensor_entry = self._call_tensor2

    def _bind_fast(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]] | None:
        """``bind()`` for calls the fast path would take (the same checks as ``__call__``,
        which inlines them), else None: for modes that handle calls themselves."""
        n = len(args)
        if kwargs or n > self._npos or n < self._nmin:
            return None
        args += self._tails[n]
        for i, ok in self._checks:
            if type(args[i]) not in ok:
                return None
        for i, nullable in self._lists:
            v = args[i]
            if v is None:
                if not nullable:
                    return None
            elif not _is_int_sequence(v):
                return None
        return list(args), dict(self._kwdefaults)

    def _with_kwdefaults(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """What the caches hold: fast-path calls pass positional arguments only, so the
        keyword-only defaults are bound in (unless the kernel has the same defaults)."""
        wanted = self._kwdefaults
        if not wanted:
            return fn
        own = getattr(fn, "__kwdefaults__", None) or {}
        if all(own.get(k, _NO) == v for k, v in wanted.items()):
            return fn
        return functools.partial(fn, **wanted)

    def _call_tensor1(self, a: Tensor) -> Any:
        """Cached entry for unary ops called with a Tensor (reached via ``__call__``)."""
        data = a._data
        if a._rg and GRAD.enabled:
            autograd = self._agcache.get(type(data))
            if autograd is None:
                return self._call_slow((a,), {})
            return autograd(a)
        fn = self._tcache.get(type(data))
        if fn is None:
            return self._call_slow((a,), {})
        t = _new(Tensor)
        t._data = fn(data)
        t._rg = False
        t.grad = None
        t.grad_fn = None
        return t

    def _call_tensor2(self, a: Tensor, b: Tensor) -> Any:
        """Cached entry for binary ops called with two Tensors (``a * b``)."""
        data = a._data
        cls = type(data)
        if type(b._data) is not cls:
            return self._call_slow((a, b), {})
        if (a._rg or b._rg) and GRAD.enabled:
            autograd = self._agcache.get(cls)
            if autograd is None:
                return self._call_slow((a, b), {})
            return autograd(a, b)
        fn = self._tcache.get(cls)
        if fn is None:
            return self._call_slow((a, b), {})
        t = _new(Tensor)
        t._data = fn(data, b._data)
        t._rg = False
        t.grad = None
        t.grad_fn = None
        return t

    def _call_tensors(self, *args: Any) -> Any:
        """Cached entry for all-Tensor calls (reached from ``__call__`` via the cache)."""
        native = list(args)
        requires_grad = False
        for i in self._key_pos:
            a = args[i]
            if a._rg:
                requires_grad = True
            native[i] = a._data
        t = type(native[self._key0])
        for i in self._key_rest:
            if type(native[i]) is not t:
                return self._call_slow(args, {})
        if requires_grad and GRAD.enabled:
            autograd = self._agcache.get(t)
            if autograd is None:
                return self._call_slow(args, {})
            return autograd(*args)
        fn = self._tcache.get(t)
        if fn is None:
            return self._call_slow(args, {})
        out = fn(*native)
        if self._single_plain_return:
            return Tensor._wrap(out)
        return self._wrap(out, list(args), {})

    def _call_below_autograd(self, args: tuple[Any, ...]) -> Any:
        """The op on ``args`` (all positional arguments) through its cached backend kernel,
        without modes or autograd, the result wrapped: what an Autograd kernel runs instead
        of calling the op again. ``MISS`` when the call needs the full path (a mode is
        active, a tensor argument is not a Tensor, the arrays' class is not cached yet...)."""
        if _active[0] or len(args) != self._npos:
            return MISS
        native = list(args)
        cls: Any = None
        for i in self._key_pos:
            a = args[i]
            if type(a) is not Tensor:
                return MISS
            data = a._data
            if cls is None:
                cls = type(data)
            elif type(data) is not cls:
                return MISS
            native[i] = data
        fn = self._tcache.get(cls)
        if fn is None:
            return MISS
        out = fn(*native)
        if self._single_plain_return:
            return Tensor._wrap(out)
        return self._wrap(out, list(args), {})

    # -- slow path --------------------------------------------------------------------------
    def _call_slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        entry = self._entry
        if not entry.alive:
            raise RuntimeError(
                f"operator {entry.qualname} no longer exists: the Library that defined it was "
                "destroyed"
            )
        if _active[0] and _MODES.stack:
            return self._call_mode(args, kwargs)
        bargs, bkwargs = self._binder.bind(args, kwargs)
        fill = not kwargs and self._nmin <= len(args) <= self._npos
        return self._dispatch(bargs, bkwargs, fill_cache=fill)

    def _call_mode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # The mode leaves this thread's stack while its handler runs. The global count stays
        # as it is (no lock): calls inside the handler take the slow path, which finds the
        # thread's stack without this mode.
        stack = _MODES.stack
        mode = stack.pop()
        try:
            handler = self._entry.py_kernels.get(type(mode))
            if handler is not None:
                return handler(mode, *args, **kwargs)
            return mode.__oplib_dispatch__(self, args, kwargs)
        finally:
            stack.append(mode)

    def tensor_arguments(
        self, nargs: list[Any], nkwargs: dict[str, Any]
    ) -> Iterator[tuple[str, Any, Any, Any]]:
        """``(name, value, container, index)`` for every tensor argument that is not None,
        in bound arguments the caller owns (``container[index] = x`` replaces it); list
        arguments are replaced by list copies first, and yield one item per element."""
        for slot in self._slots:
            container: Any = nkwargs if slot.kw else nargs
            value = container[slot.index]
            if value is None:
                continue
            if slot.is_list:
                items = list(value)
                container[slot.index] = items
                for j, item in enumerate(items):
                    if item is not None:
                        yield f"{slot.name}[{j}]", item, items, j
            else:
                yield slot.name, value, container, slot.index

    def _prepare(self, bargs: list[Any], bkwargs: dict[str, Any]) -> _Call:
        """Unwrap Tensors, find the arrays and the backend the call runs on."""
        nargs = list(bargs)
        nkwargs = dict(bkwargs)
        tensors_in = False
        requires_grad = False
        found: list[tuple[str, Any, Callable[[Any], None]]] = []
        for name, value, container, index in self.tensor_arguments(nargs, nkwargs):
            if type(value) is Tensor:
                tensors_in = True
                requires_grad = requires_grad or value._rg
                value = value._data
                container[index] = value
            found.append((name, value, _setter(container, index)))
        backend, converted = self._backend_for(found, nargs, nkwargs)
        return _Call(nargs, nkwargs, found, tensors_in, requires_grad, backend, converted)

    def _dispatch(
        self, bargs: list[Any], bkwargs: dict[str, Any], *, fill_cache: bool = False
    ) -> Any:
        call = self._prepare(bargs, bkwargs)
        nargs, nkwargs = call.nargs, call.nkwargs
        tensors_in, backend = call.tensors_in, call.backend
        if tensors_in and call.requires_grad and GRAD.enabled:
            if not backend.spec.autograd:
                raise self._no_autograd(backend)
            autograd = self._autograd_kernel(backend)
            if autograd is not None:
                if fill_cache:
                    self._fill_autograd_cache(call)
                return autograd(*bargs, **bkwargs)
        fn, key = self._kernel(backend)
        if LOG_DISPATCH:
            _log.debug(
                "%s: backend %s (%s), kernel for key %s",
                self._entry.qualname,
                backend.name,
                "Tensors" if tensors_in else "native arrays",
                key,
            )
        if key == COMPOSITE_IMPLICIT:
            return fn(*bargs, **bkwargs)
        out = fn(*nargs, **nkwargs)
        if fill_cache:
            cls = self._cache_class(call)
            if cls is not None:
                with REGISTRY.lock:
                    if self._entry.cache is self._cache and self._kernel(backend)[0] is fn:
                        if tensors_in:
                            self._tcache[cls] = self._with_kwdefaults(fn)
                            self._cache[Tensor] = self._tensor_entry
                        else:
                            self._cache[cls] = self._with_kwdefaults(fn)
        if tensors_in:
            return self._wrap(out, bargs, bkwargs)
        return out

    def _fill_autograd_cache(self, call: _Call) -> None:
        cls = self._cache_class(call)
        if cls is None:
            return
        with REGISTRY.lock:  # resolve again under the lock: a registration may have raced us
            try:
                current = self._autograd_kernel(call.backend)
            except RuntimeError:
                return
            if current is not None:
                self._agcache[cls] = self._with_kwdefaults(current)
                self._cache[Tensor] = self._tensor_entry

    def _cache_class(self, call: _Call) -> type | None:
        """The array class the fast path caches this kind of call under (None: not cached)."""
        found = call.found
        if (
            LOG_DISPATCH
            or call.converted
            or not found
            or (call.backend.multi_device and len(found) > 1)
        ):
            return None
        cls = type(found[0][1])
        return cls if all(type(f[1]) is cls for f in found) else None

    def _backend_for(
        self,
        found: list[tuple[str, Any, Callable[[Any], None]]],
        nargs: list[Any],
        nkwargs: dict[str, Any],
    ) -> tuple[Backend, bool]:
        """The backend the call runs on; moves 0-d CPU arrays (scalars) to it if needed."""
        if not found:
            return self._factory_backend(nargs, nkwargs), False
        for_type = TABLE.for_type
        main: list[tuple[str, Any, Backend]] = []
        scalars: list[tuple[str, Any, Backend, Callable[[Any], None]]] = []
        for name, arr, setter in found:
            b = for_type(type(arr))
            if b is None:
                raise TypeError(
                    f"{self._entry.qualname}(): argument {name!r} is a {type(arr).__name__}, "
                    f"which no installed backend recognises ({TABLE.names_text()})"
                )
            if b.name == "cpu" and getattr(arr, "ndim", None) == 0:
                scalars.append((name, arr, b, setter))
            else:
                main.append((name, arr, b))
        if not main:
            return scalars[0][2], False
        backend = main[0][2]
        backends = {b.name: b for _, _, b in main}
        if len(backends) > 1:
            backend = self._accepting_backend(backends, main)
        if backend.multi_device:
            devices = {name: backend.device_of(arr) for name, arr, b in main if b is backend}
            if len(set(devices.values())) > 1:
                self._mismatch({n: str(d) for n, d in devices.items()})
        converted = False
        if backend.name != "cpu" and scalars and "cpu" not in backend.spec.accepts:
            dev = backend.device_of(main[0][1])
            for _, arr, _, setter in scalars:
                setter(backend.from_host(arr, dev))
            converted = True
        return backend, converted

    def _accepting_backend(
        self, backends: dict[str, Backend], main: list[tuple[str, Any, Backend]]
    ) -> Backend:
        for b in backends.values():
            if all(o == b.name or o in b.spec.accepts for o in backends):
                return b
        self._mismatch({name: str(b.device_of(arr)) for name, arr, b in main})
        raise AssertionError("unreachable")

    def _mismatch(self, devices: dict[str, str]) -> None:
        listing = ", ".join(f"{n!r} on {d}" for n, d in devices.items())
        raise DeviceMismatchError(
            f"{self._entry.qualname}(): expected all tensor arguments on one device, got "
            f"{listing}; move them with .to(device) first",
            op=self._entry.qualname,
            devices=devices,
        )

    def _factory_backend(self, nargs: list[Any], nkwargs: dict[str, Any]) -> Backend:
        slot = self._device_arg
        dev: Device | None = None
        if slot is not None:
            dev = (nkwargs if slot.kw else nargs)[slot.index]
        name = "cpu" if dev is None else dev.type
        backend = TABLE.find(name)
        if backend is None:
            raise BackendError(
                f"{self._entry.qualname}(): no backend {name!r} is installed (installed: "
                f"{TABLE.names_text()})"
            )
        return backend

    # -- kernel resolution (mirrors torch's resolve_key) -----------------------------------
    def _kernel(self, backend: Backend) -> tuple[Callable[..., Any], str]:
        entry = self._entry
        cached = entry.cache.get(backend.name)
        if cached is not None:
            return cached
        with REGISTRY.lock:
            found = self._resolve(backend)
            if entry.cache is self._cache:
                entry.cache[backend.name] = found
            return found

    def _resolve(self, backend: Backend) -> tuple[Callable[..., Any], str]:
        for key, fn, _ in self.resolution_steps(backend):
            if fn is not None:
                return fn, key
        raise self._no_kernel(backend)

    def resolution_steps(
        self, backend: Backend
    ) -> Iterator[tuple[str, Callable[..., Any] | None, str]]:
        """The keys tried for ``backend`` in order, as ``(key, kernel or None, why)``; the
        first step with a kernel is the one dispatch takes (torch's ``resolve_key``)."""
        entry = self._entry
        name = backend.name
        keys = [name]
        if backend.spec.fake_kernels:
            keys.append(FAKE)
        keys.append(COMPOSITE_EXPLICIT)
        for key in keys:
            fn = self._lookup(key, (name,))
            yield key, fn, self._why(key, fn)
            if fn is not None:
                return
        if entry.has_kernel(name) or name in entry.py_kernels:
            yield COMPOSITE_IMPLICIT, None, f"skipped: not used when {name!r} has a kernel"
        else:
            fn = self._lookup(COMPOSITE_IMPLICIT, (name,))
            yield COMPOSITE_IMPLICIT, fn, self._why(COMPOSITE_IMPLICIT, fn)
            if fn is not None:
                return
        fallback = backend.spec.fallback
        if fallback is not None:
            fn = fallback(self)
            why = (
                "taken: the backend's fallback"
                if fn is not None
                else ("skipped: the backend's fallback does not cover this op")
            )
            yield f"{backend.key}Fallback", fn, why

    def _why(self, key: str, fn: Callable[..., Any] | None) -> str:
        if fn is None:
            k = self._entry.kernel(key)
            return "skipped: fallthrough_kernel" if k is not None else "skipped: no kernel"
        if key in self._entry.py_kernels:
            return "taken: py_impl kernel"
        k = self._entry.kernel(key)
        return f"taken: kernel at {k.origin}" if k is not None else "taken"

    def _lookup(self, key: str, below: tuple[str, ...]) -> Callable[..., Any] | None:
        entry = self._entry
        py = entry.py_kernels.get(key)
        if py is not None:
            return py
        k: Kernel | None = entry.kernel(key)
        if k is None or k.is_fallthrough:
            return None
        if k.with_keyset:
            fn = k.fn
            keyset = DispatchKeySet(below)
            return lambda *a, **kw: fn(keyset, *a, **kw)
        return k.fn

    def _autograd_kernel(self, backend: Backend) -> Callable[..., Any] | None:
        """The kernel for the Autograd key, ``None`` to go straight to the backend
        (fallthrough), or an error when the op has no formula."""
        entry = self._entry
        k = entry.py_kernels.get(AUTOGRAD) or entry.kernel(AUTOGRAD)
        if isinstance(k, Kernel):
            if k.is_fallthrough:
                return None
            if k.with_keyset:
                fn, keyset = k.fn, DispatchKeySet((backend.name,))
                return lambda *a, **kw: fn(keyset, *a, **kw)
            return k.fn
        if k is not None:
            return k
        has_backend = entry.has_kernel(backend.name) or entry.has_kernel(COMPOSITE_EXPLICIT)
        implicit = self._lookup(COMPOSITE_IMPLICIT, (backend.name,))
        if implicit is not None and not has_backend:
            return implicit
        raise RuntimeError(
            f"Autograd has not been implemented for operator {entry.qualname}: an input "
            "requires grad but the op has no autograd formula. Register one with "
            f"oplib.register_autograd({entry.qualname!r}, backward, setup_context=...), or "
            "call it under oplib.no_grad() or on detached inputs."
        )

    def _no_autograd(self, backend: Backend) -> AutogradUnsupportedError:
        name = self._entry.qualname
        return AutogradUnsupportedError(
            f"{name}(): an input is a {backend.name} tensor that requires grad, but autograd "
            f"does not run on {backend.name} arrays. Call the op under oplib.no_grad(), or on "
            "t.detach(); compute gradients on another device.",
            op=name,
            backend=backend.name,
        )

    def _no_kernel(self, backend: Backend) -> NoKernelError:
        entry = self._entry
        have = sorted(k for k in entry.kernels if k != AUTOGRAD) or ["(none)"]
        fake_hint = (
            " (a fake kernel, register_fake, also serves this device)"
            if (backend.spec.fake_kernels)
            else ""
        )
        hint = f" {backend.spec.no_kernel_hint}" if backend.spec.no_kernel_hint else ""
        return NoKernelError(
            f"{entry.qualname}(): no kernel for backend {backend.name!r} (dispatch key "
            f"{backend.key}){fake_hint}. Kernels are registered for: {', '.join(have)}. "
            f"Installed backends: {TABLE.names_text()}. Register one with "
            f"oplib.register_kernel({entry.qualname!r}, {backend.name!r}) or a 'default' "
            f"kernel.{hint}",
            op=entry.qualname,
            key=backend.key,
        )

    # -- results ----------------------------------------------------------------------------
    def _wrap(self, out: Any, bargs: list[Any], bkwargs: dict[str, Any]) -> Any:
        plan = self._returns
        if not plan:  # "-> ()": the kernel returns None
            return out
        if len(plan) == 1:
            return self._wrap_one(plan[0], out, bargs, bkwargs)
        return tuple(self._wrap_one(p, o, bargs, bkwargs) for p, o in zip(plan, out, strict=True))

    @staticmethod
    def _wrap_one(
        plan: tuple[str, Any], value: Any, bargs: list[Any], bkwargs: dict[str, Any]
    ) -> Any:
        kind, alias = plan
        if alias is not None:
            kw, index = alias
            original = (bkwargs if kw else bargs)[index]
            if type(original) is Tensor and original._data is value:
                return original
        if kind == "tensor":
            return value if value is None else Tensor._wrap(value)
        if kind == "list":
            return [Tensor._wrap(v) for v in value]
        return value

    # -- introspection ----------------------------------------------------------------------
    def name(self) -> str:
        """``"ns::op"`` or ``"ns::op.overload"``."""
        return self._entry.qualname

    @property
    def namespace(self) -> str:
        return self._schema.namespace

    @property
    def tags(self) -> tuple[Any, ...]:
        return self._entry.tags

    @property
    def schema(self) -> Any:
        """The op's :class:`~oplib_core.FunctionSchema` (read-only)."""
        return self._schema

    @property
    def origin(self) -> Any:
        """Where the op was defined: ``.source`` (``file:line``), ``.plugin``,
        ``.distribution``, ``.version``."""
        return self._entry.origin

    def kernel(self, key: str) -> Kernel | None:
        """The kernel serving dispatch key ``key`` (a device type, ``"default"``, a key name
        such as ``"CPU"`` or ``"Fake"``) as registered, or None; resolution (composites,
        fallbacks) is not applied. Its fields: ``fn``, ``key``, ``origin``."""
        return self._entry.kernel(REGISTRY.normalize_key(key, api="OpOverload.kernel"))

    def has_kernel(self, key: str) -> bool:
        """Whether a kernel is registered for ``key`` (as :meth:`kernel`)."""
        return self.kernel(key) is not None

    def __repr__(self) -> str:
        ns, _, op = self._schema.qualname.partition("::")
        return f"<OpOverload(op='{ns}.{op}', overload='{self._overloadname}')>"

    def __str__(self) -> str:
        ns, _, op = self._schema.qualname.partition("::")
        return f"{ns}.{op}.{self._overloadname}"

    def py_impl(self, key: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: a Python kernel for a dispatch key (``"CPU"``, ``"Autograd"``...) or a
        ``DispatchMode`` subclass (called as ``fn(mode, *args, **kwargs)``), taking
        precedence over the kernels in the table."""
        if isinstance(key, type) and issubclass(key, DispatchMode):
            norm: Any = key
        else:
            norm = REGISTRY.normalize_key(key, api="py_impl")

        def inner(fn: Callable[..., Any]) -> Callable[..., Any]:
            REGISTRY.add_py_kernel(self._entry.qualname, norm, fn)
            return fn

        return inner

    def redispatch(self, keyset: DispatchKeySet, /, *args: Any, **kwargs: Any) -> Any:
        """Call the kernel of ``keyset``'s highest-priority key directly (no modes, no
        autograd above it)."""
        key = REGISTRY.normalize_key(keyset.highest_priority(), api="redispatch")
        bargs, bkwargs = self._binder.bind(args, kwargs)
        if key == AUTOGRAD:
            backend = TABLE.get(keyset.remove(AUTOGRAD).highest_priority())
            fn = self._autograd_kernel(backend)
            if fn is not None:
                return fn(*bargs, **bkwargs)
            key = backend.name
        fn = self._lookup(key, keyset.remove(key).keys)
        if fn is None:
            raise self._no_kernel(TABLE.get(key))
        if key == COMPOSITE_IMPLICIT:
            return fn(*bargs, **bkwargs)
        call = self._prepare(bargs, bkwargs)  # backend kernels see native arrays
        out = fn(*call.nargs, **call.nkwargs)
        return self._wrap(out, bargs, bkwargs) if call.tensors_in else out

    def kernels(self) -> Iterator[tuple[str, Kernel]]:
        for key, stack in self._entry.kernels.items():
            yield key, stack[-1]


_NO = object()


def _setter(container: Any, index: Any) -> Callable[[Any], None]:
    def set_value(value: Any) -> None:
        container[index] = value

    return set_value


def _return_plan(schema: Any) -> tuple[tuple[str, Any], ...]:
    """Per return: ("tensor" | "list" | "other", alias slot of the input it returns or None)."""
    aliases: dict[frozenset[str], tuple[bool, Any]] = {}
    pos_i = 0
    for a in schema.arguments:
        if a.annotation is not None and a.annotation.is_write:
            aliases[frozenset(a.annotation.alias_set)] = (
                a.kwarg_only,
                a.name if a.kwarg_only else pos_i,
            )
        if not a.kwarg_only:
            pos_i += 1
    plan = []
    for r in schema.returns:
        is_tensor, is_list = _tensor_like(r.type)
        kind = "list" if is_list else ("tensor" if is_tensor else "other")
        alias = None
        if r.annotation is not None and r.annotation.is_write:
            alias = aliases.get(frozenset(r.annotation.alias_set))
        plan.append((kind, alias))
    return tuple(plan)


def _install(event: str, entry: OpEntry) -> None:
    if event == "defined" and entry.overload is None:
        entry.overload = OpOverload(entry)


REGISTRY.add_listener(_install)
