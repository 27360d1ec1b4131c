"""One exception type per kind of failure; each carries the culprit as data.

Every error oplib raises on purpose is an :class:`OplibError`, so ``except
oplib.OplibError`` catches them all. Where an error used to be (or, in torch, is) a
builtin exception, the oplib type also derives from that builtin (``InvalidNameError`` is
a ``ValueError``, ``NotAnOperatorError`` a ``TypeError``), so ``except ValueError`` and
friends keep working::

    OplibError
    ├── SchemaError (ValueError)
    ├── InvalidArgumentError (ValueError)
    ├── ArgumentTypeError (TypeError)
    │   └── NotAnOperatorError
    ├── CallArgumentError (TypeError)
    │   └── UnsupportedDtypeError
    ├── RegistrationError (RuntimeError)
    │   ├── UnknownOperatorError (LookupError)
    │   ├── AmbiguousOperatorError (LookupError)
    │   ├── InvalidNameError (ValueError)
    │   ├── ReservedNamespaceError (ValueError)
    │   ├── DuplicateLibraryError (ValueError)
    │   ├── UnknownDispatchKeyError (ValueError)
    │   └── LibraryDestroyedError
    ├── NoKernelError (NotImplementedError)
    │   └── NamespaceUnsupportedError
    ├── KernelResultError (TypeError, RuntimeError)
    ├── DeviceMismatchError (RuntimeError)
    ├── BackendError (RuntimeError)
    │   ├── AutogradUnsupportedError
    │   ├── BackendNameError (ValueError)
    │   ├── InvalidDeviceError (ValueError)
    │   └── DeviceModuleError
    ├── PluginError (RuntimeError)
    └── OpCheckError (AssertionError)
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AmbiguousOperatorError",
    "ArgumentTypeError",
    "AutogradUnsupportedError",
    "BackendDtypeError",
    "BackendError",
    "BackendNameError",
    "CallArgumentError",
    "DeviceMismatchError",
    "DeviceModuleError",
    "DuplicateLibraryError",
    "InvalidArgumentError",
    "InvalidDeviceError",
    "InvalidNameError",
    "KernelResultError",
    "LibraryDestroyedError",
    "NamespaceUnsupportedError",
    "NoKernelError",
    "NotAnOperatorError",
    "OpCheckError",
    "OplibError",
    "PluginError",
    "RegistrationError",
    "ReservedNamespaceError",
    "SchemaError",
    "UnknownDispatchKeyError",
    "UnknownOperatorError",
    "UnsupportedDtypeError",
]


class OplibError(Exception):
    """Base class of oplib's own errors."""

    def __reduce__(self) -> tuple[object, ...]:
        # Exception pickles as cls(*args), which drops the keyword-only arguments most
        # subclasses require (unpickling then raises TypeError: a multiprocessing pool whose
        # worker raised one hangs). Rebuilt from the message and the attributes instead.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(
    cls: type[OplibError], args: tuple[object, ...], state: dict[str, object]
) -> OplibError:
    error = cls.__new__(cls, *args)
    error.__dict__.update(state)
    return error


class InvalidArgumentError(OplibError, ValueError):
    """An argument of an oplib call has a value the call does not accept.

    ``api`` names the call (``"Library"``), ``argument`` the parameter (``"kind"``),
    ``value`` is what was given.
    """

    def __init__(self, message: str, *, api: str, argument: str, value: object) -> None:
        self.api = api
        self.argument = argument
        self.value = value
        super().__init__(message)


class ArgumentTypeError(OplibError, TypeError):
    """An argument of an oplib call has a type the call does not accept (a kernel that is
    not callable, a dispatch key that is not a str ...). Attributes as
    :class:`InvalidArgumentError`."""

    def __init__(self, message: str, *, api: str, argument: str, value: object) -> None:
        self.api = api
        self.argument = argument
        self.value = value
        super().__init__(message)


class CallArgumentError(OplibError, TypeError):
    """An operator was called with arguments its schema does not take (a missing or
    unexpected argument, a value of the wrong type, an array no installed backend
    recognises, no overload that fits). ``op`` names the operator, ``schema`` is the
    schema (or the schemas tried, one per line) the call was checked against."""

    def __init__(self, message: str, *, op: str, schema: str) -> None:
        self.op = op
        self.schema = schema
        super().__init__(message)


class BackendDtypeError(ArgumentTypeError):
    """A dtype a backend's arrays cannot hold (see ``BackendSpec.dtypes``: bfloat16 and
    float8 on cuda, float64 on JAX in its 32-bit mode, float16 on array-api-strict) was
    sent to it: data copied there, ``empty``, or an op's ``ScalarType`` argument (a
    factory's ``dtype=``, ``astype``). Core raises it, before the library is touched, for
    every backend alike. ``dtype`` is that dtype, ``backend`` the backend's name, ``api``
    what refused it (``"copy to cuda:0"``, ``"oplib::zeros()"``). ``oplib check``,
    ``opcheck`` and the ``oplib_device`` pytest fixture report it as a skip, not a
    failure."""

    def __init__(self, message: str, *, api: str, backend: str, dtype: object) -> None:
        super().__init__(message, api=api, argument="dtype", value=dtype)
        self.backend = backend
        self.dtype = dtype


class UnsupportedDtypeError(CallArgumentError):
    """A kernel failed on an array whose dtype no oplib backend computes with (object,
    str, bytes, datetime, timedelta, structured), or raised ``TypeError`` on a bfloat16 or
    float8 array (numpy lacks some functions for them). ``argument`` names the argument,
    ``dtype`` is its numpy dtype; the kernel's own exception is the ``__cause__``.

    Diagnosed only after the kernel raised, so that calls that work pay nothing for it."""

    def __init__(self, message: str, *, op: str, schema: str, argument: str, dtype: object) -> None:
        self.argument = argument
        self.dtype = dtype
        super().__init__(message, op=op, schema=schema)


class NotAnOperatorError(ArgumentTypeError):
    """Something that is not an operator was given where one was expected (``value``)."""

    def __init__(self, message: str, *, api: str, value: object) -> None:
        super().__init__(message, api=api, argument="op", value=value)


class SchemaError(OplibError, ValueError):
    """A schema string that does not parse, or a function whose schema cannot be inferred.

    ``schema`` is the text, ``position`` the 0-based offset of the offending character
    (``None`` when the error is not about one place).
    """

    def __init__(self, message: str, schema: str = "", position: int | None = None) -> None:
        self.schema = schema
        self.position = position
        self.reason = message
        if schema and position is not None:
            pointer = " " * position + "^"
            message = f"{message}\n  {schema}\n  {pointer}"
        elif schema:
            message = f"{message}\n  in schema: {schema}"
        super().__init__(message)


class RegistrationError(OplibError, RuntimeError):
    """A registration that conflicts with an existing one or is malformed.

    ``op`` is the operator's qualified name, ``existing`` the source (``file:line`` and
    plugin) of the registration already in place, if any.
    """

    def __init__(self, message: str, op: str | None = None, existing: str | None = None) -> None:
        self.op = op
        self.existing = existing
        super().__init__(message)


class UnknownOperatorError(RegistrationError, LookupError):
    """No operator goes by the name given (or the op given no longer exists).

    ``op`` is what was asked for, as text; ``suggestions`` the qualified names of existing
    operators that are spelled alike (possibly empty).
    """

    def __init__(self, message: str, op: str, suggestions: Sequence[str] = ()) -> None:
        self.suggestions = tuple(suggestions)
        super().__init__(message, op=op)


class AmbiguousOperatorError(RegistrationError, LookupError):
    """An operator packet with no default overload and several others was given where one
    overload is needed. ``op`` is the packet's qualified name, ``overloads`` the overload
    names to choose from."""

    def __init__(self, message: str, op: str, overloads: Sequence[str]) -> None:
        self.overloads = tuple(overloads)
        super().__init__(message, op=op)


class InvalidNameError(RegistrationError, ValueError):
    """A name that cannot name an operator here: no namespace (``"sin"`` for
    ``"mylib::sin"``), a namespace that is not an identifier, an overload name where none
    is allowed, another namespace than the Library's. ``name`` is the name given."""

    def __init__(self, message: str, name: object) -> None:
        self.name = name
        super().__init__(message, op=name if isinstance(name, str) else None)


class ReservedNamespaceError(RegistrationError, ValueError):
    """Defining operators in a namespace reserved for the core (``oplib``, ``prim``: the
    core op set; ``higher_order``: HigherOrderOperators only); ``namespace`` names it."""

    def __init__(self, message: str, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(message)


class DuplicateLibraryError(RegistrationError, ValueError):
    """A second ``DEF`` Library for one namespace. ``namespace`` names it, ``existing`` is
    where the first one was created."""

    def __init__(self, message: str, namespace: str, existing: str) -> None:
        self.namespace = namespace
        super().__init__(message, existing=existing)


class UnknownDispatchKeyError(RegistrationError, ValueError):
    """A dispatch key name that is no device type, alias key or known key (``key``)."""

    def __init__(self, message: str, key: str) -> None:
        self.key = key
        super().__init__(message)


class LibraryDestroyedError(RegistrationError):
    """A registration through a Library that was destroyed (``namespace`` is its
    namespace)."""

    def __init__(self, message: str, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(message)


class NoKernelError(OplibError, NotImplementedError):
    """No kernel serves an operator for the backend its inputs live on."""

    def __init__(self, message: str, op: str, key: str) -> None:
        self.op = op
        self.key = key
        super().__init__(message)


class NamespaceUnsupportedError(NoKernelError):
    """A shared core kernel (``oplib.kernels.array_kernels``) needs something the array
    namespace it is bound to lacks (``needs``, e.g. in-place writes on jax.numpy);
    ``namespace`` names it. ``oplib check`` reports it as a skip with this reason."""

    def __init__(self, message: str, op: str, namespace: str, needs: str) -> None:
        self.namespace = namespace
        self.needs = needs
        super().__init__(message, op, namespace)


class KernelResultError(OplibError, TypeError, RuntimeError):
    """A kernel (or fake kernel) returned something its operator's schema does not allow:
    a list or a Python scalar for a ``Tensor``, a tuple of the wrong length, an array no
    installed backend (or another backend than the call's) recognises, a value for ``-> ()``.

    ``op`` names the operator, ``kernel`` where the kernel is defined (``file:line``),
    ``expected`` the schema's returns, ``got`` a description of what came back. It is a
    ``TypeError`` and, as torch raises ``RuntimeError`` here, also a ``RuntimeError``.
    """

    def __init__(self, message: str, *, op: str, kernel: str, expected: str, got: str) -> None:
        self.op = op
        self.kernel = kernel
        self.expected = expected
        self.got = got
        super().__init__(message)


class DeviceMismatchError(OplibError, RuntimeError):
    """Inputs of one call live on different devices."""

    def __init__(self, message: str, op: str, devices: dict[str, str]) -> None:
        self.op = op
        self.devices = devices
        super().__init__(message)


class BackendError(OplibError, RuntimeError):
    """A backend is unknown, unavailable, or cannot do what was asked."""


class BackendNameError(BackendError, ValueError):
    """A backend name that cannot be used (``name``): not a lower-case identifier, a
    well-known backend's, taken by an installed backend or an attribute of ``oplib_core``,
    or a second, different name for the private-use backend."""

    def __init__(self, message: str, name: object) -> None:
        self.name = name
        super().__init__(message)


class InvalidDeviceError(BackendError, ValueError):
    """A device that does not fit where it was given: another backend's device, a negative
    index. ``device`` is what was given, ``device_type`` the backend expected (if any)."""

    def __init__(self, message: str, device: object, device_type: str | None = None) -> None:
        self.device = device
        self.device_type = device_type
        super().__init__(message)


class DeviceModuleError(BackendError):
    """A device module (``oplib_core.<device_type>``) that is missing, lacks a function
    (``attribute``) a caller needs, or is registered twice."""

    def __init__(self, message: str, device_type: str, attribute: str | None = None) -> None:
        self.device_type = device_type
        self.attribute = attribute
        super().__init__(message)


class AutogradUnsupportedError(BackendError):
    """An input requires grad but lives on a backend that cannot record gradients."""

    def __init__(self, message: str, op: str, backend: str) -> None:
        self.op = op
        self.backend = backend
        super().__init__(message)


class PluginError(OplibError, RuntimeError):
    """A plugin failed to load or one of its hooks raised; ``plugin`` names it."""

    def __init__(self, message: str, plugin: str) -> None:
        self.plugin = plugin
        super().__init__(message)


class OpCheckError(OplibError, AssertionError):
    """A check failed. ``op`` (qualified name), ``check`` (``"test_schema"`` ...) and
    ``backend`` say where; the message says what differed."""

    def __init__(self, message: str, *, op: str, check: str, backend: str) -> None:
        self.op = op
        self.check = check
        self.backend = backend
        super().__init__(message)
