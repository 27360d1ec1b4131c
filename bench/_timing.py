"""Timing shared by the bench scripts (``python bench/x.py`` puts this directory on the
path): the best of repeated ``timeit`` runs, and rounds that interleave statements so a
burst of load elsewhere hits all of them alike."""

from __future__ import annotations

import timeit
from collections.abc import Iterable


def best_ns(stmt: str, env: dict, number: int, repeat: int = 1) -> float:
    """ns per call of ``stmt``: the best of ``repeat`` runs of ``number`` calls."""
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=repeat)) / number * 1e9


def interleaved_ns(stmts: Iterable[str], env: dict, number: int, rounds: int) -> dict[str, float]:
    """ns per call of each statement (run once first, to warm the caches): ``rounds``
    rounds over all of them, each keeping its best round."""
    order = list(dict.fromkeys(stmts))
    for stmt in order:
        eval(stmt, env)
    best = dict.fromkeys(order, float("inf"))
    for _ in range(rounds):
        for stmt in order:
            best[stmt] = min(best[stmt], best_ns(stmt, env, number))
    return best


def print_ns(best: dict[str, float]) -> None:
    """The table of ``interleaved_ns``'s result."""
    print(f"{'call':34s} {'ns/call':>9s}")
    for stmt, ns in best.items():
        print(f"{stmt:34s} {ns:9.0f}")
    print()
