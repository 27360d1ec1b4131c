"""native-ops: oplib operators whose kernels are C (see docs/native-kernels.md).

The operators live in ``oplib.ops.native_ops``; the class ``Affine`` in
``oplib.classes.native_ops.Affine``. The plugin (``native_ops.plugin``) loads the shared
library when oplib loads its plugins.
"""

from __future__ import annotations

import os

__all__ = ["library_path"]


def library_path() -> str:
    """The path of the compiled kernels (``libnative_ops.so`` next to this file)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libnative_ops.so", "libnative_ops.dll"):
        path = os.path.join(here, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"native-ops: no compiled library in {here}; install the distribution with pip "
        "(it compiles csrc/native_ops.c with the system C compiler)"
    )
