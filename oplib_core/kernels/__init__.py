"""The core op set (``CORE_OPS``: schemas and tags) and its kernels, written once against an
array namespace (``array_kernels(xp)``): what a backend plugin binds to its device."""

from __future__ import annotations

from .._opset import CORE_OPS, NAMESPACE, CoreOp
from ._array_kernels import array_kernels, check_kernels
from ._index_kernels import index_kernels

__all__ = ["CORE_OPS", "NAMESPACE", "CoreOp", "array_kernels", "check_kernels", "index_kernels"]
