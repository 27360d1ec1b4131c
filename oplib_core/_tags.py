"""Operator tags: facts about an op that backends and tools may rely on."""

from __future__ import annotations

import enum

__all__ = ["Tag"]


class Tag(enum.Enum):
    """Given as ``tags=`` to ``define``, ``Library.define`` and ``custom_op``."""

    #: Elementwise with numpy broadcasting: output element i depends only on input
    #: element i. Chunked backends (Dask) map such ops over blocks without a kernel of their own.
    pointwise = "pointwise"
    #: The op reduces over dimensions given by a ``dim`` argument.
    reduction = "reduction"
    #: Output shape depends on input data (fake kernels use ``get_ctx().new_dynamic_size``).
    data_dependent_output = "data_dependent_output"
    #: The op creates a new array from its arguments (no tensor inputs).
    factory = "factory"
    #: Results may differ between runs (random numbers, atomics).
    nondeterministic_seeded = "nondeterministic_seeded"
