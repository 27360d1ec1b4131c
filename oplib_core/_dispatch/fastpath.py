"""The fast path: calls that earlier calls already resolved, and the caches that remember them.

A call of the common shape (positional arguments, every tensor argument of one class,
scalars of the exact types the schema names, no active mode) skips binding, placement and
resolution: ``FastCall.__call__`` checks the shape and finds the kernel with one dict
lookup. Everything else, and every first call, takes the op's slow path, which fills the
caches for next time. The caches belong to one ``OpCache`` per op; the registry only tells
it to ``invalidate()`` whenever an answer may change.

``OPLIB_DISPATCH_SLOW=1`` (read once, at import) turns the fast path off: no call shape is
fast, and no cache is read or filled, so the test suite can prove both paths agree.
``OPLIB_LOG_DISPATCH=1`` does the same, since decisions are logged where they are made.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

from .._device import Device
from .._dtypes import DEFAULT_DTYPE
from .._grad_mode import STATE as GRAD
from .._registry.entry import OpEntry
from .._registry.registry import REGISTRY
from .._tensor.tensor import Tensor
from ..backends import Backend
from .binding import (
    REQUIRED,
    BoundCall,
    Signature,
    by_position,
    keyword_split,
    place_int_lists,
)
from .failure import kernel_failed
from .placement import Placement, wrap
from .resolution import _GUARDS, autograd_kernel, factory_kernel, resolve
from .stack import ACTIVE, MODES

__all__ = [
    "COMPILED",
    "DEVICE_KEYS",
    "FAST_FIELDS",
    "LOG_DISPATCH",
    "MISS",
    "SLOW",
    "FactoryCall",
    "FactoryFastCall",
    "FactoryPlan",
    "FastCall",
    "OpCache",
    "Route",
    "below_autograd",
    "below_kernels",
    "cache_class",
    "factory_call",
    "factory_plan",
    "fast_route",
    "mode_table",
    "same_device",
    "sized_tensor",
    "tensor_entry",
]


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip() not in ("", "0")


#: ``OPLIB_LOG_DISPATCH=1``: log every dispatch decision to the ``oplib.dispatch`` logger.
LOG_DISPATCH: Final = _flag("OPLIB_LOG_DISPATCH")
#: The fast path is off: ``OPLIB_DISPATCH_SLOW=1`` (or logging, which happens on the slow
#: path). Every call then binds, places and resolves.
SLOW: Final = _flag("OPLIB_DISPATCH_SLOW") or LOG_DISPATCH


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


#: ``call_below_autograd``'s answer when the call must take the full path.
MISS: Final = _Miss()

_NO = object()

#: What a factory call on one ``device`` argument runs: (kernel, backend, its keyword
#: arguments when no dtype is given: the device as bound, each dtype None, the backend's
#: ``check_dtype`` when a dtype given must be checked first, else None, the kernel's
#: ``factory_entry`` or None, and the dtypes that need no check (``Backend.fixed_dtypes``)
#: or None).
FactoryServe = tuple[Callable[..., Any], Backend, dict[str, Any], Any, Any, Any]
#: The most caches of kernels with keyword-only values bound one op keeps (``OpCache.
#: keyed``): a program that keeps giving new values takes the slow path for the rest.
MAX_KEYED: Final = 32
#: The ``device`` values a factory call is remembered under (a bool is refused by binding,
#: and would find the entry of 0 or 1); a ``Device`` as the tuple (type, index).
DEVICE_KEYS = frozenset({type(None), Device, str, int})
#: The classes of the numpy dtype objects seen by factories' fast path (numpy's dtypes are
#: instances of per-dtype subclasses of ``np.dtype``).
_DTYPE_CLASSES: set[type] = set()

#: After a factory's kernel ``fn`` raised: ``failed(exc, fn, args, kwargs, backend)``.
FactoryFailed = Callable[
    [Exception, Callable[..., Any], Sequence[Any], dict[str, Any], Backend], None
]
#: A factory's fast path: ``entry(args, kwargs)``, the result or ``MISS``.
FactoryCall = Callable[[tuple[Any, ...], dict[str, Any]], Any]

#: An op's slow path: ``call_slow(args, kwargs)``.
CallSlow = Callable[[tuple[Any, ...], dict[str, Any]], Any]

#: What a mode asked an op to serve for it (``OpCache.remember_mode``), read by
#: ``FastCall.__call__`` as it reads ``by_type``: the class of a fast call's first tensor
#: argument -> what runs the call (its positional arguments, defaults appended); and a
#: number of positional arguments -> what runs every keyword-less call of that many,
#: checking it itself (two tensors; one, for a kernel the mode runs in its context).
ModeTable = dict[type | int, Callable[..., Any]]


class OpCache:
    """What the fast path remembers about one op; empty until calls fill it.

    - ``by_type``: the class of a fast call's first tensor argument → what runs the call:
      for a native array class, its kernel (filled by calls); for ``Tensor``, the op's
      ``tensor_entry`` (always there), which looks in the next two by the wrapped arrays'
      class. ``FastCall.__call__`` reads this dict and nothing else;
    - ``tensor``: array class inside the Tensors → the backend kernel, for calls with
      Tensors that record no autograd (and for ``call_below_autograd``);
    - ``autograd``: array class inside the Tensors → the Autograd kernel, for calls with
      Tensors that record a graph node;
    - ``by_backend``: backend name → (kernel, key) as resolution chose it, for the slow path;
    - ``factory``: for a factory (``Signature.factory_dtypes``), the ``device`` argument as
      given (None, a str, an int, or a ``Device`` as ``(type, index)``) → ``FactoryServe``, read by
      ``factory_entry``;
    - ``keyed``: for calls with keyword-only arguments (``t.sum(dtype=oplib.float64)``),
      the key of their values (``keyword_split``) → an ``OpCache`` of its own whose
      kernels carry those values as their keyword-only defaults (``kwdefaults``), filled by
      the slow path as this one is and read by ``call_keyed``; at most ``MAX_KEYED``.

    The kernels in the first three already carry the op's keyword-only defaults (fast calls
    pass positional arguments only). Entries are added under the registry lock, after
    checking that resolution still gives the same kernel; the registry calls
    ``invalidate()`` (under the same lock) whenever a registration may change an answer.
    """

    __slots__ = (
        "autograd",
        "by_backend",
        "by_type",
        "call_slow",
        "entry",
        "factory",
        "key0",
        "key_rest",
        "keyed",
        "kwdefaults",
        "modes",
        "sig",
        "tensor",
        "tensor_entry",
    )

    def __init__(
        self,
        entry: OpEntry,
        sig: Signature,
        call_slow: CallSlow,
        kwdefaults: dict[str, Any] | None = None,
    ) -> None:
        self.entry = entry
        self.sig = sig
        self.kwdefaults = sig.kwdefaults if kwdefaults is None else kwdefaults
        self.keyed: dict[tuple[Any, ...], OpCache] = {}
        self.key0, self.key_rest = sig.key0, sig.key_rest
        self.call_slow = call_slow
        self.by_type: dict[type, Callable[..., Any]] = {}
        self.tensor: dict[type, Callable[..., Any]] = {}
        self.autograd: dict[type, Callable[..., Any]] = {}
        self.by_backend: dict[str, tuple[Callable[..., Any], str]] = {}
        self.factory: dict[Any, FactoryServe] = {}
        self.modes: dict[type, ModeTable] = {}
        self.tensor_entry = tensor_entry(sig, self, call_slow)
        self.by_type[Tensor] = self.tensor_entry

    def invalidate(self) -> None:
        """Forget every answer (in place: the fast path holds these dicts)."""
        self.by_type.clear()
        self.by_type[Tensor] = self.tensor_entry
        self.tensor.clear()
        self.autograd.clear()
        self.by_backend.clear()
        self.factory.clear()
        self.modes.clear()
        for keyed in self.keyed.values():
            keyed.invalidate()
        self.keyed.clear()

    def keyed_route(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[OpCache, list[Any]] | None:
        """For a call with keyword-only arguments: the cache of kernels with their values
        bound (``keyed``) and the call's positional arguments as the fast path passes them
        (``Signature.bind_fast``), or None: no such cache yet, or a call the fast path does
        not take."""
        sig = self.sig
        split = keyword_split(args, kwargs, sig.params, sig.kwkeys)
        if split is None:
            return None
        keyed = self.keyed.get(split[2])
        if keyed is None:
            return None
        bargs = sig.positional(split[0], {}, sig.nmin, sig.npos)
        return None if bargs is None else (keyed, bargs)

    def call_keyed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call with keyword-only arguments (``t.to(oplib.float64)``'s ``_to_copy``,
        ``t.sum(dtype=...)``) run from the cache of kernels with their values bound, or
        ``MISS`` (then the slow path runs it, and fills that cache). The plain form of
        ``FastCall.__call__``'s checks, with ``keyword_split``'s."""
        route = self.keyed_route(args, kwargs)
        if route is None:
            return MISS
        keyed, bargs = route
        sig = self.sig
        t = type(bargs[sig.key0])
        for i in sig.key_rest:
            if type(bargs[i]) is not t:
                return MISS
        return keyed.run_served(t, bargs)

    def run_served(self, t: type, bargs: list[Any]) -> Any:
        """What ``by_type`` holds for class ``t`` on ``bargs``, its failure reported as the
        fast path reports it; ``MISS`` when it holds nothing."""
        fn = self.by_type.get(t)
        if fn is None:
            return MISS
        try:
            return fn(*bargs)
        except Exception as e:
            self.failed(e, fn, bargs)
            raise

    def listed_route(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[type, type, list[Any], list[Any], bool] | None:
        """For an op with lists of tensors (``Signature.tensor_lists``: ``cat``, ``stack``,
        ``index.Tensor``): ``(first, cls, bargs, native, requires_grad)`` for a call whose
        tensors, in lists or not, are all of one class ``first`` (``Tensor`` wrapping
        arrays of class ``cls``, else ``cls`` itself) and whose other arguments are
        checked as the fast path checks them: its bound positional arguments (lists as new
        lists), the same with the Tensors' arrays, and whether a Tensor requires grad.
        None: the slow path's call (a mix of classes, no tensor, a keyword it cannot place,
        a value binding must convert)."""
        sig = self.sig
        lists = sig.tensor_lists
        bargs = sig.positional(args, kwargs, sig.listed_nmin, sig.arity) if lists else None
        if bargs is None:
            return None
        first: type | None = None
        for i in sig.key_pos:
            t = type(bargs[i])
            if first is None:
                first = t
            elif t is not first:
                return None
        for i, optional in lists:
            items = bargs[i]
            if type(items) is not list and type(items) is not tuple:
                return None
            bargs[i] = items = list(items)  # (the kernel may keep it: not the caller's)
            for e in items:
                if e is None:
                    if not optional:
                        return None
                    continue
                t = type(e)
                if first is None:
                    first = t
                elif t is not first:
                    return None
        if first is None:
            return None
        if first is not Tensor:
            return first, first, bargs, bargs, False
        native = list(bargs)
        cls: type | None = None
        requires_grad = False
        for i in sig.key_pos:
            a = bargs[i]
            requires_grad = requires_grad or a._rg
            data = native[i] = a._data
            if cls is None:
                cls = type(data)
            elif type(data) is not cls:
                return None
        for i, _ in lists:
            arrays: list[Any] = []
            for e in bargs[i]:
                if e is not None:
                    requires_grad = requires_grad or e._rg
                    e = e._data
                    if cls is None:
                        cls = type(e)
                    elif type(e) is not cls:
                        return None
                arrays.append(e)
            native[i] = arrays
        assert cls is not None
        return Tensor, cls, bargs, native, requires_grad

    def call_listed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call of an op with lists of tensors (``oplib.ops.oplib.cat([a, b])``) run from
        the caches (``listed_route``), or ``MISS`` (then the slow path runs it, and fills
        them). A Tensor call runs the Autograd kernel when one requires grad and grad mode
        is on, else the backend kernel on the arrays, its result wrapped, as the Tensor
        entries of other ops do."""
        route = self.listed_route(args, kwargs)
        if route is None:
            return MISS
        first, cls, bargs, native, requires_grad = route
        if first is not Tensor:
            return self.run_served(first, bargs)
        if requires_grad and GRAD.enabled:
            fn = self.autograd.get(cls)
            return MISS if fn is None else fn(*bargs)
        fn = self.tensor.get(cls)
        if fn is None:
            return MISS
        try:
            return _make_tensor(fn(*native))
        except Exception as e:
            kernel_failed(e, self.entry, fn, native)
            raise

    def serves_listed(self, args: tuple[Any, ...], kwargs: dict[str, Any], autograd: bool) -> bool:
        """Whether ``call_listed`` would serve this call now, for ``explain()``."""
        route = self.listed_route(args, kwargs)
        return route is not None and self.serves(route[0], route[1], autograd)

    def keyed_for(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], bkwargs: dict[str, Any]
    ) -> OpCache | None:
        """The slow path's call ``op(*args, **kwargs)``, whose keyword-only arguments bound
        to ``bkwargs``: the cache (``keyed``) its answer is remembered in, made if need be;
        None: it is not remembered (no keyword-only argument, a value that cannot key a
        cache, ``MAX_KEYED`` caches already, the fast path off)."""
        sig = self.sig
        split = None if SLOW else keyword_split(args, kwargs, sig.params, sig.kwkeys)
        if split is None or sig.positional(split[0], {}, sig.nmin, sig.npos) is None:
            return None
        key, kwonly = split[2], split[1]
        with REGISTRY.lock:
            keyed = self.keyed.get(key)
            if keyed is None and len(self.keyed) < MAX_KEYED:
                call_slow = self.call_slow

                def call_slow_keyed(a: tuple[Any, ...], k: dict[str, Any]) -> Any:
                    return call_slow(a, {**kwonly, **k})

                keyed = OpCache(self.entry, sig, call_slow_keyed, dict(bkwargs))
                self.keyed[key] = keyed
            return keyed

    def backend_kernel(self, backend: Backend) -> tuple[Callable[..., Any], str]:
        """``resolve(entry, backend)``, remembered per backend."""
        found = self.by_backend.get(backend.name)
        if found is not None:
            return found
        with REGISTRY.lock:
            found = resolve(self.entry, backend)
            if not SLOW:
                self.by_backend[backend.name] = found
            return found

    def remember(
        self,
        cls: type,
        tensors_in: bool,
        backend: Backend,
        fn: Callable[..., Any],
        serve: Callable[..., Any],
    ) -> None:
        """After ``fn`` ran a call on ``cls`` arrays: serve such calls on the fast path with
        ``serve`` (``fn`` itself, or ``fn`` checking its results when they needed it)."""
        device_of = self._device_check(backend)  # asks the backend: outside the lock
        with REGISTRY.lock:  # resolve again under the lock: a registration may have raced us
            if self.backend_kernel(backend)[0] is fn:
                if serve is fn:
                    serve = fast_entry(fn, self.kwdefaults)
                cache = self.tensor if tensors_in else self.by_type
                cache[cls] = self._served(self._with_kwdefaults(serve), device_of, False)

    def remember_factory(
        self,
        given: Any,
        device: Any,
        backend: Backend,
        fn: Callable[..., Any],
        serve: Callable[..., Any],
    ) -> None:
        """After kernel ``fn`` of a factory ran a call whose ``device`` argument was
        ``given`` (bound as ``device``): serve such calls with ``serve`` (``fn`` itself:
        its ``factory_kernel``)."""
        if type(given) not in DEVICE_KEYS:
            return
        slot, dtypes = self.sig.device_arg, self.sig.factory_dtypes
        assert slot is not None and dtypes is not None
        kw = dict.fromkeys(dtypes)
        kw[slot.name] = device
        with REGISTRY.lock:  # resolve again under the lock: a registration may have raced us
            if self.backend_kernel(backend)[0] is fn:
                check: Callable[..., None] | None = None
                if serve is fn:
                    serve = factory_kernel(self.entry, backend, fn)
                    inner = getattr(serve, _GUARDS, None)
                    if getattr(serve, "fast_entry", None) is inner and callable(inner):
                        # the guard checks keyword dtypes alone: the entry checks them
                        # itself, without the guard's call (0.4 us a call)
                        serve = inner
                        check = backend.check_dtype
                key = (given.type, given.index) if type(given) is Device else given
                entry = getattr(serve, "factory_entry", None)
                held = backend.fixed_dtypes() if check is not None else None
                self.factory[key] = (serve, backend, kw, check, entry, held)

    def serves_factory(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a factory's cached call (``factory_call``) would serve ``op(*args, **kwargs)``
        now, no mode active: the plain restatement of its checks, for ``explain()``."""
        sig, slot, dtypes = self.sig, self.sig.device_arg, self.sig.factory_dtypes
        if slot is None or dtypes is None:
            return False
        if sig.positional(args, {}, sig.factory_nmin, sig.arity) is None:
            return False
        if not set(kwargs) <= {*dtypes, slot.name}:
            return False
        if any(kwargs.get(d) is not None and not isinstance(kwargs[d], np.dtype) for d in dtypes):
            return False
        given = kwargs.get(slot.name)
        if type(given) not in DEVICE_KEYS:
            return False
        key = (given.type, given.index) if type(given) is Device else given
        return key in self.factory

    def remember_mode(self, mode_type: type, table: ModeTable) -> None:
        """Serve this op's fast calls under an innermost mode of exactly ``mode_type`` from
        ``table`` (``mode_table``'s; a call it has no entry for goes to the mode), until
        ``invalidate()``. Nothing is remembered with the fast path off."""
        if SLOW:
            return
        with REGISTRY.lock:
            self.modes[mode_type] = table

    def remember_autograd(self, cls: type, backend: Backend) -> None:
        """After the Autograd kernel ran a call on Tensors of ``cls`` arrays."""
        device_of = self._device_check(backend)
        with REGISTRY.lock:
            try:
                current = autograd_kernel(self.entry, backend)
            except RuntimeError:
                return
            if current is not None:
                fn = self._with_kwdefaults(current)
                self.autograd[cls] = self._served(fn, device_of, True)

    def _device_check(self, backend: Backend) -> Callable[[Any], int | None] | None:
        """The ``device_of`` the fast path checks this op's calls on ``backend`` with, or
        None: only an op with several tensor arguments on a backend that has more than one
        device now (``device_of`` declared, ``device_count() > 1``) needs it, the one check
        the slow path's placement makes that the array class cannot answer. Asked once per
        (op, array class), when a call is remembered: with one device (one GPU) every array
        of the class is on it, and calls pay nothing for the check."""
        device_of = backend.spec.device_of
        if device_of is None or not self.key_rest or backend.device_count() <= 1:
            return None
        return device_of

    def _served(
        self, fn: Callable[..., Any], device_of: Callable[[Any], int | None] | None, tensors: bool
    ) -> Callable[..., Any]:
        """What the fast path serves for ``fn``: ``fn``, or ``fn`` behind ``same_device``."""
        if device_of is None:
            return fn
        return same_device(fn, device_of, self.key0, self.key_rest, self.call_slow, tensors)

    def serves(self, first: type, cls: type, autograd: bool) -> bool:
        """Whether ``FastCall.__call__`` finds a kernel for a call whose first tensor
        argument is a ``first`` (an array class, or ``Tensor`` wrapping ``cls`` arrays)."""
        if first is not Tensor:
            return first in self.by_type
        return cls in (self.autograd if autograd else self.tensor)

    def failed(self, exc: Exception, fn: Callable[..., Any], args: Any) -> None:
        """The exception path of a fast call: kernel ``fn`` raised ``exc`` on ``args``
        (``kernel_failed``; the Tensor entry reports its own kernels)."""
        if fn is not self.tensor_entry:
            kernel_failed(exc, self.entry, fn, args)

    def _with_kwdefaults(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return with_kwdefaults(fn, self.kwdefaults)


def fast_entry(fn: Callable[..., Any], kwdefaults: dict[str, Any]) -> Callable[..., Any]:
    """What the fast path may call in place of kernel ``fn`` (positional arguments only,
    keyword-only ones at their defaults ``kwdefaults``), valid until ``invalidate()``: a
    kernel may offer a cheaper callable as its ``fast_entry`` (a native kernel's generated
    fast call; ``on_device``'s kernel on a machine with one device; the dtype guard's
    kernel where only keyword dtypes are guarded), followed while each applies the
    keyword-only defaults itself (a native fast call takes no keywords)."""
    for _ in range(8):  # (a chain that long is a cycle or a mistake)
        entry = getattr(fn, "fast_entry", None)
        if entry is None or with_kwdefaults(entry, kwdefaults) is not entry:
            break
        fn = entry
    return fn


def with_kwdefaults(fn: Callable[..., Any], wanted: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with the keyword-only defaults ``wanted`` bound in, unless it has the same
    ones: its own, or (a wrapper taking ``*args, **kwargs``) those of the function it
    wraps, found as ``inspect.signature`` finds it, through ``__wrapped__``. (Binding them
    costs a keyword dict per call, and again in each wrapper that passes it on: +0.7 µs
    for ``sum`` through ``backends.on_device``, issue 30.)"""
    if not wanted:
        return fn
    own = _own_kwdefaults(fn)
    if all(_same_value(own.get(k, _NO), v) for k, v in wanted.items()):
        return fn
    return functools.partial(fn, **wanted)


def _same_value(a: Any, b: Any) -> bool:
    """Whether a kernel given ``a`` gets what it would from ``b``: the same object, or equal
    values of one type (``np.dtype("float64") == None`` is true: numpy reads None as its
    default dtype; ``0.0 == -0.0``: their signs are compared too)."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    return type(a) is not float or math.copysign(1.0, a) == math.copysign(1.0, b)


def _own_kwdefaults(fn: Any) -> dict[str, Any]:
    """The keyword-only defaults ``fn`` applies: its own, else, while it is a Python
    function without keyword-only arguments (a ``*args, **kwargs`` wrapper), those of the
    function it wraps (``__wrapped__``)."""
    for _ in range(16):  # (a chain that long is a cycle or a mistake: bind them)
        own = getattr(fn, "__kwdefaults__", None)
        code = getattr(fn, "__code__", None)
        if own is not None or code is None or code.co_kwonlyargcount:
            return own or {}
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            break
    return {}


def cache_class(placement: Placement) -> type | None:
    """The array class the fast path may remember this call under (None: never cached —
    scalars were moved, no arrays, arrays of several classes). Arrays of a backend with
    several devices are remembered too (placement found them on one device): the fast
    path serves them through ``same_device``, which checks their devices on every call."""
    found = placement.found
    if SLOW or placement.converted or not found:
        return None
    cls = type(found[0][1])
    return cls if all(type(f[1]) is cls for f in found) else None


def same_device(
    fn: Callable[..., Any],
    device_of: Callable[[Any], int | None],
    key0: int,
    key_rest: tuple[int, ...],
    call_slow: CallSlow,
    tensors: bool,
) -> Callable[..., Any]:
    """``fn`` for fast calls on a backend with several devices: runs it when the tensor
    arguments (at ``key0`` and ``key_rest``; Tensors when ``tensors``, whose arrays are read)
    are on one device, else hands the call to the slow path, whose placement raises the
    ``DeviceMismatchError``. Built once per (op, array class) when a call is remembered; per
    call it costs one ``device_of`` per tensor argument (the spec's, an int: no ``Device``
    object is made). Failures are reported as ``fn``'s (``__wrapped__``)."""
    if key0 == 0 and key_rest == (1,):  # binary ops: unrolled
        if tensors:

            def same_device_tensors2(a: Tensor, b: Tensor, /, *rest: Any) -> Any:
                if device_of(a._data) == device_of(b._data):
                    return fn(a, b, *rest)
                return call_slow((a, b, *rest), {})

            guarded = same_device_tensors2
        else:

            def same_device2(a: Any, b: Any, /, *rest: Any) -> Any:
                if device_of(a) == device_of(b):
                    return fn(a, b, *rest)
                return call_slow((a, b, *rest), {})

            guarded = same_device2
    else:
        read = (lambda v: device_of(v._data)) if tensors else device_of

        def same_device_n(*args: Any) -> Any:
            first = read(args[key0])
            for i in key_rest:
                if read(args[i]) != first:
                    return call_slow(args, {})
            return fn(*args)

        guarded = same_device_n
    guarded.__wrapped__ = fn  # type: ignore[attr-defined]
    return guarded


#: ``FastCall._route``'s answer: the kernels by class, the class, the defaults appended, the
#: cache that reports a failure, and its ``OpCache.tensor`` where the compiled call serves
#: Tensors from it (``FastCall._tensor``).
Route = tuple[
    dict[type, Callable[..., Any]],
    type,
    tuple[Any, ...],
    OpCache,
    dict[type, Callable[..., Any]] | None,
]

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
    "_by_type",
    "_opcache",
    "_modes",
    "_fplan",
    "_lplan",
    "_params",
    "_tensor",
    "_kwplan",
    "_keyed",
)

# What an object that shares no op's fast path serves, with or without modes: nothing.
_NO_MODES: Mapping[type, ModeTable] = types.MappingProxyType({})
_NO_KERNELS: Mapping[type, Callable[..., Any]] = types.MappingProxyType({})


class _FastFields:
    """``FastCall``'s fields, where the compiled base is not there."""

    __slots__ = FAST_FIELDS


def _compiled() -> types.ModuleType | None:
    """The compiled cached call (``_ccall.c``): its ``FastCallBase`` (``FastCall.__call__``'s
    common case in C, the fields as its members), ``setup``, ``wrap`` (``Tensor._wrap`` in
    C) and ``sized_tensor`` (the Tensor factories' common case); or None: oplib-core was
    built without a C compiler, or ``OPLIB_NATIVE_SPEEDUPS=0``. On Python 3.12 and later,
    the build for 3.12's limited API (``_ccall312``, called by vectorcall) where oplib-core
    has it."""
    from .._native import speedups_off

    if speedups_off():
        return None
    # 3.12's build first (its calls by vectorcall), where this Python and the build have it
    for name in ("_ccall312", "_ccall") if sys.version_info >= (3, 12) else ("_ccall",):
        try:
            return importlib.import_module(f".{name}", __package__)
        except ImportError:
            continue
    return None


_ccall = _compiled()
_setup_compiled: Callable[..., None] | None
#: How the fast paths wrap a kernel's result in a Tensor: ``Tensor._wrap``, or the same
#: made in C (the compiled call's ``wrap``).
_make_tensor: Callable[[Any], Tensor]
#: ``sized_tensor(op, size, dtype, device)``: factory ``op`` on the shape a Tensor factory's
#: ``*size`` gives, with ``dtype=``/``device=`` where not None, as a Tensor, or None where
#: the Python factory must make the call (``_factories._sized``); None without the
#: compiled call.
sized_tensor: Callable[[Any, tuple[Any, ...], Any, Any], Tensor | None] | None
if TYPE_CHECKING or _ccall is None:
    _Base = _FastFields
    _setup_compiled = sized_tensor = None
    _make_tensor = Tensor._wrap
else:
    _Base = _ccall.FastCallBase
    _setup_compiled, _make_tensor, sized_tensor = _ccall.setup, _ccall.wrap, _ccall.sized_tensor

#: ``backends.by_size``'s compiled base (``_ccall.c``), or None without the compiled call.
SizeRoutedBase: type | None = None if _ccall is None else _ccall.SizeRoutedBase

#: Whether calls take the compiled cached call (``_ccall.c``) or the Python ``__call__``.
COMPILED: Final = _setup_compiled is not None
#: Which build of it: ``"_ccall312"`` (3.12's limited API, called by vectorcall),
#: ``"_ccall"`` (3.10's, by tp_call), or None (the Python ``__call__``).
COMPILED_MODULE: Final = None if _ccall is None else _ccall.__name__.rpartition(".")[2]


class FastCall(_Base):
    """The hot path, shared by ``OpOverload``, single-overload ``OpOverloadPacket``s and
    custom ops.

    Subclasses set the ``Signature``'s fast-path plan as attributes (``_npos``, ``_nmin``,
    ``_tails``, ``_key0``, ``_key_rest``, ``_checks``, ``_lists``, ``_multi``; ``_npos`` -1
    to always take the slow path), ``_by_type`` (their op's ``OpCache.by_type``),
    ``_opcache`` (that ``OpCache``, for the exception path), ``_modes`` (its ``modes``:
    what it serves under a mode, tried before the slow path), ``_tensor`` (its ``tensor``
    where it returns one plain Tensor, else None: the compiled call runs calls with
    Tensors that record no autograd from it, as ``tensor_entry`` does), ``_kwplan`` and
    ``_keyed`` (``Signature.kwplan`` and ``OpCache.keyed``: the compiled call runs calls
    with keyword-only arguments from the latter, as ``OpCache.call_keyed`` does) and
    ``_call_slow``. The base
    class holds those fields (``FAST_FIELDS``): the compiled ``_ccall.FastCallBase``,
    whose call runs ``_call_py``'s common case in C, or ``_FastFields`` (then ``_call_py``
    is ``__call__``). A subclass must not declare them again.
    """

    __slots__ = ()
    _npos: int
    _nmin: int
    _tails: tuple[tuple[Any, ...], ...]
    _key0: int
    _key_rest: tuple[int, ...]
    _checks: tuple[tuple[tuple[int, frozenset[type]], ...], ...]
    _lists: tuple[tuple[tuple[int, bool], ...], ...]
    _multi: tuple[int, ...]
    _by_type: dict[type, Callable[..., Any]]
    _opcache: OpCache
    _modes: Mapping[type, ModeTable]
    _fplan: FactoryPlan | None
    _lplan: ListedPlan | None
    _params: tuple[tuple[str, ...], tuple[Any, ...]]
    _tensor: dict[type, Callable[..., Any]] | None
    _kwplan: tuple[tuple[str, frozenset[type], frozenset[type]], ...]
    _keyed: dict[tuple[Any, ...], OpCache] | None

    def _call_slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    # Complicated for better performance (every check inlined, the common case tested
    # first, Tensors found through the same dict lookup as arrays); the plain equivalent:
    #
    #     by_type = cache.by_type
    #     if ACTIVE[0] and this thread has a mode:
    #         by_type = cache.modes.get(MODES.key)   # the class of the mode taking calls
    #         if by_type is None: return self._call_slow(args, kwargs)   # the mode's call
    #     bound = sig.bind_fast(args, kwargs)           # the shape: arity, scalars, int[]s
    #     if bound is None or the tensor arguments differ in type:
    #         return self._call_slow(args, kwargs)
    #     args = tuple(bound[0])                        # defaults in, int[]s as lists
    #     t = type(args[key0])
    #     if t in by_type:                              # Tensor: cache.tensor_entry, which
    #         return by_type[t](*args)                  # looks in cache.tensor/.autograd
    #     return self._call_slow(args, kwargs)
    # Compiled (``_ccall.c``), the common case below runs in C, which hands every other
    # call to this method as it came; without it, this is ``__call__``.
    def _call_py(self, /, *args: Any, **kwargs: Any) -> Any:
        n = len(args)
        by_type: Mapping[Any, Callable[..., Any]] | None  # (a declaration: no code)
        if ACTIVE[0]:
            key = MODES.key
            if key is not None:
                # the mode takes the call, unless it gave the op a table of its own
                # (OpCache.modes, read as by_type is)
                by_type = self._modes.get(key)
                if by_type is None:
                    return self._call_slow(args, kwargs)
                if not kwargs:
                    # an entry that checks a call of n arguments itself (mode_table's)
                    direct = by_type.get(n)
                    if direct is not None:
                        return direct(*args)
            else:  # the modes are other threads': as if none were active
                by_type = self._by_type
        else:
            by_type = self._by_type
        if kwargs or n != self._npos:
            if self._npos < 0:  # never the positional cached call; lists of tensors may
                if by_type is self._by_type:  # (not under a mode's table)
                    out = self._opcache.call_listed(args, kwargs)
                    if out is not MISS:
                        return out
                return self._call_slow(args, kwargs)
            if kwargs:
                # x.clamp(min=0.0): keywords naming positional parameters, placed; not
                # under a mode's table (the mode sees a call it takes as it was made)
                if by_type is not self._by_type:
                    return self._call_slow(args, kwargs)
                placed = by_position(args, kwargs, self._params)
                if placed is None:  # keyword-only arguments (t.sum(dtype=...))
                    out = self._opcache.call_keyed(args, kwargs)
                    return self._call_slow(args, kwargs) if out is MISS else out
                args, kwargs, n = placed, {}, len(placed)
            elif n > self._npos or n < self._nmin:
                return self._call_slow(args, kwargs)
            else:
                args += self._tails[n]
        t = type(args[self._key0])
        m = self._multi[n]  # (n: the arguments given; their defaults need no check)
        if m:
            for i in self._key_rest:
                if type(args[i]) is not t:
                    return self._call_slow(args, kwargs)
            if m > 1:  # scalars or int[]s to check too
                for i, ok in self._checks[n]:
                    if type(args[i]) not in ok:
                        return self._call_slow(args, kwargs)
                for i, nullable in self._lists[n]:
                    v = args[i]
                    if v is None:
                        if not nullable:
                            return self._call_slow(args, kwargs)
                    elif type(v) is list:
                        for e in v:
                            if type(e) is not int:
                                return self._call_slow(args, kwargs)
                    elif type(v) is tuple:  # kernels get int[] as a list, as binding gives it
                        for e in v:
                            if type(e) is not int:
                                return self._call_slow(args, kwargs)
                        args = (*args[:i], list(v), *args[i + 1 :])
                    elif type(v) is int:  # t.sum(0): as binding gives it, [0]
                        args = (*args[:i], [v], *args[i + 1 :])
                    else:
                        return self._call_slow(args, kwargs)
        try:
            fn = by_type[t]
        except KeyError:
            fn = None
        if fn is None:  # outside the except block: the slow path's errors chain no KeyError
            return self._call_slow(args, kwargs)
        try:  # free while nothing raises (CPython 3.11); the note costs only on failure
            return fn(*args)
        except Exception as e:
            if by_type is self._by_type:  # (a mode's kernels fail as under the mode)
                self._opcache.failed(e, fn, args)
            raise

    def _route(self, types: tuple[type, ...]) -> Route | None:
        """What ``__call__`` does with positional arguments of exactly these ``types``,
        decided once (for a packet that caches it per call shape): ``(by_type, t, tail,
        cache, tensor)`` — run ``by_type[t](*args, *tail)``, reporting failures through
        ``cache.failed`` — or None when such calls take the slow path whatever the caches
        hold (a wrong arity, tensor arguments of several types, a scalar of a type the
        schema does not take, a list argument, the fast path off). Reading ``by_type`` at
        call time keeps the answer valid across ``invalidate()``."""
        n = len(types)
        if n > self._npos or n < self._nmin:
            return None
        tail = self._tails[n]
        types += tuple(map(type, tail))
        t = types[self._key0]
        for i in self._key_rest:
            if types[i] is not t:
                return None
        for i, ok in self._checks[n]:
            if types[i] not in ok:
                return None
        for i, nullable in self._lists[n]:
            if types[i] is type(None) and nullable:
                continue
            # a given list is checked element by element per call: not by its type alone;
            # a default one is fixed (and __call__ would pass it as it is)
            if (
                i < n
                or type(tail[i - n]) is not list
                or not all(type(e) is int for e in tail[i - n])
            ):
                return None
        return (self._by_type, t, tail, self._opcache, self._tensor)

    def _follow(self, op: FastCall | None) -> None:
        """Share ``op``'s fast path (its plan and its caches); None: always slow."""
        # (The subclasses declare the slots, FastCall only their types: hence setattr.)
        if op is None:
            for name, value in (
                ("_npos", -1),
                ("_nmin", 0),
                ("_modes", _NO_MODES),
                ("_by_type", _NO_KERNELS),
                ("_fplan", None),
                ("_lplan", None),
                ("_params", ((), ())),
                ("_tensor", None),
                ("_kwplan", ()),
                ("_keyed", None),
            ):
                setattr(self, name, value)
            return
        for name in FAST_FIELDS:
            setattr(self, name, getattr(op, name))

    if TYPE_CHECKING:

        def __call__(self, /, *args: Any, **kwargs: Any) -> Any: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Without the compiled call, each class gets its own copy of the Python __call__ it
        # inherits: the interpreter specialises attribute access per code object, and one
        # code object shared by OpOverload and OpOverloadPacket would keep switching
        # between their layouts (measured: ~40% slower).
        super().__init_subclass__(**kwargs)
        if COMPILED or "__call__" in cls.__dict__:
            return
        base = next(k.__dict__["__call__"] for k in cls.__mro__ if "__call__" in k.__dict__)
        cls.__call__ = types.FunctionType(  # type: ignore[method-assign]
            base.__code__.replace(), base.__globals__, base.__name__, base.__defaults__
        )


#: Tensor's slots, in the order the compiled call's ``setup`` takes their descriptors.
TENSOR_SLOTS: Final = ("_data", "_rg", "grad", "grad_fn", "_out_nr", "_vc")

if _setup_compiled is not None:
    _setup_compiled(
        ACTIVE,
        FastCall._call_py,
        OpCache.failed,
        Device,
        _DTYPE_CLASSES,
        DEFAULT_DTYPE,
        REQUIRED,
        Tensor,
        tuple(Tensor.__dict__[name] for name in TENSOR_SLOTS),
    )
    # every Tensor the core makes, made in C (the same slots, set as ``_init`` sets them)
    Tensor._wrap = staticmethod(_make_tensor)
else:
    FastCall.__call__ = FastCall._call_py  # type: ignore[method-assign]


class FactoryFastCall(FastCall):
    """The call of a factory (``zeros``, ``arange``...: no tensor argument, placed by its
    keyword-only ``device``), for its overload and for a packet whose one overload it is:
    a call whose ``device`` an earlier call placed runs from the cache (``factory_call``,
    keyword arguments and all), the rest takes the slow path. Compiled, ``_ccall.c`` runs
    the cached case from the same plan (``_fplan``) and hands the rest to ``_call_py``."""

    __slots__ = ()
    _factory: FactoryCall

    def _call_py(self, /, *args: Any, **kwargs: Any) -> Any:
        if not ACTIVE[0]:
            out = self._factory(args, kwargs)
            if out is not MISS:
                return out
        return self._call_slow(args, kwargs)

    if not COMPILED:
        __call__ = _call_py


# -- calls with Tensors -----------------------------------------------------------------------
#
# Built once per op, as closures over its caches (the dicts are only ever cleared in place).
# Each serves a fast call whose tensor arguments are Tensors: the Autograd kernel when an
# input requires grad and grad mode is on, else the backend kernel on the native arrays,
# with the result wrapped; anything the caches do not hold goes to the slow path. For
# speed, the one- and two-Tensor versions and the one of a Tensor and other arguments
# (``t * 0.5``, ``t.sum(0)``) unroll ``call_tensors`` (the plain equivalent of all four),
# and dict hits are ``try: d[k]`` (cheaper than ``d.get(k)`` when present). A
# miss calls the slow path after the ``except`` block, never inside it: an error raised
# there would chain the ``KeyError`` ("during handling of the above exception") into
# every traceback of a first call.


def tensor_entry(sig: Signature, cache: OpCache, call_slow: CallSlow) -> Callable[..., Any]:
    """What ``FastCall.__call__`` hands Tensor calls to: specialised for one Tensor in and
    one out (``t.exp()``), and for two Tensors in, one out (``a * b``)."""
    tensor, autograd, entry = cache.tensor, cache.autograd, cache.entry
    if sig.plain_result and sig.arity == 1:

        def call_tensor1(a: Tensor) -> Any:
            data = a._data
            if a._rg and GRAD.enabled:
                try:
                    fn = autograd[type(data)]
                except KeyError:
                    fn = None
                if fn is None:
                    return call_slow((a,), {})
                return fn(a)
            try:
                fn = tensor[type(data)]
            except KeyError:
                fn = None
            if fn is None:
                return call_slow((a,), {})
            try:
                return _make_tensor(fn(data))
            except Exception as e:
                kernel_failed(e, entry, fn, (data,))
                raise

        return call_tensor1

    if sig.plain_result and sig.arity == 2 and len(sig.key_pos) == 2:

        def call_tensor2(a: Tensor, b: Tensor) -> Any:
            data = a._data
            cls = type(data)
            if type(b._data) is not cls:
                return call_slow((a, b), {})
            if (a._rg or b._rg) and GRAD.enabled:
                try:
                    fn = autograd[cls]
                except KeyError:
                    fn = None
                if fn is None:
                    return call_slow((a, b), {})
                return fn(a, b)
            try:
                fn = tensor[cls]
            except KeyError:
                fn = None
            if fn is None:
                return call_slow((a, b), {})
            try:
                return _make_tensor(fn(data, b._data))
            except Exception as e:
                kernel_failed(e, entry, fn, (data, b._data))
                raise

        return call_tensor2

    if sig.plain_result and sig.key_pos == (0,):

        def call_tensor_first(a: Tensor, /, *rest: Any) -> Any:
            data = a._data
            if a._rg and GRAD.enabled:
                try:
                    fn = autograd[type(data)]
                except KeyError:
                    fn = None
                if fn is None:
                    return call_slow((a, *rest), {})
                return fn(a, *rest)
            try:
                fn = tensor[type(data)]
            except KeyError:
                fn = None
            if fn is None:
                return call_slow((a, *rest), {})
            try:
                return _make_tensor(fn(data, *rest))
            except Exception as e:
                kernel_failed(e, entry, fn, (data, *rest))
                raise

        return call_tensor_first

    key_pos, key0, key_rest = sig.key_pos, sig.key0, sig.key_rest
    single = sig.plain_result

    def call_tensors(*args: Any) -> Any:
        native = list(args)
        requires_grad = False
        for i in key_pos:
            a = args[i]
            if a._rg:
                requires_grad = True
            native[i] = a._data
        t = type(native[key0])
        for i in key_rest:
            if type(native[i]) is not t:
                return call_slow(args, {})
        if requires_grad and GRAD.enabled:
            fn = autograd.get(t)
            if fn is None:
                return call_slow(args, {})
            return fn(*args)
        fn = tensor.get(t)
        if fn is None:
            return call_slow(args, {})
        try:
            out = fn(*native)
        except Exception as e:
            kernel_failed(e, entry, fn, native)
            raise
        if single:
            return _make_tensor(out)
        return wrap(sig, out, list(args), {})

    return call_tensors


def fast_route(
    sig: Signature, cache: OpCache, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Callable[..., Any], list[Any], Callable[..., Any], tuple[int, ...]] | None:
    """What ``FastCall.__call__`` would do with ``op(*args, **kwargs)`` if no mode were
    active, for a mode that runs calls below itself cheaply (the profiler):
    ``(entry, bargs, kernel, key_pos)`` — ``entry(*bargs)`` runs the call as the fast path
    would, ``kernel`` is the cached kernel that serves it (a new object whenever the answer
    may have changed), ``key_pos`` where the tensor arguments sit in ``bargs`` — or None
    when the call would take the slow path (then plan it). The plain restatement of
    ``FastCall.__call__``'s checks (through ``sig.bind_fast``)."""
    if SLOW or not sig.key_pos:
        return None
    bound = sig.bind_fast(args, kwargs)
    if bound is not None:
        bargs = bound[0]
    else:  # keyword-only arguments: the cache with their values bound, if any
        route = cache.keyed_route(args, kwargs) if kwargs else None
        if route is None:
            return None
        cache, bargs = route
    first = type(bargs[sig.key0])
    for i in sig.key_rest:
        if type(bargs[i]) is not first:
            return None
    if first is not Tensor:
        fn = cache.by_type.get(first)
        return None if fn is None else (fn, bargs, fn, sig.key_pos)
    cls = type(bargs[sig.key0]._data)
    requires_grad = False
    for i in sig.key_pos:
        a = bargs[i]
        if type(a._data) is not cls:
            return None
        if a._rg:
            requires_grad = True
    fn = (cache.autograd if requires_grad and GRAD.enabled else cache.tensor).get(cls)
    return None if fn is None else (cache.tensor_entry, bargs, fn, sig.key_pos)


def _never(args: tuple[Any, ...]) -> Any:
    return MISS


def below_kernels(sig: Signature, cache: OpCache) -> Mapping[type, Callable[..., Any]]:
    """``OpOverload.tensor_kernels`` for this op: ``cache.tensor``, whose kernels
    ``below_autograd``'s one-Tensor entries (``below1``, ``below_first``) call on a
    Tensor's array and wrap, for an op they serve (its one Tensor argument first, one plain
    Tensor returned); else an empty dict, as with the fast path off."""
    if SLOW or sig.npos < 0 or not sig.plain_result or sig.key_pos != (0,):
        return {}
    return cache.tensor


def below_autograd(sig: Signature, cache: OpCache) -> Callable[[tuple[Any, ...]], Any]:
    """``OpOverload.call_below_autograd`` for this op: the backend kernel the fast path
    holds for these Tensors' arrays, on their native arrays, the result wrapped; ``MISS``
    when the call needs the full path (a mode is active, an argument is not a Tensor, the
    arrays differ in class, nothing is cached yet, the fast path is off)."""
    if SLOW or sig.npos < 0:
        return _never
    tensor, entry = cache.tensor, cache.entry
    # unrolled as tensor_entry's are: below_first serves one argument too, 0.2 us slower
    # per call (the empty rest it slices and unpacks), so one argument keeps its own
    if sig.plain_result and sig.npos == 1:

        def below1(args: tuple[Any, ...]) -> Any:
            if ACTIVE[0] or len(args) != 1:
                return MISS
            a = args[0]
            if type(a) is not Tensor:
                return MISS
            data = a._data
            try:
                fn = tensor[type(data)]
            except KeyError:
                return MISS
            try:
                return _make_tensor(fn(data))
            except Exception as e:
                kernel_failed(e, entry, fn, (data,))
                raise

        return below1

    npos, key_pos, single = sig.npos, sig.key_pos, sig.plain_result
    if single and key_pos == (0,):

        def below_first(args: tuple[Any, ...]) -> Any:
            if ACTIVE[0] or len(args) != npos:
                return MISS
            a = args[0]
            if type(a) is not Tensor:
                return MISS
            data = a._data
            try:
                fn = tensor[type(data)]
            except KeyError:
                return MISS
            rest = args[1:]
            try:
                return _make_tensor(fn(data, *rest))
            except Exception as e:
                kernel_failed(e, entry, fn, (data, *rest))
                raise

        return below_first

    def below(args: tuple[Any, ...]) -> Any:
        if ACTIVE[0] or len(args) != npos:
            return MISS
        native = list(args)
        cls: Any = None
        for i in key_pos:
            a = args[i]
            if type(a) is not Tensor:
                return MISS
            data = a._data
            if cls is None:
                cls = type(data)
            elif type(data) is not cls:
                return MISS
            native[i] = data
        fn = tensor.get(cls)
        if fn is None:
            return MISS
        try:
            out = fn(*native)
        except Exception as e:
            kernel_failed(e, entry, fn, native)
            raise
        if single:
            return _make_tensor(out)
        return wrap(sig, out, list(args), {})

    return below


# -- ops with lists of tensors ----------------------------------------------------------------


class ListedPlan(NamedTuple):
    """What the compiled cached call (``_ccall.c``, ``listed_call``) checks for a positional
    call of an op with lists of tensors (``cat``, ``stack``, ``index.Tensor``): what
    ``OpCache.listed_route`` checks, for native arrays and for Tensors recording no
    autograd (the op's ``tensor`` kernels, the result wrapped); a Tensor requiring grad, or
    a keyword the compiled call cannot place, goes to the Python call
    (``OpCache.call_listed``)."""

    nmin: int  # the positional arguments a call must give ...
    nmax: int  # ... and may give
    tails: tuple[tuple[Any, ...], ...]  # the defaults appended to n given
    key_pos: tuple[int, ...]  # the positions of the plain tensor arguments
    checks: tuple[tuple[int, frozenset[type]], ...]  # (position, the scalar types it takes)
    lists: tuple[tuple[int, bool], ...]  # (position of an int[], whether None is allowed)
    tensor_lists: tuple[tuple[int, bool], ...]  # (position of a Tensor[], Tensor?[] or not)


def listed_plan(sig: Signature) -> ListedPlan | None:
    """For an op with lists of tensors (``Signature.tensor_lists``), what its compiled
    cached call checks; None: no such op, or the fast path is off."""
    if SLOW or not sig.tensor_lists:
        return None
    return ListedPlan(
        sig.listed_nmin,
        sig.arity,
        sig.tails,
        sig.key_pos,
        sig.checks,
        sig.lists,
        sig.tensor_lists,
    )


# -- factories --------------------------------------------------------------------------------


class FactoryPlan(NamedTuple):
    """What a factory's cached call checks and runs (``factory_plan``), read by its Python
    call (``factory_call``) and by the compiled one (``_ccall.c``) alike."""

    served: dict[Any, FactoryServe]  # the op's ``OpCache.factory``
    device_name: str  # the keyword-only ``device`` argument's name
    dtype_names: frozenset[str]  # the keyword-only dtype arguments' names
    npos: int  # the positional arguments a call may give ...
    nmin: int  # ... and must give
    tails: tuple[tuple[Any, ...], ...]  # the defaults appended to n given
    checks: tuple[tuple[int, frozenset[type]], ...]  # (position, the scalar types it takes)
    lists: tuple[tuple[int, bool], ...]  # (position of an int[], whether None is allowed)
    api: str  # the name a backend's dtype check gives in its errors
    failed: FactoryFailed  # reports a kernel's exception as the slow path does


def factory_plan(sig: Signature, cache: OpCache) -> FactoryPlan | None:
    """For a factory (``zeros``, ``arange``, ``full``...: no tensor argument, placed by its
    keyword-only ``device``), what its cached call checks and runs; None: the op is no
    such factory, or the fast path is off."""
    dtypes, slot = sig.factory_dtypes, sig.device_arg
    if SLOW or dtypes is None or slot is None:
        return None
    entry = cache.entry

    def failed(
        exc: Exception,
        fn: Callable[..., Any],
        bargs: Sequence[Any],
        kw: dict[str, Any],
        backend: Backend,
    ) -> None:
        kernel_failed(exc, entry, fn, list(bargs), kw, backend)

    return FactoryPlan(
        cache.factory,
        slot.name,
        frozenset(dtypes),
        sig.arity,
        sig.factory_nmin,
        sig.tails,
        sig.checks,
        sig.lists,
        f"{entry.qualname}()",  # (the name dtype_guarded's errors give)
        failed,
    )


def factory_call(plan: FactoryPlan) -> FactoryCall:
    """A factory's cached call: ``entry(args, kwargs)`` runs a call whose ``device``
    argument an earlier call already placed (``cache.factory``), or returns ``MISS`` (then
    plan it). Per call it checks what binding would: the positional arguments as
    ``FastCall`` does, keyword arguments among the op's, each dtype a numpy dtype or None
    (checked by the backend when it lacks dtypes), the device of a remembered value.
    ``_ccall.c`` (``factory_call`` there) runs the same steps in C.

    A kernel ``k(size, *, dtype, device)`` may offer a ``factory_entry``: a function
    that makes what ``k`` makes when called ``factory_entry(tuple(size), dtype)``, the
    dtype given or else the default one (``empty``, ``zeros`` and ``ones`` on numpy and
    cupy offer the library's own function). The call runs it in the kernel's place, and
    the kernel itself when it raises, so that the error and its report are the kernel's."""
    served, dname, dtype_names, npos, nmin, tails, checks, lists, api, failed = plan
    dtype_type = np.dtype
    default = DEFAULT_DTYPE

    def call_factory(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n = len(args)
        if n > npos or n < nmin:
            return MISS
        device: Any = kwargs.get(dname) if kwargs else None
        t = type(device)
        if t is Device:  # hashing a Device costs 0.6 us: its fields are the key
            device = (device.type, device.index)
        elif t not in DEVICE_KEYS:
            return MISS
        try:
            fn, backend, kw, check, entry, held = served[device]
        except KeyError:
            return MISS
        if kwargs:  # the dtypes, as given when numpy dtypes (binding converts the rest)
            kw = kw.copy()
            for name, d in kwargs.items():
                if name != dname:
                    if name not in dtype_names:
                        return MISS
                    if d is not None:
                        if type(d) not in _DTYPE_CLASSES:  # (isinstance: 80 ns per dtype)
                            if not isinstance(d, dtype_type):
                                return MISS
                            _DTYPE_CLASSES.add(type(d))
                        if check is not None and (held is None or d not in held):
                            check(d, api)
                        kw[name] = d
        bargs = list(args + tails[n])
        for i, ok in checks:
            if type(bargs[i]) not in ok:
                return MISS
        if not place_int_lists(bargs, lists):  # zeros(2) as zeros([2]), as binding gives it
            return MISS
        if entry is not None:
            dtype = kw.get("dtype")
            try:
                return entry(tuple(bargs[0]), default[0] if dtype is None else dtype)
            except Exception:  # (the kernel raises it again, and it is reported as its)
                pass
        try:
            return fn(*bargs, **kw)
        except Exception as e:
            failed(e, fn, bargs, kw, backend)
            raise

    return call_factory


# -- modes that run kernels themselves --------------------------------------------------------

#: How a mode runs a kernel in its own context: ``enter(kernel)``, a callable taking the
#: kernel's positional arguments (see ``mode_table``).
ModeEnter = Callable[[Callable[..., Any]], Callable[..., Any]]
#: A mode's answer for a kernel result it must look at: ``finish(out, tensors_in, call)``,
#: the call's result (or it raises). ``call`` is the bound call (``BoundCall``, Tensors as
#: given) for an op whose returns are not one plain Tensor, else None: its one result was
#: no array of the class the mode runs on.
ModeFinish = Callable[[Any, bool, "BoundCall | None"], Any]

_NEVER = (0,)
_ALWAYS = (1,)


def mode_table(
    sig: Signature,
    cls: type,
    kernel: Callable[..., Any],
    finish: ModeFinish,
    call_slow: CallSlow,
    enter: ModeEnter | None = None,
    recording: Sequence[int] | None = None,
) -> ModeTable | None:
    """For a mode that runs an op's kernel itself on arrays of exactly class ``cls`` (the
    fake mode on fake arrays): the table (``OpCache.remember_mode``) that serves the op's
    fast calls (the shape ``FastCall.__call__`` checks) whose tensor arguments are all
    ``cls`` arrays, or all Tensors of them, without leaving the dispatcher: ``kernel`` on
    the arrays, the keyword-only defaults passed.

    Without ``enter`` the kernel runs bare, and the mode trusts it to return ``cls``
    arrays where the op returns one plain Tensor (as the fast path trusts a backend's
    kernel): array calls are served by the kernel itself. With ``enter``, the kernel runs
    as ``run = enter(kernel)`` runs it (``run(*nargs)``, in the mode's context) while
    ``recording[0]`` is nonzero (no ``recording``: always), else bare, and each entry's
    frame holds ``run`` as a local (a mode finds there what the frame runs); a single
    plain result is checked. Where the op returns one plain Tensor and writes no argument
    it does not return (``Signature.plain_result``), a ``cls`` result is served as it is
    (wrapped for Tensor calls), any other through ``finish(out, tensors_in, None)``; any
    other op gives each result to ``finish(out, tensors_in, call)``. A Tensor call on
    arrays of another class goes to ``call_slow`` (the mode). None when no call
    qualifies: the op has no fast shape, or the fast path is off
    (``OPLIB_DISPATCH_SLOW=1``)."""
    if SLOW or sig.npos < 0:
        return None
    key_pos, kwdefaults, npos = sig.key_pos, sig.kwdefaults, sig.npos
    kernel = with_kwdefaults(kernel, kwdefaults)
    run = kernel if enter is None else enter(kernel)
    rec = _NEVER if enter is None else (_ALWAYS if recording is None else recording)
    if not sig.plain_result:

        def arrays_other(*args: Any) -> Any:
            out = kernel(*args) if not rec[0] else run(*args)
            return finish(out, False, BoundCall(list(args), dict(kwdefaults), True))

        def tensors_other(*args: Any) -> Any:
            nargs = list(args)
            for i in key_pos:
                v = nargs[i] = args[i]._data
                if type(v) is not cls:
                    return call_slow(args, {})
            out = kernel(*nargs) if not rec[0] else run(*nargs)
            return finish(out, True, BoundCall(list(args), dict(kwdefaults), True))

        return {cls: arrays_other, Tensor: tensors_other}

    # One Tensor in, one out; two in, one out: unrolled (a fixed signature is cheaper to
    # call than *args). Each is the plain equivalent of the general pair below.
    if key_pos == (0,) and npos == 1:
        # (one Tensor or one array: one entry for both; a kernel run in the mode's context
        # takes every one-argument call directly, its frame the one get_ctx() finds)

        def one(a: Any) -> Any:
            if type(a) is cls:
                out = kernel(a) if not rec[0] else run(a)
                if type(out) is cls:
                    return out
                return finish(out, False, None)
            if type(a) is not Tensor:
                return call_slow((a,), {})
            data = a._data
            if type(data) is not cls:
                return call_slow((a,), {})
            out = kernel(data) if not rec[0] else run(data)
            if type(out) is cls:
                return _make_tensor(out)
            return finish(out, True, None)

        if enter is None:  # arrays: the kernel itself
            return {cls: kernel, Tensor: one}
        return {1: one, cls: one, Tensor: one}

    if key_pos == (0, 1) and npos == 2 and not sig.checks and not sig.lists:
        # (two Tensors, or two arrays: one entry checks them, instead of FastCall.__call__'s
        # loops and then one of these)

        def pair(a: Any, b: Any) -> Any:
            if type(a) is Tensor:
                if type(b) is not Tensor:
                    return call_slow((a, b), {})
                da, db = a._data, b._data
                if type(da) is not cls or type(db) is not cls:
                    return call_slow((a, b), {})
                out = kernel(da, db) if not rec[0] else run(da, db)
                if type(out) is cls:
                    return _make_tensor(out)
                return finish(out, True, None)
            if type(a) is not cls or type(b) is not cls:
                return call_slow((a, b), {})
            out = kernel(a, b) if not rec[0] else run(a, b)
            if type(out) is cls:
                return out
            return finish(out, False, None)

        return {2: pair, cls: pair, Tensor: pair}

    def tensors(*args: Any) -> Any:
        nargs = list(args)
        for i in key_pos:
            v = nargs[i] = args[i]._data
            if type(v) is not cls:
                return call_slow(args, {})
        out = kernel(*nargs) if not rec[0] else run(*nargs)
        if type(out) is cls:
            return _make_tensor(out)
        return finish(out, True, None)

    def arrays(*args: Any) -> Any:
        out = kernel(*args) if not rec[0] else run(*args)
        if type(out) is cls:
            return out
        return finish(out, False, None)

    return {cls: kernel if enter is None else arrays, Tensor: tensors}
