"""What the Tensor's helpers (``indexing``, ``setitem``, ``pickling``) need of a tensor.

The Tensor class calls them, so they cannot import it, not even for annotations (that
would close an import cycle): they are written against :class:`TensorLike` instead, and
are generic in the tensor's type (``getitem(t: T, ...) -> T``), so the class's own methods
keep their exact types. Type checkers match the class against this protocol at each call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from .._device import Device
    from ..backends import Backend

__all__ = ["T", "TensorLike"]


class TensorLike(Protocol):
    """The part of :class:`oplib_core.Tensor` its helpers read."""

    __slots__: ClassVar[tuple[str, ...]]
    _data: Any
    grad_fn: Any

    def __init__(self, data: Any) -> None: ...

    @staticmethod
    def _wrap(data: Any) -> Any: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def device(self) -> Device: ...

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    def detach(self) -> Any: ...

    def item(self) -> Any: ...

    def to(self, *args: Any, device: Any = None, dtype: Any = None, copy: bool = False) -> Any: ...


#: A tensor of some class (the Tensor, a subclass): what a helper returns is of that class.
T = TypeVar("T", bound=TensorLike)
