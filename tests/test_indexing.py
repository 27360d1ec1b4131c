"""Indexing and views (issue 14): the core ops (``select``, ``slice``, ``index``, ``gather``,
``pad``, ``split`` ...) on every backend with their fakes and formulas, ``Tensor.__getitem__``
against numpy, views that alias and copies that do not, and torch 2.13's errors (checked
against torch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core._opset import CORE_OPS
from oplib_core.autograd import gradcheck, gradgradcheck
from oplib_core.fake import SymInt
from oplib_core.fake._symbolic import ShapeEnv
from oplib_core.kernels import index_kernels
from oplib_core.testing._index_samples import INDEX_MAKERS

O = oplib.ops.oplib  # noqa: E741  (the op namespace)
NEW_OPS = sorted(INDEX_MAKERS)


def _installed(device: str) -> None:
    if device not in {b.name for b in oplib.backends.list()}:
        pytest.skip(f"{device} is not installed")


class _Data:
    def __init__(self, name: str) -> None:
        self.rng = np.random.default_rng(sum(name.encode()))

    def floats(self, shape: tuple[int, ...]) -> np.ndarray:
        out: np.ndarray = self.rng.uniform(0.5, 2.0, shape) * self.rng.choice([-1.0, 1.0], shape)
        return out

    def ints(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.integers(-5, 6, size=shape).astype(np.int64)

    def bools(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.integers(0, 2, size=shape).astype(bool)


def _samples(name: str, device: str) -> list[oplib.testing.SampleInput]:
    return list(INDEX_MAKERS[name](_Data(name), oplib.device(device)))


def _host(x: object) -> list[np.ndarray]:
    items = x if isinstance(x, (list, tuple)) else [x]
    return [np.asarray(t.detach().to("cpu").numpy()) for t in items]  # type: ignore[attr-defined]


# -- the op set -------------------------------------------------------------------------------
def test_every_new_op_is_in_the_op_set_with_samples():
    names = {op.name for op in CORE_OPS}
    assert set(NEW_OPS) <= names
    assert set(index_kernels(np)) == set(NEW_OPS)
    assert "index_put" not in {n.partition(".")[0] for n in NEW_OPS}  # the in-place work's


@pytest.mark.parametrize("name", NEW_OPS)
@pytest.mark.parametrize("device", ["cpu", "privateuse1"])
def test_opcheck_every_sample(name, device):
    _installed(device)
    op = oplib.lookup(f"oplib::{name}")
    for sample in _samples(name, device):
        oplib.opcheck(op, sample.args, sample.kwargs)


@pytest.mark.parametrize("name", NEW_OPS)
def test_meta_and_fake_shapes_match_the_cpu_kernel(name):
    op = oplib.lookup(f"oplib::{name}")
    for sample in _samples(name, "cpu"):
        real = op(*sample.args, **sample.kwargs)
        meta_args = [a.to("meta") if isinstance(a, oplib.Tensor) else a for a in sample.args]
        meta_args = [
            [i.to("meta") if isinstance(i, oplib.Tensor) else i for i in a]
            if isinstance(a, list) and any(isinstance(i, oplib.Tensor) for i in a)
            else a
            for a in meta_args
        ]
        meta = op(*meta_args, **sample.kwargs)
        reals = real if isinstance(real, (list, tuple)) else [real]
        metas = meta if isinstance(meta, (list, tuple)) else [meta]
        for r, m in zip(reals, metas, strict=True):
            assert m.device.type == "meta" and m.dtype == r.dtype, sample.name
            if any(isinstance(s, SymInt) for s in m.shape):  # a mask's data-dependent size
                assert name in ("masked_select", "index.Tensor"), sample.name
                assert len(m.shape) == len(r.shape), sample.name
            else:
                assert m.shape == r.shape, sample.name


@pytest.mark.parametrize("name", NEW_OPS)
def test_gradcheck_every_float_sample(name):
    op = oplib.lookup(f"oplib::{name}")
    for sample in _samples(name, "cpu"):
        x = sample.args[0]
        if not x.requires_grad:
            continue
        x64 = x.detach().double().requires_grad_()
        rest = [
            a.detach().double() if isinstance(a, oplib.Tensor) and a.dtype.kind == "f" else a
            for a in sample.args[1:]
        ]

        def f(x: oplib.Tensor, rest: list = rest, sample=sample) -> object:
            out = op(x, *rest, **sample.kwargs)
            return out[0] if name.endswith(".dim") else out

        assert gradcheck(f, (x64,)), sample.name


DASK_OPS = [
    "select.int", "slice.Tensor", "narrow", "index_select", "pad", "flip", "roll", "tril",
    "triu", "repeat", "tile", "split.Tensor", "split_with_sizes", "chunk",
    "tensor_split.sections", "tensor_split.indices", "expand", "movedim.int",
    "movedim.intlist", "max", "min", "max.dim", "min.dim",
]  # fmt: skip


@pytest.mark.parametrize("name", DASK_OPS)
def test_dask_kernels_agree_with_cpu(name):
    _installed("dask")
    op = oplib.lookup(f"oplib::{name}")
    for sample in _samples(name, "cpu"):
        want = op(*[a.detach() if isinstance(a, oplib.Tensor) else a for a in sample.args])
        args = [a.detach().to("dask") if isinstance(a, oplib.Tensor) else a for a in sample.args]
        got = op(*args, **sample.kwargs)
        gots = got if isinstance(got, (list, tuple)) else [got]
        assert all(g.device.type == "dask" for g in gots)
        for g, w in zip(_host(got), _host(want), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=sample.name)


def test_dask_integer_array_indexing_is_chunked_and_masks_refuse():
    _installed("dask")
    a = np.arange(24.0).reshape(4, 6)
    t = oplib.tensor(a).to("dask")
    np.testing.assert_array_equal(t[1:, [0, 2]].cpu().numpy(), a[1:, [0, 2]])
    with pytest.raises(oplib.NoKernelError, match="bool mask gives a data-dependent size"):
        t[t > 3]
    with pytest.raises(oplib.NoKernelError, match="no kernel for backend 'dask'"):
        t.gather(1, oplib.tensor([[0]]).to("dask"))


# -- __getitem__ ------------------------------------------------------------------------------
_SHAPE = (3, 4, 5)


@st.composite
def _basic_keys(draw: st.DrawFn) -> tuple[object, ...]:
    """Keys numpy and torch read alike: ints, positive-step slices, None, one Ellipsis, or at
    most one integer-array index without ints (torch applies ints first, numpy treats them as
    arrays: ``t[0, :, [0]]`` is (4, 1) in torch and in oplib, (1, 4) in numpy)."""
    entries: list[object] = []
    dims = list(_SHAPE)
    used_adv = False
    ellipsis = draw(st.booleans())
    kinds = ["slice", "none", "array"] if draw(st.booleans()) else ["int", "slice", "none"]
    for size in dims[: draw(st.integers(0, len(dims)))]:
        kind = draw(st.sampled_from(kinds))
        if kind == "int":
            entries.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            start = draw(st.none() | st.integers(-size - 2, size + 2))
            stop = draw(st.none() | st.integers(-size - 2, size + 2))
            step = draw(st.none() | st.integers(1, 3))
            entries.append(slice(start, stop, step))
        elif kind == "none":
            entries.append(None)
            entries.append(slice(None))
        elif not used_adv:
            used_adv = True
            entries.append(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=4)))
        else:
            entries.append(slice(None))
    if ellipsis:
        entries.insert(draw(st.integers(0, len(entries))), Ellipsis)
    return tuple(entries)


@settings(max_examples=150, deadline=None)
@given(key=_basic_keys())
def test_getitem_agrees_with_numpy(key):
    a = np.arange(60.0).reshape(_SHAPE)
    got = oplib.tensor(a)[key]
    want = a[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize(
    "key",
    [
        (slice(None), [2, 0]),
        ([0, 1], slice(None), [1, 2]),
        ([[0, 1], [1, 0]],),
        (0, [1, 2], slice(1, 3)),
        (Ellipsis, None, [3, 3]),
    ],
)
def test_integer_arrays_as_torch(key):
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(oplib.tensor(a)[key].numpy(), a[key])


def test_ints_apply_before_integer_arrays_as_in_torch():
    # torch 2.13: t[0, :, [0]].shape == (4, 1), t[[0], :, 0].shape == (1, 4)
    t = oplib.zeros(3, 4, 5)
    assert t[0, :, [0]].shape == (4, 1)
    assert t[[0], :, 0].shape == (1, 4)
    assert t[:, 0, [1, 2]].shape == (3, 2)


def test_bool_masks_and_index_tensors():
    a = np.arange(24.0).reshape(2, 3, 4)
    t = oplib.tensor(a)
    np.testing.assert_array_equal(t[t > 5].numpy(), a[a > 5])
    np.testing.assert_array_equal(t[a[..., 0] > 5].numpy(), a[a[..., 0] > 5])
    np.testing.assert_array_equal(t[[True, False]].numpy(), a[[True, False]])
    np.testing.assert_array_equal(t[:, oplib.tensor([2, 0])].numpy(), a[:, [2, 0]])
    np.testing.assert_array_equal(t[oplib.tensor(1)].numpy(), a[1])


@pytest.mark.parametrize("device", ["cpu", "privateuse1"])
def test_a_mask_broadcasts_with_index_arrays_by_its_true_count_as_torch(device):
    # torch 2.13: t[m, :, i] with one true element in m and two indices in i: shape (2, 2)
    a = np.arange(12.0).reshape(2, 2, 3)
    t = oplib.tensor(a, device=device)
    m, i = np.array([True, False]), np.array([2, 0])
    got = t[oplib.tensor(m, device=device), :, oplib.tensor(i, device=device)]
    np.testing.assert_array_equal(got.to("cpu").numpy(), a[m, :, i])
    assert got.shape == (2, 2)
    both = oplib.tensor([True, True], device=device)
    with pytest.raises(IndexError, match="indexing tensors could not be broadcast together"):
        t[both, :, oplib.tensor([0, 1, 2], device=device)]


@pytest.mark.parametrize("device", ["meta", "privateuse1", "dask"])
def test_getitem_on_other_devices(device):
    _installed(device)
    a = np.arange(24.0).reshape(2, 3, 4)
    t = oplib.tensor(a).to(device)
    keys = [1, (slice(None), -1), (0, [2, 0]), (slice(1, None, 2), 1), Ellipsis]
    keys.append((Ellipsis, None))
    for key in keys:
        got = t[key]
        assert got.device.type == device and got.shape == a[key].shape
        if device != "meta":
            np.testing.assert_array_equal(got.cpu().numpy(), a[key])


def test_getitem_gradients():
    x = oplib.tensor(np.random.default_rng(0).normal(size=(3, 4)), requires_grad=True)
    for key in [1, (slice(None), -1), (slice(None, None, 2), [1, 1, 3]), (Ellipsis, None)]:
        assert gradcheck(lambda x, key=key: x[key], (x,))
    assert gradcheck(lambda x: x[x.detach() > 0], (x,))


def test_getitem_under_fake_mode_gives_a_dynamic_size_for_masks():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones((3, 4)))
        assert x[1:, None, 2].shape == (2, 1)
        masked = x[x > 0]
        assert isinstance(masked.shape[0], SymInt)
        assert x[[0, 2]].shape == (2, 4)


def test_fake_shapes_with_symbolic_sizes():
    env = ShapeEnv()
    n = env.new_symbol(min=2)
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(oplib.fake.FakeArray((n, 3)))
        assert x[0].shape == (3,)
        assert x[:, 1:].shape == (n, 2)
        assert x.expand(2, n, 3).shape == (2, n, 3)
        assert x.movedim(0, 1).shape == (3, n)
        assert O.pad(x, [1, 1]).shape == (n, 5)


@pytest.mark.parametrize(
    ("key", "error", "message"),
    [
        (5, IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
        ((0, 4), IndexError, "index 4 is out of bounds for dimension 1 with size 4"),
        ((None, 0, -5), IndexError, "index -5 is out of bounds for dimension 2 with size 4"),
        (slice(None, None, -1), ValueError, "step must be greater than zero"),
        (slice(None, None, 0), ValueError, "slice step cannot be zero"),
        ((0, 0, 0), IndexError, "too many indices for tensor of dimension 2"),
        (1.5, IndexError, r"only integers, slices \(`:`\), ellipsis .* \(got float\)"),
        ((Ellipsis, Ellipsis), IndexError, "an index can only have a single ellipsis"),
        (
            [[True, False]],
            IndexError,
            r"The shape of the mask \[1, 2\] at index 0 does not match the shape of the "
            r"indexed tensor \[3, 4\] at index 0",
        ),
        ([0.5], IndexError, "tensors used as indices must be long, int, byte or bool tensors"),
    ],
)
def test_getitem_errors_are_torchs(key, error, message):
    t = oplib.zeros(3, 4)
    with pytest.raises(error, match=message):
        t[key]


def test_0d_tensor_index_and_iteration_errors():
    t = oplib.tensor(1.0)
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        t[0]
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(t)
    assert t[...].shape == () and t[None].shape == (1,)


def test_iteration_gives_select_views_with_gradients():
    x = oplib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    rows = list(x)
    assert all("select_int" in r.grad_fn.name() for r in rows)
    (rows[1] * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [2, 2, 2]])


# -- views alias, copies do not ---------------------------------------------------------------
def test_views_share_memory_and_copies_do_not():
    a = np.arange(24.0).reshape(2, 3, 4)
    t = oplib.tensor(a)
    views = [
        t[1], t[:, 1:], t[..., None], t[...], t.select(2, 0), t.narrow(1, 1, 2),
        t.view(6, 4), t.expand(3, 2, 3, 4), t.movedim(0, 2), *t.split(1), *t.chunk(2, 2),
        *t.tensor_split([1], 1),
    ]  # fmt: skip
    for v in views:
        assert np.shares_memory(v.numpy(), a), v.shape
    copies = [
        t[[0, 1]], t[t > 2], t.flip(0), t.roll(1), O.pad(t, [1, 1]), t.repeat(1, 1, 1),
        t.tile(1), t.index_select(0, oplib.tensor([0])), t.tril(), t.max(0).values,
        t.gather(0, oplib.tensor(np.zeros((1, 3, 4), dtype=np.int64))),
    ]  # fmt: skip
    for c in copies:
        assert not np.shares_memory(c.numpy(), a), c.shape


def test_view_never_copies_and_raises_torchs_error():
    t = oplib.tensor(np.arange(6.0).reshape(2, 3))
    with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's"):
        t.T.view(6)
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        t.view(4)
    assert t.T.reshape(6).shape == (6,)  # reshape copies instead
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        t.to("meta").view(4)


# -- the ops' own errors (torch 2.13's words) -------------------------------------------------
@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t: t.select(0, 3), IndexError, r"select\(\): index 3 out of range for tensor"),
        (lambda t: t.narrow(1, 3, 2), RuntimeError, r"start \(3\) \+ length \(2\) exceeds"),
        (lambda t: t.split([1, 1]), RuntimeError, "expects split_sizes to sum exactly to 3"),
        (lambda t: t.chunk(0), RuntimeError, "chunk expects `chunks` to be greater than 0"),
        (lambda t: t.tensor_split(0), RuntimeError, "number of sections must be larger than 0"),
        (lambda t: t.tensor_split(2**70), RuntimeError, "at most 2147483647 are allowed"),
        (lambda t: t.expand(3, 5), RuntimeError, r"The expanded size of the tensor \(5\) must"),
        (lambda t: t.movedim([0, 0], [0, 1]), RuntimeError, "movedim: repeated dim in `source`"),
        (lambda t: t.flip(0, 0), RuntimeError, "dim 0 appears multiple times"),
        (lambda t: t.roll([1, 1], [0]), RuntimeError, "shifts and dimensions must align"),
        (lambda t: t[0].tril(), RuntimeError, "tril: input tensor must have at least 2 dim"),
        (lambda t: t.repeat(2), RuntimeError, "Number of dimensions of repeat dims can not"),
        (lambda t: O.pad(t, [1]), RuntimeError, "Padding length must be divisible by 2"),
        (lambda t: O.pad(t, [4, 0], "reflect"), RuntimeError, "Padding size should be less"),
        (lambda t: O.pad(t, [1, 1], "edge"), NotImplementedError, "unsupported padding mode"),
        (lambda t: t[:0].max(), RuntimeError, "Expected reduction dim to be specified"),
        (lambda t: t[:0].max(0), IndexError, "Expected reduction dim 0 to have non-zero size"),
        (lambda t: t.masked_select(t), RuntimeError, "expected BoolTensor for mask"),
        (lambda t: t.gather(0, t[0].long()), RuntimeError, "same number of dimensions"),
        (
            lambda t: t.index_select(0, oplib.tensor([5])),
            IndexError,
            "index 5 is out of bounds for dimension 0 with size 3",
        ),
        (lambda t: t.select(2, 0), IndexError, r"Dimension out of range \(expected to be in"),
    ],
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_errors_are_torchs(call, error, message, device):
    t = oplib.zeros(3, 4).to(device)
    if device == "meta" and "out of bounds" in message:
        pytest.skip("a data-dependent bound: meta has no data to check")
    with pytest.raises(error, match=message):
        call(t)


# -- methods and named results ------------------------------------------------------------------
def test_methods_take_torchs_forms():
    a = np.arange(6.0).reshape(2, 3)
    t = oplib.tensor(a)
    assert t.view(3, 2).shape == t.view((3, 2)).shape == (3, 2)
    assert t.expand(2, 2, 3).shape == (2, 2, 3)
    assert t.repeat(2, 1).shape == (4, 3)
    np.testing.assert_array_equal(t.flip(0, 1).numpy(), a[::-1, ::-1])
    np.testing.assert_array_equal(t.roll(1).numpy(), np.roll(a, 1))
    np.testing.assert_array_equal(t.roll(1, 1).numpy(), np.roll(a, 1, 1))
    assert [p.shape for p in t.split(2, 1)] == [(2, 2), (2, 1)]
    assert [p.shape for p in t.split([1, 2], 1)] == [(2, 1), (2, 2)]
    assert [p.shape for p in t.tensor_split(2, 1)] == [(2, 2), (2, 1)]
    assert t.max().item() == 5.0 and t.min().item() == 0.0
    _, indices = t.max(1)
    np.testing.assert_array_equal(indices.numpy(), [2, 2])
    assert t.min(dim=0, keepdim=True).values.shape == (1, 3)
    np.testing.assert_array_equal(t.max(oplib.tensor([4.0, 0, 0])).numpy(), [[4, 1, 2], [4, 4, 5]])


@pytest.mark.parametrize("device", ["meta", "dask"])
def test_named_results_elsewhere(device):
    _installed(device)
    r = oplib.tensor(np.arange(6.0).reshape(2, 3)).to(device).max(1)
    assert r.values.shape == r.indices.shape == (2,)
    assert r.indices.dtype == np.int64


def test_max_dim_indices_do_not_require_grad():
    x = oplib.tensor(np.array([[1.0, 3.0], [2.0, 0.0]]), requires_grad=True)
    values, indices = x.max(1)
    assert values.requires_grad and not indices.requires_grad
    values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1], [1, 0]])


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=6), st.integers(-2, 2))
def test_contains_agrees_with_python(values, probe):
    assert (probe in oplib.tensor(values)) == (probe in values)


def test_second_derivatives_through_indexing():
    x = oplib.tensor(np.random.default_rng(0).normal(size=(3, 4)), requires_grad=True)
    index = oplib.tensor([[0, 0], [1, 3], [2, 2]])
    for f in [
        lambda x: x[1:, [0, 2]] * x[1:, [0, 2]],
        lambda x: O.pad(x * x, [1, 1], "reflect"),
        lambda x: (x * x).gather(1, index),
        lambda x: (x * x).max(1).values,
        lambda x: (x * x).split(2, 1)[1],
        lambda x: (x * x).expand(2, 3, 4),
    ]:
        assert gradgradcheck(f, (x,))


class _NoCopyReshape:
    """numpy with cupy's older ``reshape(a, shape)``, which has no ``copy=``."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)

    @staticmethod
    def reshape(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return np.reshape(a, shape)


def test_view_without_reshape_copy_sets_the_shape_of_a_view():
    view = index_kernels(_NoCopyReshape())["view"]
    a = np.arange(6.0).reshape(2, 3)
    assert np.shares_memory(view(a, [3, -1]), a)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        view(a.T, [6])


def test_opcheck_skips_a_kernel_that_refuses_its_arguments():
    _installed("dask")
    x = oplib.tensor(np.arange(12.0).reshape(3, 4))
    two_d = oplib.tensor([[0, 1], [3, 3]])
    on_cpu = oplib.opcheck(O.index.Tensor, (x, [None, two_d]), raise_exception=False)
    skipped = [r for r in on_cpu.details if r.backend == "dask" and r.status == "SKIP"]
    assert skipped and "dask indexes with one integer array" in skipped[0].reason
    on_dask = oplib.opcheck(
        O.index.Tensor, (x.to("dask"), [None, two_d.to("dask")]), raise_exception=False
    )
    assert all(v == "SUCCESS" for v in on_dask.values())
    assert any("no kernel for these arguments" in r.reason for r in on_dask.details)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex64, np.bool_])
def test_scatter_add_sums_repeated_targets_alike_on_every_device(dtype):
    _installed("privateuse1")
    index = np.array([[0, 0, 1], [2, 2, 2]])
    src = (np.arange(6) % 3 + 1).reshape(2, 3).astype(dtype)
    want = np.zeros((2, 3), dtype=dtype)
    for row in range(2):
        for col in range(3):
            want[row, index[row, col]] += src[row, col]
    for device in ["cpu", "privateuse1"]:
        out = oplib.zeros(2, 3, dtype=dtype, device=device).scatter_add(
            1, oplib.tensor(index, device=device), oplib.tensor(src, device=device)
        )
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.cpu().numpy(), want, err_msg=device)


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (np.flip, ()),
        (np.flip, (1,)),
        (np.roll, (1,)),
        (np.roll, ((1, 2), (0, 1))),
        (np.tril, ()),
        (np.triu, (1,)),
        (np.tile, ((2, 1),)),
        (np.moveaxis, (0, 1)),
    ],
)
@pytest.mark.parametrize("device", ["cpu", "privateuse1"])
def test_numpy_functions_of_the_new_ops_dispatch_them(fn, args, device):
    _installed(device)
    a = np.arange(12.0).reshape(3, 4)
    t = oplib.tensor(a, device=device, requires_grad=True)
    got = fn(t, *args)
    assert type(got) is oplib.Tensor and got.device.type == device
    assert got.grad_fn is not None
    np.testing.assert_array_equal(got.detach().cpu().numpy(), fn(a, *args))
