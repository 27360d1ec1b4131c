"""``DispatchMode`` subclasses written for torch: ``__torch_dispatch__(self, func, types,
args=(), kwargs=None)`` as on a ``TorchDispatchMode`` (issue 31, item 6)."""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import oplib_core as oplib

# -- torch's LoggingTensorMode (torch/testing/_internal/logging_tensor.py), ported ---------------
# The mode and its log handler as torch writes them; `torch` became `oplib` and the pytree
# map a small local one (one level of lists and tuples is what these calls hold).

logger = logging.getLogger("LoggingTensor")


def tree_map(fn, x):
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, v) for v in x)
    return fn(x)


class LoggingTensorMode(oplib.DispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        rs = func(*args, **kwargs)
        logging.getLogger("LoggingTensor").info(
            f"{func.__module__}.{func.__name__}", args, kwargs, rs
        )
        return rs


class LoggingTensorHandler(logging.Handler):
    def __init__(self, log_list: list[str], with_type: bool) -> None:
        logging.Handler.__init__(self)
        self.log_list = log_list
        self.memo: dict[int, int] = {}
        self.next_id = 0
        self.with_type = with_type

    def _shortid(self, t: oplib.Tensor) -> int:
        if id(t) not in self.memo:
            self.memo[id(t)] = self.next_id
            self.next_id += 1
        return self.memo[id(t)]

    def _fmt(self, a: object, with_type: bool = False) -> str:
        if isinstance(a, oplib.Tensor):
            maybe_type = ""
            if with_type and self.with_type:
                maybe_type = f": {a.dtype}[{', '.join(map(str, a.shape))}]"
            return f"${self._shortid(a)}{maybe_type}"
        return repr(a)

    def emit(self, record):
        fmt_args = ", ".join(
            itertools.chain(
                (str(tree_map(self._fmt, a)) for a in record.args[0]),
                (f"{k}={tree_map(self._fmt, v)!s}" for k, v in record.args[1].items()),
            )
        )
        fmt_rets = tree_map(functools.partial(self._fmt, with_type=True), record.args[2])
        self.log_list.append(f"{fmt_rets} = {record.msg}({fmt_args})")


@contextmanager
def capture_logs() -> Iterator[list[str]]:
    log_list: list[str] = []
    handler = LoggingTensorHandler(log_list, with_type=True)
    # (not in torch's version) pytest's log capture hooks non-propagating loggers too; its
    # handlers cannot format these records, so ours is the only one while we capture.
    others, logger.handlers = logger.handlers, []
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield log_list
    finally:
        logger.removeHandler(handler)
        logger.handlers = others


def capture_logs_with_logging_tensor_mode():
    with LoggingTensorMode(), capture_logs() as logs:
        yield logs


# -----------------------------------------------------------------------------------------------


def test_torchs_logging_mode_logs_each_call():
    x = oplib.tensor([1.0, 2.0])
    y = oplib.tensor([3.0, 4.0])
    with capture_logs() as logs, LoggingTensorMode():
        z = oplib.ops.oplib.mul(x, y)
        oplib.ops.oplib.sum(z)
    m = oplib.ops.oplib.mul.default.__module__  # torch's is "torch._ops.aten"
    assert logs == [
        f"$2: float32[2] = {m}.mul.default($0, $1)",
        f"$3: float32[] = {m}.sum.default($2)",
    ]
    np.testing.assert_array_equal(z.numpy(), [3.0, 8.0])


def test_torchs_logging_mode_sees_higher_order_operators():
    x = oplib.tensor([1.0, -2.0])
    with capture_logs() as logs, LoggingTensorMode():
        out = oplib.cond(True, lambda a: a.relu(), lambda a: -a, (x,))
    assert [line.split(" = ")[1].split("(")[0].rpartition(".")[2] for line in logs] == [
        "default",  # relu.default
        "cond",
    ]
    assert "relu.default($" in logs[0] and "cond(True, " in logs[1]
    np.testing.assert_array_equal(out.numpy(), [1.0, 0.0])


class Seen(oplib.DispatchMode):
    def __init__(self) -> None:
        self.calls: list[tuple[object, tuple[type, ...], tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, types, args, kwargs))
        return func(*args, **(kwargs or {}))


class MyTensor(oplib.Tensor):
    pass


def test_types_are_the_tensor_arguments_types_once_each():
    x = oplib.tensor([1.0, 2.0])
    with Seen() as mode:
        oplib.ops.oplib.add(x, x)
        oplib.ops.oplib.neg(np.ones(2))  # native arrays: no Tensor types
        oplib.ops.oplib.cat([x, x])  # Tensors inside a list count
        oplib.ops.oplib.sum(x, keepdim=True)
    types = [c[1] for c in mode.calls]
    assert types == [(oplib.Tensor,), (), (oplib.Tensor,), (oplib.Tensor,)]
    assert mode.calls[3][3] == {"keepdim": True}
    assert all(isinstance(c[2], tuple) and isinstance(c[3], dict) for c in mode.calls)


def test_types_keep_a_tensor_subclass():
    class Types(oplib.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return types  # (oplib ops do not take Tensor subclasses: nothing is run)

    x = oplib.tensor([1.0])
    sub = MyTensor(np.ones(1, np.float32))
    with Types():
        assert oplib.ops.oplib.add.default(x, sub) == (oplib.Tensor, MyTensor)
        assert oplib.ops.oplib.add.default(sub, sub) == (MyTensor,)


def test_classmethod_and_staticmethod_forms():
    got = []

    class ClassForm(oplib.DispatchMode):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            got.append((cls, func.name()))
            return func(*args, **(kwargs or {}))

    class StaticForm(oplib.DispatchMode):
        @staticmethod
        def __torch_dispatch__(func, types, args=(), kwargs=None):
            got.append(("static", func.name()))
            return func(*args, **(kwargs or {}))

    x = oplib.tensor([4.0])
    with ClassForm():
        oplib.ops.oplib.sqrt(x)
    with StaticForm():
        oplib.ops.oplib.neg(x)
    assert got == [(ClassForm, "oplib::sqrt"), ("static", "oplib::neg")]


def test_a_mode_can_replace_the_result():
    class Zeros(oplib.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return "replaced by " + func.name()

    with Zeros():
        assert oplib.ops.oplib.neg(oplib.tensor([1.0])) == "replaced by oplib::neg"


def test_the_mode_is_inactive_inside_and_nests_with_oplib_modes():
    log: list[str] = []

    class Outer(oplib.DispatchMode):
        def __oplib_dispatch__(self, op, args, kwargs):
            log.append("outer " + op.name())
            return op(*args, **kwargs)

    class Inner(oplib.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            log.append("inner " + func.name())
            return func(*args, **(kwargs or {}))

    with Outer(), Inner():
        oplib.ops.oplib.neg(oplib.tensor([1.0]))
    assert log == ["inner oplib::neg", "outer oplib::neg"]


def test_each_name_reaches_the_other_through_super():
    log: list[str] = []

    class OplibBase(oplib.DispatchMode):
        def __oplib_dispatch__(self, op, args, kwargs):
            log.append("oplib base")
            return op(*args, **kwargs)

    class TorchChild(OplibBase):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            log.append("torch child")
            return super().__torch_dispatch__(func, types, args, kwargs)

    class OplibGrandchild(TorchChild):
        def __oplib_dispatch__(self, op, args, kwargs):
            log.append("oplib grandchild")
            return super().__oplib_dispatch__(op, args, kwargs)

    x = oplib.tensor([1.0])
    with OplibGrandchild():
        out = oplib.ops.oplib.neg(x)
    assert log == ["oplib grandchild", "torch child", "oplib base"]
    np.testing.assert_array_equal(out.numpy(), [-1.0])


def test_defining_both_names_in_one_class_is_refused():
    with pytest.raises(
        TypeError, match=r"Both defines both __oplib_dispatch__ and __torch_dispatch__"
    ):

        class Both(oplib.DispatchMode):
            def __oplib_dispatch__(self, op, args, kwargs):
                return None

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return None


def test_a_fake_mode_subclass_written_for_torch():
    """torch code subclasses FakeTensorMode and calls ``super().__torch_dispatch__``."""
    seen: list[str] = []

    class CountingFake(oplib.FakeTensorMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.name())
            return super().__torch_dispatch__(func, types, args, kwargs)

    with CountingFake() as mode:
        x = mode.from_real(oplib.tensor(np.ones((2, 3), np.float32)))
        y = oplib.ops.oplib.matmul(x, oplib.ops.oplib.transpose(x, 0, 1))
    assert y.shape == (2, 2) and isinstance(y._data, oplib.fake.FakeArray)
    assert seen == ["oplib::transpose", "oplib::matmul"]


def test_the_fake_mode_and_the_profiler_answer_to_torchs_name():
    x = oplib.tensor([1.0, 2.0])
    with oplib.FakeTensorMode() as fake:
        fx = fake.from_real(x)
        out = fake.__torch_dispatch__(oplib.ops.oplib.neg.default, (oplib.Tensor,), (fx,))
    assert out.shape == (2,) and isinstance(out._data, oplib.fake.FakeArray)
    with oplib.profile() as prof:
        oplib.ops.oplib.neg(x)
    assert [e.name for e in prof.events()] == ["oplib::neg"]


def test_resolved_once_per_class_not_per_call():
    class Mode(oplib.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    # the adapter sits in the class dict at class creation: calls go straight to it
    assert Mode.__dict__["__oplib_dispatch__"].__oplib_from_torch__
    assert "__torch_dispatch__" in oplib.FakeTensorMode.__dict__
