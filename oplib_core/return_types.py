"""The named result types of operators whose schema names every return.

An op defined as ``"mylib::topk(Tensor x, int k) -> (Tensor values, Tensor indices)"``
returns ``oplib.return_types.mylib.topk``, a tuple subclass, as torch's ``torch.max(x, 0)``
returns ``torch.return_types.max``::

    r = oplib.ops.mylib.topk(x, 2)
    r.values, r.indices          # by name
    values, indices = r          # still a tuple
    isinstance(r, oplib.return_types.mylib.topk)

One type per op name (``oplib.return_types.<namespace>.<op name>``), shared by the
overloads with the same field names; an overload naming its returns differently gets
``<op name>_<overload name>``. A type appears when the op is defined and goes when the
last overload using it is destroyed. Ops with one return, or with returns not all named,
return a plain tuple (torch's rule). Results pickle by value (unpickled where the op is
not defined, they are still named tuples, of a detached type of the same name).
"""

# Every global here is a dunder: any other name could hide a namespace of that name
# (``oplib.return_types.annotations`` must be the ``annotations::`` ops' types).
from . import _return_types as __impl

__all__: list[str] = []


def __getattr__(name: str) -> __impl.Namespace:
    space = __impl.namespace_of(name)
    if space is None:
        raise AttributeError(
            f"oplib.return_types has no namespace {name!r}: no op of it with named returns "
            "is defined"
        )
    return space


def __dir__() -> list[str]:
    return __impl.namespace_names()
