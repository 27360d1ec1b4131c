"""The fast path of a native call, kept in one room: calls whose arguments are numpy arrays
and plain scalars (``Tensor``, ``int``, ``SymInt``, ``bool``, ``float``, ``Scalar``).

Each kernel gets a function written for its schema (straight-line code, generated on its
first call), which per call only reads the arrays' metadata, looks it up in a per-kernel
cache, allocates the outputs, writes the whole call (``oplib_arg``s, ``DLTensor``s) into one
fresh buffer with one precompiled ``struct`` pack, and calls the C function through a
prototype taking plain addresses. What depends on the inputs' metadata only is computed on
a cache miss and kept: the constant bytes of each ``DLTensor`` (device, ndim, dtype, shape
and strides pointers), and the outputs' sizes when the op's Python fake kernel gives them
(the key then holds the scalar values too). A shape function is called on every call (in
real mode it may read the data), on the same buffer. The plain equivalent, used for every
other call, is::

    cargs, first = plan.fill(values, keep)                 # _marshal.CallPlan.fill
    metas = kernel._metas(values, cargs)
    outs, couts = allocate(plan, first, metas, keep)       # _marshal.allocate
    plan.check(kernel.fn(cargs, n, couts, nouts, byref(err)), err)

Where oplib-core was built with a C compiler, ``_cfastcall.c`` makes the same call in C
(see ``COMPILED``): ``_generate`` then returns its object instead of generated code; it
reads and fills the same cache (keyed by bytes of the metadata) through the same ``miss``,
and reports through the same ``_fail`` and ``_out_meta``.

The caches are dropped whenever the registry changes (a fake kernel registered or removed)
or a library's shape functions do. ``tests/test_native*.py`` run under both paths
(``OPLIB_DISPATCH_SLOW=1`` turns this one off).
"""

from __future__ import annotations

import ctypes as C
import struct
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from .._dispatch import SLOW
from .._schema import BaseType
from . import _abi as A
from . import speedups_off
from ._marshal import (
    DATA_OFFSET,
    WORD_SHIFT,
    WORDS,
    CallPlan,
    Layout,
    layout,
    meta_of,
    numpy_data,
)

__all__ = ["FastCall", "NoFastCall", "fast_call_for"]

_KINDS = {"Tensor": "t", "int": "i", "SymInt": "i", "bool": "i", "float": "f", "Scalar": "f"}
_ARG = {"t": "8xQ8x", "i": "8xq8x", "f": "8xd8x"}  # oplib_arg: is_none=0, reserved, union
_DL = "Q40s"  # a DLTensor: its data pointer, then 40 constant bytes (see _dl_consts)
_DL_TAIL = struct.Struct("=iiiBBHQQQ")  # device, ndim, dtype, shape, strides, byte_offset
_META = struct.Struct("=iBBH" + "q" * A.MAX_DIMS)  # oplib_tensor_meta
_ARG_SIZE = C.sizeof(A.Arg)
_DL_SIZE = C.sizeof(A.DLTensor)
_META_SIZE = C.sizeof(A.TensorMeta)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CACHE_SIZE = 256
assert struct.calcsize("=" + _ARG["t"]) == _ARG_SIZE and struct.calcsize("=" + _DL) == _DL_SIZE
assert _META.size == _META_SIZE and _DL_TAIL.size == _DL_SIZE - 8

# Kernels and shape functions are called with ready ctypes objects (see _untyped). Where
# pointers are 64 bits, the two int64_t counts go as pointers: the same registers by every
# 64-bit C calling convention.
_COUNT = C.c_void_p if C.sizeof(C.c_void_p) == 8 else C.c_int64

Meta = tuple[tuple[int, ...], np.dtype]


def _compiled() -> Any:
    """The compiled fast call (``_cfastcall``, built by setup.py when a C compiler is
    there), or None: not built, ``OPLIB_NATIVE_SPEEDUPS=0``, or numpy's array layout is not
    the one it reads (checked on a strided probe against numpy's own answers)."""
    if speedups_off():
        return None
    try:
        from . import _cfastcall
    except ImportError:
        return None
    for probe in (np.arange(24.0).reshape(2, 3, 4)[:, ::2, 1:], np.broadcast_to(np.int8(1), (2,))):
        seen = _cfastcall.probe(probe)
        data = probe.__array_interface__["data"][0]
        wanted = (data, probe.shape, probe.strides, probe.flags.writeable)
        if seen is None or seen[:4] != wanted or seen[4] is not probe.dtype:
            return None  # pragma: no cover -- a numpy whose PyArrayObject_fields changed
    assert _cfastcall.TAIL_SIZE == _DL_SIZE - 8
    return _cfastcall


#: The compiled fast call, or None (then each kernel's fast call is generated Python).
COMPILED: Any = _compiled()


def _untyped(address: int) -> Any:
    """The C function at ``address`` (``int f(void *, int64_t, void *, int64_t, void *)``)
    called with ready ctypes objects and no conversion: the fast call passes the buffer's
    addresses as ``c_void_p`` and the counts as ``_COUNT`` objects made once, which saves
    converting five Python ints on every call."""
    fn: Any = C.CFUNCTYPE(C.c_int)(address)
    fn.argtypes = None
    return fn


def _slot_maker(size: int, outs_at: int, metas_at: int, err_at: int) -> Callable[[], Any]:
    """Makes a call's buffer with its base address and the ``c_void_p`` pointers into it
    that the kernel and shape function get (args, outputs, metas, error)."""
    buffer_type = C.c_char * size

    def new_slot() -> tuple[Any, ...]:
        buf = buffer_type()
        base = C.addressof(buf)
        pointers = (C.c_void_p(base + at) for at in (0, outs_at, metas_at, err_at))
        return (buf, base, *pointers)

    return new_slot


class Owner(Protocol):
    """What the fast path asks of its :class:`~._library.NativeKernel`."""

    def shape_fn(self) -> Any: ...
    def fake_metas(self, values: list[Any]) -> list[Meta]: ...


def _dl_consts(lay: Layout) -> bytes:
    """The 40 bytes of a cpu ``DLTensor`` after its data pointer."""
    return _DL_TAIL.pack(A.KDL_CPU, 0, lay[3], lay[6], lay[7], 1, lay[4], lay[5], 0)


def _out_layout(shape: tuple[int, ...], dtype: np.dtype) -> tuple[bytes, Layout]:
    """The ``DLTensor`` constants of ``np.empty(shape, dtype)`` (C-contiguous)."""
    strides = [dtype.itemsize] * len(shape)
    for i in range(len(shape) - 1, 0, -1):
        strides[i - 1] = strides[i] * max(shape[i], 1)
    lay = layout((shape, tuple(strides), dtype))
    return _dl_consts(lay), lay


# What a shape function wrote (the raw oplib_tensor_meta) -> (shape, dtype, DLTensor bytes).
_OUT_METAS: dict[bytes, tuple[tuple[int, ...], np.dtype, bytes, Layout]] = {}


#: What a fast call hands the calls it declines to (the arguments as a tuple).
Slow = Callable[[tuple[Any, ...]], Any]


class FastCall:
    """A kernel's fast path: ``call(*args)`` (positional, in schema order) runs the kernel,
    or hands the call to ``slow(args)`` when an argument is not a numpy array or a plain
    scalar. ``call`` is what the dispatcher's cache holds for the kernel (no frame of the
    kernel object in between); it is replaced whenever the fast path is invalidated, and
    so is every dispatcher cache of the op (see ``NativeKernel.invalidate``)."""

    __slots__ = ("address", "cache", "call", "kinds", "owner", "plan", "slow")

    def __init__(self, plan: CallPlan, address: int, owner: Owner, slow: Slow) -> None:
        self.plan = plan
        self.address = address
        self.owner = owner
        self.slow = slow
        # "w": a Tensor(a!), which must also be writable (else the plain path refuses it)
        self.kinds = tuple(
            "w" if a.is_write and a.type.name == "Tensor" else _KINDS[a.type.name]  # type: ignore[union-attr]
            for a in plan.args
        )
        self.cache: dict[Any, Any] = {}
        self.call: Callable[..., Any] = self._first

    def invalidate(self) -> None:
        """Forget what was cached and how outputs are sized (the next call decides anew)."""
        self.call = self._first
        self.cache = {}

    def _first(self, *args: Any) -> Any:
        cache = self.cache
        call = self._generate()
        if self.cache is cache:  # not invalidated meanwhile (by another thread)
            self.call = call
        return call(*args)

    def _generate(self) -> Callable[..., Any]:
        """Straight-line code for this schema and this way of sizing outputs."""
        plan, kinds = self.plan, self.kinds
        nargs, nouts = plan.nargs, plan.nouts
        shape_fn = self.owner.shape_fn() if nouts else None
        by_fake = nouts > 0 and shape_fn is None
        shape_address = C.cast(shape_fn, C.c_void_p).value or 0 if shape_fn else 0
        tensors = [i for i, k in enumerate(kinds) if k in "tw"]
        miss = self._miss_for(tensors, by_fake)
        if COMPILED is not None:  # the same call in C: its keys are bytes, its entries these
            call: Any = COMPILED.FastCall(
                "".join(kinds), nouts, by_fake, self.address,
                shape_address,
                np.ndarray, self.cache, miss, self.slow, np.empty, self._fail,
                _OUT_METAS, self._out_meta,
            )  # fmt: skip
            call.__wrapped__ = self.owner
            return call  # type: ignore[no-any-return]
        # the buffer: oplib_arg[nargs], the inputs' DLTensors, the outputs', metas, error
        ins_at = nargs * _ARG_SIZE
        outs_at = ins_at + _DL_SIZE * len(tensors)
        metas_at = outs_at + _DL_SIZE * nouts
        err_at = metas_at + (_META_SIZE * nouts if shape_fn is not None else 0)
        v = [f"v{i}" for i in range(nargs)]
        lines = [
            "def call(*args):",
            "    try:",
            f"        {', '.join(v)}{',' if nargs == 1 else ''} = args",
            "    except ValueError: return slow(args)",
        ]
        if tensors:
            checks = " or ".join(f"type(v{i}) is not ndarray" for i in tensors)
            lines.append(f"    if {checks}: return slow(args)")
        if "w" in kinds:
            checks = " or ".join(f"not v{i}.flags.writeable" for i in tensors if kinds[i] == "w")
            lines.append(f"    if {checks}: return slow(args)")
        key: list[str] = []
        for i, k in enumerate(kinds):
            if k in "tw":
                key += [f"v{i}.shape", f"v{i}.strides", f"v{i}.dtype"]
                continue
            allowed = ("int", "bool") if k == "i" else ("float", "int", "bool")
            lines.append(f"    t{i} = type(v{i})")
            lines.append(
                f"    if {' and '.join(f't{i} is not {t}' for t in allowed)}: return slow(args)"
            )
            if by_fake:  # a fake kernel may depend on scalar values (and types)
                key += [f"t{i}", f"v{i}"]
        consts = [f"c{j}" for j in range(len(tensors))]
        outs = [f"o{j}" for j in range(nouts)]
        hit = consts + ([f"s{j}, d{j}, oc{j}" for j in range(nouts)] if by_fake else [])
        lines += [
            f"    key = ({', '.join(key)},)" if key else "    key = ()",
            "    hit = cache.get(key)",
            "    if hit is None:",
            "        hit = miss(args, key)",
            "        if hit is None: return slow(args)",
            f"    {''.join(h + ', ' for h in hit)}_ = hit",
            "    try:",
            "        slot = free.pop()",
            "    except IndexError:",
            "        slot = new_slot()",
            "    buf, base, p_args, p_outs, p_metas, p_err = slot",
        ]
        head = [f"base + {ins_at + _DL_SIZE * tensors.index(i)}" if k in "tw" else f"v{i}"
                for i, k in enumerate(kinds)]  # fmt: skip
        # numpy's data pointer, read where PyArray_DATA reads it (see _marshal.numpy_data)
        data = (
            "data({})"
            if DATA_OFFSET is None or WORDS is None
            else f"words[(id({{}}) + {DATA_OFFSET}) >> {WORD_SHIFT}]"
        )
        head += [f"{data.format(f'v{i}')}, c{j}" for j, i in enumerate(tensors)]
        tail = [f"{data.format(f'o{j}')}, oc{j}" for j in range(nouts)]
        fmt_head = "=" + "".join(_ARG["t" if k == "w" else k] for k in kinds) + _DL * len(tensors)
        if shape_fn is not None:
            lines += [
                "    try:",
                f"        pack_head(buf, 0, {', '.join(head)})",
                "    except (StructError, OverflowError): return slow(args)",
                "    status = shape_fn(p_args, n_args, p_metas, n_outs, p_err)",
                f"    if status: fail(status, buf, {err_at}, ' shape function')",
            ]
            for j in range(nouts):
                at = metas_at + j * _META_SIZE
                lines.append(f"    s{j}, d{j}, oc{j}, _ = out_meta(buf[{at}:{at + _META_SIZE}])")
            lines += [f"    o{j} = empty(s{j}, d{j})" for j in range(nouts)]
            if nouts:
                lines.append(f"    pack_tail(buf, {outs_at}, {', '.join(tail)})")
            # a reused buffer: the outputs' DLTensors and the metas are written anew
            fmt_head += f"{_DL_SIZE * nouts + _META_SIZE * nouts}x"
        else:
            lines += [f"    o{j} = empty(s{j}, d{j})" for j in range(nouts)]
            lines += [
                "    try:",
                f"        pack_head(buf, 0, {', '.join(head + tail)})",
                "    except (StructError, OverflowError): return slow(args)",
            ]
            fmt_head += _DL * nouts
        fmt_head += "x"  # and the error message is empty (the buffer may be reused)
        lines += [
            "    status = fn(p_args, n_args, p_outs, n_outs, p_err)",
            f"    if status: fail(status, buf, {err_at}, '')",
            "    free.append(slot)",
            "    return "
            + (outs[0] if nouts == 1 else f"({', '.join(outs)},)" if outs else "None"),
        ]
        env: dict[str, Any] = {
            "ndarray": np.ndarray,
            "int": int,
            "bool": bool,
            "float": float,
            "slow": self.slow,
            "cache": self.cache,
            "miss": miss,
            "free": [],  # buffers of finished calls (each call takes its own)
            "new_slot": _slot_maker(err_at + C.sizeof(A.Error), outs_at, metas_at, err_at),
            "n_args": _COUNT(nargs),
            "n_outs": _COUNT(nouts),
            "data": numpy_data,
            "words": WORDS,
            "empty": np.empty,
            "pack_head": struct.Struct(fmt_head).pack_into,
            "pack_tail": struct.Struct("=" + _DL * nouts).pack_into,
            "StructError": struct.error,
            "fn": _untyped(self.address),
            "shape_fn": _untyped(shape_address) if shape_fn else None,
            "fail": self._fail,
            "out_meta": self._out_meta,
        }
        exec(compile("\n".join(lines), f"<native fast call of {plan.op}>", "exec"), env)
        call = env["call"]
        call.__wrapped__ = self.owner  # what a failure's note names (see _dispatch.failure)
        return call  # type: ignore[no-any-return]

    def _miss_for(
        self, tensors: list[int], by_fake: bool
    ) -> Callable[[Sequence[Any], Any], tuple[Any, ...] | None]:
        cache = self.cache
        kinds = self.kinds

        def miss(args: Sequence[Any], key: Any) -> tuple[Any, ...] | None:
            keep: list[Any] = []
            hit: list[Any] = []
            for i in tensors:
                v = args[i]
                lay = layout((v.shape, v.strides, v.dtype))
                hit.append(_dl_consts(lay))
                keep.append(lay)  # the shape and strides arrays the bytes point to
                keep.append(v.dtype)  # the compiled call's key holds its address
            if by_fake:
                for k, v in zip(kinds, args, strict=True):
                    if k == "i" and not _INT64_MIN <= v <= _INT64_MAX:
                        return None  # the plain path says what it does with it
                for shape, dtype in self.owner.fake_metas(list(args)):
                    consts, lay = _out_layout(shape, dtype)
                    hit += (shape, dtype, consts)
                    keep.append(lay)
            hit.append(keep)
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            found = cache[key] = tuple(hit)
            return found

        return miss

    def _out_meta(self, raw: bytes) -> tuple[tuple[int, ...], np.dtype, bytes, Layout]:
        """What the shape function wrote for one output (its raw ``oplib_tensor_meta``)."""
        found = _OUT_METAS.get(raw)
        if found is not None:
            return found
        ndim, code, bits, lanes, *dims = _META.unpack(raw)
        shape, dtype = meta_of(self.plan, ndim, A.DLDataType(code, bits, lanes), dims)
        consts, lay = _out_layout(shape, dtype)
        if len(_OUT_METAS) >= 4096:
            _OUT_METAS.clear()
        found = _OUT_METAS[raw] = (shape, dtype, consts, lay)
        return found

    def _fail(self, status: int, buf: Any, at: int, what: str) -> None:
        self.plan.check(status, A.Error.from_buffer(buf, at), what)


class NoFastCall:
    """The fast path of a kernel that has none: ``call(*args)`` hands every call to
    ``slow(args)``."""

    __slots__ = ("call",)

    def __init__(self, slow: Slow) -> None:
        def call(*args: Any) -> Any:
            return slow(args)

        self.call = call

    def invalidate(self) -> None:
        """Nothing is cached."""


def fast_call_for(plan: CallPlan, address: int, owner: Owner, slow: Slow) -> FastCall | NoFastCall:
    """The fast path of a kernel, or a ``NoFastCall`` when its schema has other argument
    types (or ``OPLIB_DISPATCH_SLOW=1``)."""
    if SLOW:
        return NoFastCall(slow)
    for a in plan.args:
        if not isinstance(a.type, BaseType) or a.type.name not in _KINDS:
            return NoFastCall(slow)
    return FastCall(plan, address, owner, slow)
