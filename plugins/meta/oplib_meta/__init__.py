"""oplib's meta backend: arrays with shape and dtype but no data. Installed, it is found
through the ``oplib`` entry point; ``oplib.empty(3, 4, device="meta")`` then works."""

from oplib_meta.array import MetaArray

__all__ = ["MetaArray"]
