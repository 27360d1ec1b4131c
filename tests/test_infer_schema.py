"""infer_schema: annotation mapping, defaults, mutates_args and every error.

This module uses ``from __future__ import annotations``, so every annotation below is a
string that infer_schema has to resolve.
"""

# ruff: noqa: UP006, UP007, UP045 - the typing spellings (Optional, Union, List) are under test

from __future__ import annotations

import numbers
import typing
from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import pytest

from oplib_core._device import Device
from oplib_core._infer_schema import infer_schema
from oplib_core._schema import parse_schema, parse_signature
from oplib_core._tensor.tensor import Tensor
from oplib_core.errors import SchemaError

# A stand-in for cupy's array class: infer_schema recognises cupy by module and class name.
CupyNdarray = type("ndarray", (), {"__module__": "cupy._core.core"})
_CUDA1 = Device("cuda", 1)
_FLOAT32 = np.dtype("float32")


def _infer(fn: typing.Callable[..., object], mutates_args: object = ()) -> str:
    text = infer_schema(fn, mutates_args=mutates_args)  # type: ignore[arg-type]
    parse_signature(text)
    return text


def _param(annotation: object) -> str:
    """The schema type inferred for one parameter annotated with ``annotation``."""

    def f(x) -> None:  # type: ignore[no-untyped-def]
        pass

    f.__annotations__["x"] = annotation
    text = _infer(f)
    assert text.startswith("(") and text.endswith(" x) -> ()")
    return text[1 : -len(" x) -> ()")]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Tensor, "Tensor"),
        (np.ndarray, "Tensor"),
        (CupyNdarray, "Tensor"),
        (int, "int"),
        (float, "float"),
        (bool, "bool"),
        (str, "str"),
        (Union[int, float], "Scalar"),
        (int | float, "Scalar"),
        (Union[int, float, bool], "Scalar"),
        (numbers.Number, "Scalar"),
        (np.dtype, "ScalarType"),
        (type[np.generic], "ScalarType"),
        (Device, "Device"),
        (Optional[Tensor], "Tensor?"),
        (Tensor | None, "Tensor?"),
        (Optional[int], "int?"),
        (float | None, "float?"),
        (Optional[str], "str?"),
        (Optional[np.dtype], "ScalarType?"),
        (Device | None, "Device?"),
        (Optional[Union[int, float]], "Scalar?"),
        (Sequence[Tensor], "Tensor[]"),
        (list[Tensor], "Tensor[]"),
        (typing.List[np.ndarray], "Tensor[]"),
        (typing.Sequence[int], "int[]"),
        (list[float], "float[]"),
        (Sequence[bool], "bool[]"),
        (Sequence[Union[int, float]], "Scalar[]"),
        (Optional[Sequence[int]], "int[]?"),
        (list[float] | None, "float[]?"),
        (Sequence[Optional[Tensor]], "Tensor?[]"),
        (list[Tensor | None], "Tensor?[]"),
        ("Tensor", "Tensor"),
        ("oplib.Tensor", "Tensor"),
        ("np.ndarray", "Tensor"),
        ("numpy.ndarray", "Tensor"),
        ("cupy.ndarray", "Tensor"),
        ("Optional[cupy.ndarray]", "Tensor?"),
        ("Sequence[cupy.ndarray | None]", "Tensor?[]"),
        ("list[oplib.Tensor]", "Tensor[]"),
        ("int | None", "int?"),
        ("type[np.generic]", "ScalarType"),
    ],
)
def test_annotation_mapping(annotation: object, expected: str) -> None:
    assert _param(annotation) == expected


@pytest.mark.parametrize(
    "annotation",
    [
        dict,
        object,
        typing.Any,
        tuple[int, ...],
        Sequence[str],
        Sequence[np.dtype],
        Sequence[Optional[int]],
        Optional[Sequence[Optional[Tensor]]],
        Sequence[Sequence[int]],
        Union[int, str],
        Union[Tensor, int],
        "cupy.something",
        "not a type(",
        "Undefined",
    ],
)
def test_unsupported_annotation_names_parameter_and_type(annotation: object) -> None:
    def f(x) -> None:  # type: ignore[no-untyped-def]
        pass

    f.__annotations__["x"] = annotation
    with pytest.raises(SchemaError) as e:
        infer_schema(f, mutates_args=())
    msg = str(e.value)
    assert msg.startswith("infer_schema(func): Parameter x has unsupported type")
    assert "The valid types are" in msg and "Tensor" in msg and "Sequence" in msg


def test_tuple_parameter_suggests_list() -> None:
    def f(x: tuple[int, int]) -> None:
        pass

    with pytest.raises(SchemaError, match=r"Parameter x has unsupported type.*Tuple inputs"):
        infer_schema(f, mutates_args=())


def test_full_signature_with_defaults_and_kwarg_only() -> None:
    def f(
        x: Tensor,
        w: Optional[Tensor] = None,
        n: int = 1,
        a: float = 1e-5,
        b: bool = False,
        s: str = 'say "hi"\n',
        *,
        dims: Optional[Sequence[int]] = None,
        dtype: Optional[np.dtype] = None,
        device: Device | None = None,
        c: Union[int, float] = 2,
    ) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    text = _infer(f)
    assert text == (
        '(Tensor x, Tensor? w=None, int n=1, float a=1e-05, bool b=False, str s="say \\"hi\\"\\n",'
        " *, int[]? dims=None, ScalarType? dtype=None, Device? device=None, Scalar c=2)"
        " -> (Tensor, Tensor)"
    )
    args = parse_signature(text).arguments
    assert [a.default_value for a in args] == [
        None,
        None,
        1,
        1e-5,
        False,
        'say "hi"\n',
        None,
        None,
        None,
        2,
    ]
    assert [a.kwarg_only for a in args] == [False] * 6 + [True] * 4


def test_float_defaults_inf_and_device_and_dtype_defaults() -> None:
    def f(
        a: float = float("inf"),
        b: float = -float("inf"),
        d: Device = _CUDA1,
        t: np.dtype = _FLOAT32,
        u: type[np.generic] = np.int64,
    ) -> None:
        pass

    args = parse_signature(_infer(f)).arguments
    assert [a.default_value for a in args] == [
        float("inf"),
        -float("inf"),
        "cuda:1",
        "float32",
        "int64",
    ]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (None, "()"),
        (Tensor, "Tensor"),
        (np.ndarray, "Tensor"),
        (tuple[Tensor, Tensor], "(Tensor, Tensor)"),
        (tuple[Tensor, int], "(Tensor, int)"),
        (list[Tensor], "Tensor[]"),
        (Sequence[Tensor], "Tensor[]"),
        (int, "int"),
        (float, "float"),
        (bool, "bool"),
        (Union[int, float, bool], "Scalar"),
        ("Tensor", "Tensor"),
        ("None", "()"),
        ("tuple[cupy.ndarray, oplib.Tensor]", "(Tensor, Tensor)"),
    ],
)
def test_return_mapping(annotation: object, expected: str) -> None:
    def f(x: Tensor):  # type: ignore[no-untyped-def]
        pass

    f.__annotations__["return"] = annotation
    assert _infer(f) == f"(Tensor x) -> {expected}"


@pytest.mark.parametrize("annotation", [str, dict, Optional[Tensor], list[int], tuple[str]])
def test_unsupported_return(annotation: object) -> None:
    def f(x: Tensor):  # type: ignore[no-untyped-def]
        pass

    f.__annotations__["return"] = annotation
    with pytest.raises(SchemaError, match=r"infer_schema\(func\): Return has unsupported type"):
        infer_schema(f, mutates_args=())


def test_missing_return_annotation() -> None:
    def f(x: Tensor):  # type: ignore[no-untyped-def]
        pass

    with pytest.raises(SchemaError, match="No return type annotation was provided"):
        infer_schema(f, mutates_args=())


def test_missing_parameter_annotation_names_it() -> None:
    def f(x: Tensor, y) -> Tensor:  # type: ignore[no-untyped-def]
        raise NotImplementedError

    with pytest.raises(SchemaError) as e:
        infer_schema(f, mutates_args=())
    assert str(e.value).startswith("infer_schema(func): Parameter y must have a type annotation.")


@pytest.mark.parametrize(
    "source",
    [
        "def f(x: Tensor, *args: Tensor) -> Tensor: ...",
        "def f(x: Tensor, **kwargs: Tensor) -> Tensor: ...",
        "def f(x: Tensor, /) -> Tensor: ...",
    ],
)
def test_varargs_kwargs_and_positional_only_are_rejected(source: str) -> None:
    scope: dict[str, object] = {"Tensor": Tensor}
    exec(source, scope)
    with pytest.raises(SchemaError, match="do not support positional-only args, varargs"):
        infer_schema(scope["f"], mutates_args=())  # type: ignore[arg-type]


@pytest.mark.parametrize("default", [[1], (1,), object(), b"x"])
def test_unsupported_default_names_the_parameter(default: object) -> None:
    def f(x: Tensor, n: Sequence[int] = default) -> Tensor:  # type: ignore[assignment]
        raise NotImplementedError

    with pytest.raises(SchemaError, match="Parameter n has an unsupported default value"):
        infer_schema(f, mutates_args=())


def test_default_that_does_not_fit_the_type_is_rejected() -> None:
    def f(x: Tensor = 1) -> Tensor:  # type: ignore[assignment]
        raise NotImplementedError

    with pytest.raises(SchemaError, match="is invalid: invalid default 1 for argument 'x'"):
        infer_schema(f, mutates_args=())


def test_positional_without_default_after_one_with_default() -> None:
    def f(x: Tensor, n: int = 1, *, y: Tensor) -> Tensor:
        raise NotImplementedError

    assert _infer(f) == "(Tensor x, int n=1, *, Tensor y) -> Tensor"


# ------------------------------------------------------------------ mutates_args


def test_mutates_args_marks_named_tensors_with_their_index() -> None:
    def f(x: Tensor, n: int, out: Tensor, outs: list[Tensor], maybe: Optional[Tensor]) -> None:
        pass

    text = _infer(f, mutates_args=["out", "outs", "maybe"])
    assert text == (
        "(Tensor x, int n, Tensor(a2!) out, Tensor(a3!)[] outs, Tensor(a4!)? maybe) -> ()"
    )
    s = parse_signature(text)
    assert s.mutated_arguments == ("out", "outs", "maybe")


@pytest.mark.parametrize("mutates", [(), [], set(), {}, iter(())])
def test_empty_mutates_args(mutates: object) -> None:
    def f(x: Tensor) -> Tensor:
        raise NotImplementedError

    assert _infer(f, mutates) == "(Tensor x) -> Tensor"


def test_mutates_args_unknown_marks_every_tensor() -> None:
    def f(
        a: Tensor, n: int, b: np.ndarray, c: Sequence[Optional[Tensor]], d: float = 1.0
    ) -> Tensor:
        raise NotImplementedError

    text = _infer(f, "unknown")
    assert text == (
        "(Tensor(a0!) a, int n, Tensor(a2!) b, Tensor(a3!)?[] c, float d=1.0) -> Tensor"
    )
    assert parse_signature(text).mutated_arguments == ("a", "b", "c")


def test_mutates_args_other_string_is_rejected() -> None:
    def f(x: Tensor) -> Tensor:
        raise NotImplementedError

    with pytest.raises(SchemaError, match="mutates_args must either be a sequence"):
        infer_schema(f, mutates_args="x")


def test_mutates_args_unknown_name_is_named() -> None:
    def f(x: Tensor) -> Tensor:
        raise NotImplementedError

    with pytest.raises(SchemaError, match=r"\['y'\] in mutates_args were not found"):
        infer_schema(f, mutates_args=["x", "y"])


def test_mutates_args_non_tensor_is_named() -> None:
    def f(x: Tensor, n: int) -> Tensor:
        raise NotImplementedError

    with pytest.raises(SchemaError, match="Parameter n is in mutates_args but only Tensors"):
        infer_schema(f, mutates_args=["n"])


def test_mutates_args_must_hold_names() -> None:
    def f(x: Tensor) -> Tensor:
        raise NotImplementedError

    with pytest.raises(SchemaError, match="must contain parameter names"):
        infer_schema(f, mutates_args=[0])  # type: ignore[list-item]


def test_mutates_args_is_keyword_only_and_required() -> None:
    def f(x: Tensor) -> Tensor:
        raise NotImplementedError

    with pytest.raises(TypeError):
        infer_schema(f)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        infer_schema(f, ())  # type: ignore[misc]


def test_op_name_gives_a_full_schema() -> None:
    def f(x: Tensor, out: Tensor) -> None:
        pass

    text = infer_schema(f, mutates_args={"out"}, op_name="mylib::foo")
    assert text == "mylib::foo(Tensor x, Tensor(a1!) out) -> ()"
    s = parse_schema(text)
    assert s.qualname == "mylib::foo" and s.mutated_arguments == ("out",)


def test_string_annotations_resolve_through_module_globals() -> None:
    def f(x: Tensor, y: np.ndarray, n: Optional[int] = None) -> Tensor:
        raise NotImplementedError

    assert f.__annotations__["x"] == "Tensor"
    assert _infer(f) == "(Tensor x, Tensor y, int? n=None) -> Tensor"


def test_unresolvable_string_falls_back_per_annotation() -> None:
    def f(x: cupy.ndarray, y: Optional[Tensor]) -> Tensor:  # type: ignore[name-defined]  # noqa: F821
        raise NotImplementedError

    assert _infer(f) == "(Tensor x, Tensor? y) -> Tensor"
