from collections.abc import Callable, Mapping
from typing import Any

class FastCallBase:
    """The dispatcher's cached call, compiled (see ``_ccall.c``): ``FastCall``'s fields as
    members, and ``__call__``'s common case. ``_ccall312`` (the build for 3.12's limited
    API, called by vectorcall) has the same members and functions."""

    _npos: int
    _nmin: int
    _key0: int
    _tails: tuple[tuple[Any, ...], ...]
    _key_rest: tuple[int, ...]
    _checks: tuple[tuple[tuple[int, frozenset[type]], ...], ...]
    _lists: tuple[tuple[tuple[int, bool], ...], ...]
    _multi: tuple[int, ...]
    _by_type: Mapping[type, Callable[..., Any]]
    _opcache: Any
    _modes: Mapping[type, Any]
    _routes: dict[tuple[type, ...], Any]
    _routed: bool
    _fplan: Any  # a FactoryPlan, or None
    _lplan: Any  # a ListedPlan, or None
    _params: tuple[tuple[str, ...], tuple[Any, ...]]
    _tensor: dict[type, Callable[..., Any]] | None
    _kwplan: tuple[tuple[str, frozenset[type], frozenset[type]], ...]
    _keyed: dict[tuple[Any, ...], Any] | None
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

class SizeRoutedBase:
    """``SizeRoutedBase(small, large, min_size, among=1)``: calls ``large`` where one of the
    first ``among`` positional arguments has a ``size`` that is an int of at least
    ``min_size``, else ``small`` (``backends.by_size``)."""

    small: Callable[..., Any]
    large: Callable[..., Any]
    min_size: int
    among: int
    def __init__(
        self, small: Callable[..., Any], large: Callable[..., Any], min_size: int, among: int = 1
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def setup(
    active: list[int],
    call_py: Callable[..., Any],
    failed: Callable[[Any, Exception, Callable[..., Any], tuple[Any, ...]], None],
    device: type,
    dtype_classes: set[type],
    default_dtype: list[Any],
    required: Any,
    tensor: type,
    slots: tuple[Any, ...],
) -> None: ...
def wrap(data: Any) -> Any: ...
def sized_tensor(op: Any, size: tuple[Any, ...], dtype: Any, device: Any) -> Any: ...
