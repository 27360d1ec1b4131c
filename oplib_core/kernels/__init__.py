"""Kernels for the core op set, written once against an array namespace."""

from __future__ import annotations

from oplib_core.kernels.array_kernels import array_kernels, check_kernels

__all__ = ["array_kernels", "check_kernels"]
