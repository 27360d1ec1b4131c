"""The dispatcher's cached call compiled (``oplib_core/_dispatch/_ccall.c``, issue 30): the
base type of every ``FastCall``, running ``__call__``'s common case in C and handing the
rest to the Python ``__call__``. Each behaviour is run twice, compiled and with
``OPLIB_NATIVE_SPEEDUPS=0`` (the Python ``__call__`` alone), and must come out the same."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import fastpath
from tests.subproc import run_python

from helpers import c_compiler

# What both runs do: every route through __call__, the answers and errors as data.
CALLS = """
import numpy as np
import oplib_core as oplib
from oplib_core._dispatch import fastpath

OUT["compiled"] = fastpath.COMPILED
OUT["module"] = fastpath.COMPILED_MODULE
OUT["python_call"] = isinstance(type(oplib.ops.oplib.neg.default).__call__, type(catch))
ops = oplib.ops.oplib
x = np.array([1.0, -2.0, 3.0])
t = oplib.tensor(x)
for _ in range(3):  # the first call fills the caches, the later ones take them
    OUT["neg"] = ops.neg.default(x).tolist()
    OUT["add"] = ops.add.default(x, x).tolist()
    OUT["mul_scalar"] = ops.mul.Scalar(x, 2.5).tolist()
    OUT["mul_int"] = ops.mul.Scalar(x, 2).tolist()
    OUT["tensor"] = type(ops.neg.default(t)).__name__
    OUT["tensor_add"] = ops.add.default(t, t).tolist()
    OUT["keyword"] = ops.add.default(x, other=x).tolist()
    OUT["sum"] = ops.sum.default(x).tolist()  # the defaults appended (None, False)
    OUT["sum_dim"] = ops.sum.default(x.reshape(3, 1), [1]).tolist()  # an int[]: checked
    OUT["sum_dim_tuple"] = ops.sum.default(x.reshape(3, 1), (1,)).tolist()
    OUT["sum_dim_int"] = ops.sum.default(x.reshape(3, 1), 1).tolist()  # [1] to the kernel
    OUT["sum_dim_bool"] = catch(ops.sum.default, x.reshape(3, 1), True)

lib = oplib.Library("ccall", "DEF")
lib.define("scale(Tensor x, float s=2.0, bool twice=False) -> Tensor")
lib.define("boom(Tensor x) -> Tensor")
lib.define("stop(Tensor x) -> Tensor")
lib.impl("scale", lambda x, s, twice: x * s * (2 if twice else 1), "CPU")


def boom(x):
    raise ValueError("boom")


class Stop(BaseException):
    pass


def stop(x):
    raise Stop("stop")


lib.impl("boom", boom, "CPU")
lib.impl("stop", stop, "CPU")
for _ in range(3):
    OUT["defaults"] = oplib.ops.ccall.scale.default(x).tolist()  # the tails appended
    OUT["one_default"] = oplib.ops.ccall.scale.default(x, 3.0).tolist()
    OUT["all_given"] = oplib.ops.ccall.scale.default(x, 3.0, True).tolist()
    OUT["wrong_scalar"] = catch(oplib.ops.ccall.scale.default, x, "two")
    OUT["too_many"] = catch(oplib.ops.ccall.scale.default, x, 1.0, True, 4)
    OUT["none"] = catch(ops.neg.default)
    OUT["mixed"] = catch(ops.add.default, x, [1.0, 2.0, 3.0])
    try:
        oplib.ops.ccall.boom.default(x)
    except ValueError as e:
        OUT["notes"] = [n.split(" (")[0] for n in getattr(e, "__notes__", [])]
    try:
        oplib.ops.ccall.stop.default(x)
    except Stop as e:
        OUT["base_exception"] = [str(e), getattr(e, "__notes__", None)]


# packets: several overloads (routed by the arguments' types), one, and one gaining another
for _ in range(3):
    OUT["packet_add"] = ops.add(x, x).tolist()
    OUT["packet_add_scalar"] = ops.add(x, 1.5).tolist()
    OUT["packet_mul_tensor"] = ops.mul(t, 2.0).tolist()
    OUT["packet_keyword"] = ops.add(x, other=x).tolist()
    OUT["packet_neg"] = ops.neg(x).tolist()
    OUT["packet_bad"] = catch(ops.add, x, "one")
lib.define("twin(Tensor x) -> Tensor")
lib.impl("twin", lambda x: x * 2, "CPU")
twin = [oplib.ops.ccall.twin(x).tolist() for _ in range(2)]
lib.define("twin.Scalar(Tensor x, float s) -> Tensor")
lib.define("twin.boom(Tensor x, bool b) -> Tensor")
lib.impl("twin.Scalar", lambda x, s: x * s, "CPU")
lib.impl("twin.boom", lambda x, b: boom(x), "CPU")
for _ in range(3):
    twin += [oplib.ops.ccall.twin(x).tolist(), oplib.ops.ccall.twin(x, 3.0).tolist()]
    try:
        oplib.ops.ccall.twin(x, True)
    except ValueError as e:
        OUT["packet_notes"] = [n.split(" (")[0] for n in getattr(e, "__notes__", [])]
OUT["packet_gains_an_overload"] = twin
OUT["packet_routed"] = [oplib.ops.ccall.twin._routed, ops.neg._routed]

# the compiled routed call remembers its last hit (the routes dict, the argument types):
# shapes alternating, then the packet's overloads redefined, so that the same shape has
# another route
lib.define("pick.A(Tensor x, float s) -> Tensor")
lib.define("pick.B(Tensor x, Tensor y) -> Tensor")
lib.impl("pick.A", lambda x, s: x * s, "CPU")
lib.impl("pick.B", lambda x, y: x - y, "CPU")
picks = []
for _ in range(3):
    picks += [oplib.ops.ccall.pick(x, 2.0).tolist(), oplib.ops.ccall.pick(x, x).tolist()]
    picks.append(oplib.ops.ccall.pick(x, 2.0).tolist())
lib.define("pick(Tensor x, float s) -> Tensor")  # the default: tried first from now on
lib.impl("pick", lambda x, s: x + s, "CPU")
picks += [oplib.ops.ccall.pick(x, 2.0).tolist() for _ in range(3)]
OUT["packet_route_after_redefinition"] = picks


# factories: the device= value placed by an earlier call (None, a str, a Device), keyword
# dtypes, a tuple size, wrong keywords and values, a kernel raising, a packet that stops
# being a factory's
f32 = np.dtype(np.float32)
lib.define("fill(SymInt[] size, float v, *, ScalarType? dtype=None, Device? device=None) -> Tensor")
lib.define("burst(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor")
lib.impl("fill", lambda size, v, *, dtype, device: np.full(size, v, dtype=dtype), "CPU")
lib.impl("burst", lambda size, *, dtype, device: boom(size), "CPU")


def made(a):
    return [a.shape, str(a.dtype), a.tolist()]


for _ in range(3):
    OUT["zeros"] = made(ops.zeros([2]))
    OUT["zeros_dtype_device"] = made(ops.zeros([2], dtype=f32, device="cpu"))
    OUT["zeros_device_object"] = made(ops.zeros([1, 2], device=oplib.device("cpu")))
    OUT["zeros_tuple_size"] = made(ops.zeros((2, 1), dtype=f32))
    OUT["zeros_int_size"] = made(ops.zeros(2, dtype=f32))
    OUT["zeros_overload"] = made(ops.zeros.default([2], dtype=np.dtype(np.int8), device="cpu"))
    OUT["zeros_dtype_name"] = made(ops.zeros([2], dtype="float16"))  # binding converts it
    OUT["zeros_float_size"] = catch(ops.zeros, [2.5])
    OUT["zeros_unknown_keyword"] = catch(ops.zeros, [2], layout=None)
    OUT["zeros_bad_device"] = catch(ops.zeros, [2], device=1.5)
    OUT["zeros_bad_dtype"] = catch(ops.zeros, [2], dtype=3)
    OUT["zeros_too_many"] = catch(ops.zeros, [2], [3])
    OUT["fill"] = made(oplib.ops.ccall.fill([2], 1.5, dtype=f32))
    OUT["fill_int_scalar"] = made(oplib.ops.ccall.fill([2], 2, device="cpu"))
    OUT["fill_wrong_scalar"] = catch(oplib.ops.ccall.fill, [2], "x")
    try:
        oplib.ops.ccall.burst([2], dtype=f32)
    except ValueError as e:
        OUT["factory_notes"] = [n.split(" (")[0] for n in getattr(e, "__notes__", [])]
fills = [made(oplib.ops.ccall.fill([1], 3.0)) for _ in range(2)]
lib.define("fill.out(SymInt[] size, float v, *, Tensor(a!) out) -> Tensor(a!)")
lib.define(
    "fill.twice(SymInt[] size, float v, float w, *, ScalarType? dtype=None, Device? device=None)"
    " -> Tensor"
)
lib.impl("fill.twice", lambda size, v, w, *, dtype, device: np.full(size, v + w), "CPU")
for _ in range(3):
    fills += [made(oplib.ops.ccall.fill([1], 3.0)), made(oplib.ops.ccall.fill([1], 3.0, 1.0))]
OUT["factory_packet_gains_overloads"] = fills
OUT["factory_plans"] = [
    oplib.ops.ccall.fill._fplan is not None, ops.zeros._fplan is not None, ops.neg._fplan
]


# more arguments than the compiled call holds (24, the defaults included): the Python call
# (by tp_call and by vectorcall, positional and with keywords); an int[] given as a tuple or
# an int: the kernel gets a list and the caller's arguments are left as they were
wide = ", ".join(f"float a{i}=0.0" for i in range(30))
lib.define(f"wide(Tensor x, {wide}) -> Tensor")
lib.impl("wide", lambda x, *a: x + sum(a), "CPU")
lib.define("dims(Tensor x, int[] d, int[] e) -> Tensor")
lib.impl("dims", lambda x, d, e: x * len(d) * 10 + len(e) if type(d) is type(e) is list else x,
         "CPU")
lib.define(f"widelist(Tensor x, int[] d, {wide}) -> Tensor")
lib.impl("widelist", lambda x, d, *a: x + sum(a) + (len(d) if type(d) is list else 100), "CPU")
size, one = (1, 2), 3
for _ in range(3):
    # all 32 given, an int[] as a tuple: more than the compiled call holds, to Python
    OUT["wide_list_positional"] = oplib.ops.ccall.widelist(x, size, *([1.0] * 30)).tolist()
    OUT["wide_defaults"] = oplib.ops.ccall.wide(x).tolist()
    OUT["wide_positional"] = oplib.ops.ccall.wide(x, *([1.0] * 30)).tolist()
    OUT["wide_keywords"] = oplib.ops.ccall.wide(x, *([1.0] * 25), a29=2.0).tolist()
    OUT["lists_made"] = oplib.ops.ccall.dims(x, size, one).tolist()
    OUT["lists_caller_args"] = [size, one]

# ops with lists of tensors: positional calls of native arrays run in C (a new list to the
# kernel, never the caller's), the rest as before
lib.define("keep(Tensor[] xs, int k=1) -> Tensor")
kept = []


def keep(xs, k):
    kept.append(xs)
    return xs[0] * k + len(xs)


lib.impl("keep", keep, "CPU")
mine = [x, x]
for _ in range(3):
    OUT["listed"] = oplib.ops.ccall.keep(mine).tolist()
    OUT["listed_kept"] = [type(kept[-1]).__name__, kept[-1] is mine, mine == [x, x]]
    OUT["listed_tuple_k"] = oplib.ops.ccall.keep((x, x, x), 2).tolist()
    OUT["listed_mixed"] = type(oplib.ops.ccall.keep([x, t])).__name__
    OUT["listed_tensors"] = oplib.ops.ccall.keep([t, t]).tolist()
    OUT["listed_empty"] = catch(oplib.ops.ccall.keep, [])
    OUT["listed_bad_scalar"] = catch(oplib.ops.ccall.keep, [x], "two")
    OUT["listed_not_a_list"] = catch(oplib.ops.ccall.keep, x)
    OUT["listed_keyword"] = oplib.ops.ccall.keep([x], k=3).tolist()
    OUT["cat"] = ops.cat([x, x], -1).tolist()
    OUT["index_tensor"] = ops.index(x, [np.array([2, 0])]).tolist()

# keywords naming positional parameters: placed (by the compiled call too), binding's
# errors for the rest
for _ in range(3):
    OUT["kw_sum"] = ops.sum.default(x.reshape(3, 1), dim=[1], keepdim=True).tolist()
    OUT["kw_skip_one"] = oplib.ops.ccall.scale.default(x, twice=True).tolist()
    OUT["kw_all"] = oplib.ops.ccall.scale.default(x=x, s=1.0, twice=False).tolist()
    OUT["kw_unknown"] = catch(oplib.ops.ccall.scale.default, x, bogus=1)
    OUT["kw_twice"] = catch(oplib.ops.ccall.scale.default, x, 1.0, s=2.0)
    OUT["kw_missing"] = catch(ops.add.default, other=x)
    OUT["kw_wrong_type"] = catch(oplib.ops.ccall.scale.default, x, s="two")


# Tensors (the compiled call unwraps them, runs the kernel of the arrays they wrap and
# wraps its result, where none requires grad): plain, routed, with defaults, an int[],
# keywords placed, a kernel raising, a Tensor requiring grad (the Python entry, autograd),
# one under no_grad, and nine Tensors (more than the C call replaces: the Python entry)
lib.define("nine(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e, Tensor f, Tensor g, "
           "Tensor h, Tensor i) -> Tensor")
lib.impl("nine", lambda *xs: sum(xs[1:], xs[0]), "CPU")
tw = oplib.tensor(x)
for _ in range(3):
    OUT["t_neg"] = [type(ops.neg(t)).__name__, ops.neg(t).tolist()]
    OUT["t_routed_scalar"] = ops.mul(t, 2.5).tolist()
    OUT["t_routed_tensor"] = ops.add(t, tw).tolist()
    OUT["t_defaults"] = oplib.ops.ccall.scale.default(t).tolist()
    OUT["t_int_list"] = ops.sum.default(oplib.tensor(x.reshape(3, 1)), 1).tolist()
    OUT["t_keywords"] = ops.clamp(t, min=0.0).tolist()
    OUT["t_nine"] = oplib.ops.ccall.nine(*[t] * 9).tolist()
    try:
        oplib.ops.ccall.boom.default(t)
    except ValueError as e:
        OUT["t_notes"] = [n.split(" (")[0] for n in getattr(e, "__notes__", [])]
    leaf = oplib.tensor(x, requires_grad=True)
    y = ops.mul(leaf, t)
    y.sum().backward()
    OUT["t_grad"] = [type(y.grad_fn).__name__ != "NoneType", leaf.grad.tolist()]
    with oplib.no_grad():
        y = ops.mul(leaf, t)
    OUT["t_no_grad"] = [y.grad_fn is None, y.requires_grad, y.tolist()]
    wrapped = ops.neg(t)
    OUT["t_slots"] = [wrapped._rg, wrapped.grad, wrapped.grad_fn, wrapped._out_nr, wrapped._vc]


class Log(oplib.DispatchMode):
    def __init__(self):
        self.names = []

    def __oplib_dispatch__(self, op, args, kwargs):
        self.names.append(op.name())
        return op(*args, **kwargs)


with Log() as log:
    ops.neg.default(x)
    ops.add.default(t, t)
    ops.add(x, x)
    ops.mul(t, 2.0)
    ops.zeros([2], dtype=f32)
OUT["mode"] = log.names


# the Tensor factories (oplib.zeros: one call in C where it can): each form of size, dtype
# and device; what the Python factory makes itself; their errors; a mode sees the keywords
# given and no others
def tmade(t):
    return [type(t).__name__, t.requires_grad, made(t.detach().numpy())]


for _ in range(3):
    OUT["tf_ints"] = tmade(oplib.zeros(2, 3))
    OUT["tf_tuple"] = tmade(oplib.ones((2, 1), dtype=f32))
    OUT["tf_list"] = tmade(oplib.zeros([2], dtype=f32, device="cpu"))
    OUT["tf_no_size"] = tmade(oplib.ones())
    OUT["tf_device_object"] = tmade(oplib.ones(1, device=oplib.device("cpu")))
    OUT["tf_empty"] = [type(oplib.empty(2, 2)).__name__, list(oplib.empty(2, 2).shape)]
    OUT["tf_numpy_int"] = tmade(oplib.zeros(np.int64(2)))
    OUT["tf_grad"] = tmade(oplib.ones(2, requires_grad=True))
    OUT["tf_layout"] = tmade(oplib.zeros(2, layout=oplib.strided))
    OUT["tf_float_size"] = catch(oplib.zeros, 2.5)
    OUT["tf_bool_size"] = catch(oplib.zeros, True)
    OUT["tf_bad_item"] = catch(oplib.zeros, [2, "a"])
    OUT["tf_bad_device"] = catch(oplib.zeros, 2, device="cpu:x")
    OUT["tf_bad_layout"] = catch(oplib.zeros, 2, layout="sparse")


class Keys(oplib.DispatchMode):
    def __init__(self):
        self.seen = []

    def __oplib_dispatch__(self, op, args, kwargs):
        self.seen.append([op.name(), sorted(kwargs)])
        return op(*args, **kwargs)


with Keys() as keys:
    oplib.zeros(2)
    oplib.zeros(2, dtype=f32)
    oplib.ones(2, device="cpu")
    oplib.empty(1, dtype=f32, device="cpu")
OUT["tf_mode"] = keys.seen
"""

EXPECTED = {
    "neg": [-1.0, 2.0, -3.0],
    "add": [2.0, -4.0, 6.0],
    "mul_scalar": [2.5, -5.0, 7.5],
    "mul_int": [2.0, -4.0, 6.0],
    "tensor": "Tensor",
    "tensor_add": [2.0, -4.0, 6.0],
    "t_neg": ["Tensor", [-1.0, 2.0, -3.0]],
    "t_routed_scalar": [2.5, -5.0, 7.5],
    "t_routed_tensor": [2.0, -4.0, 6.0],
    "t_defaults": [2.0, -4.0, 6.0],
    "t_int_list": [1.0, -2.0, 3.0],
    "t_keywords": [1.0, 0.0, 3.0],
    "t_nine": [9.0, -18.0, 27.0],
    "t_notes": ["oplib: raised by the cpu kernel of ccall::boom"],
    "t_grad": [True, [1.0, -2.0, 3.0]],
    "t_no_grad": [True, False, [1.0, 4.0, 9.0]],
    "t_slots": [False, None, None, 0, None],
    "tf_ints": ["Tensor", False, [[2, 3], "float32", [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]],
    "tf_tuple": ["Tensor", False, [[2, 1], "float32", [[1.0], [1.0]]]],
    "tf_list": ["Tensor", False, [[2], "float32", [0.0, 0.0]]],
    "tf_no_size": ["Tensor", False, [[], "float32", 1.0]],
    "tf_device_object": ["Tensor", False, [[1], "float32", [1.0]]],
    "tf_empty": ["Tensor", [2, 2]],
    "tf_numpy_int": ["Tensor", False, [[2], "float32", [0.0, 0.0]]],
    "tf_grad": ["Tensor", True, [[2], "float32", [1.0, 1.0]]],
    "tf_layout": ["Tensor", False, [[2], "float32", [0.0, 0.0]]],
    "tf_float_size": [
        "CallArgumentError",
        "oplib::zeros(): argument 'size' must be SymInt[], got list of float\n"
        "  schema: oplib::zeros(SymInt[] size, *, ScalarType? dtype=None, Device? device=None)"
        " -> Tensor",
    ],
    "tf_bool_size": [
        "CallArgumentError",
        "oplib::zeros(): argument 'size' must be SymInt[], got list of bool\n"
        "  schema: oplib::zeros(SymInt[] size, *, ScalarType? dtype=None, Device? device=None)"
        " -> Tensor",
    ],
    "tf_bad_item": [
        "CallArgumentError",
        "oplib::zeros(): argument 'size' must be SymInt[], got list of int, str\n"
        "  schema: oplib::zeros(SymInt[] size, *, ScalarType? dtype=None, Device? device=None)"
        " -> Tensor",
    ],
    "tf_bad_device": [
        "InvalidDeviceError",
        "oplib::zeros(): argument 'device': expected a device string like 'cpu', 'cuda' or "
        "'cuda:1', got 'cpu:x'",
    ],
    "tf_bad_layout": [
        "ArgumentTypeError",
        "zeros(): argument 'layout' must be oplib.strided, the only layout oplib has (its "
        "tensors are dense arrays: no sparse or other layouts), got 'sparse'",
    ],
    "tf_mode": [
        ["oplib::zeros", []],
        ["oplib::zeros", ["dtype"]],
        ["oplib::ones", ["device"]],
        ["oplib::empty", ["device", "dtype"]],
    ],
    "keyword": [2.0, -4.0, 6.0],
    "sum": 2.0,
    "sum_dim": [1.0, -2.0, 3.0],
    "sum_dim_tuple": [1.0, -2.0, 3.0],
    "sum_dim_int": [1.0, -2.0, 3.0],
    "defaults": [2.0, -4.0, 6.0],
    "one_default": [3.0, -6.0, 9.0],
    "all_given": [6.0, -12.0, 18.0],
    "notes": ["oplib: raised by the cpu kernel of ccall::boom"],
    "base_exception": ["stop", None],
    "mode": ["oplib::neg", "oplib::add", "oplib::add", "oplib::mul.Scalar", "oplib::zeros"],
    "zeros": [[2], "float32", [0.0, 0.0]],
    "zeros_dtype_device": [[2], "float32", [0.0, 0.0]],
    "zeros_device_object": [[1, 2], "float32", [[0.0, 0.0]]],
    "zeros_tuple_size": [[2, 1], "float32", [[0.0], [0.0]]],
    "zeros_int_size": [[2], "float32", [0.0, 0.0]],
    "zeros_overload": [[2], "int8", [0, 0]],
    "zeros_dtype_name": [[2], "float16", [0.0, 0.0]],
    "fill": [[2], "float32", [1.5, 1.5]],
    "fill_int_scalar": [[2], "float64", [2.0, 2.0]],  # (an int given for a float)
    "factory_notes": ["oplib: raised by the cpu kernel of ccall::burst"],
    "factory_packet_gains_overloads": [[[1], "float64", [3.0]]] * 2
    + [[[1], "float64", [3.0]], [[1], "float64", [4.0]]] * 3,
    "factory_plans": [False, True, None],
    "packet_add": [2.0, -4.0, 6.0],
    "packet_add_scalar": [2.5, -0.5, 4.5],
    "packet_mul_tensor": [2.0, -4.0, 6.0],
    "packet_keyword": [2.0, -4.0, 6.0],
    "packet_neg": [-1.0, 2.0, -3.0],
    "packet_gains_an_overload": [[2.0, -4.0, 6.0]] * 2 + [[2.0, -4.0, 6.0], [3.0, -6.0, 9.0]] * 3,
    "packet_notes": ["oplib: raised by the cpu kernel of ccall::twin.boom"],
    "packet_routed": [True, False],
    "wide_defaults": [1.0, -2.0, 3.0],
    "wide_positional": [31.0, 28.0, 33.0],
    "wide_keywords": [28.0, 25.0, 30.0],
    "wide_list_positional": [33.0, 30.0, 35.0],
    "lists_made": [21.0, -39.0, 61.0],
    "lists_caller_args": [[1, 2], 3],
    "listed": [3.0, 0.0, 5.0],
    "listed_kept": ["list", False, True],
    "listed_tuple_k": [5.0, -1.0, 9.0],
    "listed_mixed": "Tensor",
    "listed_tensors": [3.0, 0.0, 5.0],
    "listed_empty": ["IndexError", "list index out of range"],
    "listed_bad_scalar": [
        "CallArgumentError",
        "ccall::keep(): argument 'k' must be int, got str ('two')\n"
        "  schema: ccall::keep(Tensor[] xs, int k=1) -> Tensor",
    ],
    "listed_not_a_list": [
        "CallArgumentError",
        "ccall::keep(): argument 'xs' must be Tensor[], got ndarray\n"
        "  schema: ccall::keep(Tensor[] xs, int k=1) -> Tensor",
    ],
    "listed_keyword": [4.0, -5.0, 10.0],
    "cat": [1.0, -2.0, 3.0, 1.0, -2.0, 3.0],
    "index_tensor": [3.0, 1.0],
    "packet_route_after_redefinition": [[2.0, -4.0, 6.0], [0.0, 0.0, 0.0], [2.0, -4.0, 6.0]] * 3
    + [[3.0, 0.0, 5.0]] * 3,
    "kw_sum": [[1.0], [-2.0], [3.0]],
    "kw_skip_one": [4.0, -8.0, 12.0],
    "kw_all": [1.0, -2.0, 3.0],
    "kw_unknown": [
        "CallArgumentError",
        "ccall::scale(): got an unexpected keyword argument 'bogus'\n"
        "  schema: ccall::scale(Tensor x, float s=2.0, bool twice=False) -> Tensor",
    ],
    "kw_twice": [
        "CallArgumentError",
        "ccall::scale(): got multiple values for argument 's'\n"
        "  schema: ccall::scale(Tensor x, float s=2.0, bool twice=False) -> Tensor",
    ],
    "kw_missing": [
        "CallArgumentError",
        "oplib::add(): missing required argument 'self' (Tensor)\n"
        "  schema: oplib::add(Tensor self, Tensor other) -> Tensor",
    ],
    "kw_wrong_type": [
        "CallArgumentError",
        "ccall::scale(): argument 's' must be float, got str ('two')\n"
        "  schema: ccall::scale(Tensor x, float s=2.0, bool twice=False) -> Tensor",
    ],
}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, object]]:
    return {
        "compiled": run_python(CALLS, timeout=120),
        "python": run_python(CALLS, env={"OPLIB_NATIVE_SPEEDUPS": "0"}, timeout=120),
    }


def test_the_compiled_call_serves_where_it_was_built(runs):
    if c_compiler() is None:
        pytest.skip("no C compiler: the install built no compiled cached call")
    assert runs["compiled"]["compiled"] is True
    assert runs["compiled"]["python_call"] is False
    # built on this Python: 3.12 and later also build and take 3.12's (by vectorcall)
    vectorcall = sys.version_info >= (3, 12)
    assert runs["compiled"]["module"] == ("_ccall312" if vectorcall else "_ccall")
    called_by_vectorcall = bool(type(oplib.ops.oplib.neg).__flags__ & (1 << 11))
    assert called_by_vectorcall is vectorcall  # (Py_TPFLAGS_HAVE_VECTORCALL, inherited)


def test_oplib_native_speedups_0_leaves_the_python_call(runs):
    assert runs["python"]["compiled"] is False
    assert runs["python"]["module"] is None
    assert runs["python"]["python_call"] is True


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_both_calls_give_the_same_answers(runs, key):
    assert runs["compiled"][key] == runs["python"][key] == EXPECTED[key]


@pytest.mark.parametrize(
    "key",
    [
        "wrong_scalar",
        "too_many",
        "none",
        "mixed",
        "packet_bad",
        "zeros_float_size",
        "sum_dim_bool",
        "zeros_unknown_keyword",
        "zeros_bad_device",
        "zeros_bad_dtype",
        "zeros_too_many",
        "fill_wrong_scalar",
        "tf_float_size",
        "tf_bool_size",
        "tf_bad_item",
        "tf_bad_device",
        "tf_bad_layout",
    ],
)
def test_both_calls_raise_the_same_errors(runs, key):
    error = runs["compiled"][key]
    assert error is not None and error == runs["python"][key]
    assert error[1].startswith(("ccall::", "oplib::", "zeros()")), error  # naming the op


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_the_compiled_base_holds_the_fields_the_python_call_reads():
    """The fields are the base type's members: no subclass may shadow one with a slot of
    its own (the C call would read the base's, left empty)."""
    base = type(oplib.ops.oplib.neg.default).__mro__[-2]
    assert base.__name__ == "FastCallBase"
    for cls in (
        type(oplib.ops.oplib.neg.default),
        type(oplib.ops.oplib.neg),
        type(oplib.ops.oplib.add),
        type(oplib.ops.oplib.zeros),
    ):
        for klass in cls.__mro__[:-2]:
            assert not set(klass.__dict__) & set(fastpath.FAST_FIELDS), klass
    op = oplib.ops.oplib.neg.default
    x = np.ones(2)
    op(x)
    assert op._by_type[np.ndarray] is not None  # read through the member
    assert isinstance(fastpath.FastCall._call_py, types.FunctionType)


@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_a_kernel_that_empties_the_cache_it_came_from_returns_its_result():
    """The C call holds the kernel it found while it runs: a kernel whose call drops the
    op's caches (a registration inside it) still returns, and the next call re-resolves."""
    with oplib.library._scoped_library("ccall_inv", "DEF") as lib:
        lib.define("f(Tensor x) -> Tensor")
        calls: list[int] = []

        def f(x):
            calls.append(1)
            if len(calls) == 3:  # a cached call: invalidate every cache of the op
                lib.impl("f", lambda x: x * 10, "Meta")
            return x + 1

        lib.impl("f", f, "CPU")
        op = oplib.ops.ccall_inv.f.default
        x = np.zeros(2)
        assert [op(x).tolist() for _ in range(4)] == [[1.0, 1.0]] * 4
        assert len(calls) == 4


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_a_cached_factory_call_runs_in_c(monkeypatch):
    """A factory call whose device an earlier call placed never reaches the Python call:
    keyword dtypes, a Device, a tuple size and no keyword at all; one it cannot take (a
    dtype named by a string) goes there as it came."""
    packet = oplib.ops.oplib.zeros
    f32 = np.dtype(np.float32)
    calls = [
        (([2],), {}),
        (([2],), {"dtype": f32, "device": "cpu"}),
        (((2, 1),), {"dtype": f32, "device": oplib.device("cpu")}),
    ]
    for _ in range(2):  # placed (the slow path), then each dtype's class met (Python)
        for args, kwargs in calls:
            packet(*args, **kwargs)
    seen: list[tuple[object, ...]] = []
    python_call = type(packet)._call_py

    def counted(self, *args, **kwargs):
        seen.append(args)
        return python_call(self, *args, **kwargs)

    monkeypatch.setattr(type(packet), "_call_py", counted)
    for args, kwargs in calls:
        assert packet(*args, **kwargs).shape == tuple(args[0])
    assert seen == []
    assert packet([2], dtype="float32").dtype == f32
    assert seen == [([2],)]


def test_a_factory_packet_whose_op_is_gone_runs_nothing():
    """A factory's cached calls end with its op: a call after the library is gone raises
    that the op no longer exists, and runs no kernel it ran before."""
    with oplib.library._scoped_library("ccall_gone", "DEF") as lib:
        lib.define("make(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor")
        lib.impl("make", lambda size, *, dtype, device: np.ones(size), "CPU")
        packet = oplib.ops.ccall_gone.make
        assert [packet([2]).tolist() for _ in range(3)] == [[1.0, 1.0]] * 3
    for _ in range(2):
        with pytest.raises(RuntimeError, match="ccall_gone::make no longer exists"):
            packet([2])


def _python_calls(fn) -> list[str]:
    """The names of the Python functions of the dispatcher's fast path (fastpath.py,
    ops.py) that ran while ``fn()`` ran."""
    ran: list[str] = []
    watched = (fastpath.__file__, sys.modules["oplib_core.ops"].__file__)

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in watched:
            ran.append(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return ran


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_keywords_naming_positional_parameters_are_placed_in_c():
    """``x.clamp(min=0.0)``, ``sum(x, dim=[1], keepdim=True)``, ``cat(xs, dim=0)``: the
    compiled call places the keywords itself (no Python frame of the dispatcher runs)."""
    ops = oplib.ops.oplib
    x = np.arange(6.0).reshape(3, 2)
    calls = {
        "clamp": lambda: ops.clamp(x, min=1.0),
        "sum": lambda: ops.sum(x, dim=[1], keepdim=True),
        "cat": lambda: ops.cat([x, x], dim=1),
        "add": lambda: ops.add.default(x, other=x),
    }
    for call in calls.values():
        call(), call()  # the caches filled
    for name, call in calls.items():
        assert _python_calls(call) == [], name
    np.testing.assert_array_equal(calls["clamp"](), np.clip(x, 1.0, None))
    np.testing.assert_array_equal(calls["sum"](), x.sum(1, keepdims=True))


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_keyword_only_calls_run_in_c():
    """``sum(x, dtype=...)``, ``_to_copy(t, dtype=...)``, with positional parameters named
    too: once the slow path filled the op's cache for those values (``OpCache.keyed``), the
    compiled call finds it by the same key and runs its kernels, with no Python frame of
    the dispatcher; a value that keys nothing (a dtype with metadata) and a value of a type
    the argument does not take still go to the Python call, which leaves them to binding."""
    ops = oplib.ops.oplib
    f64 = np.dtype(np.float64)
    x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    t = oplib.tensor(x)
    calls = {
        "native": (lambda: ops.sum(x, dtype=f64), x.sum(dtype=f64)),
        "placed too": (lambda: ops.sum(x, dim=[1], dtype=f64), x.sum(1, dtype=f64)),
        "keyword-only first": (
            lambda: ops.sum(x, dtype=f64, keepdim=True, dim=[0]),
            x.sum(0, keepdims=True, dtype=f64),
        ),
        "Tensor": (lambda: ops._to_copy(t, dtype=f64), x.astype(f64)),
        "Tensor method": (lambda: t.sum(dtype=f64), x.sum(dtype=f64)),
    }
    for call, _ in calls.values():
        call(), call()  # the slow path fills the keyed caches
    for name, (call, expected) in calls.items():
        assert _python_calls(call) == [], name
        out = np.asarray(call().numpy() if name.startswith("Tensor") else call())
        assert out.dtype == f64, name
        np.testing.assert_array_equal(out, expected)
    with_metadata = np.dtype(np.float64, metadata={"unit": "m"})
    ops.sum(x, dtype=with_metadata)
    assert "_call_py" in _python_calls(lambda: ops.sum(x, dtype=with_metadata))
    with pytest.raises(TypeError, match="dtype"):
        ops.sum(x, dtype=3.5)


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_calls_with_tensors_run_in_c():
    """Tensors that record no autograd: the compiled call unwraps them, runs the kernel of
    the arrays they wrap and wraps its result, and no Python frame of the dispatcher runs
    (issue 30: ``tensor_entry`` in Python cost a Tensor call 0.4-0.7 µs more than the
    array's). A Tensor requiring grad still takes the Python entry, which records the node."""
    ops = oplib.ops.oplib
    x = np.arange(1.0, 7.0).reshape(3, 2)
    t, u, w = oplib.tensor(x), oplib.tensor(x + 1), oplib.tensor(x.T.copy())
    calls = {
        "neg": (lambda: ops.neg(t), -x),
        "add (routed)": (lambda: ops.add(t, u), x + x + 1),
        "mul by a float (routed)": (lambda: ops.mul(t, 2.0), x * 2.0),
        "matmul": (lambda: ops.matmul(t, w), x @ x.T),
        "sum of an int[]": (lambda: ops.sum(t, [1]), x.sum(1)),
        "keywords placed": (lambda: ops.clamp(t, min=3.0), np.clip(x, 3.0, None)),
    }
    for call, _ in calls.values():
        call(), call()  # the caches filled
    for name, (call, expected) in calls.items():
        assert _python_calls(call) == [], name
        out = call()
        assert type(out) is oplib.Tensor, name
        np.testing.assert_array_equal(out.numpy(), expected)
    leaf = oplib.tensor(x, requires_grad=True)
    ops.neg(leaf)
    assert "call_tensor1" in _python_calls(lambda: ops.neg(leaf))
    assert ops.neg(leaf).grad_fn is not None


@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_tensors_over_two_backends_arrays_take_the_slow_path():
    """Tensors wrapping arrays of two classes (cpu and another backend's) are not run by
    the first one's kernel: the slow path raises its device error, call after call."""
    from oplib_core.errors import DeviceMismatchError
    from tests import cupylike_backend

    uninstall = cupylike_backend.install()
    try:
        ops = oplib.ops.oplib
        on_cpu = oplib.tensor(np.ones(2))
        on_other = on_cpu.to(cupylike_backend.NAME)
        assert ops.add.default(on_other, on_other).tolist() == [2.0, 2.0]
        assert ops.add.default(on_cpu, on_cpu).tolist() == [2.0, 2.0]
        for _ in range(3):  # the cached kernels of both classes in place
            for call in (ops.add.default, ops.add):
                with pytest.raises(DeviceMismatchError, match="'self' on cpu, 'other' on cupylike"):
                    call(on_cpu, on_other)
    finally:
        uninstall()


def test_the_compiled_call_sets_every_tensor_slot():
    """``TENSOR_SLOTS`` (what the compiled call's ``wrap`` sets, in its order) is every slot
    of Tensor, and a Tensor made by ``Tensor._wrap`` (the compiled one where built) has
    each as ``_init`` sets it."""
    assert set(fastpath.TENSOR_SLOTS) == set(oplib.Tensor.__slots__) - {"__weakref__"}
    data = np.ones(2)
    made = oplib.Tensor._wrap(data)
    assert type(made) is oplib.Tensor
    assert made._data is data
    assert [getattr(made, s) for s in fastpath.TENSOR_SLOTS[1:]] == [False, None, None, 0, None]
    if fastpath.COMPILED:
        assert oplib.Tensor._wrap is fastpath._make_tensor


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_a_tensor_factory_call_is_one_call_in_c():
    """``oplib.zeros(2, 3)``, ``oplib.ones((2, 1), dtype=..., device="cpu")``: the Tensor
    factory makes the op's call and the Tensor in C (``sized_tensor``), with no Python
    frame of the dispatcher nor of ``_made``; a call it cannot take (grad, a numpy int, a
    layout) still goes through ``_made``."""
    import oplib_core._factories as factories

    f32 = np.dtype(np.float32)
    calls = {  # the factory called -> the call
        "zeros": lambda: oplib.zeros(2, 3),
        "ones": lambda: oplib.ones((2, 1), dtype=f32, device="cpu"),
        "empty": lambda: oplib.empty([2], device=oplib.device("cpu")),
    }
    ran: list[str] = []
    watched = (fastpath.__file__, sys.modules["oplib_core.ops"].__file__, factories.__file__)

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in watched:
            ran.append(frame.f_code.co_name)

    for name, call in calls.items():
        call(), call()
        ran.clear()
        sys.setprofile(hook)
        try:
            made = call()
        finally:
            sys.setprofile(None)
        assert ran == [name, "_sized"], name
        assert type(made) is oplib.Tensor and made.requires_grad is False
    for slow in (
        lambda: oplib.zeros(2, requires_grad=True),
        lambda: oplib.zeros(np.int64(2)),
        lambda: oplib.zeros(2, layout=oplib.strided),
    ):
        ran.clear()
        sys.setprofile(hook)
        try:
            slow()
        finally:
            sys.setprofile(None)
        assert "_made" in ran


@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
@pytest.mark.parametrize("which", ["FastCallBase", "SizeRoutedBase"])
def test_a_subclass_of_a_compiled_base_is_collected_with_its_instances(which: str) -> None:
    """The compiled bases are heap types: their traverse visits the instance's type, as
    CPython leaves it to them, so a class whose instances sit in a reference cycle is
    collected with them (FastCallBase's did not: every such class leaked)."""
    import gc
    import weakref

    base = fastpath.SizeRoutedBase if which == "SizeRoutedBase" else fastpath._Base
    args = (abs, abs, 1) if which == "SizeRoutedBase" else ()

    def made() -> weakref.ref[type]:
        cls = type("Dynamic", (base,), {})
        obj = cls(*args)
        obj.me = obj  # a cycle through the instance
        return weakref.ref(cls)

    ref = made()
    gc.collect()
    assert ref() is None
