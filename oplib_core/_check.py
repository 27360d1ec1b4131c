"""torch's ``torch._check`` family: assertions for kernels and fake kernels that raise the
exception type torch raises.

``oplib._check(cond, message=None)`` raises ``RuntimeError``, ``_check_value`` ``ValueError``,
``_check_index`` ``IndexError``, ``_check_type`` ``TypeError``, ``_check_not_implemented``
``NotImplementedError``; ``_check_is_size(i, max=None)`` checks ``0 <= i (<= max)`` with
``RuntimeError``. ``message`` is a callable returning the message (it is only called on
failure), as in torch; without one the message is torch's "Expected cond to be True, but got
False." ``cond`` must be a ``bool`` (or a numpy bool, which numpy kernels compute): anything
else raises ``TypeError("cond must be a bool, but got <type>")``, as in torch.

On symbolic sizes (``SymInt``) a comparison whose answer depends on the data raises
``DataDependentError`` before ``_check`` sees it: unlike torch, oplib records no runtime
assertion and does not narrow the size's range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

__all__ = [
    "_check",
    "_check_index",
    "_check_is_size",
    "_check_not_implemented",
    "_check_type",
    "_check_value",
]

#: torch's message for a failed check without a message (its first sentence; torch adds a
#: request to report an enhancement to PyTorch).
DEFAULT_MESSAGE = "Expected cond to be True, but got False."


def _check_with(error_type: type[Exception], cond: Any, message: Callable[[], Any] | None) -> None:
    """``torch._check_with``: raise ``error_type`` unless ``cond`` is true."""
    if cond is True:
        return
    if cond is not False and not isinstance(cond, (bool, np.bool_)):
        raise TypeError(f"cond must be a bool, but got {type(cond)}")
    if cond:
        return
    _fail(error_type, message)


def _fail(error_type: type[Exception], message: Callable[[], Any] | None) -> NoReturn:
    if message is None:
        raise error_type(DEFAULT_MESSAGE)
    if not callable(message):
        raise TypeError("message must be a callable")
    raise error_type(str(message()))


def _check(cond: Any, message: Callable[[], Any] | None = None) -> None:
    """Raise ``RuntimeError`` (with ``message()``, when given) unless ``cond`` is true."""
    _check_with(RuntimeError, cond, message)


def _check_value(cond: Any, message: Callable[[], Any] | None = None) -> None:
    """Raise ``ValueError`` (with ``message()``, when given) unless ``cond`` is true."""
    _check_with(ValueError, cond, message)


def _check_index(cond: Any, message: Callable[[], Any] | None = None) -> None:
    """Raise ``IndexError`` (with ``message()``, when given) unless ``cond`` is true."""
    _check_with(IndexError, cond, message)


def _check_type(cond: Any, message: Callable[[], Any] | None = None) -> None:
    """Raise ``TypeError`` (with ``message()``, when given) unless ``cond`` is true."""
    _check_with(TypeError, cond, message)


def _check_not_implemented(cond: Any, message: Callable[[], Any] | None = None) -> None:
    """Raise ``NotImplementedError`` (with ``message()``, when given) unless ``cond`` is
    true."""
    _check_with(NotImplementedError, cond, message)


def _check_is_size(i: Any, message: Callable[[], Any] | None = None, *, max: Any = None) -> None:
    """Check that ``i`` (an int or a ``SymInt``) is a size: ``i >= 0`` and, with ``max``,
    ``i <= max``; ``RuntimeError`` otherwise, as in torch."""
    _check_with(RuntimeError, i >= 0, message)
    if max is not None:
        _check_with(RuntimeError, i <= max, message)
