"""The first use of the core ops from many threads at once, in fresh processes (the core ops
are built on first use, ``_op_table``): every thread sees each op complete (defined, its
kernels and gradient formula placed, its dispatcher attached) and gets the right answer.
A thread used to see the op half-built: ``KeyError('oplib::mul')``, ``TypeError("'NoneType'
object is not callable")`` or a false "Autograd has not been implemented".

Each scenario runs in child interpreters (a first use happens once per process), with a
timeout: a hang fails with a message instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The issue's reproduction: 8 threads whose first call is ``(w * x).sum().backward()``.
FIRST_BACKWARD = """\
import json, sys, threading
import numpy as np
import oplib_core as oplib

sys.setswitchinterval(1e-6)
N = 8
errors, grads = [], []
barrier = threading.Barrier(N)

def run(k):
    try:
        w = oplib.tensor(np.ones(4), requires_grad=True)
        x = oplib.tensor(np.arange(4.0) + k)
        barrier.wait()
        (w * x).sum().backward()
        grads.append(w.grad.numpy().tolist() == (np.arange(4.0) + k).tolist())
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=run, args=(k,)) for k in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
hung = sum(t.is_alive() for t in threads)
print(json.dumps({"errors": errors, "right": grads.count(True), "hung": hung}))
"""

#: 16 threads making the first calls of 50 core ops, all threads each op at once, with or
#: without grad; the results are compared with the same calls made afterwards in the main
#: thread.
FIFTY_OPS = """\
import json, sys, threading
import numpy as np
import oplib_core as oplib

GRAD = sys.argv[1] == "grad"
N = 16
sys.setswitchinterval(1e-6)
o = oplib.ops.oplib
A = np.linspace(0.5, 1.5, 6).reshape(2, 3)
B = np.linspace(1.25, 0.25, 6).reshape(2, 3)

# (name, differentiable, call)
CALLS = [
    ("neg", True, lambda x, y: o.neg(x)),
    ("exp", True, lambda x, y: o.exp(x)),
    ("log", True, lambda x, y: o.log(x)),
    ("sin", True, lambda x, y: o.sin(x)),
    ("cos", True, lambda x, y: o.cos(x)),
    ("tanh", True, lambda x, y: o.tanh(x)),
    ("sigmoid", True, lambda x, y: o.sigmoid(x)),
    ("relu", True, lambda x, y: o.relu(x)),
    ("abs", True, lambda x, y: o.abs(x)),
    ("sqrt", True, lambda x, y: o.sqrt(x)),
    ("add", True, lambda x, y: o.add(x, y)),
    ("sub", True, lambda x, y: x - y),
    ("mul", True, lambda x, y: x * y),
    ("div", True, lambda x, y: x / y),
    ("pow", True, lambda x, y: o.pow(x, y)),
    ("maximum", True, lambda x, y: o.maximum(x, y)),
    ("minimum", True, lambda x, y: o.minimum(x, y)),
    ("add.Scalar", True, lambda x, y: o.add.Scalar(x, 2.0)),
    ("sub.Scalar", True, lambda x, y: o.sub.Scalar(x, 2.0)),
    ("mul.Scalar", True, lambda x, y: o.mul.Scalar(x, 3.0)),
    ("div.Scalar", True, lambda x, y: o.div.Scalar(x, 4.0)),
    ("pow.Scalar", True, lambda x, y: o.pow.Scalar(x, 2.0)),
    ("rsub.Scalar", True, lambda x, y: 1.0 - x),
    ("rdiv.Scalar", True, lambda x, y: 1.0 / x),
    ("rpow.Scalar", True, lambda x, y: 2.0 ** x),
    ("eq", False, lambda x, y: o.eq(x, y)),
    ("ne", False, lambda x, y: o.ne(x, y)),
    ("lt", False, lambda x, y: o.lt(x, y)),
    ("le", False, lambda x, y: o.le(x, y)),
    ("gt", False, lambda x, y: o.gt(x, y)),
    ("ge.Scalar", False, lambda x, y: o.ge.Scalar(x, 1.0)),
    ("where", True, lambda x, y: o.where(o.gt(x, y), x, y)),
    ("sum", True, lambda x, y: o.sum(x, [1])),
    ("mean", True, lambda x, y: o.mean(x, [0])),
    ("amax", True, lambda x, y: o.amax(x, [1])),
    ("amin", True, lambda x, y: o.amin(x, [0])),
    ("matmul", True, lambda x, y: o.matmul(x, o.transpose(y, 0, 1))),
    ("permute", True, lambda x, y: o.permute(x, [1, 0])),
    ("reshape", True, lambda x, y: o.reshape(x, [3, 2])),
    ("unsqueeze", True, lambda x, y: o.unsqueeze(x, 0)),
    ("flip", True, lambda x, y: o.flip(x, [1])),
    ("roll", True, lambda x, y: o.roll(x, [1], [1])),
    ("tril", True, lambda x, y: o.tril(x)),
    ("triu", True, lambda x, y: o.triu(x)),
    ("tile", True, lambda x, y: o.tile(x, [2, 1])),
    ("clone", True, lambda x, y: o.clone(x)),
    ("clamp", True, lambda x, y: o.clamp(x, 0.75, 1.25)),
    ("cat", True, lambda x, y: o.cat([x, y])),
    ("stack", True, lambda x, y: o.stack([x, y], 1)),
    ("max", True, lambda x, y: o.max(x)),
]
assert len(CALLS) == 50

def call(i):
    name, diff, fn = CALLS[i]
    x = oplib.tensor(A, requires_grad=GRAD)
    y = oplib.tensor(B, requires_grad=GRAD)
    out = fn(x, y)
    grads = None
    if GRAD and diff:
        (out * out).sum().backward()
        grads = [x.grad.numpy().tolist(), y.grad.numpy().tolist() if y.grad is not None else None]
    return out.detach().numpy().tolist(), grads

errors, results = [], {}
barrier = threading.Barrier(N)

def run(k):
    for i in range(len(CALLS)):
        try:
            barrier.wait(30)  # all threads make this op's first call together
            results[k, i] = call(i)
        except BaseException as e:
            errors.append(f"{CALLS[i][0]}: {e!r}")

threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
hung = sum(t.is_alive() for t in threads)
wrong = []
if not hung:
    expected = [call(i) for i in range(len(CALLS))]
    wrong = sorted({CALLS[i][0] for (k, i), got in results.items() if got != expected[i]})
print(json.dumps({"errors": errors, "wrong": wrong, "hung": hung, "calls": len(results)}))
"""


def _run(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run ``code`` in a fresh interpreter; its last line of output is JSON."""
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OPLIB_") or k == "OPLIB_CACHE_DIR"  # the run's (see conftest)
    }
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a fresh process hung: no answer within {timeout} s (a deadlock?)")
    assert proc.returncode == 0, f"the child failed (exit {proc.returncode}):\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _in_parallel(n: int, code: str, *args: str, env: dict[str, str] | None = None) -> list[Any]:
    """``n`` fresh processes of ``code``, a few at a time."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda _: _run(code, *args, env=env), range(n)))


@pytest.mark.parametrize("lazy", ["1", "0"], ids=["lazy-ops", "eager-ops"])
def test_first_backward_from_eight_threads(lazy: str) -> None:
    for out in _in_parallel(4, FIRST_BACKWARD, env={"OPLIB_LAZY_OPS": lazy}):
        assert out == {"errors": [], "right": 8, "hung": 0}, out


@pytest.mark.slow
@pytest.mark.parametrize("grad", ["grad", "nograd"])
def test_first_calls_of_fifty_ops_from_sixteen_threads_in_twenty_processes(grad: str) -> None:
    outs = _in_parallel(20, FIFTY_OPS, grad)
    assert [o for o in outs if o["errors"] or o["wrong"] or o["hung"]] == []
    assert all(o["calls"] == 16 * 50 for o in outs), outs
