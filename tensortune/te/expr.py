"""Scalar expression nodes shared by tensor expressions and the loop IR.

Every node is an immutable dataclass compared structurally. Constructors
validate their operands: a dtype mismatch is a ``DTypeError`` that prints both
operands, so the tensors involved are named in the message.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Callable, Iterator, Union

from ..dtype import DType
from ..errors import DTypeError, ExprError, ShapeError

_uid = itertools.count()


class Expr:
    """Base of scalar expressions. Python operators build new nodes (``==`` stays structural)."""

    __slots__ = ()

    @property
    def dtype(self) -> DType:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    # arithmetic -----------------------------------------------------------
    def __add__(self, o): return _arith(BinOp.ADD, self, o)
    def __radd__(self, o): return _arith(BinOp.ADD, o, self)
    def __sub__(self, o): return _arith(BinOp.SUB, self, o)
    def __rsub__(self, o): return _arith(BinOp.SUB, o, self)
    def __mul__(self, o): return _arith(BinOp.MUL, self, o)
    def __rmul__(self, o): return _arith(BinOp.MUL, o, self)
    def __truediv__(self, o): return _arith(BinOp.DIV, self, o)
    def __rtruediv__(self, o): return _arith(BinOp.DIV, o, self)
    def __floordiv__(self, o): return _arith(BinOp.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return _arith(BinOp.FLOORDIV, o, self)
    def __mod__(self, o): return _arith(BinOp.FLOORMOD, self, o)
    def __rmod__(self, o): return _arith(BinOp.FLOORMOD, o, self)
    def __neg__(self): return _arith(BinOp.SUB, const(0, self.dtype), self)

    # comparisons (``==``/``!=`` are structural; use ``equal``/``not_equal``) --
    def __lt__(self, o): return _compare(CmpOp.LT, self, o)
    def __le__(self, o): return _compare(CmpOp.LE, self, o)
    def __gt__(self, o): return _compare(CmpOp.GT, self, o)
    def __ge__(self, o): return _compare(CmpOp.GE, self, o)

    def __and__(self, o): return Binary(BinOp.AND, self, as_expr(o, DType.bool))
    def __or__(self, o): return Binary(BinOp.OR, self, as_expr(o, DType.bool))
    def __invert__(self): return Not(self)

    def __bool__(self):
        raise ExprError(
            "a tensor expression has no truth value; use tensortune.te.select / if_then_else "
            "instead of Python 'if', and '&'/'|' instead of 'and'/'or'"
        )

    def astype(self, dtype: DType | str) -> "Expr":
        return cast(dtype, self)

    def __str__(self) -> str:
        return self.text()[0]

    def text(self) -> tuple[str, int]:
        """Readable Python-like text of the expression and its precedence (higher binds tighter; ``ATOM`` for
        names, literals and calls): ``str(expr)``, and what the loop IR printer writes."""
        return repr(self), ATOM


class BinOp(Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    FLOORDIV = "//"
    FLOORMOD = "%"
    MIN = "min"
    MAX = "max"
    AND = "&&"
    OR = "||"


class CmpOp(Enum):
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


#: precedence of names, literals and calls in printed expressions (``Expr.text``)
ATOM = 9
_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.ADD: 4, BinOp.SUB: 4, BinOp.MUL: 5, BinOp.DIV: 5, BinOp.FLOORDIV: 5,
         BinOp.FLOORMOD: 5}
_CMP_PREC = 3


def wrap(e: "Expr", min_prec: int, right: bool = False) -> str:
    """``e``'s text, in parentheses where its precedence is below ``min_prec`` (or equal, on the right)."""
    s, p = e.text()
    return f"({s})" if p < min_prec or (right and p == min_prec) else s


_SUFFIX = {DType.float64: "f64"}


class MathFunc(Enum):
    """Elementwise math functions (of one argument, ``pow`` of two). What each means and how it is computed is one
    row of ``MATH_FUNCTIONS``, which constant folding, the graph interpreter and the C and CUDA code generators
    read."""

    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    ABS = "abs"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    POW = "pow"


@dataclass(frozen=True)
class MathImpl:
    """How a math function is computed: ``numpy`` on arrays, ``c`` the C99 function of doubles (the float
    version adds ``f``; CUDA has the same names); ``ints``: whether it takes integers too (the C of an integer
    argument is then ``c_int``, an expression of ``x``, or ``wrapped``: ``x`` in parentheses where needed);
    ``arity``: its number of arguments (of one dtype)."""

    numpy: Callable[..., Any]
    c: str
    ints: bool = False
    c_int: str = ""
    arity: int = 1


def _np(name: str) -> Callable[..., Any]:
    def fn(*xs):
        import numpy as np

        return getattr(np, name)(*xs)

    fn.__name__ = name
    return fn


def _erf(x):
    """numpy has no erf: C's, one element at a time (the interpreter and constant folding only)."""
    import math

    import numpy as np

    x = np.asarray(x)
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=x.dtype)


#: the one table of math functions (see ``MathFunc``)
MATH_FUNCTIONS: dict[MathFunc, MathImpl] = {
    MathFunc.EXP: MathImpl(_np("exp"), "exp"),
    MathFunc.LOG: MathImpl(_np("log"), "log"),
    MathFunc.SQRT: MathImpl(_np("sqrt"), "sqrt"),
    MathFunc.TANH: MathImpl(_np("tanh"), "tanh"),
    MathFunc.ABS: MathImpl(_np("abs"), "fabs", ints=True, c_int="({x} < 0 ? -{wrapped} : {wrapped})"),
    MathFunc.FLOOR: MathImpl(_np("floor"), "floor"),
    MathFunc.CEIL: MathImpl(_np("ceil"), "ceil"),
    MathFunc.ROUND: MathImpl(_np("rint"), "rint"),  # to nearest, ties to even (C's default rounding mode)
    MathFunc.ERF: MathImpl(_erf, "erf"),
    MathFunc.SIN: MathImpl(_np("sin"), "sin"),
    MathFunc.COS: MathImpl(_np("cos"), "cos"),
    MathFunc.POW: MathImpl(_np("power"), "pow", arity=2),
}


class Reducer(Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


class AxisKind(Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class Var(Expr):
    """A named integer variable (loop index). Two vars are equal only if they share ``uid``."""

    name: str
    dtype: DType = DType.int32
    uid: int = field(default_factory=lambda: next(_uid))

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ExprError("a Var needs a non-empty string name")

    def __hash__(self) -> int:  # vars are compared by uid; hashing it alone is much cheaper
        return self.uid


    def text(self) -> tuple[str, int]:
        return self.name, ATOM

@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A literal of a given dtype."""

    value: int | float
    dtype: DType = DType.int32

    def __post_init__(self):
        if self.dtype.is_float:
            object.__setattr__(self, "value", float(self.value))
        elif isinstance(self.value, float):
            if not self.value.is_integer():
                raise DTypeError(f"constant {self.value} is not an integer but dtype is {self.dtype}")
            object.__setattr__(self, "value", int(self.value))
        elif self.dtype is DType.bool:
            object.__setattr__(self, "value", int(bool(self.value)))


    def text(self) -> tuple[str, int]:
        if self.dtype.is_float:
            v = repr(self.value)
            return (v if self.dtype is DType.float32 else f"{v}{_SUFFIX.get(self.dtype, self.dtype.value)}"), ATOM
        return str(self.value), ATOM if self.value >= 0 else 6

def _check_same_dtype(op: str, a: Expr, b: Expr) -> None:
    if a.dtype != b.dtype:
        raise DTypeError(f"operands of '{op}' have different dtypes: ({a}) is {a.dtype}, ({b}) is {b.dtype}; "
                         "cast one of them with .astype()")
    _computes_in(op, a)


def _computes_in(op: str, a: Expr) -> None:
    """bfloat16 is a storage type: arithmetic on it runs in float32 (as the CPUs' bfloat16 instructions do)."""
    if a.dtype is DType.bfloat16:
        raise DTypeError(f"'{op}' on bfloat16 ({a}): bfloat16 is stored, not computed in; compute in float32 with "
                         ".astype('float32') and cast the result back")


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    """Arithmetic or logical binary operation on operands of one dtype."""

    op: BinOp
    a: Expr
    b: Expr

    def __post_init__(self):
        _check_same_dtype(self.op.value, self.a, self.b)
        if self.op in (BinOp.AND, BinOp.OR) and self.a.dtype is not DType.bool:
            raise DTypeError(f"'{self.op.value}' needs boolean operands, got {self.a.dtype}")
        if self.op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and not self.a.dtype.is_int:
            raise DTypeError(f"'{self.op.value}' needs integer operands, got {self.a.dtype}; use '/' for floats")
        if self.op is BinOp.DIV and not self.a.dtype.is_float:
            raise DTypeError(f"'/' needs float operands, got {self.a.dtype}; use '//' for integers")

    @property
    def dtype(self) -> DType:
        return self.a.dtype


    def text(self) -> tuple[str, int]:
        if self.op in (BinOp.MIN, BinOp.MAX):
            return f"{self.op.value}({self.a}, {self.b})", ATOM
        p = _PREC[self.op]
        return f"{wrap(self.a, p)} {self.op.value} {wrap(self.b, p, right=True)}", p

@dataclass(frozen=True, slots=True)
class Compare(Expr):
    """A comparison; its dtype is bool."""

    op: CmpOp
    a: Expr
    b: Expr

    def __post_init__(self):
        _check_same_dtype(self.op.value, self.a, self.b)

    @property
    def dtype(self) -> DType:
        return DType.bool


    def text(self) -> tuple[str, int]:
        return f"{wrap(self.a, _CMP_PREC + 1)} {self.op.value} {wrap(self.b, _CMP_PREC + 1)}", _CMP_PREC

@dataclass(frozen=True, slots=True)
class Not(Expr):
    a: Expr

    def __post_init__(self):
        if self.a.dtype is not DType.bool:
            raise DTypeError(f"'~' needs a boolean operand, got {self.a.dtype}")

    @property
    def dtype(self) -> DType:
        return DType.bool


    def text(self) -> tuple[str, int]:
        return f"!{wrap(self.a, 8)}", 8

@dataclass(frozen=True, slots=True)
class Select(Expr):
    """``cond ? true_value : false_value``; both branches may be evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr

    def __post_init__(self):
        if self.cond.dtype is not DType.bool:
            raise DTypeError(f"select condition must be boolean, got ({self.cond}) of {self.cond.dtype}")
        if self.true_value.dtype != self.false_value.dtype:
            raise DTypeError(
                f"select branches have different dtypes: ({self.true_value}) is {self.true_value.dtype}, "
                f"({self.false_value}) is {self.false_value.dtype}"
            )

    @property
    def dtype(self) -> DType:
        return self.true_value.dtype


    def text(self) -> tuple[str, int]:
        return f"select({self.cond}, {self.true_value}, {self.false_value})", ATOM

@dataclass(frozen=True, slots=True)
class Cast(Expr):
    to: DType
    value: Expr

    @property
    def dtype(self) -> DType:
        return self.to


    def text(self) -> tuple[str, int]:
        return f"{self.to.value}({self.value})", ATOM

@dataclass(frozen=True, slots=True)
class Call(Expr):
    """An elementwise math function on float operands (of one dtype)."""

    func: MathFunc
    args: tuple[Expr, ...]

    def __post_init__(self):
        arity = MATH_FUNCTIONS[self.func].arity
        if len(self.args) != arity:
            raise ExprError(f"{self.func.value} takes {arity} argument(s), got {len(self.args)}")
        if not MATH_FUNCTIONS[self.func].ints and not self.args[0].dtype.is_float:
            raise DTypeError(f"{self.func.value} needs a float argument, got {self.args[0].dtype}")
        for a in self.args[1:]:
            _check_same_dtype(self.func.value, self.args[0], a)
        _computes_in(self.func.value, self.args[0])

    @property
    def dtype(self) -> DType:
        return self.args[0].dtype


    def text(self) -> tuple[str, int]:
        return f"{self.func.value}({', '.join(str(a) for a in self.args)})", ATOM

@dataclass(frozen=True, slots=True)
class IterVar:
    """An axis of a compute: a variable ranging over ``[0, extent)``, spatial or reduction."""

    var: Var
    extent: int
    kind: AxisKind = AxisKind.SPATIAL

    def __post_init__(self):
        if not isinstance(self.extent, int) or isinstance(self.extent, bool) or self.extent < 1:
            raise ExprError(f"axis '{self.var.name}' needs a positive integer extent, got {self.extent!r}")

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> DType:
        return self.var.dtype


def _itervar_ops():
    # Forward arithmetic on IterVar to its Var so ``i + 1`` works for axes too.
    for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
                 "__rfloordiv__", "__mod__", "__rmod__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__"):
        def op(self, *o, _n=name):
            return getattr(self.var, _n)(*o)
        setattr(IterVar, name, op)


_itervar_ops()


@dataclass(frozen=True, slots=True)
class TensorRead(Expr):
    """``tensor[indices]`` in a tensor expression (before lowering)."""

    tensor: Any  # tensortune.te.tensor.Tensor; typed loosely to avoid an import cycle
    indices: tuple[Expr, ...]

    def __post_init__(self):
        shape = self.tensor.shape
        if len(self.indices) != len(shape):
            raise ShapeError(f"tensor '{self.tensor.name}' has {len(shape)} dimensions {tuple(shape)} "
                             f"but was indexed with {len(self.indices)} indices")
        for i, idx in enumerate(self.indices):
            if not idx.dtype.is_int:
                raise DTypeError(
                    f"index {i} of tensor '{self.tensor.name}' must be an integer expression, "
                    f"got ({idx}) of {idx.dtype}"
                )

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype


    def text(self) -> tuple[str, int]:
        return f"{self.tensor.name}[{', '.join(str(i) for i in self.indices)}]", ATOM

@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    """A reduction of ``source`` over ``axes`` with a commutative ``combiner``."""

    combiner: Reducer
    source: Expr
    axes: tuple[IterVar, ...]

    def __post_init__(self):
        if not self.axes:
            raise ExprError(f"{self.combiner.value} needs at least one reduce axis")
        for ax in self.axes:
            if ax.kind is not AxisKind.REDUCE:
                raise ExprError(f"axis '{ax.name}' is not a reduce axis; create it with reduce_axis()")
        if self.source.dtype is DType.bool:
            raise DTypeError("cannot reduce a boolean expression; cast it first")
        _computes_in(self.combiner.value, self.source)

    @property
    def dtype(self) -> DType:
        return self.source.dtype

    def identity(self) -> "Const":
        dt = self.dtype
        if self.combiner is Reducer.SUM:
            return const(0, dt)
        if self.combiner is Reducer.PROD:
            return const(1, dt)
        if dt.is_float:
            return const(-math.inf if self.combiner is Reducer.MAX else math.inf, dt)
        bits = 8 * dt.bytes - 1
        return const(-(2**bits) if self.combiner is Reducer.MAX else 2**bits - 1, dt)


    def text(self) -> tuple[str, int]:
        axes = ", ".join(f"{a.name}:{a.extent}" for a in self.axes)
        return f"{self.combiner.value}({self.source}, axis=[{axes}])", ATOM

# ---------------------------------------------------------------------------
# construction helpers

ExprLike = Union[Expr, IterVar, int, float, bool]


def const(value: int | float, dtype: DType | str) -> Const:
    return Const(value, DType.of(dtype) if not isinstance(dtype, DType) else dtype)


def as_expr(x: ExprLike, like: DType | None = None) -> Expr:
    """Convert a Python number or an IterVar to an expression (numbers take the dtype ``like``)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, bool):
        return Const(int(x), DType.bool)
    if isinstance(x, int):
        if like is not None and like is not DType.bool:
            return Const(x, like)
        return Const(x, DType.int32)
    if isinstance(x, float):
        if like is not None and like.is_float:
            return Const(x, like)
        if like is not None and like.is_int:
            raise DTypeError(f"cannot combine the float constant {x} with an {like} expression; cast explicitly")
        return Const(x, DType.float32)
    raise ExprError(f"cannot use {x!r} (of type {type(x).__name__}) in a tensor expression")


def _pair(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    if isinstance(a, (Expr, IterVar)):
        a = as_expr(a)
        return a, as_expr(b, a.dtype)
    b = as_expr(b)
    return as_expr(a, b.dtype), b


def _arith(op: BinOp, a: ExprLike, b: ExprLike) -> Expr:
    x, y = _pair(a, b)
    return Binary(op, x, y)


def _compare(op: CmpOp, a: ExprLike, b: ExprLike) -> Expr:
    x, y = _pair(a, b)
    return Compare(op, x, y)


def equal(a: ExprLike, b: ExprLike) -> Expr:
    """Element comparison ``a == b`` (``==`` on nodes is structural equality)."""
    return _compare(CmpOp.EQ, a, b)


def not_equal(a: ExprLike, b: ExprLike) -> Expr:
    return _compare(CmpOp.NE, a, b)


def logical_and(*conds: Expr) -> Expr:
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = Binary(BinOp.AND, out, as_expr(c))
    return out


def select(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> Expr:
    t, f = _pair(true_value, false_value)
    return Select(as_expr(cond), t, f)


if_then_else = select


def cast(dtype: DType | str, value: ExprLike) -> Expr:
    dt = DType.of(dtype)
    v = as_expr(value)
    return v if v.dtype is dt else Cast(dt, v)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return _arith(BinOp.MAX, a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return _arith(BinOp.MIN, a, b)


def _math(func: MathFunc) -> Callable[[ExprLike], Expr]:
    def f(x: ExprLike) -> Expr:
        return Call(func, (as_expr(x),))

    f.__name__ = func.value
    f.__doc__ = f"Elementwise {func.value}."
    return f


def call(func: MathFunc, x: ExprLike, *more: ExprLike) -> Expr:
    """``func(x, ...)`` elementwise (``exp``, ``log``... are this for one function each)."""
    if not more:
        return Call(func, (as_expr(x),))
    first = as_expr(x) if isinstance(x, (Expr, IterVar)) else as_expr(x, as_expr(more[0]).dtype)
    return Call(func, (first,) + tuple(as_expr(y, first.dtype) for y in more))


exp = _math(MathFunc.EXP)
log = _math(MathFunc.LOG)
sqrt = _math(MathFunc.SQRT)
tanh = _math(MathFunc.TANH)
abs_ = _math(MathFunc.ABS)
floor = _math(MathFunc.FLOOR)


def sigmoid(x: ExprLike) -> Expr:
    x = as_expr(x)
    return const(1.0, x.dtype) / (const(1.0, x.dtype) + exp(-x))


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    """A reduction axis over ``[0, extent)``."""
    return IterVar(Var(name), extent, AxisKind.REDUCE)


def _reducer(comb: Reducer):
    def f(expr: ExprLike, axis: IterVar | list[IterVar] | tuple[IterVar, ...]) -> Reduce:
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if not all(isinstance(a, IterVar) for a in axes):
            raise ExprError(f"{comb.value} needs axis= a reduce axis or a list of them (from reduce_axis()), "
                            f"got {axis!r}")
        return Reduce(comb, as_expr(expr), axes)

    f.__name__ = comb.value
    f.__doc__ = f"{comb.value} of ``expr`` over the reduce ``axis`` (one axis or a list)."
    return f


sum = _reducer(Reducer.SUM)  # noqa: A001 - mirrors the tensor-expression vocabulary
max = _reducer(Reducer.MAX)  # noqa: A001
min = _reducer(Reducer.MIN)  # noqa: A001
prod = _reducer(Reducer.PROD)


# ---------------------------------------------------------------------------
# generic traversal over frozen dataclass nodes (expressions and statements)

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(node) -> tuple[str, ...]:
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def children(node) -> Iterator:
    """Yield the child nodes (expressions or statements) of ``node``."""
    for name in _field_names(node):
        v = getattr(node, name)
        if isinstance(v, _NODE_TYPES):
            yield v
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, _NODE_TYPES):
                    yield x


def walk(node) -> Iterator:
    """Pre-order traversal of a node and all its descendants."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(children(n))))


def rebuild(node, fn: Callable):
    """``node`` with ``fn`` applied to each child (expression or statement, also inside tuples); the same
    object when no child changes. The one primitive that every mutator and ``transform`` rebuild through."""
    changes = None
    for name in _field_names(node):
        v = getattr(node, name)
        if isinstance(v, _NODE_TYPES):
            nv = fn(v)
            if nv is not v:
                changes = changes or {}
                changes[name] = nv
        elif isinstance(v, tuple) and v and isinstance(v[0], _NODE_TYPES):
            nv = tuple(fn(x) if isinstance(x, _NODE_TYPES) else x for x in v)
            if any(a is not b for a, b in zip(nv, v)):
                changes = changes or {}
                changes[name] = nv
    if changes:
        node = type(node)(**{n: changes.get(n, getattr(node, n)) for n in _field_names(node)})
    return node


def transform(node, fn: Callable):
    """Rebuild ``node`` bottom-up: children first, then ``fn(new_node)`` (return the node to keep it)."""
    return fn(rebuild(node, lambda child: transform(child, fn)))


def substitute(node, mapping: dict) -> Any:
    """Replace Vars (keys) by expressions (values) everywhere in ``node``."""
    if not mapping:
        return node
    return transform(node, lambda n: mapping.get(n, n) if isinstance(n, Var) else n)


def free_vars(node) -> set:
    return {n for n in walk(node) if isinstance(n, Var)}


class StmtBase:
    """Marker base of loop-IR statements (defined in tensortune.ir) so traversal can see them."""

    __slots__ = ()


_NODE_TYPES = (Expr, StmtBase)
