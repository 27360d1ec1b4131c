"""What users found doing, from the docs alone, what they will do: send tensors through
pickle and process pools, back-propagate a custom op from threads into a shared weight,
copy the backend template under a name of their own."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oplib_core as oplib

from helpers import Teardown, compile_library, toy_spec, unique_ns
from subproc import run_python

ROOT = Path(__file__).resolve().parent.parent

# -- pickling tensors --------------------------------------------------------------------


def test_a_tensor_with_a_graph_is_refused_by_pickle_and_deepcopy() -> None:
    """Pickled whole, its grad_fn carried copies of its leaves: backward() on the copy ran
    into them silently and the sender's x.grad stayed None."""
    x = oplib.tensor(np.arange(3.0), requires_grad=True)
    y = (x * x).sum()
    for send in (pickle.dumps, copy.deepcopy):
        with pytest.raises(pickle.PicklingError) as e:
            send(y)
        message = str(e.value)
        assert "part of an autograd graph (grad_fn=<" in message, message
        assert "autograd does not cross process boundaries" in message
        assert "tensor.detach()" in message and ".grad" in message
    assert x.grad is None


def test_a_leaf_and_a_detached_tensor_pickle_with_their_data() -> None:
    x = oplib.tensor(np.arange(3.0), requires_grad=True)
    x.grad = oplib.ones(3, dtype=oplib.float64)
    back = pickle.loads(pickle.dumps(x))
    assert back.is_leaf and back.requires_grad and back.grad_fn is None
    assert np.array_equal(back.detach().numpy(), [0.0, 1.0, 2.0])
    assert back.grad is not None and np.array_equal(back.grad.numpy(), [1.0, 1.0, 1.0])
    (back * 2).sum().backward()  # records again, into the copy's own .grad
    assert np.array_equal(back.grad.numpy(), [3.0, 3.0, 3.0])
    y = (x * 2).detach()
    same = pickle.loads(pickle.dumps(y))
    assert same.grad_fn is None and not same.requires_grad
    assert np.array_equal(same.numpy(), [0.0, 2.0, 4.0])
    view = oplib.arange(6.0).reshape(2, 3)
    assert np.array_equal(pickle.loads(pickle.dumps(view)).numpy(), view.numpy())


def _loss(x: oplib.Tensor) -> oplib.Tensor:
    return 2 * (x * x).sum()  # a worker function of a public torch Pool.map example


def _loss_value(x: oplib.Tensor) -> oplib.Tensor:
    return _loss(x).detach()


def test_pool_map_of_tensors_that_require_grad() -> None:
    """``Pool.map(f, tensors)`` with leaves that require grad: a result that is part of the
    worker's graph is refused with the reason (it reaches the caller), its detached value
    comes back."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method on this platform")
    tensors = [oplib.tensor([float(i)], requires_grad=True) for i in range(3)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        values = pool.map_async(_loss_value, tensors).get(60)
        assert [v.item() for v in values] == [0.0, 2.0, 8.0]
        with pytest.raises(Exception) as e:
            pool.map_async(_loss, tensors).get(60)
    assert "part of an autograd graph" in str(e.value), str(e.value)


# -- threads ---------------------------------------------------------------------------


@pytest.fixture
def scale_op(teardown: Teardown) -> Iterator[oplib.CustomOpDef]:
    ns = unique_ns("trial")

    @oplib.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: oplib.Tensor, a: float) -> oplib.Tensor:
        return x * a

    def setup(ctx: object, inputs: tuple[object, ...], output: object) -> None:
        ctx.a = inputs[1]  # type: ignore[attr-defined]

    def backward(ctx: object, grad: oplib.Tensor) -> tuple[oplib.Tensor, None]:
        return grad * ctx.a, None  # type: ignore[attr-defined]

    scale.register_autograd(backward, setup_context=setup)
    teardown(scale)
    yield scale


def test_threads_back_propagate_a_custom_op_into_a_shared_weight(
    scale_op: oplib.CustomOpDef,
) -> None:
    w = oplib.tensor(np.ones(1000), requires_grad=True)
    x = oplib.tensor(np.arange(1000.0))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(25):
                scale_op(w * x, 3.0).sum().backward()
        except BaseException as e:
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert w.grad is not None
    assert np.array_equal(w.grad.numpy(), 8 * 25 * 3.0 * np.arange(1000.0))


# -- the backend template under a name of its own ----------------------------------------

_HELD = "bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 complex64"


def _copy_template(site: Path) -> None:
    """What docs/writing-a-backend.md's checklist says to do with a copy of the template,
    for a backend named ``toytrial`` whose library lacks bfloat16 and float64."""
    package = site / "toytrial"
    shutil.copytree(
        ROOT / "plugins" / "privateuse" / "oplib_privateuse",
        package,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for path in package.glob("*.py"):
        path.write_text(path.read_text().replace("oplib_privateuse", "toytrial"))

    def edit(name: str, *pairs: tuple[str, str]) -> None:
        path = package / name
        text = path.read_text()
        for old, new in pairs:
            assert old in text, f"the template's {name} no longer has {old!r}"
            text = text.replace(old, new)
        path.write_text(text)

    edit("name.py", ('NAME: str = "privateuse1"', 'NAME: str = "toytrial"'))
    held = ", ".join(f"oplib.{d}" for d in _HELD.split())
    edit(
        "plugin.py",
        (
            "    device_module=device_module,\n",
            "    device_module=device_module,\n"
            f"    dtypes=lambda: frozenset(({held})),\n"
            '    dtype_hint="the toytrial runtime has no bfloat16 or float64",\n',
        ),
        ("from oplib_core import ", "import oplib_core as oplib\nfrom oplib_core import "),
    )
    info = site / "toytrial-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toytrial\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[oplib]\ntoytrial = toytrial.plugin\n")
    (info / "RECORD").write_text("")


def test_the_template_copied_under_its_own_name_as_the_docs_say(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "writing-a-backend.md").read_text()
    checklist = doc[doc.index("## Checklist for your own device") :]
    for step in ("`privateuse::rand`", "`NAME` in `name.py`", "`dtypes=`"):
        assert step in checklist, step
    site = tmp_path / "site"
    site.mkdir()
    _copy_template(site)
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        import numpy as np
        import oplib_core as oplib
        from oplib_core.cli import main

        b = oplib.backends.get("toytrial")
        OUT["status"] = [b.status(), b.device_count()]
        OUT["plugin"] = [
            p.status for p in oplib.plugins.list() if p.name == "toytrial"
        ]
        oplib.toytrial.set_device("toytrial:1")
        OUT["current"] = oplib.toytrial.current_device()
        OUT["bad_index"] = catch(oplib.ones, 2, device="toytrial:7")
        OUT["to_bf16"] = catch(oplib.ones(2).bfloat16().to, "toytrial")
        t = oplib.tensor(np.arange(3.0, dtype=np.float32), device="toytrial")
        OUT["sum"] = float((t * t).sum().item())
        OUT["check"] = main(["check", "--backend", "toytrial", "oplib::mul", "oplib::sum"])

        def max_precision_float_dtype(device):  # scikit-learn's, ported (mps: float32)
            held = oplib.backends.get(oplib.device(device).type).supports_dtype
            return (oplib.float64 if held(oplib.float64) else oplib.float32).name

        OUT["max_float"] = [max_precision_float_dtype(d) for d in ("cpu", "toytrial:1")]
        """,
        env={"OPLIB_TOYTRIAL_DEVICES": "2"},
        timeout=120,
    )
    assert out["plugin"] == ["loaded"], out
    assert out["status"] == [None, 2]
    assert out["current"] == 1
    kind, message = out["bad_index"]
    assert kind == "BackendError" and "toytrial:7 does not exist" in message, message
    assert "TOYTRIAL_DEVICES" in message and "privateuse1" not in message, message
    kind, message = out["to_bf16"]
    assert kind == "BackendDtypeError", message
    assert "the toytrial runtime has no bfloat16 or float64" in message, message
    assert out["sum"] == 5.0
    assert out["check"] == 0
    assert out["max_float"] == ["float64", "float32"]


# -- a native library's own mistakes ------------------------------------------------------

_NATIVE = """
#include "oplib.h"
static int k(const oplib_arg *args, int64_t nargs, DLTensor *outs, int64_t nouts,
             oplib_error *err) { return 0; }
OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "NS::f", "(Tensor x) -> Tensor")) return 1;
  return MISTAKE;
}
"""


def test_a_native_impl_of_an_undefined_op_says_to_define_it_with_the_api(tmp_path: Path) -> None:
    ns = unique_ns("native_trial")
    source = _NATIVE.replace("NS", ns).replace("MISTAKE", f'api->impl(c, "{ns}::g", "cpu", k)')
    path = compile_library(source, tmp_path)
    with pytest.raises(oplib.LibraryLoadError) as e:
        oplib.ops.load_library(path)
    assert e.value.op == f"{ns}::g"
    message = str(e.value)
    assert f"impl(): operator '{ns}::g' does not exist; define it first" in message, message
    assert f'api->define(api->ctx, "{ns}::g", "(...) -> ...")' in message, message
    assert "oplib.define" not in message  # a Python call is no help in C
    with pytest.raises(oplib.UnknownOperatorError):  # its define was undone
        oplib.lookup(f"{ns}::f")


def test_a_native_init_failing_on_its_own_says_its_registrations_succeeded(
    tmp_path: Path,
) -> None:
    ns = unique_ns("native_trial")
    path = compile_library(_NATIVE.replace("NS", ns).replace("MISTAKE", "7"), tmp_path)
    with pytest.raises(oplib.LibraryLoadError) as e:
        oplib.ops.load_library(path)
    message = str(e.value)
    assert "oplib_library_init returned 7 (OPLIB_OK is 0)" in message, message
    assert "every registration call it made succeeded" in message
    assert "nothing it registered was kept" in message
    assert path not in oplib.ops.loaded_libraries


def test_torch_functions_are_operators_and_methods_as_coming_from_torch_says() -> None:
    doc = (ROOT / "docs" / "coming-from-torch.md").read_text()
    assert "`oplib` has no top-level op functions (`oplib.sin` is an" in doc
    x = oplib.tensor(np.array([0.5, 1.0]))
    with pytest.raises(AttributeError):
        oplib.sin  # noqa: B018  (the claim: torch.sin has no oplib.sin)
    want = np.sin([0.5, 1.0])
    assert np.allclose(oplib.ops.oplib.sin(x).numpy(), want)
    assert np.allclose(x.sin().numpy(), want)
    assert np.allclose(x.matmul(x).numpy(), oplib.ops.oplib.matmul(x, x).numpy())
    assert oplib.ops.oplib.cat([x, x]).shape == (4,)


@pytest.mark.parametrize(
    ("held", "says"),
    [
        ("float32", ", got 'float32'"),  # np.dtype would read it as a dtype per letter
        ([oplib.float32, None], "; None in it is not a dtype"),  # np.dtype(None) is float64
        ([oplib.float32, 1.5], "; 1.5 in it is not a dtype"),
    ],
)
def test_a_backend_declaring_its_dtypes_wrongly_is_told_what_dtypes_must_return(
    teardown: Teardown, held: object, says: str
) -> None:
    teardown(oplib.backends.register(toy_spec(name="toydtypes", dtypes=lambda: held)))
    backend = oplib.backends.get("toydtypes")
    with pytest.raises(oplib.BackendError) as e:
        backend.supports_dtype(oplib.float32)
    message = str(e.value)
    assert message.startswith("backend 'toydtypes': BackendSpec.dtypes() must return a mapping")
    assert "or a collection of numpy dtypes such as {oplib.float32, oplib.int32}" in message
    assert message.endswith(says), message


def test_a_backend_declaring_numpy_scalar_types_and_names_holds_them(teardown: Teardown) -> None:
    declared = [np.float32, "int32", oplib.float16]
    teardown(oplib.backends.register(toy_spec(name="toydtypes", dtypes=lambda: declared)))
    backend = oplib.backends.get("toydtypes")
    assert [backend.supports_dtype(d) for d in (oplib.float32, oplib.int32, oplib.float16)] == [
        True,
        True,
        True,
    ]
    assert not backend.supports_dtype(oplib.float64)
