"""Symbolic sizes: ``SymInt``, an integer polynomial over data-dependent size symbols.

A fake kernel whose output size depends on data (``nonzero``, ``unique``) asks
``get_ctx().new_dynamic_size()`` for a fresh symbol, printed ``u0``, ``u1``... Sizes built
from symbols with ``+ - * // %`` stay exact polynomials where they can (``2*u0 + 4``), so
later fake kernels can still compare them (``u0*4 == 4*u0``). A question whose answer
depends on the data (``u0 == 3`` for an unbounded ``u0``) raises
:class:`~oplib_core.fake.errors.DataDependentError`; symbol ranges (``min``/``max``) decide
what they can (``u0 >= 0`` always holds).

Terms are kept canonical (sorted, no zero coefficients) and an expression without symbols
is a plain ``int``: arithmetic returns ``int | SymInt``.
"""

from __future__ import annotations

import itertools
import math
import numbers
import threading
from typing import Any

from ._errors import DataDependentError

__all__ = ["ShapeEnv", "SymInt", "is_symbolic"]

_INF = math.inf
_ids = itertools.count()


class _Atom:
    """A size symbol (``u0``) or an opaque derived size (``(u0//3)``) with its range."""

    __slots__ = ("hi", "id", "lo", "name")

    def __init__(self, name: str, lo: float, hi: float) -> None:
        self.id = next(_ids)
        self.name = name
        self.lo = lo
        self.hi = hi

    def __repr__(self) -> str:
        return self.name


Mono = tuple[_Atom, ...]
Terms = tuple[tuple[Mono, int], ...]

# Opaque atoms for ``a // b`` and ``a % b``, so that the same expression computed twice is
# the same atom (and compares equal).
_derived: dict[tuple[str, Any, Any], _Atom] = {}
_derived_lock = threading.Lock()


def _mono_key(mono: Mono) -> tuple[int, ...]:
    return tuple(a.id for a in mono)


def _make(terms: dict[Mono, int]) -> int | SymInt:
    items = [(m, c) for m, c in terms.items() if c]
    if not items:
        return 0
    if len(items) == 1 and items[0][0] == ():
        return items[0][1]
    items.sort(key=lambda mc: (len(mc[0]), _mono_key(mc[0])))
    s = object.__new__(SymInt)
    s._terms = tuple(items)
    s._hash = hash(s._terms)
    return s


def _terms(x: int | SymInt) -> dict[Mono, int]:
    if isinstance(x, SymInt):
        return dict(x._terms)
    return {(): x} if x else {}


def _coerce(x: Any) -> int | SymInt | None:
    """``x`` as ``int | SymInt``, or ``None`` when it is not an integer."""
    if isinstance(x, SymInt):
        return x
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, bool):
        return int(x)
    return None


def _add(a: int | SymInt, b: int | SymInt) -> int | SymInt:
    t = _terms(a)
    for m, c in _terms(b).items():
        t[m] = t.get(m, 0) + c
    return _make(t)


def _neg(a: int | SymInt) -> int | SymInt:
    return _make({m: -c for m, c in _terms(a).items()})


def _mul(a: int | SymInt, b: int | SymInt) -> int | SymInt:
    out: dict[Mono, int] = {}
    for ma, ca in _terms(a).items():
        for mb, cb in _terms(b).items():
            m = tuple(sorted(ma + mb, key=lambda at: at.id))
            out[m] = out.get(m, 0) + ca * cb
    return _make(out)


def _xmul(a: float, b: float) -> float:
    return 0.0 if a == 0 or b == 0 else a * b


def _interval(x: int | SymInt) -> tuple[float, float]:
    """Bounds of ``x`` from its symbols' ranges (interval arithmetic)."""
    if not isinstance(x, SymInt):
        return float(x), float(x)
    lo = hi = 0.0
    for mono, c in x._terms:
        mlo, mhi = 1.0, 1.0
        for atom in mono:
            cands = [_xmul(p, q) for p in (mlo, mhi) for q in (atom.lo, atom.hi)]
            mlo, mhi = min(cands), max(cands)
        a, b = _xmul(c, mlo), _xmul(c, mhi)
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def _exact_div(a: int | SymInt, b: int | SymInt) -> int | SymInt | None:
    """``a / b`` when ``b`` is a single term dividing every term of ``a`` exactly."""
    tb = _terms(b)
    if len(tb) != 1:
        return None
    ((mb, cb),) = tb.items()
    out: dict[Mono, int] = {}
    for ma, ca in _terms(a).items():
        if ca % cb:
            return None
        rest = list(ma)
        for atom in mb:
            if atom not in rest:
                return None
            rest.remove(atom)
        out[tuple(rest)] = ca // cb
    return _make(out)


def _paren(x: int | SymInt) -> str:
    text = str(x)
    return f"({text})" if " " in text or "*" in text else text


def _key(x: int | SymInt) -> Any:
    return x._terms if isinstance(x, SymInt) else x


def _derived_atom(op: str, a: int | SymInt, b: int | SymInt) -> SymInt:
    key = (op, _key(a), _key(b))
    with _derived_lock:
        atom = _derived.get(key)
        if atom is None:
            alo, ahi = _interval(a)
            blo, bhi = _interval(b)
            lo, hi = -_INF, _INF
            if op == "//" and alo >= 0 and blo > 0:
                lo = math.floor(alo / bhi) if bhi != _INF else 0.0
                hi = math.floor(ahi / blo) if ahi != _INF else _INF
            elif op == "%" and blo > 0 and alo >= 0:
                lo, hi = 0.0, (bhi - 1 if bhi != _INF else _INF)
            atom = _Atom(f"({_paren(a)}{op}{_paren(b)})", lo, hi)
            _derived[key] = atom
    s = _make({(atom,): 1})
    assert isinstance(s, SymInt)
    return s


def _floordiv(a: int | SymInt, b: int | SymInt) -> int | SymInt:
    if isinstance(b, int) and b == 0:
        raise ZeroDivisionError("integer division or modulo by zero")
    if not isinstance(a, SymInt) and not isinstance(b, SymInt):
        return a // b
    if isinstance(b, int) and b == 1:
        return a
    if _known(a, b, "=="):
        return 1
    if not (isinstance(b, int) and b < 0):
        exact = _exact_div(a, b)
        if exact is not None:
            return exact
    return _derived_atom("//", a, b)


def _mod(a: int | SymInt, b: int | SymInt) -> int | SymInt:
    if isinstance(b, int) and b == 0:
        raise ZeroDivisionError("integer division or modulo by zero")
    if not isinstance(a, SymInt) and not isinstance(b, SymInt):
        return a % b
    if isinstance(b, int) and abs(b) == 1:
        return 0
    if not (isinstance(b, int) and b < 0) and _exact_div(a, b) is not None:
        return 0
    return _derived_atom("%", a, b)


def _decide(d: int | SymInt, op: str) -> bool | None:
    """``d <op> 0`` when the bounds of ``d`` decide it, else ``None``."""
    lo, hi = _interval(d)
    if op == "==":
        if lo == hi == 0:
            return True
        return False if lo > 0 or hi < 0 else None
    if op == "!=":
        r = _decide(d, "==")
        return None if r is None else not r
    if op == "<":
        return True if hi < 0 else (False if lo >= 0 else None)
    if op == "<=":
        return True if hi <= 0 else (False if lo > 0 else None)
    if op == ">":
        return True if lo > 0 else (False if hi <= 0 else None)
    return True if lo >= 0 else (False if hi < 0 else None)  # ">="


def _known(a: int | SymInt, b: int | SymInt, op: str) -> bool:
    """Whether ``a <op> b`` is known to hold (``False`` when false or undecidable)."""
    return _decide(_add(a, _neg(b)), op) is True


def _symbols(*xs: Any) -> list[_Atom]:
    seen: dict[int, _Atom] = {}
    for x in xs:
        if isinstance(x, SymInt):
            for mono, _ in x._terms:
                for atom in mono:
                    seen.setdefault(atom.id, atom)
    return list(seen.values())


def _range_text(atoms: list[_Atom]) -> str:
    parts = []
    for a in atoms:
        hi = "inf" if a.hi == _INF else str(int(a.hi))
        lo = "-inf" if a.lo == -_INF else str(int(a.lo))
        parts.append(f"{a.name} in [{lo}, {hi}]")
    return ", ".join(parts)


def undecidable(question: str, *operands: Any, context: str = "") -> DataDependentError:
    """The error for a question about data-dependent sizes that cannot be answered."""
    atoms = _symbols(*operands)
    where = f" while {context}" if context else ""
    return DataDependentError(
        f"cannot decide whether {question}{where}: it depends on data-dependent sizes "
        f"({_range_text(atoms)}) whose values are known only when the op runs on real data. "
        "Avoid branching on such sizes in fake kernels, or give "
        "get_ctx().new_dynamic_size(min=..., max=...) bounds that decide it.",
        expression=question,
    )


class SymInt:
    """A symbolic integer size (see the module docstring). Prints like ``u0`` or
    ``2*u0 + 1``; binds to ``int``/``SymInt`` schema arguments."""

    __slots__ = ("_hash", "_terms")
    __oplib_symint__ = True

    _terms: Terms
    _hash: int

    def __init__(self) -> None:
        raise TypeError("SymInt objects come from get_ctx().new_dynamic_size() and arithmetic")

    # -- arithmetic -----------------------------------------------------------------------
    def __add__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _add(self, o)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _add(self, _neg(o))

    def __rsub__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _add(o, _neg(self))

    def __mul__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _mul(self, o)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _floordiv(self, o)

    def __rfloordiv__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _floordiv(o, self)

    def __mod__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _mod(self, o)

    def __rmod__(self, other: Any) -> Any:
        o = _coerce(other)
        return NotImplemented if o is None else _mod(o, self)

    def __neg__(self) -> Any:
        return _neg(self)

    def __pos__(self) -> SymInt:
        return self

    # -- comparisons: answered when the symbols' ranges decide them ---------------------
    def _compare(self, other: Any, op: str) -> Any:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        answer = _decide(_add(self, _neg(o)), op)
        if answer is None:
            raise undecidable(f"{self} {op} {o}", self, o)
        return answer

    def __eq__(self, other: object) -> Any:
        return self._compare(other, "==")

    def __ne__(self, other: object) -> Any:
        return self._compare(other, "!=")

    def __lt__(self, other: Any) -> Any:
        return self._compare(other, "<")

    def __le__(self, other: Any) -> Any:
        return self._compare(other, "<=")

    def __gt__(self, other: Any) -> Any:
        return self._compare(other, ">")

    def __ge__(self, other: Any) -> Any:
        return self._compare(other, ">=")

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return bool(self._compare(0, "!="))

    # -- no concrete value ----------------------------------------------------------------
    def _no_value(self, what: str) -> DataDependentError:
        return DataDependentError(
            f"{what}: {self} is a data-dependent size ({_range_text(_symbols(self))}); it has "
            "no concrete value until the op runs on real data. Keep it symbolic (use it in "
            "shapes and size arithmetic) instead of converting it to a Python int.",
            expression=str(self),
        )

    def __index__(self) -> int:
        raise self._no_value("int(size)")

    def __int__(self) -> int:
        raise self._no_value("int(size)")

    def __float__(self) -> float:
        raise self._no_value("float(size)")

    # -- introspection --------------------------------------------------------------------
    @property
    def bounds(self) -> tuple[float, float]:
        """``(min, max)`` this size can take (``math.inf`` when unbounded)."""
        return _interval(self)

    def __repr__(self) -> str:
        parts: list[str] = []
        const = 0
        for mono, c in self._terms:
            if not mono:
                const = c
                continue
            names = "*".join(a.name for a in mono)
            body = names if abs(c) == 1 else f"{abs(c)}*{names}"
            if not parts:
                parts.append(body if c > 0 else f"-{body}")
            else:
                parts.append(f"+ {body}" if c > 0 else f"- {body}")
        if const:
            parts.append(f"+ {const}" if const > 0 else f"- {-const}")
        return " ".join(parts)

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError(f"cannot pickle the symbolic size {self}")


def is_symbolic(x: object) -> bool:
    """Whether ``x`` is a :class:`SymInt`."""
    return isinstance(x, SymInt)


class ShapeEnv:
    """Creates size symbols ``u0``, ``u1``... (one per ``FakeTensorMode``; the meta device
    shares a process-wide one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def new_symbol(self, min: int = 0, max: int | None = None) -> int | SymInt:
        """A new size symbol with ``min <= u <= max`` (``max=None``: unbounded)."""
        if not isinstance(min, numbers.Integral) or min < 0:
            raise ValueError(
                f"new_dynamic_size(min={min!r}, max={max!r}): expected min to be an int >= 0: "
                "sizes cannot be negative"
            )
        if max is not None and (not isinstance(max, numbers.Integral) or max < min):
            raise ValueError(
                f"new_dynamic_size(min={min!r}, max={max!r}): expected max to be None or an "
                "int >= min"
            )
        if max is not None and max == min:
            return int(min)
        with self._lock:
            name = f"u{self._count}"
            self._count += 1
        atom = _Atom(name, float(min), _INF if max is None else float(max))
        return _make({(atom,): 1})


#: Symbols made on the meta device, outside any FakeTensorMode.
DEFAULT_ENV = ShapeEnv()
