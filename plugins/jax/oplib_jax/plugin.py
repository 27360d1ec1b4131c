"""The ``jax`` backend: ``jax.Array``, and the core op set's kernels bound to ``jax.numpy``.

Nothing here imports jax at load time: arrays are recognised by the public name
``"jax.Array"`` (matched through the class's bases once jax is imported), and the kernels are
small wrappers that bind ``array_kernels(jax.numpy)`` on their first call (factories through
``oplib_core.backends.on_device``, on the JAX device their ``device=`` argument names).

JAX arrays are immutable: the core ops that write to an argument (``copy_``) have no jax
kernel, and calling one says so (``no_kernel_hint``).

JAX's 64-bit mode is read, never switched: while it is off, the backend declares the dtypes
it holds without float64/int64 (``BackendSpec.dtypes``), so core refuses 64-bit data and
dtype arguments with ``BackendDtypeError`` saying how to switch it on (``dtype_hint``), and a
64-bit result JAX would silently truncate raises :class:`JaxDtypeError`, one of those.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from oplib_core import BackendSpec, Device, hookimpl
from oplib_core.backends import DevicePlacement, on_device
from oplib_core.errors import BackendDtypeError, BackendError
from oplib_core.kernels import CORE_OPS, array_kernels
from oplib_core.plugins import Registrar
from oplib_jax import runtime

__all__ = ["JAX", "KEY", "JaxDtypeError"]

KEY = "JAX"
_KDL_CPU = 1  # DLPack device type of host memory (JAX's cpu platform)


class JaxDtypeError(BackendDtypeError, BackendError):
    """A result JAX cannot hold in its current mode (a 64-bit default while x64 is off),
    which JAX would silently truncate; the dtype is ``.dtype``. A ``BackendDtypeError``, so
    checkers skip it as they skip the dtypes core refuses from ``BackendSpec.dtypes``."""

    def __init__(self, message: str, dtype: np.dtype, api: str = "jax") -> None:
        super().__init__(message, api=api, backend="jax", dtype=dtype)


def _device(device: Device | None) -> Any:
    """The JAX device object for ``jax:i`` (``jax`` alone: JAX's first device)."""
    found = runtime.devices()
    index = 0 if device is None or device.index is None else device.index
    if not 0 <= index < len(found):
        raise BackendError(
            f"jax:{index}: JAX reports {len(found)} device(s) ({', '.join(map(str, found))})"
        )
    return found[index]


def _device_of(array: Any) -> int:
    """``k`` of ``jax:k``: the array's device's place in ``jax.devices()`` (a GPU array on
    CUDA device ``k`` is ``jax:k`` where JAX's default platform is the GPU)."""
    device = next(iter(array.devices()))
    found = runtime.devices()
    try:
        return found.index(device)
    except ValueError:
        raise BackendError(
            f"jax: this array is on JAX's {device!r} (platform {device.platform}), which is "
            "not one of the devices of JAX's default platform that the jax backend holds as "
            f"jax:0 ... ({', '.join(map(repr, found))}); move it there first, e.g. "
            "jax.device_put(x, jax.devices()[0]), or copy it to oplib's cpu with "
            "oplib.tensor(np.asarray(x))"
        ) from None


def _to_host(array: Any) -> np.ndarray:
    return np.array(array)  # a writable copy: JAX's own buffer is read-only


def _from_host(array: np.ndarray, device: Device) -> Any:
    return runtime.jax().device_put(array, _device(device))


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: Device) -> Any:
    with runtime.jax().default_device(_device(device)):
        return runtime.jnp().empty(shape, dtype=dtype)


def _from_dlpack(obj: Any) -> Any:
    if isinstance(obj, runtime.jax().Array):
        # already where it lives: JAX's DLPack id of every cpu device is 0, so a round trip
        # through jnp.from_dlpack would move a jax:1 cpu array to jax:0
        return obj
    return runtime.jnp().from_dlpack(obj)


JAX = BackendSpec(
    name="jax",
    key=KEY,
    array_type_names=("jax.Array",),
    # below cpu: a host DLPack capsule from another library stays a numpy tensor
    priority=-1,
    status=runtime.status,
    device_count=runtime.device_count,
    device_of=_device_of,
    to_host=_to_host,
    from_host=_from_host,
    empty=_empty,
    namespace=runtime.jnp,
    from_dlpack=_from_dlpack,
    dlpack_device_type=_KDL_CPU,
    dtypes=runtime.dtypes,
    dtype_hint=runtime.X64_HINT,
    no_kernel_hint=(
        "JAX arrays are immutable, so in-place ops (copy_ ...) have no jax kernel: use the "
        "out-of-place op and keep its result"
    ),
    description="jax.Array on JAX's devices (cpu; gpu/tpu where JAX reports one)",
    library="jax",
)


class _Namespace:
    """``jax.numpy`` as the shared kernels see it, with ``asarray`` returning a jax array
    as it is: the kernels wrap every result in ``xp.asarray`` (numpy ufuncs give scalars for
    0-d input), which jax.numpy does not need and which costs more than the op itself."""

    def __init__(self, jnp: Any, array: type) -> None:
        self._jnp = jnp
        self._array = array

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jnp, name)

    def asarray(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if type(obj) is self._array and not args and not kwargs:
            return obj
        return self._jnp.asarray(obj, *args, **kwargs)


@functools.cache
def _kernels() -> dict[str, Callable[..., Any]]:
    jnp = runtime.jnp()
    return array_kernels(_Namespace(jnp, type(jnp.zeros(()))))


#: Ops whose result dtype may be a 64-bit default chosen inside the kernel (int64 sums and
#: aranges, int64 fills): JAX would truncate it with a warning; here it is an error. (A
#: dtype asked for by a ``dtype`` argument is checked by core, from ``BackendSpec.dtypes``.)
_DTYPE_DEFAULTS = frozenset(("sum", "mean", "full", "arange", "arange.start", "astype"))
#: Factories: they run on the JAX device of their ``device=`` argument.
_FACTORIES = frozenset(("empty", "zeros", "ones", "full", "arange", "arange.start"))


_TRUNCATED = re.compile(r"Explicitly requested dtype (\w+) requested")


@contextlib.contextmanager
def _no_truncation(name: str) -> Iterator[None]:
    """JAX's "requested dtype ... will be truncated" warning raised as ``JaxDtypeError``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("always", message="Explicitly requested dtype")
        yield
    for w in caught:
        found = _TRUNCATED.match(str(w.message))
        if found is not None:
            raise JaxDtypeError(
                f"oplib::{name} on jax: the result would be {found[1]} (as in torch), which "
                f"JAX cannot hold now: {runtime.X64_HINT} (give dtype=)",
                np.dtype(found[1]),
                f"oplib::{name}()",
            )
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _placement() -> DevicePlacement:
    """Factories run on the JAX device their ``device=`` argument names (``jax:i`` under
    ``jax.default_device``); no array decides, as JAX runs an op where its inputs are, and
    JAX has no current device to compare with, so a named device is always entered."""
    return DevicePlacement(
        array_type=(),
        device_of=_device_of,
        current_device=None,
        device=lambda index: runtime.jax().default_device(_device(Device("jax", index))),
        device_count=runtime.device_count,
    )


def _bound(name: str) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _kernels()[name](*args, **kwargs)

    if name not in _DTYPE_DEFAULTS and name not in _FACTORIES:
        return kernel

    def checked(*args: Any, **kwargs: Any) -> Any:
        with _no_truncation(name):
            return _kernels()[name](*args, **kwargs)

    if name not in _FACTORIES:
        return checked
    return on_device(lambda: checked, _placement, name=f"jax_{name.replace('.', '_')}")


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [JAX]


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    for op in CORE_OPS:
        if not op.writes:  # JAX arrays are immutable (see ``no_kernel_hint``)
            kernel = _bound(op.name)
            kernel.__name__ = kernel.__qualname__ = f"jax_{op.name.replace('.', '_')}"
            registrar.impl(f"oplib::{op.name}", KEY, kernel)
