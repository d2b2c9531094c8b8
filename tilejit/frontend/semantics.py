"""Scalar semantics: typing, promotion, constexpr folding and IR building for native code.

Operations on two compile-time values fold in Python. Anything touching an IR value builds
IR: a Python literal adopts the other operand's type (``x_f16 * 2.0`` stays f16, a float
literal with an int value gives f32), two IR types promote numpy-style
(``tilejit.ir.types.promote``), ``/`` on integers divides in f32. Operations on tiles are
forwarded to :mod:`semantics_tile` (fragment expressions); buffers, regions and barriers
live in :mod:`semantics_memory`.
"""
from __future__ import annotations

import copy
import math
import operator

from tilejit.errors import CompilationError
from tilejit.ir.builder import Builder
from tilejit.ir.core import Value
from tilejit.ir.ops_native import (PER_DIM_INDEX_KINDS, PRINTF_INT_KINDS, SHUFFLE_MODES,
                                    printf_conversions)
from tilejit.ir.types import (BufferType, MemScope, ScalarType, TeamKind, f32, f64, i1, i32, i64,
                              promote)

from .semantics_memory import MemorySemantics
from .semantics_tile import TileSemantics
from .signature import LaunchOptions
from .triton_names import not_a_pointer
from .values import (describe, fits, is_int_number, is_number, is_scalar, is_tile, is_value,
                     number_type_promote, python_number_type)

__all__ = ["Semantics", "fold", "literal_type"]

PY_BINARY = {
    "add": (operator.add, "+"), "sub": (operator.sub, "-"), "mul": (operator.mul, "*"),
    "truediv": (operator.truediv, "/"), "floordiv": (operator.floordiv, "//"),
    "mod": (operator.mod, "%"), "pow": (operator.pow, "**"), "lshift": (operator.lshift, "<<"),
    "rshift": (operator.rshift, ">>"), "bitand": (operator.and_, "&"),
    "bitor": (operator.or_, "|"), "bitxor": (operator.xor, "^"),
    "matmul": (operator.matmul, "@"),
}
IR_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "floordiv": "floordiv",
             "mod": "mod", "lshift": "shl", "rshift": "shr", "bitand": "and", "bitor": "or",
             "bitxor": "xor"}
INT_ONLY = ("lshift", "rshift", "bitand", "bitor", "bitxor")
PY_COMPARE = {
    "eq": (operator.eq, "=="), "ne": (operator.ne, "!="), "lt": (operator.lt, "<"),
    "le": (operator.le, "<="), "gt": (operator.gt, ">"), "ge": (operator.ge, ">="),
    "is": (operator.is_, "is"), "is_not": (operator.is_not, "is not"),
    "in": (lambda a, b: a in b, "in"), "not_in": (lambda a, b: a not in b, "not in"),
}
PY_UNARY = {"neg": (operator.neg, "-"), "pos": (operator.pos, "+"),
            "invert": (operator.invert, "~"), "not": (operator.not_, "not")}
PY_MATH = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "sqrt": math.sqrt,
           "rsqrt": lambda x: 1.0 / math.sqrt(x), "log2": math.log2, "sin": math.sin,
           "cos": math.cos, "tanh": math.tanh, "erf": math.erf,
           "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
           "floor": lambda x: float(math.floor(x)), "ceil": lambda x: float(math.ceil(x))}
# Largest compile-time int (in bits) or sequence (in items) that folding may build.
MAX_FOLDED_SIZE = 1 << 16
# Largest exponent `x ** n` expands into multiplications for a run-time x.
MAX_UNROLLED_POWER = 16


def literal_type(dtype: ScalarType, literal) -> ScalarType:
    """The type of ``dtype OP literal``: the literal adopts ``dtype`` when it can."""
    if isinstance(literal, bool):
        return dtype
    if is_int_number(literal):
        if dtype.is_bool:
            return python_number_type(literal)
        return dtype if fits(int(literal), dtype) else promote(dtype, i64)
    return dtype if dtype.is_float else f32


def fold(fn, *args, what: str):
    """Evaluate ``fn(*args)`` at compile time; a Python exception becomes a CompilationError."""
    try:
        return fn(*args)
    except Exception as err:  # the user's compile-time expression failed
        raise CompilationError(f"cannot evaluate {what} at compile time: "
                               f"{type(err).__name__}: {err}") from None


# Thread indexes that count CTAs: 64-bit when a tensor argument is large (ArgSpec.index64),
# so that ``cta_id(0) * BLOCK + k`` cannot wrap.
GRID_INDEX_KINDS = ("cta_id", "num_ctas")


class Semantics:
    """Builds native IR through ``builder``; ``team`` is set for scoped spellings (tj.wg.*);
    ``grid_index_type`` is the type of ``cta_id`` and ``num_ctas``."""

    def __init__(self, builder: Builder, options: LaunchOptions, team: TeamKind | None = None,
                 grid_index_type: ScalarType = i32):
        self.b = builder
        self.options = options
        self.team = team
        self.grid_index_type = grid_index_type
        # The walker's call of a callable (a @tj.func is inlined), set by the CodeGenerator:
        # for builtins that call user code, such as tj.associative_scan's combine.
        self.call_function = None
        self.memory = MemorySemantics(self)
        self.tile = TileSemantics(self)

    def with_team(self, kind: TeamKind) -> Semantics:
        scoped = copy.copy(self)
        scoped.team = kind
        scoped.memory = MemorySemantics(scoped)
        scoped.tile = TileSemantics(scoped)
        return scoped

    # ------------------------------------------------------------------- conversion
    def const(self, value, dtype: ScalarType) -> Value:
        if dtype.is_bool:
            value = bool(value)
        elif dtype.is_float:
            value = float(value)
        else:
            value = int(value)
            if not fits(value, dtype):
                raise CompilationError(f"{value} does not fit in {dtype!r}")
        return self.b.const(value, dtype)

    def to_ir(self, x, dtype: ScalarType | None = None) -> Value:
        """``x`` as a scalar IR value (of ``dtype`` when given, casting if needed)."""
        if is_scalar(x):
            return x if dtype is None else self.cast(x, dtype)
        if is_number(x):
            return self.const(x, dtype or python_number_type(x))
        raise CompilationError(f"expected a scalar, got {describe(x)}")

    def cast(self, x, dtype):
        if not isinstance(dtype, ScalarType):
            raise CompilationError(f"cast target must be a dtype such as tj.float32, "
                                   f"got {describe(dtype)}")
        if is_tile(x):
            return self.tile.expression("cast", (x,), dtype=dtype)
        if is_number(x):
            return self.const(x, dtype)
        x = self.to_ir(x)
        return x if x.type == dtype else self.b.cast(x, dtype)

    def operand_type(self, a, b) -> ScalarType:
        """The common type of two scalar operands, at least one of them an IR value."""
        for operand in (a, b):
            if not (is_scalar(operand) or is_number(operand)):
                raise CompilationError(f"expected a scalar operand, got {describe(operand)}")
        if is_scalar(a) and is_scalar(b):
            return promote(a.type, b.type)
        value, literal = (a, b) if is_scalar(a) else (b, a)
        return literal_type(value.type, literal)

    def truth(self, x):
        """``x`` as a condition: an i1 IR value, or a Python bool when ``x`` is compile-time."""
        if is_scalar(x):
            return x if x.type == i1 else self.b.cmp("ne", x, self.const(0, x.type))
        if is_value(x):
            raise CompilationError(f"{describe(x)} has no truth value")
        return fold(bool, x, what=f"the truth of {describe(x)}")

    def to_i1(self, x) -> Value:
        cond = self.truth(x)
        return cond if is_value(cond) else self.const(cond, i1)

    # ------------------------------------------------------------------- operators
    def binary(self, op: str, a, b):
        fn, symbol = PY_BINARY[op]
        if not is_value(a) and not is_value(b):
            _check_fold_size(op, a, b)
            return fold(fn, a, b, what=f"{describe(a)} {symbol} {describe(b)}")
        if op in ("add", "sub") and (_is_tensor(a) or _is_tensor(b)):
            tensor, other = (a, b) if _is_tensor(a) else (b, a)
            if _is_integer(other):
                raise CompilationError(not_a_pointer(tensor.name_hint))
        if is_tile(a) or is_tile(b):
            return self.tile.operator(op, symbol, (a, b))
        if op == "pow":
            return self._power(a, b)
        if op == "matmul":
            raise CompilationError("'@' is not defined on scalars; use tj.gemm(C, A, B) on tiles")
        dtype = self.operand_type(a, b)
        if op == "truediv" and not dtype.is_float:
            dtype = f32
        if op in INT_ONLY and not dtype.is_int:
            raise CompilationError(f"'{symbol}' needs integer operands, got {dtype!r}")
        if dtype.is_bool and op not in INT_ONLY:
            dtype = i32  # arithmetic on bools counts, as in Python
        return self.b.binary(IR_BINARY[op], self.to_ir(a, dtype), self.to_ir(b, dtype))

    def _power(self, base, exponent):
        """A small compile-time integer exponent multiplies (exact, and integers stay
        integers); otherwise a float base or exponent is the native ``pow``."""
        if not (is_int_number(exponent) and 0 <= exponent <= MAX_UNROLLED_POWER):
            dtype = self.operand_type(base, exponent)
            if not dtype.is_float:
                raise CompilationError(f"'**' on a run-time integer needs a compile-time "
                                       f"integer exponent in [0, {MAX_UNROLLED_POWER}], got "
                                       f"{describe(exponent)}; convert to a float for pow")
            return self.b.binary("pow", self.to_ir(base, dtype), self.to_ir(exponent, dtype))
        base = self.to_ir(base)
        result = self.const(1, base.type)
        for _ in range(int(exponent)):
            result = self.b.binary("mul", result, base)
        return result

    def compare(self, pred: str, a, b):
        fn, symbol = PY_COMPARE[pred]
        if not is_value(a) and not is_value(b):
            return fold(fn, a, b, what=f"{describe(a)} {symbol} {describe(b)}")
        if pred in ("is", "is_not", "in", "not_in"):
            raise CompilationError(f"'{symbol}' works on compile-time values only, "
                                   f"got {describe(a)} and {describe(b)}")
        if is_tile(a) or is_tile(b):
            return self.tile.operator(pred, symbol, (a, b))
        dtype = self.operand_type(a, b)
        return self.b.cmp(pred, self.to_ir(a, dtype), self.to_ir(b, dtype))

    def unary(self, op: str, x):
        fn, symbol = PY_UNARY[op]
        if not is_value(x):
            return fold(fn, x, what=f"{symbol}{describe(x)}")
        if is_tile(x):
            return self.tile.operator(op, symbol, (x,))
        if op == "not":
            return self.b.unary("not", self.to_i1(x))
        x = self.to_ir(x)
        if op == "pos":
            return x
        if op == "invert":
            if not x.type.is_int:
                raise CompilationError(f"'~' needs an integer operand, got {x.type!r}")
            return self.b.unary("not", x)
        return self.b.unary("neg", self.cast(x, i32) if x.type.is_bool else x)

    def logical(self, op: str, a, b):
        """Non-short-circuit ``and``/``or`` of two conditions; a compile-time side folds away."""
        a, b = self.truth(a), self.truth(b)
        for known, other in ((a, b), (b, a)):
            if not is_value(known):
                return known if known == (op == "or") else other
        return self.b.binary(op, a, b)

    def logical_not(self, x):
        cond = self.truth(x)
        return (not cond) if not is_value(cond) else self.b.unary("not", cond)

    def select(self, cond, a, b):
        cond = self.truth(cond)
        if not is_value(cond):
            return a if cond else b
        if not is_value(a) and not is_value(b):
            if not (is_number(a) and is_number(b)):
                raise CompilationError("a run-time conditional expression needs scalar "
                                       f"branches, got {describe(a)} and {describe(b)}")
            dtype = number_type_promote(a, b)
        else:
            dtype = self.operand_type(a, b)
        return self.b.select(cond, self.to_ir(a, dtype), self.to_ir(b, dtype))

    def min_max(self, op: str, a, b):
        """``min``/``max`` of two scalars (``op`` is ``"min"`` or ``"max"``)."""
        if not is_value(a) and not is_value(b):
            return fold(min if op == "min" else max, a, b, what=f"{op}({a!r}, {b!r})")
        if is_tile(a) or is_tile(b):
            return self.tile.expression("minimum" if op == "min" else "maximum", (a, b))
        dtype = self.operand_type(a, b)
        return self.b.binary(op, self.to_ir(a, dtype), self.to_ir(b, dtype))

    def math(self, op: str, x):
        """exp, tanh, erf, floor, ... (PY_MATH) or abs of a scalar; integers are computed
        in f32."""
        if not is_value(x):
            fn = abs if op == "abs" else PY_MATH[op]
            return fold(fn, x, what=f"{op}({describe(x)})")
        if is_tile(x):
            return self.tile.expression(op, (x,))
        x = self.to_ir(x)
        if op != "abs" and not x.type.is_float:
            x = self.cast(x, f32)
        return self.b.unary(op, x)

    def cdiv(self, a, b):
        return self.binary("floordiv", self.binary("sub", self.binary("add", a, b), 1), b)

    # ------------------------------------------------------------------ natives
    def thread_index(self, kind: str, dim):
        if not (is_int_number(dim) and not isinstance(dim, bool)):
            raise CompilationError(f"the dimension must be a compile-time int, got {describe(dim)}")
        if kind in PER_DIM_INDEX_KINDS and not 0 <= dim < 3:
            raise CompilationError(f"dimension must be 0, 1 or 2, got {dim}")
        index = self.b.thread_index(kind, int(dim))
        if kind in GRID_INDEX_KINDS and index.type != self.grid_index_type:
            return self.b.cast(index, self.grid_index_type)
        return index

    def shuffle(self, value, lane, mode):
        if mode not in SHUFFLE_MODES:
            raise CompilationError(f"tj.shuffle mode= is one of {', '.join(SHUFFLE_MODES)}, got "
                                   f"{describe(mode)}")
        if not (is_scalar(value) or is_number(value)):
            raise CompilationError(f"tj.shuffle exchanges one scalar per lane, got "
                                   f"{describe(value)}")
        if not (is_int_number(lane) or (is_scalar(lane) and lane.type.is_int)):
            raise CompilationError(f"tj.shuffle's lane is an integer, got {describe(lane)}")
        return self.b.warp_shuffle(mode, self.to_ir(value), self.to_ir(lane, i32))

    def static_assert(self, cond, msg):
        if is_value(cond) or not isinstance(msg, str):
            raise CompilationError("tj.static_assert(cond, msg) needs a compile-time condition "
                                   f"and message, got {describe(cond)} and {describe(msg)}")
        if not self.truth(cond):
            raise CompilationError("static assertion failed" + (f": {msg}" if msg else ""))

    def device_print(self, fmt, args):
        """A format with a ``%`` is a printf format; without one, ``{}`` placeholders take
        the arguments in order and the rest are appended, space-separated."""
        if not isinstance(fmt, str):
            raise CompilationError("tj.device_print needs a format string first, got "
                                   f"{describe(fmt)}")
        if "%" not in fmt:
            return self.b.device_print(fmt, [self.to_ir(a) for a in args])
        text, operands = self.printf_format(fmt, args)
        return self.b.create("device_print", operands, {"fmt": text, "printf": True})

    def printf_format(self, fmt: str, args) -> tuple[str, list[Value]]:
        """``fmt`` checked against ``args`` (one conversion each, of a matching kind), with
        the ``%s`` arguments formatted in; the others become the op's operands (compile-time
        numbers as constants, so that the target's printf formats every number)."""
        try:
            conversions = printf_conversions(fmt)
        except ValueError as err:
            raise CompilationError(f"tj.device_print: {err}") from None
        wanted = [c for c in conversions if c["kind"] != "%"]
        if len(wanted) != len(args):
            raise CompilationError(
                f"tj.device_print format {fmt!r} has {len(wanted)} conversion(s) "
                f"({' '.join(c[0] for c in wanted) or 'none'}) but {len(args)} argument(s) "
                "were given (write %% for a percent sign)")
        parts, operands, pos = [], [], 0
        for conversion, arg in zip(wanted, args):
            parts.append(fmt[pos:conversion.start()])
            pos = conversion.end()
            kind = conversion["kind"]
            if kind == "s":
                if is_value(arg):
                    raise CompilationError(f"tj.device_print: {conversion[0]} prints "
                                           f"compile-time values, got {describe(arg)}; use "
                                           "%d or %f for run-time values")
                parts.append((conversion[0] % (arg,)).replace("%", "%%"))
                continue
            operands.append(self.printf_operand(conversion[0], kind, arg))
            parts.append(conversion[0])
        parts.append(fmt[pos:])
        return "".join(parts), operands

    def printf_operand(self, spec: str, kind: str, arg) -> Value:
        if kind in PRINTF_INT_KINDS:
            if is_scalar(arg) and arg.type.is_int or is_int_number(arg):
                return self.to_ir(arg)
            hint = "convert it with int(...)"
        else:
            if is_scalar(arg) and arg.type.is_float or is_number(arg):
                return self.to_ir(arg, None if is_value(arg) else f64)
            hint = "convert it with float(...)"
        if not (is_scalar(arg) or is_number(arg)):
            hint = "tj.device_print prints scalars"
        expected = "an integer" if kind in PRINTF_INT_KINDS else "a float"
        raise CompilationError(f"tj.device_print: {spec} needs {expected}, got "
                               f"{describe(arg)}; {hint}")

    def intrinsic(self, target: str, name: str, args, dtype):
        if dtype is not None and not isinstance(dtype, ScalarType):
            raise CompilationError("dtype= of an intrinsic must be a tj dtype, got "
                                   f"{describe(dtype)}")
        operands = [a if is_value(a) else self.to_ir(a) for a in args]
        return self.b.intrinsic(target, name, operands, dtype)

    def loop_bounds(self, start, stop, step) -> tuple[Value, Value, Value]:
        """The three bounds of a run-time loop as IR values of one integer type."""
        bounds = (start, stop, step)
        for bound in bounds:
            if not ((is_scalar(bound) and bound.type.is_int) or is_int_number(bound)):
                raise CompilationError(f"range bounds must be integers, got {describe(bound)}")
        if is_int_number(step) and step == 0:
            raise CompilationError("range step must not be zero")
        types = [v.type for v in bounds if is_scalar(v)]
        dtype = types[0] if types else i32
        for t in types[1:]:
            dtype = promote(dtype, t)
        if dtype.is_bool:
            dtype = i32
        if any(is_int_number(v) and not fits(int(v), dtype) for v in bounds):
            dtype = promote(dtype, i64)
        return tuple(self.to_ir(v, dtype) for v in bounds)


def _is_tensor(x) -> bool:
    """A whole tensor argument (Triton would have a pointer there)."""
    return is_value(x) and isinstance(x.type, BufferType) and x.type.scope is MemScope.GLOBAL


def _is_integer(x) -> bool:
    """An integer offset: a Python int, an integer scalar or an integer tile."""
    if is_int_number(x):
        return not isinstance(x, bool)
    dtype = x.type if is_scalar(x) else x.type.dtype if is_tile(x) else None
    return dtype is not None and dtype.is_int and not dtype.is_bool


def _check_fold_size(op: str, a, b):
    """Refuse compile-time results so large that computing them would hang the compiler."""
    bits = 0
    if op == "pow" and is_int_number(a) and is_int_number(b) and abs(a) > 1:
        bits = int(b) * int(abs(a)).bit_length()
    elif op == "lshift" and is_int_number(b):
        bits = int(b)
    elif op == "mul" and isinstance(a, (str, tuple, list)) != isinstance(b, (str, tuple, list)):
        seq, count = (a, b) if isinstance(a, (str, tuple, list)) else (b, a)
        bits = len(seq) * int(count) if is_int_number(count) else 0
    if bits > MAX_FOLDED_SIZE:
        raise CompilationError("the compile-time result would be too large to compute")
