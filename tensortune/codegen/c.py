"""C99 (GNU) code generation from loop IR.

* ``parallel`` loops become ``#pragma omp parallel for`` with a per-call thread count;
* ``vectorized`` loops become explicit SIMD through GCC/Clang vector extensions, in chunks of
  the target's register width (wider vectors would be kept in memory by the compiler); a body
  that cannot be vectorized explicitly falls back to a scalar loop under ``#pragma omp simd``;
* ``unrolled`` loops were already replicated by lowering; long ones get ``#pragma GCC unroll``;
* local buffers live on the stack (aligned), so fully unrolled accumulators stay in registers.

The entry point follows the runtime's convention: ``int32_t name(void** args, int32_t num_threads)``.
"""
from __future__ import annotations

import math
import re

import numpy as np
from typing import Sequence

from ..version import __version__
from ..arith import Analyzer
from ..dtype import DType
from ..errors import CodegenError
from ..ir.nodes import Allocate, Buffer, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Seq, Stmt, Store
from ..ir.visitor import Visitor
from ..target import ISA, Target
from ..te.expr import (Binary, BinOp, Call, Cast, Compare, Const, Expr, MathFunc, Not, Select, Var,
                       free_vars, substitute, walk)

#: Local buffers up to this size go on the stack; larger ones are heap-allocated per entry.
STACK_LIMIT_BYTES = 128 * 1024
#: Vectorized loops with more full vectors than this become a loop over vectors instead of straight-line code.
MAX_STRAIGHT_VECTORS = 8

_SHORT = {DType.float16: "f16", DType.bfloat16: "bf16", DType.float32: "f32", DType.float64: "f64", DType.int8: "i8",
          DType.uint8: "u8", DType.int16: "i16", DType.int32: "i32", DType.int64: "i64", DType.bool: "b"}
#: the element types of explicit SIMD code (others run as scalar loops the compiler may vectorize)
_VECTOR_DTYPES = frozenset({DType.float32, DType.float64, DType.int32, DType.int64})
_MASK = {DType.float32: DType.int32, DType.float64: DType.int64, DType.int32: DType.int32,
         DType.int64: DType.int64}
_CMATH = {MathFunc.EXP: "exp", MathFunc.LOG: "log", MathFunc.SQRT: "sqrt", MathFunc.TANH: "tanh",
          MathFunc.ABS: "fabs", MathFunc.FLOOR: "floor"}
_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.ADD: 5, BinOp.SUB: 5, BinOp.MUL: 6, BinOp.DIV: 6}
_CMP_PREC = 4


class _NotVectorizable(Exception):
    pass


def codegen_c(func: PrimFunc, target: Target, analyzer: Analyzer | None = None) -> str:
    """Deterministic, readable C source for ``func`` on ``target``.

    ``analyzer``: the arithmetic analysis of the lowering that made ``func`` (reused, so expressions it
    already simplified are not analysed again); a new one by default.
    """
    if func.name in RESERVED or func.name.startswith("tt_"):
        raise CodegenError(f"kernel name {func.name!r} is a C keyword or library name, or starts with 'tt_' "
                           "(reserved for generated helpers); choose another name")
    return _CGen(func, target, analyzer or Analyzer()).emit()


class _CGen(Visitor):
    """Statements are visited for their lines (``self.lines``); ``self.expr`` gives the C of an expression."""

    def __init__(self, func: PrimFunc, target: Target, analyzer: Analyzer):
        self.func = func
        self.target = target
        self.ana = analyzer
        self.lines: list[str] = []
        self.names: dict[object, str] = {}
        self.used_names: set[str] = set()
        self.vec_types: set[tuple[DType, int]] = set()
        self.helpers: set[str] = set()
        self.depth = 1
        self.scalar = _ScalarExpr(self)
        # loop variable -> its inclusive bounds: a floor division or modulo of a provably non-negative
        # value by a positive constant is then C's own '/' or '%', which the C compiler hoists and folds
        self.ranges: dict[Var, tuple[int, int]] = {}

    # ------------------------------------------------------------------ naming
    def name(self, key, hint: str) -> str:
        if key in self.names:
            return self.names[key]
        base = re.sub(r"[^0-9A-Za-z_]", "_", hint) or "v"
        if base[0].isdigit() or base in RESERVED or (base.startswith("tt_") and key != base):
            base = "v_" + base
        n, i = base, 1
        while n in self.used_names:
            n, i = f"{base}_{i}", i + 1
        self.used_names.add(n)
        self.names[key] = n
        return n

    def buf(self, b: Buffer) -> str:
        return self.name(("buf", b.name), b.name)

    def var(self, v: Var) -> str:
        return self.name(v, v.name)

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    # ------------------------------------------------------------------ top level
    def emit(self) -> str:
        f = self.func
        stored = {n.buffer.name for n in _stores(f.body)}
        fname = self.name(("func", f.name), f.name)
        assert fname == f.name, f"kernel name {f.name!r} is not a usable C identifier"
        impl = self.name(("impl", f.name), f"{f.name}_impl")
        body = self.static_function(impl)
        out = [f"// Generated by tensortune {__version__} for target: {self.target}",
               f"// Kernel '{f.name}': " + ", ".join(f"{b.name} {b.dtype.value}{list(b.shape)}" for b in f.args),
               *_INCLUDES, ""]
        out += self.prelude()
        out += body
        out.append("")
        casts = [f"({'const ' if b.name not in stored and b in f.args else ''}{b.dtype.c_type}*)args[{i}]"
                 for i, b in enumerate(f.args + f.workspaces)]
        out.append(f"int32_t {fname}(void** args, int32_t num_threads) {{")
        out.append(f"  {impl}({', '.join(casts + ['num_threads > 0 ? num_threads : 1'])});")
        out.append("  return 0;")
        out.append("}")
        return "\n".join(out) + "\n"

    def static_function(self, impl: str) -> list[str]:
        """``static void impl(args..., workspaces..., int32_t tt_num_threads) { body }`` as lines."""
        f = self.func
        stored = {n.buffer.name for n in _stores(f.body)}
        self.name("tt_num_threads", "tt_num_threads")
        params = []
        for b in f.args:
            const = "" if b.name in stored else "const "
            params.append(f"{const}{b.dtype.c_type}* restrict {self.buf(b)}")
        for b in f.workspaces:
            params.append(f"{b.dtype.c_type}* restrict {self.buf(b)}")
        self.depth = 1
        self.lines = []
        for b in f.workspaces:
            self.line(f"{self.buf(b)} = ({b.dtype.c_type}*)__builtin_assume_aligned({self.buf(b)}, 64);")
        self.visit(f.body)
        return [f"static void {impl}({', '.join(params + ['int32_t tt_num_threads'])}) {{", *self.lines, "}"]

    def prelude(self) -> list[str]:
        out = []
        for dt, n in sorted(self.vec_types, key=lambda t: (t[0].value, t[1])):
            t = _vtype(dt, n)
            size = dt.bytes * n
            out.append(f"typedef {dt.c_type} {t} __attribute__((vector_size({size})));")
            out.append(f"typedef {dt.c_type} {t}_u __attribute__((vector_size({size}), aligned({dt.bytes})));")
        out += sorted(self.helpers)
        return out + ([""] if out else [])

    # ------------------------------------------------------------------ statements
    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_Store(self, s: Store) -> None:
        self.line(f"{self.buf(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};")

    def visit_Prefetch(self, s: Prefetch) -> None:
        self.line(f"__builtin_prefetch(&{self.buf(s.buffer)}[{self.expr(s.index)}], 0, 3);")

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        self.line(f"if ({self.expr(s.cond)}) {{")
        self.block(s.then)
        if s.otherwise is not None:
            self.line("} else {")
            self.block(s.otherwise)
        self.line("}")

    def visit_Stmt(self, s: Stmt) -> None:  # pragma: no cover - a node kind the C backend does not know
        raise AssertionError(f"the C backend has no rule for statement {type(s).__name__}")

    def block(self, s: Stmt) -> None:
        self.depth += 1
        self.visit(s)
        self.depth -= 1

    def visit_Allocate(self, s: Allocate) -> None:
        b = s.buffer
        name = self.buf(b)
        ct = b.dtype.c_type
        nbytes = b.size * b.dtype.bytes
        self.line("{")  # a scope of its own: unrolled copies of an allocation must not clash
        self.depth += 1
        if nbytes <= STACK_LIMIT_BYTES:
            self.line(f"{ct} {name}[{b.size}] __attribute__((aligned(64)));")
            self.visit(s.body)
        else:
            rounded = -(-nbytes // 64) * 64
            self.line(f"{ct}* restrict {name} = ({ct}*)aligned_alloc(64, {rounded});")
            self.line(f"if (!{name}) abort();")
            self.visit(s.body)
            self.line(f"free({name});")
        self.depth -= 1
        self.line("}")

    def visit_For(self, s: For) -> None:
        if s.kind.is_gpu:
            raise CodegenError(f"loop '{s.var.name}' is bound to {s.kind.value}: build it for a 'cuda -arch=...' "
                               "target (or run it on a CPU through tensortune.lower.gpu.serialize_gpu)")
        self.ranges[s.var] = (0, s.extent - 1)
        v = self.var(s.var)
        head = f"for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{"
        if s.kind is ForKind.VECTORIZED:
            if self.vector_loop(s):
                return
            if _vector_body_ok(s.body, None):  # straight-line body: let the compiler vectorize it
                self.line("#pragma omp simd")
        elif s.kind is ForKind.PARALLEL:
            self.line("#pragma omp parallel for num_threads(tt_num_threads) schedule(static)")
        elif s.kind is ForKind.UNROLLED:
            self.line(f"#pragma GCC unroll {min(s.extent, 64)}")
        self.line(head)
        self.block(s.body)
        self.line("}")

    # ------------------------------------------------------------------ explicit SIMD
    def vector_loop(self, s: For) -> bool:
        """Emit ``s`` with vector types; False if its body cannot be vectorized explicitly."""
        stores = _stores(s.body)
        dtypes = {st.buffer.dtype for st in stores}
        if len(dtypes) != 1 or not _vector_body_ok(s.body, s.var):
            return False
        dt = dtypes.pop()
        width = self.target.lanes(dt)
        if width < 2 or dt not in _VECTOR_DTYPES:
            return False
        try:
            for st in stores:  # dry run: every store and value must be vectorizable
                self.vstore_code(st, s.var, Const(0), min(width, _pow2_floor(s.extent)), dry=True)
        except _NotVectorizable:
            return False
        chunks = _chunks(s.extent, width)
        full = [c for c in chunks if c[1] == width]
        rest = [c for c in chunks if c[1] != width]
        if len(full) > MAX_STRAIGHT_VECTORS:
            vb = Var(f"{s.var.name}.vec")
            self.ranges[vb] = (0, (len(full) - 1) * width)
            vname = self.var(vb)
            self.line(f"for (int32_t {vname} = 0; {vname} < {len(full) * width}; {vname} += {width}) {{")
            self.depth += 1
            self.vector_chunk(s.body, s.var, vb, width)
            self.depth -= 1
            self.line("}")
        else:
            rest = chunks
        for base, n in rest:
            if n == 1:
                self.visit(substitute(s.body, {s.var: Const(base)}))
            else:
                self.vector_chunk(s.body, s.var, Const(base), n)
        return True

    def vector_chunk(self, body: Stmt, v: Var, base: Expr, n: int) -> None:
        """The statements of a vectorized loop body at lanes ``v = base + 0..n-1``."""
        _VectorChunk(self, v, base, n).visit(body)

    def vstore_code(self, st: Store, v: Var, base: Expr, n: int, dry: bool = False) -> str:
        terms, _ = self.ana.linear(st.index)
        if terms.get(v, 0) != 1 or any(v in free_vars(a) for a in terms if a is not v):
            raise _NotVectorizable
        idx = self.expr(self.ana.simplify(substitute(st.index, {v: base})))
        val, is_vec = _VectorExpr(self, v, base, n, dry).visit(st.value)
        t = _vtype(st.buffer.dtype, n)
        if not dry:
            self.vec_types.add((st.buffer.dtype, n))
        if not is_vec:
            val = self.bcast(val, st.buffer.dtype, n, dry)
        return f"*({t}_u*)(&{self.buf(st.buffer)}[{idx}]) = {val};"

    def bcast(self, scalar: str, dt: DType, n: int, dry: bool) -> str:
        t = _vtype(dt, n)
        if not dry:
            self.vec_types.add((dt, n))
        return f"(({t}){{}} + ({scalar}))"

    # ------------------------------------------------------------------ scalar expressions
    def expr(self, e: Expr) -> str:
        return self.scalar.visit(e)[0]


_INCLUDES = ("#include <stdint.h>", "#include <stdlib.h>", "#include <math.h>")


def codegen_c_unit(funcs: Sequence[tuple[PrimFunc, Analyzer | None]], target: Target, main: str = "",
                   comment: str = "") -> str:
    """One translation unit holding every kernel of ``funcs`` as ``static void NAME(args..., workspaces...,
    int32_t tt_num_threads)`` (NAME is the function's name), then ``main``: the code that calls them (a
    whole network's entry point). Vector types and helpers are emitted once for all kernels."""
    names = [f.name for f, _ in funcs]
    if len(set(names)) != len(names):
        raise CodegenError(f"kernel names in one unit must be unique, got {sorted(names)}")
    prelude: dict[str, None] = {}
    bodies: list[str] = []
    for func, analyzer in funcs:
        if func.name in RESERVED or func.name.startswith("tt_"):
            raise CodegenError(f"kernel name {func.name!r} is a C keyword or library name, or starts with 'tt_'")
        gen = _CGen(func, target, analyzer or Analyzer())
        gen.name(("func", func.name), func.name)
        bodies += gen.static_function(func.name) + [""]
        prelude.update(dict.fromkeys(gen.prelude()))
    head = [f"// Generated by tensortune {__version__} for target: {target}"] + ([f"// {comment}"] if comment else [])
    lines = head + [*_INCLUDES, ""] + [p for p in prelude if p] + [""] + bodies + [main]
    return "\n".join(lines) + "\n"


class _VectorChunk(Visitor):
    """Emits the statements of a vectorized loop body for ``n`` lanes from ``base`` (stores become vector stores)."""

    def __init__(self, gen: _CGen, v: Var, base: Expr, n: int):
        self.gen, self.v, self.base, self.n = gen, v, base, n

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        gen = self.gen
        gen.line(f"if ({gen.expr(s.cond)}) {{")
        gen.depth += 1
        self.visit(s.then)
        gen.depth -= 1
        if s.otherwise is not None:
            gen.line("} else {")
            gen.depth += 1
            self.visit(s.otherwise)
            gen.depth -= 1
        gen.line("}")

    def visit_Store(self, s: Store) -> None:
        self.gen.line(self.gen.vstore_code(s, self.v, self.base, self.n))

    def visit_Stmt(self, s: Stmt) -> None:  # pragma: no cover - excluded by _vector_body_ok
        raise AssertionError(f"statement {type(s).__name__} in a vector chunk")


class _VectorExpr(Visitor):
    """``(code, is_vector)`` of an expression evaluated at lanes ``v = base + 0..n-1``; raises
    ``_NotVectorizable`` for what explicit SIMD does not handle. ``dry``: only check, emit nothing."""

    def __init__(self, gen: _CGen, v: Var, base: Expr, n: int, dry: bool):
        self.gen, self.v, self.base, self.n, self.dry = gen, v, base, n, dry

    def visit(self, e: Expr) -> tuple[str, bool]:
        if self.v not in free_vars(e):
            return ("" if self.dry else self.gen.expr(e)), False
        return super().visit(e)

    def visit_Load(self, e: Load) -> tuple[str, bool]:
        gen, v, base, n = self.gen, self.v, self.base, self.n
        terms, _ = gen.ana.linear(e.index)
        coef = terms.get(v, 0)
        if any(v in free_vars(a) for a in terms if a is not v):
            raise _NotVectorizable  # v inside a non-linear index: not worth a gather here
        t = _vtype(e.dtype, n)
        if self.dry:
            return "", True
        gen.vec_types.add((e.dtype, n))
        if coef == 1:
            idx = gen.expr(gen.ana.simplify(substitute(e.index, {v: base})))
            return f"(*(const {t}_u*)(&{gen.buf(e.buffer)}[{idx}]))", True
        lanes = [gen.expr(gen.ana.simplify(substitute(e.index, {v: base + i}))) for i in range(n)]
        b = gen.buf(e.buffer)
        return f"(({t}){{{', '.join(f'{b}[{x}]' for x in lanes)}}})", True

    def _vectors(self, x: Expr, y: Expr, dt: DType) -> tuple[str, str] | None:
        """The code of ``x`` and ``y`` as vectors (scalars broadcast); None in a dry run."""
        a, av = self.visit(x)
        b, bv = self.visit(y)
        if self.dry:
            return None
        return (a if av else self.gen.bcast(a, dt, self.n, False)), (b if bv else self.gen.bcast(b, dt, self.n, False))

    def visit_Select(self, e: Select) -> tuple[str, bool]:
        """A condition the same for all lanes (padding tests of rows and columns) picks a whole vector: C's ``?:``
        evaluates only the branch it picks."""
        if self.v in free_vars(e.cond) or e.dtype not in _VECTOR_DTYPES:
            raise _NotVectorizable
        pair = self._vectors(e.true_value, e.false_value, e.dtype)
        return ("", True) if pair is None else (f"({self.gen.expr(e.cond)} ? {pair[0]} : {pair[1]})", True)

    def visit_Binary(self, e: Binary) -> tuple[str, bool]:
        if e.op not in (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.MIN, BinOp.MAX) or e.dtype not in _VECTOR_DTYPES \
                or (not e.dtype.is_float and e.op is BinOp.DIV):
            raise _NotVectorizable
        gen = self.gen
        if e.op in (BinOp.MIN, BinOp.MAX):
            pair = self._vectors(e.a, e.b, e.dtype)
            if pair is None:
                return "", True
            h = _vminmax_helper(e.op, e.dtype, self.n, gen.target.isa)
            gen.helpers.add(h[1])
            gen.vec_types.add((_MASK[e.dtype], self.n))
            return f"{h[0]}({pair[0]}, {pair[1]})", True
        a, _ = self.visit(e.a)
        b, _ = self.visit(e.b)
        return ("", True) if self.dry else (f"({a} {e.op.value} {b})", True)

    def generic_visit(self, e: Expr) -> tuple[str, bool]:
        raise _NotVectorizable


class _ScalarExpr(Visitor):
    """``(code, precedence)`` of a scalar C expression (higher binds tighter)."""

    def __init__(self, gen: _CGen):
        self.gen = gen

    def wrap(self, e: Expr, prec: int, right: bool = False) -> str:
        s, p = self.visit(e)
        return f"({s})" if p < prec or (right and p == prec) else s

    def visit_Var(self, e: Var):
        return self.gen.var(e), 10

    def visit_Const(self, e: Const):
        return _const(e), 10 if not (isinstance(e.value, (int, float)) and e.value < 0) else 7

    def visit_Load(self, e: Load):
        return f"{self.gen.buf(e.buffer)}[{self.gen.expr(e.index)}]", 10

    def visit_Binary(self, e: Binary):
        if e.op in _PREC:
            p = _PREC[e.op]
            return f"{self.wrap(e.a, p)} {e.op.value} {self.wrap(e.b, p, right=True)}", p
        if e.op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and isinstance(e.b, Const) and e.b.value > 0:
            bounds = self.gen.ana.bounds(e.a, self.gen.ranges)
            if bounds is not None and bounds[0] >= 0:  # C's truncating '/' and '%' agree with floor here
                op = "/" if e.op is BinOp.FLOORDIV else "%"
                return f"{self.wrap(e.a, 6)} {op} {self.wrap(e.b, 6, right=True)}", 6
        self.gen.helpers.add(_scalar_helper(e.op, e.dtype))
        return f"{_helper_name(e.op, e.dtype)}({self.gen.expr(e.a)}, {self.gen.expr(e.b)})", 10

    def visit_Compare(self, e: Compare):
        return f"{self.wrap(e.a, _CMP_PREC + 1)} {e.op.value} {self.wrap(e.b, _CMP_PREC + 1)}", _CMP_PREC

    def visit_Not(self, e: Not):
        return f"!{self.wrap(e.a, 9)}", 9

    def visit_Select(self, e: Select):
        return f"{self.wrap(e.cond, 4)} ? {self.wrap(e.true_value, 4)} : {self.wrap(e.false_value, 4)}", 3

    def visit_Cast(self, e: Cast):
        src = e.value.dtype
        if e.to is DType.bool:  # C's (uint8_t)0.5 would be 0
            return f"({self.wrap(e.value, _CMP_PREC + 1)} != 0)", _CMP_PREC
        if src is DType.bfloat16 or e.to is DType.bfloat16:
            self.gen.helpers.add(_BF16_HELPERS)
            if src is DType.bfloat16:
                value = f"tt_bf16_to_f32({self.gen.expr(e.value)})"
                return (value, 10) if e.to is DType.float32 else (f"({e.to.c_type}){value}", 9)
            return f"tt_f32_to_bf16((float){self.wrap(e.value, 9)})", 10
        return f"({e.to.c_type}){self.wrap(e.value, 9)}", 9

    def visit_Call(self, e: Call):
        x = e.args[0]
        if e.func is MathFunc.ABS and x.dtype.is_int:
            return f"({self.gen.expr(x)} < 0 ? -{self.wrap(x, 9)} : {self.wrap(x, 9)})", 10
        fn = _CMATH[e.func] + ("f" if x.dtype in (DType.float32, DType.float16) else "")
        return f"{fn}({self.gen.expr(x)})", 10

    def generic_visit(self, e: Expr):
        raise AssertionError(f"cannot generate C for {type(e).__name__}")


#: Identifiers that generated names must not take: C keywords and the names the headers we include declare.
RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long register
restrict return short signed sizeof static struct switch typedef union unsigned void volatile while _Bool _Complex
bool true false NULL main args num_threads
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t size_t ptrdiff_t
abort free malloc calloc realloc aligned_alloc exit abs labs div
exp expf log logf sqrt sqrtf tanh tanhf fabs fabsf floor floorf ceil ceilf pow powf fmax fmaxf fmin fminf
sin cos tan sinf cosf tanf erf erff round roundf INFINITY NAN HUGE_VAL isnan isinf
""".split())


def _vtype(dt: DType, n: int) -> str:
    return f"tt_{_SHORT[dt]}x{n}"


def _const(e: Const) -> str:
    v = e.value
    if e.dtype is DType.bfloat16:  # the bits of the nearest bfloat16
        return f"((uint16_t){int(np.asarray(v, np.float32).astype(DType.bfloat16.numpy).view(np.uint16))})"
    if e.dtype is DType.float16:
        return f"((_Float16){_const(Const(v, DType.float32))})"
    if e.dtype.is_float:
        if math.isinf(v):
            s = "INFINITY" if v > 0 else "-INFINITY"
            return s if e.dtype is DType.float32 else f"(double){s}"
        if math.isnan(v):
            return "NAN"
        r = repr(float(v))
        if "e" not in r and "." not in r:
            r += ".0"
        return r + ("f" if e.dtype is DType.float32 else "")
    if e.dtype is DType.int64:
        return f"{v}LL"
    if e.dtype is DType.int32 and v == -(2**31):
        return "(-2147483647 - 1)"
    return str(int(v))


#: bfloat16 <-> float32: the upper 16 bits of a float32, rounded to nearest even (a NaN stays a NaN)
_BF16_HELPERS = """static inline float tt_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
static inline uint16_t tt_f32_to_bf16(float f) {
  union { uint32_t u; float f; } v; v.f = f;
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}"""


def _helper_name(op: BinOp, dt: DType) -> str:
    return f"tt_{op.name.lower()}_{_SHORT[dt]}"


def _scalar_helper(op: BinOp, dt: DType) -> str:
    name, t = _helper_name(op, dt), dt.c_type
    if op is BinOp.MIN:
        return f"static inline {t} {name}({t} a, {t} b) {{ return a < b ? a : b; }}"
    if op is BinOp.MAX:
        return f"static inline {t} {name}({t} a, {t} b) {{ return a > b ? a : b; }}"
    if op is BinOp.FLOORDIV:
        return (f"static inline {t} {name}({t} a, {t} b) {{ {t} q = a / b; "
                f"return q - ((a % b != 0) & ((a < 0) != (b < 0))); }}")
    if op is BinOp.FLOORMOD:
        return f"static inline {t} {name}({t} a, {t} b) {{ {t} r = a % b; return r != 0 && ((r < 0) != (b < 0)) ? r + b : r; }}"
    raise AssertionError(op)


def _vminmax_helper(op: BinOp, dt: DType, n: int, isa: ISA = ISA.SCALAR) -> tuple[str, str]:
    """``a < b ? a : b`` (``a > b ? a : b``) over vectors. On x86 the MINPS/MAXPS instruction (``_x86_minmax``),
    which computes exactly that (NaN or equal zeros: ``b``); elsewhere a comparison and a blend."""
    t, m = _vtype(dt, n), _vtype(_MASK[dt], n)
    name = f"tt_v{op.name.lower()}_{_SHORT[dt]}x{n}"
    body = _x86_minmax(op, dt, n, isa)
    if body is None:
        cmp = "<" if op is BinOp.MIN else ">"
        body = f"{m} k = a {cmp} b; return ({t})((k & ({m})a) | (~k & ({m})b));"
    return name, f"static inline {t} {name}({t} a, {t} b) {{ {body} }}"


#: the widest x86 vector (bits) each ISA has
_X86_BITS = {ISA.AVX2: 256, ISA.AVX512: 512}


def _x86_minmax(op: BinOp, dt: DType, n: int, isa: ISA) -> str | None:
    """The body of a float min/max of ``n`` lanes on ``isa`` as one MINPS/MAXPS (PD), through the compiler's
    builtin (the one ``<immintrin.h>`` wraps; including that header would add a quarter of a second to every
    compile), or None (not x86, not a float, a width the ISA lacks). A comparison and a blend cost two
    instructions where the builtin costs one: every ReLU and Clip in a kernel's epilogue (MobileNetV2 2-3%
    faster)."""
    bits = n * dt.bytes * 8
    if isa not in _X86_BITS or dt not in (DType.float32, DType.float64) or bits not in (128, 256, 512) \
            or bits > _X86_BITS[isa]:
        return None
    fn = f"__builtin_ia32_{op.name.lower()}p{'s' if dt is DType.float32 else 'd'}{'' if bits == 128 else bits}"
    if bits < 512:
        return f"return {fn}(a, b);"
    # 512 bits: gcc's builtin is the masked one (all lanes, current rounding), clang's takes the rounding only
    return (f"\n#if defined(__clang__)\n  return {fn}(a, b, 4);\n#else\n"
            f"  return {fn}_mask(a, b, a, ({'unsigned short' if n == 16 else 'unsigned char'})-1, 4);\n#endif\n")


def _stores(s: Stmt) -> list[Store]:
    return [n for n in walk(s) if isinstance(n, Store)]


def _vector_body_ok(s: Stmt, v: Var | None) -> bool:
    """Straight-line stores (and conditions not depending on ``v``): what explicit SIMD handles."""
    return _StraightLine(v).visit(s)


class _StraightLine(Visitor):
    def __init__(self, v: Var | None):
        self.v = v

    def visit_Seq(self, s: Seq) -> bool:
        return all(self.visit(x) for x in s.stmts)

    def visit_Store(self, s: Store) -> bool:
        return True

    def visit_IfThenElse(self, s: IfThenElse) -> bool:
        return (self.v is None or self.v not in free_vars(s.cond)) and self.visit(s.then) and \
            (s.otherwise is None or self.visit(s.otherwise))

    def visit_Stmt(self, s: Stmt) -> bool:
        return False


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _chunks(extent: int, width: int) -> list[tuple[int, int]]:
    """Split ``[0, extent)`` into (start, lanes) pieces: full vectors, then halving powers of two."""
    out, pos = [], 0
    while extent - pos >= width:
        out.append((pos, width))
        pos += width
    n = width // 2
    while pos < extent and n >= 1:
        if extent - pos >= n:
            out.append((pos, n))
            pos += n
        n //= 2
    return out
