"""Backward passes from several threads into shared leaves: each addition into a leaf's
``.grad`` holds that leaf's lock (as torch's ``AccumulateGrad``), so the result is exactly
the serial sum. Without it, 8 threads x 50 passes kept 131-151 of 400 contributions,
silently. Threads switch every microsecond here, so that a lost update would show."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import oplib_core as oplib


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(saved)


def _together(n: int, fn: Callable[[int], None]) -> None:
    """``fn(k)`` in ``n`` threads started at once; fails on an exception or a hang."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            barrier.wait()
            fn(k)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a backward thread hung"
    assert errors == [], errors[:3]


def test_eight_threads_backward_into_one_leaf_give_the_serial_sum() -> None:
    w = oplib.tensor(np.zeros(200_000), requires_grad=True)
    x = oplib.tensor(np.ones(200_000))

    def passes(k: int) -> None:
        for _ in range(50):
            (w * x).sum().backward()

    _together(8, passes)
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), np.full(200_000, 400.0))


def test_contributions_of_different_sizes_into_two_shared_leaves_add_up_exactly() -> None:
    """Each thread contributes its own amount to each of two leaves (some passes reach
    both, some one): every contribution is counted once."""
    n = 100_000
    a = oplib.tensor(np.zeros(n), requires_grad=True)
    b = oplib.tensor(np.zeros(n), requires_grad=True)

    def passes(k: int) -> None:
        scale = oplib.tensor(np.full(n, float(k + 1)))
        for i in range(30):
            if i % 3 == 2:
                (a * scale).sum().backward()
            else:
                (a * scale + b * scale).sum().backward()

    _together(6, passes)
    # thread k gives (k + 1) to a 30 times and to b 20 times
    total = sum(k + 1 for k in range(6))
    assert a.grad is not None and b.grad is not None
    np.testing.assert_array_equal(a.grad.numpy(), np.full(n, 30.0 * total))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(n, 20.0 * total))


def test_first_gradient_of_a_leaf_is_never_a_buffer_another_thread_adds_into() -> None:
    """The first pass to reach a leaf sets ``.grad`` (a copy where it must be); later ones
    add. With many threads racing for the first, still no contribution is lost and the
    caller's gradient tensor is not written into."""
    for _ in range(20):
        w = oplib.tensor(np.zeros(50_000), requires_grad=True)
        seeds = [oplib.tensor(np.full(50_000, float(k))) for k in range(8)]

        def once(k: int, w: oplib.Tensor = w, seeds: list[oplib.Tensor] = seeds) -> None:
            (w * 1.0).backward(seeds[k])

        _together(8, once)
        assert w.grad is not None
        np.testing.assert_array_equal(w.grad.numpy(), np.full(50_000, float(sum(range(8)))))
        for k, seed in enumerate(seeds):
            np.testing.assert_array_equal(seed.numpy(), np.full(50_000, float(k)))
