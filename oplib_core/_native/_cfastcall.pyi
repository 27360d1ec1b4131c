from collections.abc import Callable
from typing import Any

import numpy as np

TAIL_SIZE: int

class FastCall:
    """A native kernel's compiled fast call (see ``_fastcall.py``)."""

    __wrapped__: Any
    def __init__(
        self,
        kinds: str,
        nouts: int,
        by_fake: bool,
        fn: int,
        shape_fn: int,
        ndarray: type[np.ndarray],
        cache: dict[bytes, Any],
        miss: Callable[[tuple[Any, ...], bytes], tuple[Any, ...] | None],
        slow: Callable[[tuple[Any, ...]], Any],
        empty: Callable[..., np.ndarray],
        fail: Callable[[int, bytearray, int, str], None],
        out_metas: dict[bytes, Any],
        out_meta: Callable[[bytes], Any],
    ) -> None: ...
    def __call__(self, *args: Any) -> Any: ...

def probe(
    arr: np.ndarray,
) -> tuple[int, tuple[int, ...], tuple[int, ...], bool, np.dtype] | None: ...
