"""oplib: define operators once, run them on any device through installable backends.

``import oplib_core as oplib``. The plugins installed under the ``oplib`` entry-point group
load on first use of the dispatch table (looking up an op, defining or registering one,
asking about devices or backends), or when ``oplib.plugins.load()`` is called
(``OPLIB_PLUGINS_AUTOLOAD=0`` to skip them, ``OPLIB_DISABLE_PLUGINS=a,b`` to block some).
"""

from __future__ import annotations

import builtins
import importlib
import os
from typing import TYPE_CHECKING, Any

from . import autograd, backend_registration, backends, plugins, profiler, return_types
from . import native as native  # device-generic helpers for kernels (oplib.native)
from ._autocast import autocast, get_autocast_dtype, is_autocast_available, is_autocast_enabled
from ._check import (
    _check,
    _check_index,
    _check_is_size,
    _check_not_implemented,
    _check_type,
    _check_value,
)
from ._device import Device
from ._dispatch import DispatchKeySet, DispatchMode, OpOverload

# torch's dtype spellings that are builtins' names: not in __all__ either (as ``map``)
from ._dtype_aliases import bool as bool
from ._dtype_aliases import cdouble, cfloat, double, half, long, short
from ._dtype_aliases import float as float
from ._dtype_aliases import int as int
from ._dtype_info import finfo, iinfo
from ._dtypes import (
    bfloat16,
    bool_,
    channels_last,
    channels_last_3d,
    complex64,
    complex128,
    contiguous_format,
    float8_e4m3fn,
    float8_e4m3fnuz,
    float8_e5m2,
    float8_e5m2fnuz,
    float8_e8m0fnu,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    layout,
    memory_format,
    preserve_format,
    promote_types,
    set_default_dtype,
    strided,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ._explain import DispatchExplanation, explain
from ._factories import (
    arange,
    empty,
    empty_like,
    from_dlpack,
    full,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from ._grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from ._higher_order import (
    ControlFlowError,
    HigherOrderOperator,
    cond,
    scan,
    while_loop,
)
from ._higher_order import map as map  # re-exported by the alias: not in __all__ (see there)
from ._infer_schema import infer_schema
from ._native._api import classes, get_include, register_class, register_fake_class
from ._native._errors import LibraryLoadError, NativeKernelError
from ._registry import startup as _startup
from ._registry.lookup import lookup, registered_ops
from ._schema import FunctionSchema, parse_schema
from ._tags import Tag
from ._tensor import methods as _methods  # noqa: F401 (sets the core ops' Tensor methods)
from ._tensor.tensor import Tensor
from ._version import __version__
from ._vmap._api import vmap
from .autograd import register_autograd
from .backend_registration import (
    generate_methods_for_backend,
    generate_methods_for_privateuse1_backend,
    register_device_module,
    rename_privateuse1_backend,
)
from .backends import BackendSpec, device
from .custom_op import CustomOpDef, custom_op
from .errors import (
    AmbiguousOperatorError,
    ArgumentTypeError,
    AutogradUnsupportedError,
    BackendDtypeError,
    BackendError,
    BackendNameError,
    CallArgumentError,
    DeviceMismatchError,
    DeviceModuleError,
    DuplicateLibraryError,
    InvalidArgumentError,
    InvalidDeviceError,
    InvalidNameError,
    KernelResultError,
    LibraryDestroyedError,
    NamespaceUnsupportedError,
    NoKernelError,
    NotAnOperatorError,
    OpCheckError,
    OplibError,
    PluginError,
    RegistrationError,
    ReservedNamespaceError,
    SchemaError,
    UnknownDispatchKeyError,
    UnknownOperatorError,
    UnsupportedDtypeError,
)
from .fake import DataAccessError, DataDependentError, FakeTensorError, SymInt, get_ctx
from .fake._mode import FakeTensorMode
from .library import (
    Library,
    define,
    fallthrough_kernel,
    impl,
    impl_abstract,
    register_dispatch_rule,
    register_fake,
    register_kernel,
)
from .ops import OpOverloadPacket, ops
from .profiler import profile

if TYPE_CHECKING:  # at run time imported on first use (``__getattr__``, ``_LAZY``)
    from . import array_api, legacy
    from .hookspecs import hookimpl, hookspec
    from .testing._checks import OpCheckResults

# ``map`` (oplib.map, the control-flow operator) is public but not in ``__all__``, so that
# ``from oplib_core import *`` does not shadow the builtin.
__all__ = [
    "AmbiguousOperatorError",
    "ArgumentTypeError",
    "AutogradUnsupportedError",
    "BackendDtypeError",
    "BackendError",
    "BackendNameError",
    "BackendSpec",
    "CallArgumentError",
    "ControlFlowError",
    "CustomOpDef",
    "DataAccessError",
    "DataDependentError",
    "Device",
    "DeviceMismatchError",
    "DeviceModuleError",
    "DispatchExplanation",
    "DispatchKeySet",
    "DispatchMode",
    "DuplicateLibraryError",
    "FakeTensorError",
    "FakeTensorMode",
    "FunctionSchema",
    "HigherOrderOperator",
    "InvalidArgumentError",
    "InvalidDeviceError",
    "InvalidNameError",
    "KernelResultError",
    "Library",
    "LibraryDestroyedError",
    "LibraryLoadError",
    "NamespaceUnsupportedError",
    "NativeKernelError",
    "NoKernelError",
    "NotAnOperatorError",
    "OpCheckError",
    "OpOverload",
    "OpOverloadPacket",
    "OplibError",
    "PluginError",
    "RegistrationError",
    "ReservedNamespaceError",
    "SchemaError",
    "SymInt",
    "Tag",
    "Tensor",
    "UnknownDispatchKeyError",
    "UnknownOperatorError",
    "UnsupportedDtypeError",
    "__version__",
    "_check",
    "_check_index",
    "_check_is_size",
    "_check_not_implemented",
    "_check_type",
    "_check_value",
    "arange",
    "array_api",
    "autocast",
    "autograd",
    "backends",
    "bfloat16",
    "bool_",
    "cdouble",
    "cfloat",
    "channels_last",
    "channels_last_3d",
    "classes",
    "complex64",
    "complex128",
    "cond",
    "contiguous_format",
    "custom_op",
    "define",
    "device",
    "double",
    "empty",
    "empty_like",
    "enable_grad",
    "explain",
    "fallthrough_kernel",
    "finfo",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "full",
    "generate_methods_for_backend",
    "generate_methods_for_privateuse1_backend",
    "get_autocast_dtype",
    "get_ctx",
    "get_default_dtype",
    "get_include",
    "half",
    "hookimpl",
    "hookspec",
    "iinfo",
    "impl",
    "impl_abstract",
    "infer_schema",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_autocast_available",
    "is_autocast_enabled",
    "is_grad_enabled",
    "layout",
    "legacy",
    "long",
    "lookup",
    "memory_format",
    "no_grad",
    "ones",
    "ones_like",
    "opcheck",
    "ops",
    "parse_schema",
    "plugins",
    "preserve_format",
    "profile",
    "profiler",
    "promote_types",
    "register_autograd",
    "register_class",
    "register_device_module",
    "register_dispatch_rule",
    "register_fake",
    "register_fake_class",
    "register_kernel",
    "registered_ops",
    "rename_privateuse1_backend",
    "return_types",
    "scan",
    "set_default_dtype",
    "set_grad_enabled",
    "short",
    "strided",
    "tensor",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "vmap",
    "while_loop",
    "zeros",
    "zeros_like",
]


def opcheck(
    op: Any,
    args: Any,
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> OpCheckResults:
    """:func:`oplib_core.testing.opcheck` (imported on first call: the checking machinery
    is not needed to run ops)."""
    from .testing._checks import opcheck as run

    return run(op, args, kwargs, **options)


# Imported on first use, to keep ``import oplib_core`` light: name -> (module, attribute).
_LAZY = {
    "legacy": ("legacy", None),
    "array_api": ("array_api", None),
    # pluggy is imported when the plugins load, or when a plugin module asks for these
    "hookimpl": ("hookspecs", "hookimpl"),
    "hookspec": ("hookspecs", "hookspec"),
}


def __getattr__(name: str) -> Any:
    """Until the plugins are loaded (see ``_settle``): the lazily imported names
    (``legacy``, ``hookimpl``, ``hookspec``) and ``oplib_core.<device type>``, the device
    module of a backend (``oplib.cuda``; ``oplib.npu`` after a rename), which loads them."""
    lazy = _LAZY.get(name)
    if lazy is not None:
        module = importlib.import_module(f".{lazy[0]}", __name__)
        value = module if lazy[1] is None else getattr(module, lazy[1])
        globals()[name] = value
        return value
    if _is_submodule(name):
        # ``from oplib_core import cli`` asks here before importing the submodule; looking
        # for a device module would load the plugins for nothing.
        raise AttributeError(f"module 'oplib_core' has no attribute {name!r}")
    mod = backend_registration.device_module(name)
    if mod is None:
        raise AttributeError(f"module 'oplib_core' has no attribute {name!r}")
    return mod


def _is_submodule(name: str) -> builtins.bool:
    here = __path__[0]
    return os.path.isfile(os.path.join(here, f"{name}.py")) or os.path.isfile(
        os.path.join(here, name, "__init__.py")
    )


def _load_plugins() -> None:
    from . import _core_plugin
    from ._discovery import CORE_DISTRIBUTION
    from ._plugin_host import HOST
    from .autograd import _core_autograd_plugin
    from .fake import _core_fake_plugin
    from .testing import _samples_plugin

    with HOST.transaction():  # all or nothing, Ctrl-C included: retried next use
        # declared by oplib-core itself: the only plugins allowed the reserved namespaces
        core = CORE_DISTRIBUTION
        HOST.register(_core_plugin, name="core", distribution=core)
        HOST.register(_core_fake_plugin, name="core-fake", distribution=core)
        HOST.register(_core_autograd_plugin, name="core-autograd", distribution=core)
        HOST.register(_samples_plugin, name="core-samples", distribution=core)
        HOST.load_entry_points()
    _settle()


def _settle() -> None:
    """Once the plugins are in, bind what ``__getattr__`` served and drop it: CPython does
    not specialise attribute loads on a module with a ``__getattr__`` (each ``oplib.x``
    would cost about 30 ns more, on every op call written ``oplib.ops.ns.op(x)``). Device
    modules are package attributes from here on (``backend_registration`` binds them)."""
    from . import array_api, hookspecs, legacy

    g = globals()
    g["legacy"] = legacy
    g["array_api"] = array_api
    g["hookimpl"] = hookspecs.hookimpl
    g["hookspec"] = hookspecs.hookspec
    g.pop("__getattr__", None)


_startup.defer(_load_plugins)
