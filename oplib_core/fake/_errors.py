"""The errors of the fake machinery; each carries the culprit as data."""

from __future__ import annotations

from ..errors import BackendError, OplibError

__all__ = ["DataAccessError", "DataDependentError", "FakeTensorError"]


class DataAccessError(BackendError):
    """Something tried to read the data of a data-less (meta or fake) array.

    ``op`` is the operator whose fake kernel tried (``None`` when not inside one), ``action``
    what was attempted (``"__array__"``, ``"item()"``, ``"to_host"``...).
    """

    def __init__(self, message: str, op: str | None = None, action: str = "") -> None:
        self.op = op
        self.action = action
        super().__init__(message)


class DataDependentError(OplibError, RuntimeError):
    """A question about a symbolic size (``u0 == 3``, ``int(u0)``) whose answer depends on
    data that fake kernels do not have. ``expression`` is the undecidable expression."""

    def __init__(self, message: str, expression: str) -> None:
        self.expression = expression
        super().__init__(message)


class FakeTensorError(OplibError, RuntimeError):
    """FakeTensorMode misuse: real and fake tensors mixed, a fake kernel returning real
    arrays, ``get_ctx()`` outside a fake kernel. ``op`` names the operator, when known."""

    def __init__(self, message: str, op: str | None = None) -> None:
        self.op = op
        super().__init__(message)
