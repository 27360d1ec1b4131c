"""One exception type per kind of failure; each carries the culprit as data."""

from __future__ import annotations

__all__ = [
    "AutogradUnsupportedError",
    "BackendError",
    "DeviceMismatchError",
    "NoKernelError",
    "OpCheckError",
    "OplibError",
    "PluginError",
    "RegistrationError",
    "SchemaError",
]


class OplibError(Exception):
    """Base class of oplib's own errors."""


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


class NoKernelError(OplibError, NotImplementedError):
    """No kernel serves an operator for the backend its inputs live on."""

    def __init__(self, message: str, op: str, key: str) -> None:
        self.op = op
        self.key = key
        super().__init__(message)


class DeviceMismatchError(OplibError, RuntimeError):
    """Inputs of one call live on different devices."""

    def __init__(self, message: str, op: str, devices: dict[str, str]) -> None:
        self.op = op
        self.devices = devices
        super().__init__(message)


class BackendError(OplibError, RuntimeError):
    """A backend is unknown, unavailable, or cannot do what was asked."""


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
