"""torch idioms that real torch.library code relies on (issue 31, items 1, 3 and 5).

Each test pins what torch does on the same code:

- an op that mutates an argument and returns nothing needs no fake kernel (torch's
  ``can_generate_trivial_fake_impl``: not a built-in op, ``schema.is_mutable``, no
  returns): under FakeTensorMode, on meta and in opcheck's fake test it returns None and
  touches nothing, for ``custom_op`` and ``Library.define`` ops alike;
- ``register_autograd`` on an op with a ``Tensor?`` return that is None (FBGEMM's
  ``permute_2D_sparse_data`` without weights): the None passes through, gets no node, and
  its gradient in backward is None;
- the calling convention at the edges: a user's op called without any array returns
  Tensors; None given for a plain ``Tensor`` argument reaches a Python kernel as None
  (torch's ``toIValue`` turns it into an undefined tensor, which a Python kernel sees as
  None); ``custom_op``'s mutates_args/schema mismatch says ``the op mutates {'x'}``.
"""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import FakeTensorMode
from oplib_core.library import _scoped_library

# -- 1. the trivial fake of an op that mutates and returns nothing ----------------------------


@pytest.fixture
def fill_op(ns):
    """``ns::fill_(Tensor(a!) x, float v) -> ()`` from custom_op, no register_fake; its
    kernel records its calls."""
    calls = []

    @oplib.custom_op(f"{ns}::fill_", mutates_args=("x",))
    def fill_(x: oplib.Tensor, v: float) -> None:
        calls.append(type(x))
        x[...] = v

    yield fill_, calls
    fill_._destroy()


@pytest.fixture
def scale_op(lib, ns):
    """``ns::scale_(Tensor(a!) x, float v) -> ()`` from Library.define, with a numpy
    'default' kernel (CompositeExplicitAutograd, as a ported torch kernel) and no fake."""
    calls = []
    lib.define("scale_(Tensor(a!) x, float v) -> ()")

    def scale_(x, v):
        calls.append(type(x))
        np.multiply(x, v, out=x)

    lib.impl("scale_", scale_, "CompositeExplicitAutograd")
    return getattr(oplib.ops, ns).scale_.default, calls


@pytest.fixture(params=["custom_op", "Library.define"])
def mutating_op(request, fill_op, scale_op):
    return fill_op if request.param == "custom_op" else scale_op


def test_mutating_op_without_fake_runs_under_fake_tensor_mode(mutating_op):
    op, calls = mutating_op
    with FakeTensorMode() as mode:
        x = mode.from_real(oplib.zeros(2, 3))
        assert op(x, 2.0) is None
        assert x.shape == (2, 3) and x.dtype == oplib.float32  # touched nothing
    assert calls == []  # the real kernel never ran on fake arrays


def test_mutating_op_without_fake_runs_on_meta(mutating_op):
    op, calls = mutating_op
    x = oplib.empty(4, device="meta")
    assert op(x, 2.0) is None
    assert x.shape == (4,) and x.device == oplib.Device("meta")
    # before the fix the 'default' kernel's numpy math ran on meta arrays (and failed)
    assert calls == []


def test_mutating_op_still_runs_its_kernel_on_real_data(mutating_op):
    op, calls = mutating_op
    x = oplib.ones(3)
    op(x, 2.0)
    assert calls and np.array_equal(x.numpy(), [2.0, 2.0, 2.0])


def test_mutating_op_without_fake_passes_opcheck_fake_test(mutating_op):
    op, _ = mutating_op
    result = oplib.testing.opcheck(op, (oplib.ones(3), 2.0), test_utils=("test_faketensor",))
    assert result["test_faketensor"] == "SUCCESS"


def test_a_registered_fake_or_meta_kernel_comes_before_the_trivial_fake(lib, ns, scale_op):
    op, _ = scale_op
    seen = []
    oplib.register_fake(f"{ns}::scale_", lambda x, v: seen.append("fake"), lib=lib)
    with FakeTensorMode() as mode:
        op(mode.from_real(oplib.zeros(2)), 1.0)
    op(oplib.empty(2, device="meta"), 1.0)
    assert seen == ["fake", "fake"]

    lib.define("touch_(Tensor(a!) x) -> ()")
    lib.impl("touch_", lambda x: seen.append("meta"), "Meta")
    with FakeTensorMode() as mode:
        getattr(oplib.ops, ns).touch_(mode.from_real(oplib.zeros(2)))
    assert seen[-1] == "meta"


def test_meta_resolution_names_the_trivial_fake(scale_op):
    op, _ = scale_op
    steps = list(op.resolution_steps(oplib.backends.get("meta")))
    taken = [(key, why) for key, fn, why in steps if fn is not None]
    assert taken == [("Fake", "taken: trivial fake (mutates, returns nothing)")]


@pytest.mark.parametrize(
    "schema",
    [
        "(Tensor(a!) x) -> Tensor",  # returns something: its metadata is needed
        "(Tensor x) -> ()",  # mutates nothing: torch declines it "out of caution"
    ],
)
def test_only_mutating_ops_returning_nothing_get_the_trivial_fake(lib, ns, schema):
    lib.define(f"g{schema}")
    lib.impl("g", lambda x: None, "CompositeExplicitAutograd")
    op = getattr(oplib.ops, ns).g.default
    with FakeTensorMode() as mode:
        x = mode.from_real(oplib.zeros(2))
        with pytest.raises(oplib.NoKernelError, match=rf"{ns}::g: has no fake kernel"):
            op(x)


def test_trivial_fake_still_refuses_real_inputs_under_the_mode(fill_op):
    op, _ = fill_op
    real = oplib.zeros(2)
    with FakeTensorMode(), pytest.raises(oplib.FakeTensorError, match="got real input 'x'"):
        op(real, 1.0)


# -- 3. register_autograd with a Tensor? return that is None -------------------------------
# FBGEMM's schema, as fbgemm_gpu/sparse_ops registers it (values as float here, so that a
# gradient flows: FBGEMM permutes embedding indices and weights alike).

PERMUTE_2D = (
    "permute_2D_sparse_data(Tensor permute, Tensor lengths, Tensor indices, Tensor? "
    "weights=None, SymInt? permuted_lengths_sum=None) -> (Tensor, Tensor, Tensor?)"
)


def _source_positions(permute, lengths):
    """For each position of the permuted values, the position it comes from."""
    offsets = np.concatenate([[0], np.cumsum(lengths.reshape(-1))])
    b = lengths.shape[1]
    order = []
    for table in permute:
        for row in range(b):
            start = offsets[table * b + row]
            order.extend(range(start, start + lengths[table, row]))
    return np.asarray(order, dtype=np.int64)


@pytest.fixture
def permute_2d(lib, ns):
    lib.define(PERMUTE_2D)

    def kernel(permute, lengths, indices, weights=None, permuted_lengths_sum=None):
        order = _source_positions(permute, lengths)
        out_weights = None if weights is None else weights[order]
        return lengths[permute], indices[order], out_weights

    lib.impl("permute_2D_sparse_data", kernel, "cpu")
    grads_seen = []

    def setup_context(ctx, inputs, output):
        permute, lengths = inputs[0], inputs[1]
        ctx.order = _source_positions(permute.numpy(), lengths.numpy())
        ctx.n = inputs[2].shape[0]

    def backward(ctx, g_lengths, g_indices, g_weights):
        grads_seen.append(g_weights)

        def unpermute(g):
            if g is None:
                return None
            out = np.zeros(ctx.n, dtype=g.dtype)
            out[ctx.order] = g.numpy()
            return oplib.tensor(out)

        return None, None, unpermute(g_indices), unpermute(g_weights), None

    oplib.register_autograd(
        f"{ns}::permute_2D_sparse_data", backward, setup_context=setup_context, lib=lib
    )
    return getattr(oplib.ops, ns).permute_2D_sparse_data, grads_seen


def _permute_inputs():
    permute = oplib.tensor(np.array([1, 0], dtype=np.int64))
    lengths = oplib.tensor(np.array([[1, 2], [2, 1]], dtype=np.int64))
    indices = oplib.tensor(np.arange(6, dtype=np.float32), requires_grad=True)
    return permute, lengths, indices


def test_register_autograd_passes_a_none_optional_output_through(permute_2d):
    op, grads_seen = permute_2d
    permute, lengths, indices = _permute_inputs()
    out_lengths, out_indices, out_weights = op(permute, lengths, indices)
    assert out_weights is None  # was: AttributeError 'NoneType' object has no attribute '_data'
    np.testing.assert_array_equal(out_lengths.numpy(), [[2, 1], [1, 2]])
    np.testing.assert_array_equal(out_indices.detach().numpy(), [3, 4, 5, 0, 1, 2])
    assert out_indices.grad_fn is not None and out_indices.requires_grad
    assert out_lengths.grad_fn is None  # an integer output
    (out_indices * oplib.tensor(np.arange(6, dtype=np.float32))).sum().backward()
    assert grads_seen == [None]  # the None output's gradient is None, as torch gives it
    np.testing.assert_array_equal(indices.grad.numpy(), [3, 4, 5, 0, 1, 2])


def test_register_autograd_with_the_optional_output_present(permute_2d):
    op, grads_seen = permute_2d
    permute, lengths, indices = _permute_inputs()
    weights = oplib.tensor(np.arange(6, dtype=np.float32) * 10, requires_grad=True)
    _, out_indices, out_weights = op(permute, lengths, indices, weights)
    np.testing.assert_array_equal(out_weights.detach().numpy(), [30, 40, 50, 0, 10, 20])
    (out_indices.sum() + 2 * out_weights.sum()).backward()
    assert grads_seen[0] is not None
    np.testing.assert_array_equal(weights.grad.numpy(), np.full(6, 2.0))
    np.testing.assert_array_equal(indices.grad.numpy(), np.ones(6))


def test_register_autograd_single_optional_output_none(lib, ns):
    lib.define("maybe(Tensor x, bool give) -> Tensor?")
    lib.impl("maybe", lambda x, give: x * 2 if give else None, "cpu")
    oplib.register_autograd(f"{ns}::maybe", lambda ctx, g: (g * 2, None), lib=lib)
    op = getattr(oplib.ops, ns).maybe
    x = oplib.ones(2, requires_grad=True)
    assert op(x, False) is None
    y = op(x, True)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


# -- 5. the calling convention at the edges --------------------------------------------------


def test_op_without_tensor_argument_returns_a_tensor(lib, ns):
    @oplib.custom_op(f"{ns}::create_from_file", mutates_args=())
    def create_from_file(path: str) -> oplib.Tensor:
        return np.full(3, len(path), dtype=np.float32)

    try:
        out = create_from_file("abc")
        assert type(out) is oplib.Tensor  # torch: a Tensor (it has nothing else)
        np.testing.assert_array_equal(out.numpy(), [3.0, 3.0, 3.0])
    finally:
        create_from_file._destroy()

    lib.define("from_name(str name) -> (Tensor, Tensor)")
    lib.impl("from_name", lambda name: (np.zeros(1), np.ones(2)), "cpu")
    a, b = getattr(oplib.ops, ns).from_name("x")
    assert type(a) is oplib.Tensor and type(b) is oplib.Tensor
    oplib.register_fake(f"{ns}::from_name", lambda name: (oplib.empty(1), oplib.empty(2)), lib=lib)
    with FakeTensorMode():
        a, b = getattr(oplib.ops, ns).from_name("x")
    assert type(a) is oplib.Tensor and b.shape == (2,)


def test_factory_op_of_a_user_returns_tensors_cold_and_from_the_cache(lib, ns):
    lib.define("make(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor")
    lib.impl("make", lambda size, *, dtype, device: np.zeros(size, dtype or np.float32), "cpu")
    make = getattr(oplib.ops, ns).make
    for _ in range(3):  # planned, then served by the factory cache
        out = make([2], device="cpu")
        assert type(out) is oplib.Tensor and out.shape == (2,)


def test_core_factories_keep_giving_arrays():
    assert type(oplib.ops.oplib.zeros([2])) is np.ndarray
    assert type(oplib.zeros(2)) is oplib.Tensor


@pytest.fixture
def conv_bwd(lib, ns):
    """The shape of causal-conv1d's backward: a plain ``Tensor`` argument given None."""
    lib.define("conv_bwd(Tensor dout, Tensor dinitial_states) -> Tensor")
    got = []

    def kernel(dout, dinitial_states):
        got.append(dinitial_states)
        return dout * 2 if dinitial_states is None else dout + dinitial_states

    lib.impl("conv_bwd", kernel, "cpu")
    return getattr(oplib.ops, ns).conv_bwd, got


def test_none_for_a_plain_tensor_argument_reaches_the_kernel_as_none(conv_bwd):
    op, got = conv_bwd
    out = op(oplib.ones(2), None)
    assert got == [None]
    assert type(out) is oplib.Tensor
    np.testing.assert_array_equal(out.numpy(), [2.0, 2.0])
    assert type(op(np.ones(2), None)) is np.ndarray  # native in, native out, as before
    assert type(op(dout=oplib.ones(2), dinitial_states=None)) is oplib.Tensor


def test_none_for_a_plain_tensor_argument_under_fake_tensor_mode(lib, ns, conv_bwd):
    op, _ = conv_bwd
    seen = []
    oplib.register_fake(
        f"{ns}::conv_bwd", lambda dout, d: seen.append(d) or oplib.empty_like(dout), lib=lib
    )
    with FakeTensorMode() as mode:
        out = op(mode.from_real(oplib.ones(2)), None)
    assert seen == [None] and out.shape == (2,)


def test_none_for_a_plain_tensor_argument_of_a_custom_op_with_autograd(ns):
    @oplib.custom_op(f"{ns}::scaled", mutates_args=())
    def scaled(x: oplib.Tensor, scale: oplib.Tensor) -> oplib.Tensor:
        return x * (2.0 if scale is None else scale)

    scaled.register_autograd(lambda ctx, g: (g * 2, None))
    try:
        x = oplib.ones(2, requires_grad=True)
        scaled(x, None).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    finally:
        scaled._destroy()


def test_core_ops_still_refuse_none_for_a_tensor():
    with pytest.raises(TypeError, match=r"argument 'self' must be Tensor, got NoneType"):
        oplib.ops.oplib.neg(None)


@pytest.mark.parametrize(
    ("schema", "mutates", "words"),
    [
        ("(Tensor(a!) x) -> ()", (), "the op mutates {'x'}"),
        ("(Tensor(a!) x, Tensor(b!) y) -> ()", ("x",), "the op mutates {'x', 'y'}"),
        ("(Tensor x) -> Tensor", ("x",), "the op mutates set()"),
    ],
)
def test_mutation_mismatch_says_what_the_op_mutates_as_torch(ns, schema, mutates, words):
    # torch: "... The schema suggests that the op mutates {expected}which is different from
    # what was provided to us in `mutates_args`. Please make these consistent." (ValueError)
    with pytest.raises(ValueError, match="Please make these consistent") as e:
        oplib.custom_op(f"{ns}::m", lambda x, y=None: None, mutates_args=mutates, schema=schema)
    msg = str(e.value)
    assert words in msg and "The schema suggests that" in msg
    assert f"mutates_args={sorted(mutates)}" in msg and f"schema={schema!r}" in msg
    assert not hasattr(getattr(oplib.ops, ns), "m")


def test_scoped_library_leaves_no_trivial_fake_behind(ns):
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("z_(Tensor(a!) x) -> ()")
        lib.impl("z_", lambda x: None, "cpu")
        with FakeTensorMode() as mode:
            assert getattr(oplib.ops, ns).z_(mode.from_real(oplib.zeros(1))) is None
    assert not hasattr(getattr(oplib.ops, ns), "z_")
