"""Which tensors are views of which: the record autograd needs to rewrite a base's history
when one of its views is written in place (torch's ``CopySlices``).

The first view taken of a tensor's storage puts a :class:`ViewSet` into the version counter
that the base and its views share (``t._vc[1]``): the base (the tensor the first view was
taken of; a view of a view has the same base) and every view taken since, all held weakly,
as torch's base does not keep its views alive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["ViewSet"]

_ref = weakref.ref

#: The tensor class (the Tensor module imports this one, so it cannot name the class).
T = TypeVar("T")


class ViewSet(Generic[T]):
    """The base of one storage and the views taken of it (weak references)."""

    __slots__ = ("_cap", "base", "pieces", "views")

    def __init__(self, base: T | None) -> None:
        self.base: Callable[[], T | None] = _no_base if base is None else _ref(base)
        #: id(view) -> weak reference to it (a dead one is pruned as the dict grows)
        self.views: dict[int, weakref.ref[T]] = {}
        #: id(piece) -> weak reference to it: the outputs of ``split`` and its family
        self.pieces: dict[int, weakref.ref[T]] = {}
        self._cap = 32

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # An unpickled tensor's data is a copy of its own: it is no view of anything there.
        return _unpickled, ()

    def add(self, base: T, view: T) -> None:
        """``view`` was taken of ``base`` (the base itself or another of its views). Where
        the base is gone (or this set came with a pickled tensor), ``base`` takes its place."""
        if self.base() is None:
            self.base = _ref(base)
        views = self.views
        if len(views) >= self._cap:
            self._prune()
        views[id(view)] = _ref(view)

    def add_piece(self, piece: T) -> None:
        """``piece`` is one of several views an op returned (``split``, ``chunk``): it shares
        the storage, but no in-place write may go through it while autograd records."""
        if len(self.pieces) >= self._cap:
            self._prune()
        self.pieces[id(piece)] = _ref(piece)

    def _prune(self) -> None:
        """Drop the dead views and pieces (a long-lived base sliced in a loop)."""
        for table in (self.views, self.pieces):
            for k in [k for k, r in list(table.items()) if r() is None]:
                del table[k]
        self._cap = max(32, 2 * len(self.views), 2 * len(self.pieces))

    def is_piece(self, t: T) -> bool:
        """Whether ``t`` is one of the pieces (see ``add_piece``)."""
        r = self.pieces.get(id(t))
        return r is not None and r() is t

    def is_view(self, t: T) -> bool:
        """Whether ``t`` is one of the views (not the base, nor a ``detach()`` of it)."""
        r = self.views.get(id(t))
        return r is not None and r() is t

    def alive(self) -> list[T]:
        """The views still alive."""
        # (a copy first: another thread may add a view meanwhile)
        return [v for r in list(self.views.values()) if (v := r()) is not None]


def _no_base() -> None:
    return None


def _unpickled() -> ViewSet[Any]:
    """The ``ViewSet`` of an unpickled (or deep-copied) tensor: no base, no views."""
    return ViewSet(None)
