"""What every registration returns: a :class:`Handle` that undoes exactly it."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Handle"]


class Handle:
    """Undoes one registration. Calling ``destroy()`` twice is harmless."""

    __slots__ = ("_undo", "description")

    def __init__(self, undo: Callable[[], None], description: str) -> None:
        self._undo: Callable[[], None] | None = undo
        self.description = description

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
