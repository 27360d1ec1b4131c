"""The private-use backend slot and device modules, after torch's
``torch/utils/backend_registration.py``.

A vendor ships a backend named ``privateuse1`` (dispatch key ``PrivateUse1``) and gives it
its own name once per process with :func:`rename_privateuse1_backend` (or the environment
variable ``OPLIB_PRIVATEUSE1_NAME``, which the core applies when a plugin registers the
``privateuse1`` backend; a bad name fails that plugin's load, rolled back). Kernels
registered for ``privateuse1``/``PrivateUse1`` move to the new name; kernels registered for
the new name before the rename wait for it. A backend's device module (``is_available``,
``device_count``, ``current_device``, ``manual_seed_all`` ...) is ``oplib_core.<name>``:
either declared by its ``BackendSpec(device_module=...)`` (it follows the backend's current
name) or registered with :func:`register_device_module`.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import numpy as np

from ._device import Device, parse_device
from ._registry.entry import PluginContext, current_plugin
from ._registry.ownership import party
from ._registry.registry import _WELL_KNOWN_KEYS, REGISTRY, Handle
from ._registry.startup import LOCK, ensure
from ._tensor.tensor import Tensor
from .backends import TABLE
from .errors import (
    ArgumentTypeError,
    BackendError,
    BackendNameError,
    DeviceModuleError,
    InvalidDeviceError,
    RegistrationError,
)

__all__ = [
    "device_module_function",
    "generate_methods_for_backend",
    "generate_methods_for_privateuse1_backend",
    "normalize_device",
    "privateuse1_backend_name",
    "register_device_module",
    "rename_privateuse1_backend",
]

PRIVATEUSE1 = "privateuse1"
ENV_NAME = "OPLIB_PRIVATEUSE1_NAME"

# Device types that mean something else already: a private-use backend may not take them.
_RESERVED = frozenset(_WELL_KNOWN_KEYS.values()) - {PRIVATEUSE1} | {"default", "privateuseone"}

_lock = LOCK  # the registration lock: renaming touches the registry and the table
_privateuse1_backend_name = PRIVATEUSE1
_device_modules: dict[str, Any] = {}


_PACKAGE = __name__.rpartition(".")[0]


def _package() -> Any:
    """The ``oplib_core`` package object (always imported before its submodules)."""
    return sys.modules[_PACKAGE]


def privateuse1_backend_name() -> str:
    """The private-use backend's current name: ``"privateuse1"`` until renamed (torch's
    ``torch._C._get_privateuse1_backend_name``)."""
    ensure()  # a plugin may rename the slot when the plugins load
    return _privateuse1_backend_name


#: The seed's name (torch's ``torch._C._get_privateuse1_backend_name``).
_get_privateuse1_backend_name = privateuse1_backend_name


def rename_privateuse1_backend(backend_name: str) -> None:
    """Rename the ``privateuse1`` backend to ``backend_name`` (``"npu"``) for this process.

    Afterwards ``"npu"``/``"npu:1"`` are device strings, ``impl``/``register_kernel`` take
    ``"npu"`` (``"PrivateUse1"`` and ``"privateuse1"`` still mean it too), kernels
    registered before the rename for ``privateuse1`` move to ``npu``, and the backend's device
    module is ``oplib_core.npu``. The backend itself may be installed before or after the
    call. Renaming is allowed once per process: the same name again is a no-op. The name
    must be a lower-case identifier that no installed or well-known backend (``cpu``,
    ``cuda``, ``meta`` ...) and no attribute of ``oplib_core`` uses. A refused name (another
    name after a rename included) raises :class:`~oplib_core.errors.BackendNameError`, a
    ``BackendError`` and a ``ValueError``.

    To make ``t.npu()`` and ``t.is_npu`` exist, call
    :func:`generate_methods_for_privateuse1_backend` afterwards.
    """
    global _privateuse1_backend_name
    ensure()  # load the plugins first: renaming applies to what they register
    _expect_str(
        backend_name, "rename_privateuse1_backend", "backend_name", "the new device name as a str"
    )
    with _lock:
        current = _privateuse1_backend_name
        ctx = current_plugin.get()
        who = party(ctx)
        if current != PRIVATEUSE1:
            if backend_name == current:
                return
            holder = _slot.renamer
            if who is not None and holder is not None and holder[0] != who:
                _refuse_both(who, backend_name, holder, current)
            by = f" by {holder[0]}" if holder is not None else ""
            raise BackendNameError(
                f"rename_privateuse1_backend(): the privateuse1 backend was already renamed to "
                f"{current!r}{by} in this process and can be renamed only once; got "
                f"{backend_name!r}. Rename it before first use, in one place (or set "
                f"{ENV_NAME}).",
                backend_name,
            )
        _check_new_name(backend_name)
        REGISTRY.rename_key(PRIVATEUSE1, backend_name)  # checks conflicts before changing
        TABLE.rename(PRIVATEUSE1, backend_name)
        _privateuse1_backend_name = backend_name
        if who is not None and ctx is not None:
            _slot.renamer = (who, ctx.plugin)
        _credit(ctx, _unrename, f"rename privateuse1 to {backend_name}")


class _Slot:
    """Who renamed the private-use slot: a plugin's party and name (None: user code)."""

    renamer: tuple[str, str] | None = None


_slot = _Slot()


def _credit(ctx: PluginContext | None, undo: Callable[[], None], what: str) -> None:
    """Hand ``undo`` to the plugin whose hook runs: rolled back if the plugin fails."""
    if ctx is not None and ctx.owner is not None:
        ctx.owner._register(Handle(undo, what))


def _unrename() -> None:
    global _privateuse1_backend_name
    with _lock:
        name = _privateuse1_backend_name
        if name == PRIVATEUSE1:
            return
        REGISTRY.unrename_key(PRIVATEUSE1, name)
        TABLE.unrename(PRIVATEUSE1, name)
        _privateuse1_backend_name = PRIVATEUSE1
        _slot.renamer = None


def _refuse_both(who: str, wanted: str, holder: tuple[str, str], current: str) -> None:
    """Two plugins rename the slot: neither keeps it (never "first found wins"). The one
    that renamed first is failed and rolled back (its rename, generated methods and device
    module go with it); the caller's hook raises."""
    message = (
        f"rename_privateuse1_backend(): {who} renames the privateuse1 slot to {wanted!r} and "
        f"{holder[0]} renamed it to {current!r}; the slot takes one name per process, so both "
        "are refused. Install one of them only, or give a vendor backend a name of its own "
        "(BackendSpec(name=...) and oplib.generate_methods_for_backend(name))"
    )
    if REGISTRY.evict is not None:
        REGISTRY.evict(holder[1], BackendNameError(message, wanted))
    _unrename()  # when the holder is not a loaded plugin (any more)
    raise BackendNameError(message, wanted)


def _expect_str(value: Any, api: str, argument: str, what: str) -> None:
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{api}(): expected {what}, got {type(value).__name__}",
            api=api,
            argument=argument,
            value=value,
        )


def _check_new_name(name: str) -> None:
    api = "rename_privateuse1_backend()"
    if not name.isidentifier() or name != name.lower():
        raise BackendNameError(
            f"{api}: the new name must be a lower-case Python identifier usable as a device "
            f"string (like 'npu'), got {name!r}",
            name,
        )
    if name == PRIVATEUSE1:
        raise BackendNameError(
            f"{api}: {name!r} is the slot's own name; pass your device's name", name
        )
    if name in _RESERVED:
        raise BackendNameError(
            f"{api}: {name!r} is the name of a well-known backend; choose a name of your own",
            name,
        )
    taken = TABLE.find(name)
    if taken is not None:
        raise BackendNameError(
            f"{api}: a backend named {name!r} is already installed (plugin "
            f"{taken.plugin!r}, distribution {taken.distribution or '-'}); choose another name",
            name,
        )
    if name in vars(_package()) or name in _device_modules:
        raise BackendNameError(
            f"{api}: {name!r} clashes with the existing attribute oplib_core.{name}, where "
            "the device module would go; choose another name",
            name,
        )


def _rename_from_env() -> None:
    """Apply ``OPLIB_PRIVATEUSE1_NAME`` if set. The plugin host calls this right after a
    plugin registers the ``privateuse1`` backend; a bad name raises there, which fails that
    plugin's load and rolls its registrations back (reported by ``oplib plugins list``).
    The same name again is a no-op."""
    name = os.environ.get(ENV_NAME, "").strip()
    if name:
        # the user's choice, not the plugin's: it is not undone with the plugin, and a
        # plugin that renamed the slot otherwise is named in the error
        token = current_plugin.set(None)
        try:
            rename_privateuse1_backend(name)
        finally:
            current_plugin.reset(token)


# -- device modules ---------------------------------------------------------------------


def register_device_module(device_type: str, module: Any) -> Callable[[], None]:
    """Make ``module`` available as ``oplib_core.<device_type>`` (torch's
    ``torch._register_device_module``). Returns a function that removes it again.

    ``device_type`` must name an installed backend or the private-use backend (under its
    current name or as ``"privateuse1"``); any other name raises
    :class:`~oplib_core.errors.DeviceModuleError` (a ``RuntimeError``) with torch's message
    for an unknown device type. The private-use backend's own (template) device module may
    be replaced: a vendor registers its module after :func:`rename_privateuse1_backend`, and
    a ``UserWarning`` names the module it replaced. Any other existing attribute of
    ``oplib_core`` (a device module registered before, ``cuda``'s, ``tensor`` ...) raises
    ``DeviceModuleError`` as torch does.
    """
    _expect_str(device_type, "register_device_module", "device_type", "a device type (str)")
    name = parse_device(device_type).type
    ensure()
    with _lock:
        pkg = _package()
        backend = TABLE.find(name)
        is_privateuse = name in (PRIVATEUSE1, _privateuse1_backend_name) or (
            backend is not None and backend.name == _privateuse1_backend_name
        )
        replaced: Any = None
        if name in _device_modules or name in vars(pkg):
            existing = getattr(pkg, name, None)
            template = name not in _device_modules and _bound.get(name) is existing
            if not (is_privateuse and template and existing is not None):
                raise DeviceModuleError(
                    f"The runtime module of '{name}' has already been registered with '{existing}'",
                    name,
                )
            replaced = existing
        elif backend is None and not is_privateuse:
            known = sorted({b.name for b in TABLE.all()} | {_privateuse1_backend_name})
            raise DeviceModuleError(
                f"Expected one of {', '.join(known)} device type at start of device string: "
                f"{name} (register_device_module() takes the name of an installed backend "
                "or of the private-use backend)",
                name,
            )
        _device_modules[name] = module
        if replaced is not None:
            del _bound[name]
            vars(pkg)[name] = module
            warnings.warn(
                f"register_device_module(): oplib_core.{name} was the device module "
                f"{getattr(replaced, '__name__', replaced)!r} of the private-use backend; "
                f"replaced it with {getattr(module, '__name__', module)!r}",
                UserWarning,
                stacklevel=2,
            )
        else:
            _bind(name, module)
        _credit(current_plugin.get(), lambda: unregister(), f"device module oplib_core.{name}")

    def unregister() -> None:
        with _lock:
            if _device_modules.get(name) is module:
                del _device_modules[name]
                pkg = vars(_package())
                if pkg.get(name) is module:
                    del pkg[name]
                _bound.pop(name, None)
                current = TABLE.find(name)
                if replaced is not None and current is not None:
                    _bind(name, current.spec.device_module)

    return unregister


# Device modules are plain attributes of the package (``oplib.cuda``), bound here as
# backends come and go: attribute loads on a module with a ``__getattr__`` are not
# specialised by CPython, so the package drops its ``__getattr__`` once the plugins load.
_bound: dict[str, Any] = {}  # name -> the module this file bound on the package


def _bind(name: str, module: Any) -> None:
    pkg = vars(_package())
    if module is not None and (name not in pkg or isinstance(pkg[name], _PendingModule)):
        pkg[name] = _bound[name] = module


class _PendingModule(ModuleType):
    """``oplib_core.<name>`` while the plugin of backend ``name`` waits to be loaded
    (``_backend_cache``): reading an attribute loads it and answers from its device module,
    which then takes this one's place."""

    def __init__(self, backend: str) -> None:
        super().__init__(f"{_PACKAGE}.{backend}")
        self._oplib_backend = backend

    def __getattr__(self, attr: str) -> Any:
        real = device_module(self._oplib_backend)  # loads the plugin
        if real is None or real is self:
            raise AttributeError(
                f"the device module oplib_core.{self._oplib_backend} has no attribute {attr!r}: "
                f"its backend's plugin did not load (see `oplib plugins list`)"
            )
        return getattr(real, attr)


def bind_deferred(name: str) -> None:
    """Bind ``oplib_core.<name>`` to a stand-in until backend ``name``'s plugin loads."""
    with _lock:
        pkg = vars(_package())
        if name not in pkg:
            pkg[name] = _bound[name] = _PendingModule(name)


def unbind_deferred(name: str) -> None:
    """Drop the stand-in of :func:`bind_deferred` if the backend did not replace it."""
    with _lock:
        stand_in = _bound.get(name)
        if isinstance(stand_in, _PendingModule):
            _unbind(name, stand_in)


def _unbind(name: str, module: Any) -> None:
    if module is not None and _bound.get(name) is module:
        del _bound[name]
        vars(_package()).pop(name, None)


def _on_backend(event: str, backend: Any) -> None:
    mod = backend.spec.device_module
    if event in ("added", "renamed"):
        # Every name TABLE.find resolves to it: a renamed backend keeps its old name as an
        # alias, also when the rename came before the backend registered.
        for name in (backend.name, *TABLE.aliases_of(backend.name)):
            _bind(name, mod)
    elif event == "removed":
        for name in [n for n, m in _bound.items() if m is mod and n not in _device_modules]:
            _unbind(name, mod)


TABLE.add_listener(_on_backend)


def device_module(name: str) -> Any:
    """The device module ``oplib_core.<name>``, or ``None``: one registered with
    :func:`register_device_module`, else the ``device_module`` of the backend ``name``."""
    ensure()  # plugins register device modules when they load
    mod = _device_modules.get(name)
    if mod is not None:
        return mod
    backend = TABLE.find(name)
    return None if backend is None else backend.spec.device_module


def device_module_function(func_name: str) -> Callable[..., Any]:
    """The function ``func_name`` of the private-use backend's device module
    (``oplib_core.<name>.<func_name>``, under the backend's current name). When the module
    or the function is missing, a :class:`~oplib_core.errors.DeviceModuleError` (a
    ``RuntimeError``) explains what to register.

    For backend implementers calling into their device module from generic code.
    """
    assert isinstance(func_name, str), f"func_name must be `str`, but got `{type(func_name)}`."
    backend_name = privateuse1_backend_name()
    mod = device_module(backend_name)
    function: Callable[..., Any] | None = getattr(mod, func_name, None)
    if mod is None or function is None:
        raise DeviceModuleError(
            f"Try to call oplib_core.{backend_name}.{func_name}. The backend must register a "
            f"custom backend module with `oplib_core.register_device_module('{backend_name}', "
            "BackendModule)` (or BackendSpec(device_module=...)). And BackendModule needs to "
            f"have the following API's:\n `{func_name}(*args, **kwargs)`. \n",
            backend_name,
            func_name,
        )
    return function


#: The seed's name (torch's ``torch.utils.backend_registration._get_custom_mod_func``).
_get_custom_mod_func = device_module_function


# -- device index normalisation -----------------------------------------------------------


def normalize_device(device: int | str | Device | None, device_type: str) -> int:
    """The device index ``device`` means for backend ``device_type`` (torch's
    ``_normalization_device``): ``None`` and an index-less device are the current device
    (``oplib_core.<device_type>.current_device()`` when the device module has it, else 0);
    ``"npu:1"``/``Device("npu", 1)`` give 1; an int is taken as the index.

    A device of another type or a negative index raises
    :class:`~oplib_core.errors.InvalidDeviceError` (a ``RuntimeError`` and a
    ``ValueError``); anything else :class:`~oplib_core.errors.ArgumentTypeError`.
    """
    return _normalization_device(device_type, device)


def _normalization_device(
    custom_backend_name: str, device: int | str | Device | None = None
) -> int:
    """The seed's spelling of :func:`normalize_device` (backend name first)."""

    def current_index() -> int:
        current = getattr(device_module(custom_backend_name), "current_device", None)
        return int(current()) if current is not None else 0

    if device is None:
        return current_index()
    if isinstance(device, str):
        device = parse_device(device)
    if isinstance(device, Device):
        if device.type != custom_backend_name:
            raise InvalidDeviceError(
                f"Invalid device, must be {custom_backend_name} device; got '{device}'",
                device,
                custom_backend_name,
            )
        return current_index() if device.index is None else device.index
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        if device < 0:
            raise InvalidDeviceError(
                f"Invalid device index {device} for {custom_backend_name}: must be >= 0",
                device,
                custom_backend_name,
            )
        return int(device)
    raise ArgumentTypeError(
        f"Invalid device, must be {custom_backend_name} device: expected an index (int), a "
        f"'{custom_backend_name}:<index>' string or an oplib Device, got "
        f"{type(device).__name__}",
        api="normalize_device",
        argument="device",
        value=device,
    )


# -- generated methods ------------------------------------------------------------------


def _check_register_once(module: Any, attr: str) -> None:
    if hasattr(module, attr):
        raise RegistrationError(
            f"The custom device module of {module} has already been registered with {attr}"
        )


def _generate_tensor_methods_for_privateuse1_backend(
    custom_backend_name: str, unsupported_dtype: Iterable[Any] | None = None
) -> None:
    is_attr = f"is_{custom_backend_name}"
    _check_register_once(Tensor, is_attr)
    _check_register_once(Tensor, custom_backend_name)
    unsupported = frozenset(np.dtype(d) for d in unsupported_dtype or ())

    def wrap_tensor_backend(self: Tensor) -> bool:
        return self.device.type == custom_backend_name

    wrap_tensor_backend.__doc__ = f"Whether this tensor lives on a {custom_backend_name} device."

    def wrap_tensor_to(
        self: Tensor,
        device: int | str | Device | None = None,
        non_blocking: bool = False,
        *,
        copy: bool = False,
    ) -> Tensor:
        # non_blocking is accepted for torch compatibility; copies here are synchronous.
        index = _normalization_device(custom_backend_name, device)
        if self.dtype in unsupported:
            raise BackendError(
                f"Cannot create a {custom_backend_name} tensor: dtype {self.dtype} is not "
                "supported by this backend"
            )
        return self.to(Device(custom_backend_name, index), copy=copy)

    wrap_tensor_to.__name__ = wrap_tensor_to.__qualname__ = custom_backend_name
    wrap_tensor_to.__doc__ = (
        f"A copy of this tensor on {custom_backend_name} device ``device`` (default: the "
        "current one); the tensor itself when it is already there."
    )
    setattr(Tensor, is_attr, property(wrap_tensor_backend))
    setattr(Tensor, custom_backend_name, wrap_tensor_to)

    def remove() -> None:
        with _lock:
            for attr in (is_attr, custom_backend_name):
                if attr in vars(Tensor):
                    delattr(Tensor, attr)

    # a plugin's generated methods go if it fails (a rename conflict, say)
    _credit(current_plugin.get(), remove, f"Tensor.{custom_backend_name}/.{is_attr}")


def generate_methods_for_privateuse1_backend(
    for_tensor: bool = True,
    for_module: bool | None = None,
    for_packed_sequence: bool | None = None,
    for_storage: bool = False,
    unsupported_dtype: Iterable[Any] | None = None,
) -> None:
    """Add ``Tensor.<name>(device=None)`` and the property ``Tensor.is_<name>`` for the
    private-use backend under its current name (call it after
    :func:`rename_privateuse1_backend`). Generating them twice raises ``RuntimeError``.
    torch's signature and order of arguments.

    ``unsupported_dtype`` lists dtypes ``Tensor.<name>()`` refuses to move to the device.
    oplib has no ``Storage``, ``nn.Module`` or ``PackedSequence`` types: ``for_storage=True``,
    ``for_module=True`` and ``for_packed_sequence=True`` generate nothing and warn
    (``UserWarning``) naming the type oplib lacks; left at their defaults they are silent.
    """
    lacking = [
        (flag, kind)
        for flag, kind, asked in (
            ("for_module", "Module (torch.nn.Module)", for_module),
            ("for_packed_sequence", "PackedSequence (torch.nn.utils.rnn)", for_packed_sequence),
            ("for_storage", "Storage (torch.UntypedStorage)", for_storage),
        )
        if asked
    ]
    for flag, kind in lacking:
        warnings.warn(
            f"generate_methods_for_privateuse1_backend(): oplib has no {kind} type, so "
            f"{flag}=True generates nothing; only Tensor methods exist",
            UserWarning,
            stacklevel=2,
        )
    name = privateuse1_backend_name()
    if for_tensor:
        with _lock:
            _generate_tensor_methods_for_privateuse1_backend(name, unsupported_dtype)


def generate_methods_for_backend(
    name: str, for_tensor: bool = True, unsupported_dtype: Iterable[Any] | None = None
) -> None:
    """Add ``Tensor.<name>(device=None)`` and the property ``Tensor.is_<name>`` for the
    installed backend ``name``: what :func:`generate_methods_for_privateuse1_backend` does
    for the private-use slot, for a backend with a name of its own (``BackendSpec(name=
    "myaccel")``), so a vendor need not take the slot. Call it once the backend is
    installed (from your plugin's ``oplib_impl`` hook, or after ``oplib.plugins.load()``);
    called from a plugin's hook, the methods go if the plugin fails.

    A name that is no installed backend raises :class:`~oplib_core.errors.BackendError`;
    generating twice (or a name ``Tensor`` already uses, like ``cpu``) raises
    :class:`~oplib_core.errors.RegistrationError`.
    """
    _expect_str(name, "generate_methods_for_backend", "name", "a backend name (str)")
    backend = TABLE.find(name)
    if backend is None:
        raise BackendError(
            f"generate_methods_for_backend(): no backend named {name!r} is installed "
            f"(installed: {TABLE.names_text()}); call it once your plugin's backend is "
            "registered, e.g. from its oplib_impl hook"
        )
    if for_tensor:
        with _lock:
            _generate_tensor_methods_for_privateuse1_backend(backend.name, unsupported_dtype)
