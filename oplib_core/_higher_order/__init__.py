"""Higher-order operators (private; ``oplib_core`` re-exports the public names).

- ``_operator``: ``HigherOrderOperator``, its handlers per key, and the table of them;
- ``_keys``: the dispatch keys of a call, from the tensors anywhere in its arguments;
- ``_pytree``, ``_structure``: nested arguments, and what the control-flow ops share;
- ``_control_flow``: ``cond``, ``while_loop``, ``map``, ``scan`` and their eager handlers;
- ``_fake``, ``_autograd``: their fake and autograd handlers.
"""

from __future__ import annotations

from . import _autograd, _fake
from ._control_flow import cond, cond_op, map, map_op, scan, scan_op, while_loop, while_loop_op
from ._errors import ControlFlowError
from ._operator import HOPS, NAMESPACE, HigherOrderOperator

__all__ = [
    "HOPS",
    "NAMESPACE",
    "ControlFlowError",
    "HigherOrderOperator",
    "_autograd",
    "_fake",
    "cond",
    "cond_op",
    "map",
    "map_op",
    "scan",
    "scan_op",
    "while_loop",
    "while_loop_op",
]
