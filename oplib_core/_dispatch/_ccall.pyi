from collections.abc import Callable, Mapping
from typing import Any

class FastCallBase:
    """The dispatcher's cached call, compiled (see ``_ccall.c``): ``FastCall``'s fields as
    members, and ``__call__``'s common case."""

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
    _params: tuple[tuple[str, ...], tuple[Any, ...]]
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def setup(
    active: list[int],
    call_py: Callable[..., Any],
    failed: Callable[[Any, Exception, Callable[..., Any], tuple[Any, ...]], None],
    device: type,
    dtype_classes: set[type],
) -> None: ...
