"""Automatic mixed precision: ``oplib.autocast``, torch's ``torch.autocast``.

Inside ``with oplib.autocast("cpu"):`` matmul-like ops run in the autocast dtype (bfloat16 on
cpu, float16 elsewhere), precision-hungry ops (``exp``, ``log``, ``pow``, ``sum``... as torch
lists them for the device) in float32, and a few ops that mix inputs run in the widest
floating dtype among them. Every other op is untouched. The classes of the core op set are
``CORE_POLICIES``, one table; ``register_autocast`` (``oplib.library``) gives a user's op its
own cast.

``autocast`` is a dispatch mode: it is on the mode stack only while an enabled autocast is
active, so with none active no call pays anything for it. As torch keeps autocast's state
per device type and thread, so does this module: the innermost ``autocast`` of a device type
decides, whichever autocast mode object sees the call first.
"""

from __future__ import annotations

import copy
import enum
import functools
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np

from ._dispatch import DispatchMode, OpOverload
from ._dtypes import bfloat16, float16, float32, float64, is_floating, promote_types, to_dtype
from ._grad_mode import is_grad_enabled
from ._registry.handle import Handle
from ._registry.lookup import lookup
from ._tensor.tensor import Tensor
from .backends import TABLE
from .errors import ArgumentTypeError, BackendError, InvalidArgumentError, InvalidDeviceError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "CORE_POLICIES",
    "CastPolicy",
    "add_rule",
    "autocast",
    "check_cast_dtype",
    "check_device_type",
    "get_autocast_dtype",
    "is_autocast_available",
    "is_autocast_enabled",
    "policy_of",
]

_F = TypeVar("_F", bound=Callable[..., Any])


class CastPolicy(enum.Enum):
    """What autocast does to an op's floating inputs (torch's names, autocast_mode.h)."""

    #: cast to the autocast dtype (float16 / bfloat16)
    LOWER_PRECISION_FP = "lower_precision_fp"
    #: cast to float32
    FP32 = "fp32"
    #: run with ``dtype=float32`` unless the caller gave a dtype (torch's reductions)
    FP32_SET_OPT_DTYPE = "fp32_set_opt_dtype"
    #: cast to the widest floating dtype among the inputs (float32 over the autocast dtype)
    PROMOTE = "promote"
    #: untouched: the op runs on its inputs as they are (torch's fallthrough)
    NONE = "fallthrough"


_LOW = CastPolicy.LOWER_PRECISION_FP
_FP32 = CastPolicy.FP32
_OPT = CastPolicy.FP32_SET_OPT_DTYPE
_PROMOTE = CastPolicy.PROMOTE
_NONE = CastPolicy.NONE

# The core ops autocast leaves alone on every device: shape ops, comparisons, elementwise ops
# torch does not list, in-place and out= overloads (torch registers functional overloads only).
_UNTOUCHED = (  # noqa: SIM905 (150 names: one a line would bury the table below)
    "_narrow _to_copy abs abs.out add add.Scalar add.Scalar_out add.out add_.Scalar "
    "add_.Tensor amax amax.out amin amin.out arange arange.start astype broadcast_to "
    "chunk clamp clamp.out clamp_ clone copy_ cos cos.out div div.Scalar "
    "div.Scalar_out div.out div_.Scalar div_.Tensor empty eq eq.Scalar eq.Scalar_out eq.out "
    "exp.out expand fill_.Scalar fill_.Tensor flip full gather ge ge.Scalar ge.Scalar_out "
    "ge.out gt gt.Scalar gt.Scalar_out gt.out index.Tensor index_put_ index_select le "
    "le.Scalar le.Scalar_out le.out log.out lt lt.Scalar lt.Scalar_out lt.out masked_select "
    "max max.dim maximum maximum.out mean mean.out min min.dim minimum minimum.out movedim.int "
    "movedim.intlist mul mul.Scalar mul.Scalar_out mul.out mul_.Scalar mul_.Tensor narrow ne "
    "ne.Scalar ne.Scalar_out ne.out neg neg.out ones pad permute pow.Scalar_out pow.out "
    "rdiv.Scalar rdiv.Scalar_out relu relu.out repeat reshape roll rpow.Scalar_out "
    "rsub.Scalar rsub.Scalar_out scatter.src scatter.value select.int sigmoid sigmoid.out sin "
    "sin.out slice.Tensor split.Tensor split_with_sizes sqrt sqrt.out squeeze sub sub.Scalar "
    "sub.Scalar_out sub.out sub_.Scalar sub_.Tensor sum.out tanh tanh.out tensor_split.indices "
    "tensor_split.sections tile transpose tril triu unsqueeze view where where.out zero_ zeros"
).split()

#: Each core op's (policy on cpu, policy on every other device), keyed by ``op.name()``.
#: torch's lists, aten/src/ATen/autocast_mode.cpp: AutocastCPU for cpu, and the lists CUDA,
#: XPU and MPS share (autocast_mode.h's AT_FORALL_*) for the others. On cpu torch casts no
#: unary math to float32 and promotes ``cat``/``stack``; on CUDA ``exp``/``log``/``pow``/
#: ``sum`` run in float32 and ``cat``/``stack`` promote by themselves. A new core op without
#: an entry fails tests/test_autocast.py.
CORE_POLICIES: Final[Mapping[str, tuple[CastPolicy, CastPolicy]]] = {
    "oplib::matmul": (_LOW, _LOW),
    "oplib::exp": (_NONE, _FP32),
    "oplib::log": (_NONE, _FP32),
    "oplib::pow": (_NONE, _FP32),  # torch's pow.Tensor_Tensor
    "oplib::pow.Scalar": (_NONE, _FP32),  # torch's pow.Tensor_Scalar
    "oplib::rpow.Scalar": (_NONE, _FP32),  # torch's pow.Scalar (a scalar to a tensor power)
    "oplib::sum": (_NONE, _OPT),
    "oplib::cat": (_PROMOTE, _NONE),
    "oplib::stack": (_PROMOTE, _NONE),
    "oplib::index_put": (_NONE, _PROMOTE),
    "oplib::scatter_add": (_NONE, _PROMOTE),
    **{f"oplib::{name}": (_NONE, _NONE) for name in _UNTOUCHED},
}

#: torch's default autocast dtypes (``torch.get_autocast_dtype``): bfloat16 on cpu, float16
#: on the accelerators.
_DEFAULT_DTYPES: Final = {"cpu": bfloat16}
_SUPPORTED_DTYPES: Final = (bfloat16, float16)


class _State(threading.local):
    """This thread's autocast state, as torch keeps it: per device type, enabled and dtype."""

    def __init__(self) -> None:
        self.settings: dict[str, tuple[bool, np.dtype]] = {}
        #: torch's ExcludeDispatchKeyGuard: set while an op autocast cast for runs
        self.excluded = False
        self.nesting = 0
        self.cache_enabled = True
        #: id(float32 leaf that requires grad) -> (that leaf, its cast): torch's weight cache
        self.cache: dict[tuple[int, np.dtype], tuple[Tensor, Tensor]] = {}


_STATE = _State()

# (qualified name, device type) -> the cast dtypes registered (the last one serves).
_RULES: dict[tuple[str, str], list[np.dtype]] = {}
#: The ops autocast may cast on some device: the core ops with a policy, and those with a
#: rule (name -> how many rules). Every other op passes straight through the mode.
_CASTING: dict[str, int] = dict.fromkeys(
    (name for name, policies in CORE_POLICIES.items() if policies != (_NONE, _NONE)), 1
)
_RULES_LOCK = threading.Lock()


# Device types torch knows whatever is installed (torch.amp.is_autocast_available says yes
# for them without the hardware): code written for them keeps running where their backend
# is missing, with autocast disabled and a warning, as torch does without a GPU.
_KNOWN_DEVICE_TYPES: Final = frozenset(("cpu", "cuda", "xpu", "mps", "hpu", "xla", "privateuse1"))


def _autocast_devices() -> list[str]:
    installed = {n for n in TABLE.names() if not TABLE.get(n).spec.fake_kernels}
    return sorted(installed | _KNOWN_DEVICE_TYPES)


def is_autocast_available(device_type: str) -> bool:
    """Whether ``device_type`` supports autocast, as ``torch.amp.is_autocast_available``: an
    installed backend that holds data (``"meta"`` does not), or a device type torch knows
    (``"cuda"``, ``"xpu"``...) whether or not its backend is installed."""
    if not isinstance(device_type, str):
        return False
    backend = TABLE.find(device_type)
    if backend is None:
        return device_type in _KNOWN_DEVICE_TYPES
    return not backend.spec.fake_kernels


def check_device_type(device_type: object, api: str) -> str:
    """``device_type`` if autocast supports it; else torch's errors (a ValueError for a
    non-str, a RuntimeError for an unsupported one: ``InvalidDeviceError`` is both)."""
    if not isinstance(device_type, str):
        raise InvalidArgumentError(
            f"{api}: Expected `device_type` of type `str`, got: `{type(device_type)}`",
            api=api,
            argument="device_type",
            value=device_type,
        )
    if not is_autocast_available(device_type):
        raise InvalidDeviceError(
            f"{api}: User specified an unsupported autocast device_type {device_type!r}; "
            f"autocast supports the device types of backends that hold data: "
            f"{', '.join(_autocast_devices())}",
            device_type,
            device_type,
        )
    return device_type


def check_cast_dtype(dtype: object, api: str, argument: str) -> np.dtype:
    """``dtype`` as a floating dtype, or ``ArgumentTypeError`` naming the call."""
    try:
        out = to_dtype(dtype)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        out = None
    if out is None or not is_floating(out):
        raise ArgumentTypeError(
            f"{api}: {argument} must be a floating dtype (oplib.float16, oplib.bfloat16, "
            f"oplib.float32...), got {dtype!r}",
            api=api,
            argument=argument,
            value=dtype,
        )
    return out


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast is enabled for ``device_type`` in this thread."""
    setting = _STATE.settings.get(device_type)
    return setting is not None and setting[0]


def get_autocast_dtype(device_type: str) -> np.dtype:
    """The dtype autocast casts down to on ``device_type`` in this thread: the innermost
    active ``autocast``'s, else the default (bfloat16 on cpu, float16 elsewhere)."""
    setting = _STATE.settings.get(device_type)
    if setting is not None:
        return setting[1]
    return _DEFAULT_DTYPES.get(device_type, float16)


def add_rule(qualname: str, device_type: str, dtype: np.dtype) -> Handle:
    """Cast ``qualname``'s floating inputs on ``device_type`` to ``dtype`` under autocast
    (``register_autocast``); the last rule registered serves, the handle removes this one."""
    key = (qualname, device_type)
    with _RULES_LOCK:
        _RULES.setdefault(key, []).append(dtype)
        _CASTING[qualname] = _CASTING.get(qualname, 0) + 1

    def undo() -> None:
        with _RULES_LOCK:
            stack = _RULES.get(key)
            if stack is not None:
                stack.reverse()
                stack.remove(dtype)  # the last one registered with this dtype
                stack.reverse()
                if not stack:
                    del _RULES[key]
                _CASTING[qualname] -= 1
                if not _CASTING[qualname]:
                    del _CASTING[qualname]

    return Handle(undo, f"autocast rule of {qualname} for {device_type}")


def policy_of(op: OpOverload, device_type: str) -> tuple[CastPolicy, np.dtype | None]:
    """How autocast treats ``op`` on ``device_type``, and the dtype to cast to when the
    policy does not say it: a ``register_autocast`` rule (``LOWER_PRECISION_FP`` with the
    rule's dtype), else the core table (``CORE_POLICIES``), else untouched (``NONE``)."""
    name = op.name()
    stack = _RULES.get((name, device_type))
    if stack:
        return _LOW, stack[-1]
    entry = CORE_POLICIES.get(name)
    if entry is None:
        return _NONE, None
    return entry[0] if device_type == "cpu" else entry[1], None


# -- casting -------------------------------------------------------------------------------


def _device_type(value: Any) -> str | None:
    if isinstance(value, Tensor):
        return value.device.type
    backend = TABLE.for_type(type(value))
    if backend is None:
        return None
    device = getattr(value, "device", None)  # fake arrays keep their own device
    if device is not None and hasattr(device, "type") and isinstance(device.type, str):
        return str(device.type)
    return backend.device_of(value).type


def _call_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The device type of the call's first tensor (in lists too): it picks the autocast
    state, as torch's key set picks AutocastCPU or AutocastCUDA."""
    for a in (*args, *kwargs.values()):
        for x in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(x, (int, float, bool, str, type(None))):
                continue
            dev = _device_type(x)
            if dev is not None:
                return dev
    return None


def _eligible_dtype(value: Any, device_type: str) -> np.dtype | None:
    """The dtype of ``value`` if autocast may cast it: a floating tensor (not float64) on
    ``device_type`` (torch's ``is_autocast_eligible``)."""
    if isinstance(value, (int, float, bool, str, type(None))):
        return None
    if not isinstance(value, Tensor) and TABLE.for_type(type(value)) is None:
        return None
    dtype = value.dtype if isinstance(value, Tensor) else _native_dtype(value)
    if not is_floating(dtype) or dtype == float64:
        return None
    return dtype if _device_type(value) == device_type else None


def _native_dtype(value: Any) -> np.dtype:
    dtype = value.dtype
    if isinstance(dtype, np.dtype):
        return dtype
    backend = TABLE.for_type(type(value))
    assert backend is not None
    return backend.dtype_of(value)


# ``oplib::astype``, looked up on first use (the core op set loads with the plugins). A cast
# is that op: differentiable, and its gradient comes back in the input's dtype.
_ASTYPE: list[Any] = []


def _cast_one(value: Any, dtype: np.dtype) -> Any:
    if not _ASTYPE:
        _ASTYPE.append(lookup("oplib::astype"))
    if isinstance(value, Tensor):
        if value.dtype == dtype:
            return value
        st = _STATE
        cacheable = (
            st.cache_enabled
            and value.requires_grad
            and value.is_leaf
            and value.dtype == float32
            and is_grad_enabled()
        )
        if cacheable:
            hit = st.cache.get((id(value), dtype))
            if hit is not None and hit[0] is value:
                return hit[1]
        out = _ASTYPE[0](value, dtype)
        if cacheable:
            st.cache[(id(value), dtype)] = (value, out)
        return out
    if _native_dtype(value) == dtype:
        return value
    return _ASTYPE[0](value, dtype)


def _cast(value: Any, device_type: str, dtype: np.dtype) -> Any:
    """``value`` with its eligible tensors (in lists and tuples too) cast to ``dtype``."""
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    if _eligible_dtype(value, device_type) is None:
        return value
    return _cast_one(value, dtype)


def _widest(args: tuple[Any, ...], kwargs: dict[str, Any], device_type: str) -> np.dtype:
    """torch's ``promote_type``: the autocast dtype, float32 if any eligible input is
    float32 (float64 inputs are ignored, as torch ignores them)."""
    out = get_autocast_dtype(device_type)
    for a in (*args, *kwargs.values()):
        for x in a if isinstance(a, (list, tuple)) else (a,):
            d = _eligible_dtype(x, device_type)
            if d is None or d == out:
                continue
            # torch refuses a third floating dtype here; the common promotion is kinder
            out = float32 if d == float32 else promote_types(out, d)
    return out


def _run_excluded(op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    st = _STATE
    st.excluded = True
    try:
        return op(*args, **kwargs)
    finally:
        st.excluded = False


# -- the context manager -----------------------------------------------------------------------


class autocast(DispatchMode):
    """Run ops in mixed precision: ``with oplib.autocast("cpu"): ...`` or as a decorator
    (``@oplib.autocast("cuda", dtype=oplib.float16)``), as ``torch.autocast``.

    ``device_type`` is the device whose tensors are cast (``"cpu"``, ``"cuda"``, any
    installed backend holding data); ``dtype`` the lower precision (default: bfloat16 on cpu,
    float16 elsewhere; only float16 and bfloat16 are supported: another dtype warns and
    disables autocast, as torch does); ``enabled=False`` turns autocast off for the block
    (inside an enabled one too); ``cache_enabled`` keeps the cast of a float32 leaf that
    requires grad (a weight) for the whole outermost autocast block.

    Casts are ordinary differentiable ops: a float32 leaf's gradient stays float32. Only
    floating tensors other than float64 on ``device_type`` are cast.

    As in torch, autocast sees each call before the other dispatch modes, whichever was
    entered first: under ``FakeTensorMode`` (or a user's mode) entered inside an autocast
    block, the mode sees the casts and the op on the cast inputs.
    """

    # modes.call_mode hands a call to this mode before the modes entered after it
    _oplib_dispatch_first = True

    def __init__(
        self,
        device_type: str,
        dtype: Any = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        api = "autocast()"
        self.device = check_device_type(device_type, api)
        self.fast_dtype: Any = get_autocast_dtype(self.device) if dtype is None else dtype
        self._cache_enabled = _STATE.cache_enabled if cache_enabled is None else cache_enabled
        self._saved: list[tuple[tuple[bool, np.dtype] | None, bool, bool]] = []
        if enabled:
            enabled = self._check_dtype()
        self._enabled = bool(enabled)
        try:
            self._dtype = to_dtype(self.fast_dtype)
        except (TypeError, ValueError):  # disabled (warned above): the dtype is not read
            self._dtype = get_autocast_dtype(self.device)

    def _check_dtype(self) -> bool:
        """Whether autocast can run as asked; torch's warnings (and its error for a dtype
        the device cannot hold) otherwise."""
        name = self.device.upper()
        try:
            dtype = to_dtype(self.fast_dtype)
        except (TypeError, ValueError):
            dtype = None
        if dtype is None or dtype not in _SUPPORTED_DTYPES:
            warnings.warn(
                f"In {name} autocast, but the target dtype is not supported. Disabling "
                f"autocast.\n{name} Autocast only supports dtypes of bfloat16, float16 "
                f"currently (got {self.fast_dtype!r}).",
                UserWarning,
                stacklevel=3,
            )
            return False
        self.fast_dtype = dtype
        backend = TABLE.find(self.device)
        if backend is None or not backend.is_available():
            why = "not installed" if backend is None else "installed, not usable here"
            warnings.warn(
                f"{name} is not available (backend {self.device!r} {why}). Disabling autocast.",
                UserWarning,
                stacklevel=3,
            )
            return False
        if not backend.supports_dtype(dtype):
            raise BackendError(
                f"autocast(): the {self.device} backend cannot hold {dtype} (torch: 'Current "
                f"{name} Device does not support {dtype}'). Please switch dtype to "
                f"{'float16' if dtype == bfloat16 else 'bfloat16'}."
            )
        return True

    def __repr__(self) -> str:
        return (
            f"autocast(device_type={self.device!r}, dtype={self.fast_dtype}, "
            f"enabled={self._enabled}, cache_enabled={self._cache_enabled})"
        )

    def __enter__(self) -> Self:
        st = _STATE
        # Pushed only when enabled: a disabled block needs no mode (the enabled one outside,
        # if any, reads the state set here and passes the calls through).
        pushed = self._enabled
        self._saved.append((st.settings.get(self.device), st.cache_enabled, pushed))
        st.settings[self.device] = (self._enabled, self._dtype)
        st.cache_enabled = self._cache_enabled
        st.nesting += 1
        if pushed:
            super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        st = _STATE
        previous, cache_enabled, pushed = self._saved.pop()
        try:
            if pushed:
                super().__exit__(*exc)
        finally:
            st.nesting -= 1
            if st.nesting == 0:
                st.cache.clear()
            if previous is None:
                st.settings.pop(self.device, None)
            else:
                st.settings[self.device] = previous
            st.cache_enabled = cache_enabled

    def __call__(self, func: _F) -> _F:
        if not callable(func):
            raise TypeError(
                f"autocast()(func) requires a callable, but got {type(func).__name__}. Did "
                "you mean to use autocast as a context manager? For example:\n"
                "    with oplib.autocast(device_type=...):\n"
                "        output = model(input)"
            )

        @functools.wraps(func)
        def decorate_autocast(*args: Any, **kwargs: Any) -> Any:
            mode = copy.copy(self)  # a fresh block per call: recursion and threads are safe
            mode._saved = []
            with mode:
                return func(*args, **kwargs)

        return decorate_autocast  # type: ignore[return-value]

    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        st = _STATE
        if st.excluded or not isinstance(op, OpOverload) or op.name() not in _CASTING:
            return op(*args, **kwargs)  # (a higher-order op: its parts come here one by one)
        device = _call_device(args, kwargs)
        if device is None:
            return op(*args, **kwargs)
        setting = st.settings.get(device)
        if setting is None or not setting[0]:
            return op(*args, **kwargs)
        policy, dtype = policy_of(op, device)
        if policy is _NONE:
            return op(*args, **kwargs)
        if policy is _OPT:
            first = args[0] if args else None
            if kwargs.get("dtype") is None and _eligible_dtype(first, device) is not None:
                kwargs = {**kwargs, "dtype": float32}
            return _run_excluded(op, args, kwargs)
        if dtype is None:
            if policy is _LOW:
                dtype = setting[1]
            elif policy is _FP32:
                dtype = float32
            else:
                dtype = _widest(args, kwargs, device)
        args = tuple(_cast(a, device, dtype) for a in args)
        kwargs = {k: _cast(v, device, dtype) for k, v in kwargs.items()}
        return _run_excluded(op, args, kwargs)
