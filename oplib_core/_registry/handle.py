"""What every registration returns: a :class:`Handle` that undoes exactly it."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Handle"]


class Handle:
    """Undoes one registration. Calling ``destroy()`` twice is harmless. ``key``: the
    dispatch key a kernel was placed under (None for anything else)."""

    __slots__ = ("_undo", "description", "key")

    def __init__(self, undo: Callable[[], None], description: str, key: str | None = None) -> None:
        self._undo: Callable[[], None] | None = undo
        self.description = description
        self.key = key

    def destroy(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    @property
    def active(self) -> bool:
        return self._undo is not None

    def __repr__(self) -> str:
        state = "active" if self.active else "destroyed"
        return f"<Handle {self.description} ({state})>"
