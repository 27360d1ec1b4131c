"""Type-checked in CI (mypy and pyright): the control-flow operators and a user-defined
higher-order operator, as a user writes them. Results of the functions' calls are ``Any``
(what the branches, bodies and mapped functions return), as in torch. The script also
runs. Not collected by pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from typing_extensions import assert_type

import oplib_core as oplib
from oplib_core.library import Kernel

xs = oplib.tensor(np.ones((3, 2)))
assert_type(oplib.map(lambda r: r * 2.0, xs), Any)
assert_type(oplib.cond(True, lambda a: a, lambda a: a * 2.0, (xs,)), Any)
carry, ys = oplib.scan(lambda c, r: (c + r, c), oplib.zeros(2), xs)
out = oplib.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a), (0, xs))
assert_type(out, tuple[Any, ...])

hop = oplib.HigherOrderOperator("typed_example_hop")
try:

    @hop.py_impl("CompositeExplicitAutograd")
    def twice(f: Callable[[Any], Any], x: oplib.Tensor) -> Any:
        return f(f(x))

    assert_type(twice(lambda a: a, xs), Any)  # the decorated function is kept as written
    hop.py_impl("Fake")(lambda f, x: f(x))
    hop.fallthrough("Autograd")
    assert_type(hop.name(), str)
    assert_type(hop.namespace, str)
    assert_type(hop.handler("Fake"), Kernel | None)
    assert_type(hop.dispatch("Fake", lambda a: a, xs), Any)
finally:
    hop._destroy()
