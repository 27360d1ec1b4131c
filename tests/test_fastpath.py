"""The hot path's seams: the fast path's caches and the switch that turns them off
(``OPLIB_DISPATCH_SLOW=1``), ``call_below_autograd``, ``plan_call`` and the read-only
accessors of ``OpOverload``."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import MISS, DispatchMode, Plan
from oplib_core._registry.entry import Kernel
from oplib_core._registry.registry import REGISTRY

from subproc import run_python


def _neg(lib, ns, calls=None):
    """``ns::neg`` with a cpu kernel that records its calls, and its OpOverload."""
    lib.define("neg(Tensor x) -> Tensor")

    def kernel(x):
        if calls is not None:
            calls.append(type(x))
        return -x

    lib.impl("neg", kernel, "CPU")
    return getattr(oplib.ops, ns).neg.default, kernel


def _with_formula(lib, ns):
    op, kernel = _neg(lib, ns)
    oplib.register_autograd(f"{ns}::neg", lambda ctx, g: -g, lib=lib)
    return op, kernel


class _Passthrough(DispatchMode):
    pass


# -- the switch -------------------------------------------------------------------------------

SLOW_SNIPPET = """
import numpy as np
import oplib_core as oplib
from oplib_core import _dispatch

lib = oplib.Library("slowcheck", "DEF")
lib.define("neg(Tensor x) -> Tensor")
calls = []
lib.impl("neg", lambda x: calls.append(1) or -x, "CPU")
oplib.register_autograd("slowcheck::neg", lambda ctx, g: -g, lib=lib)
op = oplib.ops.slowcheck.neg.default
x, t = np.ones(2), oplib.tensor([1.0, 2.0])
leaf = oplib.tensor([1.0], requires_grad=True)
for _ in range(3):
    op(x)
    oplib.ops.slowcheck.neg(x)
    op(t)
    op(leaf).sum().backward()
cache = op._opcache
OUT["slow"] = _dispatch.SLOW
OUT["npos"] = op._npos
OUT["by_type"] = sorted(c.__name__ for c in cache.by_type)
OUT["tensor"] = len(cache.tensor)
OUT["autograd"] = len(cache.autograd)
OUT["by_backend"] = len(cache.by_backend)
OUT["calls"] = len(calls)
OUT["below"] = op.call_below_autograd((t,)) is _dispatch.MISS
OUT["hit"] = oplib.explain(op, x).cache_hit
OUT["grad"] = leaf.grad.tolist()
"""


def test_slow_switch_turns_the_caches_off():
    out = run_python(SLOW_SNIPPET, env={"OPLIB_DISPATCH_SLOW": "1"})
    assert out["slow"] is True and out["npos"] == -1
    assert out["by_type"] == ["Tensor"]  # only the Tensor entry, never reached
    assert out["tensor"] == out["autograd"] == out["by_backend"] == 0
    assert out["below"] is True and out["hit"] is False
    assert out["calls"] == 12  # every call ran the kernel (the backward's neg is another op)
    assert out["grad"] == [-3.0]  # three backward passes accumulated


def test_without_the_switch_the_same_calls_fill_the_caches():
    out = run_python(SLOW_SNIPPET)
    assert out["slow"] is False and out["npos"] == 1
    assert out["by_type"] == ["Tensor", "ndarray"]
    assert out["tensor"] == out["autograd"] == out["by_backend"] == 1
    assert out["below"] is False and out["hit"] is True
    assert out["calls"] == 12 and out["grad"] == [-3.0]


# -- the cache object ---------------------------------------------------------------------------


@pytest.mark.fastpath
def test_calls_fill_the_named_caches(lib, ns):
    op, kernel = _with_formula(lib, ns)
    cache = op._opcache
    op(np.ones(1))
    assert cache.by_type[np.ndarray] is kernel
    assert cache.by_backend["cpu"] == (kernel, "cpu")
    op(oplib.tensor([1.0]))
    assert cache.tensor == {np.ndarray: kernel}
    op(oplib.tensor([1.0], requires_grad=True))
    assert list(cache.autograd) == [np.ndarray]
    assert cache.by_type[oplib.Tensor] is cache.tensor_entry


@pytest.mark.fastpath
def test_registration_invalidates_the_cache_object(lib, ns):
    op, _ = _neg(lib, ns)
    cache = op._opcache
    assert REGISTRY.ops[f"{ns}::neg"].cache is cache  # the registry holds it, tells it to forget
    op(np.ones(1))
    op(oplib.tensor([1.0]))
    assert np.ndarray in cache.by_type and cache.tensor and cache.by_backend
    with oplib.library._scoped_library(ns, "FRAGMENT") as other:
        other.impl("neg", lambda x: x * 10, "CompositeExplicitAutograd")
        assert list(cache.by_type) == [oplib.Tensor]  # the Tensor entry stays
        assert not cache.tensor and not cache.autograd and not cache.by_backend
        op(np.ones(1))
        assert np.ndarray in cache.by_type
    assert list(cache.by_type) == [oplib.Tensor]  # undoing a registration forgets too


def test_a_new_kernel_serves_calls_after_the_cache_was_warm(lib, ns):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, "CompositeExplicitAutograd")
    op = getattr(oplib.ops, ns).f
    x, t = np.zeros(1), oplib.tensor([0.0])
    for _ in range(2):
        assert op(x)[0] == 1 and op(t).tolist() == [1.0]
    handle = oplib.register_kernel(f"{ns}::f", "cpu", lambda x: x + 2, lib=lib)
    assert op(x)[0] == 2 and op(t).tolist() == [2.0]
    del handle


# -- call_below_autograd --------------------------------------------------------------------------


def test_call_below_autograd_misses_until_a_call_is_cached(lib, ns):
    op, _ = _neg(lib, ns)
    t = oplib.tensor([1.0, 2.0])
    assert op.call_below_autograd((t,)) is MISS  # nothing cached yet (or the fast path off)


@pytest.mark.fastpath
def test_call_below_autograd_runs_the_cached_backend_kernel(lib, ns):
    calls: list = []
    op, _ = _neg(lib, ns, calls)
    t = oplib.tensor([1.0, 2.0], requires_grad=True)
    with oplib.no_grad():
        op(t)  # fills the Tensor cache
    calls.clear()
    out = op.call_below_autograd((t,))
    assert type(out) is oplib.Tensor and out.tolist() == [-1.0, -2.0]
    assert out.grad_fn is None and not out.requires_grad  # below autograd: no history
    assert calls == [np.ndarray]  # the kernel got the native array


@pytest.mark.fastpath
def test_call_below_autograd_misses_when_the_full_path_is_needed(lib, ns, toy):
    lib.define("add2(Tensor a, Tensor b) -> Tensor")
    lib.impl("add2", lambda a, b: a + b, "CPU")
    op = getattr(oplib.ops, ns).add2.default
    t = oplib.tensor([1.0])
    with oplib.no_grad():
        op(t, t)
    assert op.call_below_autograd((t, t)).tolist() == [2.0]
    assert op.call_below_autograd((t, np.ones(1))) is MISS  # not a Tensor
    assert op.call_below_autograd((t,)) is MISS  # not the op's arity
    assert op.call_below_autograd((t, oplib.Tensor(toy(np.ones(1))))) is MISS  # other arrays
    with _Passthrough():
        assert op.call_below_autograd((t, t)) is MISS  # a mode must see the call


def test_autograd_through_call_below_autograd_matches_the_full_path(lib, ns):
    op, _ = _with_formula(lib, ns)
    grads = []
    for _ in range(3):  # the first call takes the full path, the others the cached kernel
        leaf = oplib.tensor([1.0, 2.0], requires_grad=True)
        out = op(leaf)
        assert out.tolist() == [-1.0, -2.0] and out.grad_fn is not None
        out.sum().backward()
        grads.append(leaf.grad.tolist())
    assert grads == [[-1.0, -1.0]] * 3


# -- plan_call ---------------------------------------------------------------------------------


def test_plan_call_gives_the_decision_without_running_a_kernel(lib, ns):
    calls: list = []
    op, kernel = _neg(lib, ns, calls)
    plan = op.plan_call((np.ones(2),), {})
    assert isinstance(plan, Plan) and calls == []
    assert plan.backend is not None and plan.backend.name == "cpu"
    assert plan.keys == ("CPU",) and plan.autograd == ""
    assert plan.key == "cpu" and plan.kernel is kernel and plan.error is None
    assert plan.placement is not None and plan.placement.tensors_in is False
    with pytest.raises(TypeError, match="argument 'x' must be Tensor"):
        op.plan_call(("nope",), {})


def test_plan_call_for_autograd_and_errors(lib, ns, toy):
    op, _ = _neg(lib, ns)
    leaf = oplib.tensor([1.0], requires_grad=True)
    plan = op.plan_call((leaf,), {})
    assert plan.keys == ("Autograd", "CPU") and plan.autograd == "no formula"
    assert plan.key is None and "Autograd has not been implemented" in str(plan.error)
    with oplib.no_grad():
        assert op.plan_call((leaf,), {}).autograd == "grad mode off"
    oplib.register_autograd(f"{ns}::neg", lambda ctx, g: -g, lib=lib)
    plan = op.plan_call((leaf,), {})
    assert plan.autograd == "taken" and plan.key == "Autograd" and plan.error is None
    plan = op.plan_call((toy(np.ones(1)),), {})
    assert isinstance(plan.error, oplib.NoKernelError) and plan.backend.name == "toy"
    lib.define("two(Tensor a, Tensor b) -> Tensor")
    plan = getattr(oplib.ops, ns).two.default.plan_call((np.ones(1), toy(np.ones(1))), {})
    assert isinstance(plan.error, oplib.DeviceMismatchError) and plan.placement is None


@pytest.mark.fastpath
def test_plan_call_knows_whether_the_fast_path_serves_the_call(lib, ns):
    op, _ = _neg(lib, ns)
    x, t = np.ones(1), oplib.tensor([1.0])
    assert op.plan_call((x,), {}).cached is False
    op(x)
    assert op.plan_call((x,), {}).cached is True
    assert op.plan_call((t,), {}).cached is False
    op(t)
    assert op.plan_call((t,), {}).cached is True
    assert op.plan_call((), {"x": x}).cached is True  # a keyword naming a positional one


# -- read-only accessors ------------------------------------------------------------------------


def test_schema_tags_origin_and_name(lib, ns):
    qualname = lib.define("f(Tensor x) -> Tensor", tags=(oplib.Tag.pointwise,))
    op = getattr(oplib.ops, ns).f.default
    assert op.schema is op._schema and str(op.schema) == f"{ns}::f(Tensor x) -> Tensor"
    assert op.tags == (oplib.Tag.pointwise,) and op.name() == qualname
    assert op.origin.source.startswith(__file__)
    with pytest.raises(AttributeError):
        op.schema = None  # read-only


def test_kernel_and_has_kernel_normalise_keys_as_registration_does(lib, ns):
    op, kernel = _neg(lib, ns)
    k = op.kernel("CPU")
    assert isinstance(k, Kernel) and k.fn is kernel and k.key == "cpu"
    assert op.kernel("cpu") is k and op.has_kernel("CPU") and op.has_kernel("cpu")
    assert op.kernel("default") is None and not op.has_kernel("CompositeExplicitAutograd")
    lib.impl("neg", oplib.fallthrough_kernel, "CompositeExplicitAutograd")
    assert op.kernel("default").is_fallthrough and op.has_kernel("default")
    oplib.register_fake(f"{ns}::neg", lambda x: oplib.empty_like(x), lib=lib)
    assert op.has_kernel("Fake") and not op.has_kernel("Autograd")
    assert {key for key, _ in op.kernels()} == {"cpu", "CompositeExplicitAutograd", "Fake"}


def test_kernel_for_unknown_keys(lib, ns):
    op, _ = _neg(lib, ns)
    assert op.kernel("cuda") is None and not op.has_kernel("CUDA")  # a device type: none
    assert op.kernel("nosuchdevice") is None
    with pytest.raises(oplib.RegistrationError, match="unknown dispatch key 'NotAKey'"):
        op.kernel("NotAKey")
    with pytest.raises(oplib.RegistrationError, match="unknown dispatch key"):
        op.has_kernel("Not A Key")
    with pytest.raises(TypeError, match="expected a device type or dispatch key name"):
        op.kernel(3)  # type: ignore[arg-type]


def test_py_kernel(lib, ns):
    op, _ = _neg(lib, ns)
    assert op.py_kernel("CPU") is None and op.py_kernel(_Passthrough) is None

    @op.py_impl("CPU")
    def cpu(x):
        return x

    @op.py_impl(_Passthrough)
    def under_mode(mode, x):
        return "handled"

    assert op.py_kernel("CPU") is cpu and op.py_kernel("cpu") is cpu
    assert op.py_kernel(_Passthrough) is under_mode
    assert op.kernel("CPU").fn is not cpu  # py_impl kernels are not registrations
    with _Passthrough():
        assert op(np.ones(1)) == "handled"
    with pytest.raises(oplib.RegistrationError):
        op.py_kernel("NotAKey")


def test_resolve_and_autograd_kernel_answer_as_dispatch_does(lib, ns):
    from oplib_core.backends import TABLE

    cpu = TABLE.get("cpu")
    op, kernel = _neg(lib, ns)
    assert op.resolve(cpu) == (kernel, "cpu")
    with pytest.raises(oplib.NoKernelError, match="no kernel for backend 'meta'"):
        op.resolve(TABLE.get("meta"))
    with pytest.raises(RuntimeError, match="has no autograd formula"):
        op.autograd_kernel(cpu)
    oplib.register_autograd(f"{ns}::neg", lambda ctx, g: -g, lib=lib)
    fn = op.autograd_kernel(cpu)
    assert fn is not None and fn is op.kernel("Autograd").fn
    lib.define("pos(Tensor x) -> Tensor")
    lib.impl("pos", oplib.fallthrough_kernel, "Autograd")
    assert getattr(oplib.ops, ns).pos.default.autograd_kernel(cpu) is None  # to the backend


def test_bind_and_defined(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("f(Tensor x, int n=2, *, float scale=1.0) -> Tensor")
    op = getattr(oplib.ops, ns).f.default
    x = np.ones(1)
    assert op.bind((x,), {}) == ([x, 2], {"scale": 1.0})
    assert op.bind((), {"x": x, "n": 3, "scale": 2.0}) == ([x, 3], {"scale": 2.0})
    with pytest.raises(TypeError, match="unexpected keyword argument 'm'"):
        op.bind((x,), {"m": 1})
    assert op.defined
    lib._destroy()
    assert not op.defined


# -- Tensors are built in one place ---------------------------------------------------------------


def test_every_tensor_has_every_slot_set(lib, ns):
    op, _ = _with_formula(lib, ns)
    leaf = oplib.tensor([1.0, 2.0], requires_grad=True)
    made = [
        oplib.Tensor(np.ones(1)),
        oplib.Tensor(np.ones(1), requires_grad=True),
        oplib.tensor([1.0]),
        leaf,
        leaf.detach(),
        op(leaf),  # through the Autograd kernel
        op(leaf),  # again, below autograd from the cache
        op(oplib.tensor([1.0])),
        leaf * leaf,
        leaf.sum(),
    ]
    slots = [s for s in oplib.Tensor.__slots__ if s != "__weakref__"]
    for t in made:
        for slot in slots:
            getattr(t, slot)  # raises AttributeError for a slot never set
        assert t._out_nr == 0


@pytest.mark.fastpath
def test_a_tensor_first_call_is_served_noted_and_recorded_as_the_slow_path_does(lib, ns):
    """``t * 0.5``'s shape (one Tensor first, then other arguments): the Tensor entry for it
    runs the kernel on the array and wraps the result, notes a kernel's failure as the
    slow path does, and hands a call that requires grad to the Autograd kernel."""
    lib.define("scale(Tensor x, float s) -> Tensor")
    fail = []

    def kernel(x, s):
        if fail:
            raise ValueError("boom")
        return x * s

    lib.impl("scale", kernel, "CPU")
    oplib.register_autograd(f"{ns}::scale", lambda ctx, g: (g * 2.0, None), lib=lib)
    op = getattr(oplib.ops, ns).scale.default
    t = oplib.tensor(np.ones(2))
    first = op(t, 2.0)
    assert op._by_type[oplib.Tensor].__name__ == "call_tensor_first"
    served = op(t, 2.0)
    assert type(served) is oplib.Tensor and served.tolist() == first.tolist() == [2.0, 2.0]
    below = op.call_below_autograd((t, 3.0))
    assert below is not MISS and below.tolist() == [3.0, 3.0]
    fail.append(1)
    notes = []
    for call in (lambda: op(t, 2.0), lambda: op.call_below_autograd((t, 2.0))):
        with pytest.raises(ValueError, match="boom") as info:
            call()
        notes.append(info.value.__notes__)
    assert f"raised by the cpu kernel of {ns}::scale (" in notes[0][0] and notes[0] == notes[1]
    fail.clear()
    x = oplib.tensor(np.ones(2), requires_grad=True)
    y = op(x, 2.0)
    assert y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [2.0, 2.0]
