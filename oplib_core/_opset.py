"""The standard op set of namespace ``oplib``: schemas and tags only, no behaviour.

Backends bind kernels to these schemas (:func:`oplib_core.kernels.array_kernels` writes
them once against an array namespace); fake kernels and autograd formulas live elsewhere.
The cross-device copy (``_to_copy``) belongs to the dispatcher layer, not to this table.
"""

from __future__ import annotations

from oplib_core._records import Record
from oplib_core._tags import Tag

__all__ = ["CORE_OPS", "NAMESPACE", "OUT_OPS", "CoreOp", "out_variant"]

#: The namespace every core op lives in.
NAMESPACE = "oplib"


class CoreOp(Record):
    """One core operator: its full schema (``"oplib::add.Scalar(Tensor self, Scalar other)
    -> Tensor"``) and the tags it is defined with."""

    schema: str
    tags: tuple[Tag, ...] = ()

    @property
    def name(self) -> str:
        """The name with overload and without namespace (``"add"``, ``"add.Scalar"``): the key
        of this op's kernel in :func:`oplib_core.kernels.array_kernels`."""
        return self.schema.split("::", 1)[1].split("(", 1)[0]

    @property
    def writes(self) -> bool:
        """Whether the op writes into an argument (an annotation like ``Tensor(a!)``: the
        in-place ops, ``copy_`` and the ``out=`` overloads)."""
        return "!" in self.schema.partition("->")[0]


_P = (Tag.pointwise,)
_R = (Tag.reduction,)
_F = (Tag.factory,)

#: Every core op, in definition order.
CORE_OPS: tuple[CoreOp, ...] = (
    # unary pointwise
    CoreOp("oplib::neg(Tensor self) -> Tensor", _P),
    CoreOp("oplib::exp(Tensor self) -> Tensor", _P),
    CoreOp("oplib::log(Tensor self) -> Tensor", _P),
    CoreOp("oplib::sin(Tensor self) -> Tensor", _P),
    CoreOp("oplib::cos(Tensor self) -> Tensor", _P),
    CoreOp("oplib::tanh(Tensor self) -> Tensor", _P),
    CoreOp("oplib::sigmoid(Tensor self) -> Tensor", _P),
    CoreOp("oplib::relu(Tensor self) -> Tensor", _P),
    CoreOp("oplib::abs(Tensor self) -> Tensor", _P),
    CoreOp("oplib::sqrt(Tensor self) -> Tensor", _P),
    # binary pointwise
    CoreOp("oplib::add(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::sub(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::mul(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::div(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::pow(Tensor self, Tensor exponent) -> Tensor", _P),
    CoreOp("oplib::maximum(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::minimum(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::add.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::sub.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::mul.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::div.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::pow.Scalar(Tensor self, Scalar exponent) -> Tensor", _P),
    # reversed scalar forms, for ``2.0 - t``, ``2.0 / t``, ``2.0 ** t``
    CoreOp("oplib::rsub.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::rdiv.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::rpow.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    # comparisons (bool results)
    CoreOp("oplib::eq(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::ne(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::lt(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::le(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::gt(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::ge(Tensor self, Tensor other) -> Tensor", _P),
    CoreOp("oplib::eq.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::ne.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::lt.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::le.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::gt.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::ge.Scalar(Tensor self, Scalar other) -> Tensor", _P),
    CoreOp("oplib::where(Tensor condition, Tensor self, Tensor other) -> Tensor", _P),
    # reductions
    CoreOp(
        "oplib::sum(Tensor self, int[]? dim=None, bool keepdim=False, *, "
        "ScalarType? dtype=None) -> Tensor",
        _R,
    ),
    CoreOp(
        "oplib::mean(Tensor self, int[]? dim=None, bool keepdim=False, *, "
        "ScalarType? dtype=None) -> Tensor",
        _R,
    ),
    CoreOp("oplib::amax(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor", _R),
    CoreOp("oplib::amin(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor", _R),
    # linear algebra
    CoreOp("oplib::matmul(Tensor self, Tensor other) -> Tensor"),
    # shape ops; annotated as in torch because their kernels may return views of ``self``
    CoreOp("oplib::transpose(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"),
    CoreOp("oplib::permute(Tensor(a) self, int[] dims) -> Tensor(a)"),
    CoreOp("oplib::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"),
    CoreOp("oplib::broadcast_to(Tensor(a) self, SymInt[] size) -> Tensor(a)"),
    CoreOp("oplib::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"),
    CoreOp("oplib::squeeze(Tensor(a) self, int[]? dim=None) -> Tensor(a)"),
    CoreOp("oplib::cat(Tensor[] tensors, int dim=0) -> Tensor"),
    CoreOp("oplib::stack(Tensor[] tensors, int dim=0) -> Tensor"),
    # indexing and views (issue 14); torch's schemas, except that the split family writes
    # ``Tensor(a) self`` where torch writes ``Tensor(a -> *) self`` (the parser's alias sets),
    # and roll writes `SymInt[] shifts, int[] dims` for torch's `SymInt[1]`, `int[1]`
    CoreOp("oplib::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"),
    CoreOp(
        "oplib::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
        "SymInt step=1) -> Tensor(a)"
    ),
    CoreOp("oplib::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"),
    CoreOp("oplib::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"),
    CoreOp("oplib::masked_select(Tensor self, Tensor mask) -> Tensor"),
    CoreOp("oplib::index_select(Tensor self, int dim, Tensor index) -> Tensor"),
    CoreOp(
        "oplib::gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"
    ),
    CoreOp("oplib::scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"),
    CoreOp("oplib::scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"),
    CoreOp("oplib::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"),
    CoreOp(
        'oplib::pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor'
    ),
    CoreOp("oplib::flip(Tensor self, int[] dims) -> Tensor"),
    CoreOp("oplib::roll(Tensor self, SymInt[] shifts, int[] dims=[]) -> Tensor"),
    CoreOp("oplib::tril(Tensor self, SymInt diagonal=0) -> Tensor"),
    CoreOp("oplib::triu(Tensor self, SymInt diagonal=0) -> Tensor"),
    CoreOp("oplib::repeat(Tensor self, SymInt[] repeats) -> Tensor"),
    CoreOp("oplib::tile(Tensor self, SymInt[] dims) -> Tensor"),
    CoreOp("oplib::split.Tensor(Tensor(a) self, SymInt split_size, int dim=0) -> Tensor(a)[]"),
    CoreOp(
        "oplib::split_with_sizes(Tensor(a) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]"
    ),
    CoreOp("oplib::chunk(Tensor(a) self, int chunks, int dim=0) -> Tensor(a)[]"),
    CoreOp(
        "oplib::tensor_split.sections(Tensor(a) self, SymInt sections, int dim=0) -> Tensor(a)[]"
    ),
    CoreOp(
        "oplib::tensor_split.indices(Tensor(a) self, SymInt[] indices, int dim=0) -> Tensor(a)[]"
    ),
    CoreOp("oplib::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"),
    CoreOp("oplib::movedim.int(Tensor(a) self, int source, int destination) -> Tensor(a)"),
    CoreOp("oplib::movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)"),
    CoreOp("oplib::view(Tensor(a) self, SymInt[] size) -> Tensor(a)"),
    CoreOp("oplib::max(Tensor self) -> Tensor"),
    CoreOp(
        "oplib::max.dim(Tensor self, int dim, bool keepdim=False) -> "
        "(Tensor values, Tensor indices)"
    ),
    CoreOp("oplib::min(Tensor self) -> Tensor"),
    CoreOp(
        "oplib::min.dim(Tensor self, int dim, bool keepdim=False) -> "
        "(Tensor values, Tensor indices)"
    ),
    # copies
    CoreOp("oplib::clone(Tensor self) -> Tensor"),
    CoreOp("oplib::copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)"),
    CoreOp("oplib::astype(Tensor self, ScalarType dtype) -> Tensor"),
    # in-place ops (they write into ``self`` and return it) and their functional companions
    CoreOp("oplib::add_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)"),
    CoreOp("oplib::add_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)"),
    CoreOp("oplib::sub_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)"),
    CoreOp("oplib::sub_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)"),
    CoreOp("oplib::mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)"),
    CoreOp("oplib::mul_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)"),
    CoreOp("oplib::div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)"),
    CoreOp("oplib::div_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)"),
    CoreOp("oplib::zero_(Tensor(a!) self) -> Tensor(a!)"),
    CoreOp("oplib::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)"),
    CoreOp("oplib::fill_.Tensor(Tensor(a!) self, Tensor value) -> Tensor(a!)"),
    CoreOp("oplib::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor", _P),
    CoreOp("oplib::clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)"),
    CoreOp(
        "oplib::index_put(Tensor self, Tensor?[] indices, Tensor values, "
        "bool accumulate=False) -> Tensor"
    ),
    CoreOp(
        "oplib::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, "
        "bool accumulate=False) -> Tensor(a!)"
    ),
    # factories
    CoreOp(
        "oplib::empty(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
        _F,
    ),
    CoreOp(
        "oplib::zeros(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
        _F,
    ),
    CoreOp(
        "oplib::ones(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
        _F,
    ),
    CoreOp(
        "oplib::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, "
        "Device? device=None) -> Tensor",
        _F,
    ),
    CoreOp(
        "oplib::arange(Scalar end, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
        _F,
    ),
    CoreOp(
        "oplib::arange.start(Scalar start, Scalar end, Scalar step=1, *, "
        "ScalarType? dtype=None, Device? device=None) -> Tensor",
        _F,
    ),
)


def out_variant(op: CoreOp) -> CoreOp:
    """The ``out=`` overload of a core op returning one Tensor, from its schema as torch
    names them: ``add(...)`` → ``add.out(..., *, Tensor(a!) out) -> Tensor(a!)``,
    ``add.Scalar`` → ``add.Scalar_out``. No tags: the result is written into ``out``."""
    head, _, rest = op.schema.partition("(")
    args = rest.rpartition(") -> ")[0]
    base, _, overload = head.partition(".")
    name = f"{base}.{overload}_out" if overload else f"{base}.out"
    extra = "Tensor(a!) out" if "*" in args.split(", ") else "*, Tensor(a!) out"
    return CoreOp(f"{name}({args}, {extra}) -> Tensor(a!)")


#: The ``out=`` overloads of the pointwise ops and the reductions, generated from their
#: schemas (their kernels are the functional ones writing into ``out``).
OUT_OPS: tuple[CoreOp, ...] = tuple(
    out_variant(op) for op in CORE_OPS if Tag.pointwise in op.tags or Tag.reduction in op.tags
)

CORE_OPS += OUT_OPS
