"""oplib's Dask backend: ops run chunk-wise on dask arrays, lazily.

Installed, it is found through the ``oplib`` entry point and adds backend ``dask``: dask
arrays passed to an op dispatch to it. Ops tagged ``Tag.pointwise`` or ``Tag.reduction``,
``oplib::matmul`` and a few core copies are served by generic kernels that build a dask
graph whose tasks call the op again, through oplib's dispatcher, on each chunk (numpy
chunks reach the ``cpu`` kernel, cupy chunks the ``cuda`` one). Output ``meta`` comes from
the op's fake kernel. Nothing here imports dask until a dask array is seen; see
``docs/dask.md``.
"""

from oplib_dask.errors import DaskMetaWarning, DaskWorkerError
from oplib_dask.kernels import single_chunk

__all__ = ["DaskMetaWarning", "DaskWorkerError", "single_chunk"]
