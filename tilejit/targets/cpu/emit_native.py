"""Scalar ops: const, binary, cmp, unary, select, cast, thread_index.

Integer semantics follow Python where the op is named after a Python operator:
``floordiv`` and ``mod`` round toward negative infinity (``div`` truncates, like C).
An integer ``div``, ``floordiv`` or ``mod`` by zero gives 0 (as numpy does) instead of a
CPU trap, and ``MIN // -1`` wraps to ``MIN`` (``MIN % -1`` is 0). Float ``floordiv`` and
``mod`` are Python's ``divmod`` (CPython's and numpy's algorithm, so ``1.0 // 0.1`` is 9.0,
not ``floor(1.0 / 0.1) = 10.0``); by zero, ``x // 0.0`` is ``x / 0.0`` and ``x % 0.0`` NaN.
A shift count is unsigned; a count of the bit width or more shifts every bit out (``<<``
and ``>>`` of an unsigned or non-negative value give 0, ``>>`` of a negative one -1) where
LLVM would give poison. Arithmetic on bools is logical, as in numpy: ``add``/``max`` are
``or``, ``mul``/``div``/``min`` are ``and``.
Float ``max``/``min`` propagate NaN (like torch.maximum). Float ``cmp`` is ordered except
``ne`` (NaN != NaN). Float-to-int casts saturate (no undefined behaviour on overflow).
Transcendentals are LLVM intrinsics (libm calls on the CPU). ``erf`` (which LLVM lacks:
libm's double ``erf``), ``tanh`` (glibc's ``tanhf`` is off by up to 2 ulp) and ``sigmoid``
(``1 / (1 + exp(-x))``) are computed in f64 and rounded once, so their f32 results are
within 0.5 ulp (plus a rare double rounding).
"""
from __future__ import annotations

from llvmlite import ir

from tilejit.ir.types import ScalarType, f64, i1

from . import types
from .scheduler import cluster_rank
from .types import F32, F64, I32

_FLOAT_SUFFIX = {F32: "f32", F64: "f64"}


def _suffix(value) -> str:
    t = value.type
    return _FLOAT_SUFFIX.get(t) or f"i{t.width}"


def _call(em, name: str, *args):
    """``llvm.<name>.<type>`` applied to ``args`` (all of the same type)."""
    return em.intrinsic(f"llvm.{name}.{_suffix(args[0])}", args[0].type, args)


def _fast(em) -> tuple:
    return ("contract",) if em.options.fp_contract else ()


# ----------------------------------------------------------------------------- integers
def _nonzero_divisor(em, a, b, signed: bool):
    """(b', b == 0, bad): b' is b where dividing by it can trap (0, and when signed the
    MIN / -1 overflow) is replaced by 1; ``bad`` says where it was."""
    one = ir.Constant(b.type, 1)
    zero = em.b.icmp_unsigned("==", b, ir.Constant(b.type, 0))
    bad = zero
    if signed:
        bad = em.b.or_(bad, em.b.icmp_signed("==", b, ir.Constant(b.type, -1)))
    return em.b.select(bad, one, b), zero, bad


def _int_div(em, a, b, signed: bool):
    safe, zero, bad = _nonzero_divisor(em, a, b, signed)
    nothing = ir.Constant(a.type, 0)
    if not signed:
        return em.b.select(zero, nothing, em.b.udiv(a, safe))
    # b == -1 is a negation (wrapping at MIN); b == 0 gives 0.
    return em.b.select(bad, em.b.select(zero, nothing, em.b.neg(a)), em.b.sdiv(a, safe))


def _int_mod(em, a, b, signed: bool, floor: bool):
    safe, _, bad = _nonzero_divisor(em, a, b, signed)
    if not signed:
        return em.b.urem(a, safe)  # x % 1 is 0, as x % 0 is defined to be
    rem = em.b.select(bad, ir.Constant(a.type, 0), em.b.srem(a, safe))
    if not floor:
        return rem
    zero = ir.Constant(a.type, 0)
    # Python: the remainder takes the divisor's sign.
    adjust = em.b.and_(em.b.icmp_signed("!=", rem, zero),
                       em.b.icmp_signed("<", em.b.xor(rem, b), zero))
    return em.b.select(adjust, em.b.add(rem, b), rem)


def _int_floordiv(em, a, b, signed: bool):
    quotient = _int_div(em, a, b, signed)
    if not signed:
        return quotient
    zero = ir.Constant(a.type, 0)
    rem = _int_mod(em, a, b, signed, floor=False)
    adjust = em.b.and_(em.b.icmp_signed("!=", rem, zero),
                       em.b.icmp_signed("<", em.b.xor(rem, b), zero))
    return em.b.select(adjust, em.b.sub(quotient, ir.Constant(a.type, 1)), quotient)


def _shift_left(em, a, count):
    too_far = em.b.icmp_unsigned(">=", count, ir.Constant(count.type, count.type.width))
    return em.b.select(too_far, ir.Constant(a.type, 0), em.b.shl(a, count))


def _shift_right(em, a, count, signed: bool):
    last_bit = ir.Constant(count.type, count.type.width - 1)
    if signed:  # shifting by width - 1 already fills every bit with the sign
        return em.b.ashr(a, _call(em, "umin", count, last_bit))
    too_far = em.b.icmp_unsigned(">", count, last_bit)
    return em.b.select(too_far, ir.Constant(a.type, 0), em.b.lshr(a, count))


INT_BINARY = {
    "add": lambda em, a, b, s: em.b.add(a, b),
    "sub": lambda em, a, b, s: em.b.sub(a, b),
    "mul": lambda em, a, b, s: em.b.mul(a, b),
    "div": _int_div,
    "floordiv": _int_floordiv,
    "mod": lambda em, a, b, s: _int_mod(em, a, b, s, floor=True),
    "max": lambda em, a, b, s: _call(em, "smax" if s else "umax", a, b),
    "min": lambda em, a, b, s: _call(em, "smin" if s else "umin", a, b),
    "and": lambda em, a, b, s: em.b.and_(a, b),
    "or": lambda em, a, b, s: em.b.or_(a, b),
    "xor": lambda em, a, b, s: em.b.xor(a, b),
    "shl": lambda em, a, b, s: _shift_left(em, a, b),
    "shr": _shift_right,
}

# numpy's bool arithmetic (True + True is True); the other ops act on i1 as on any int.
BOOL_BINARY = {
    "add": lambda em, a, b: em.b.or_(a, b),
    "max": lambda em, a, b: em.b.or_(a, b),
    "mul": lambda em, a, b: em.b.and_(a, b),
    "div": lambda em, a, b: em.b.and_(a, b),
    "min": lambda em, a, b: em.b.and_(a, b),
}


# ----------------------------------------------------------------------------- floats
def _float_divmod(em, a, b):
    """(a // b, a % b) as CPython's float_divmod and numpy's npy_divmod compute them: the
    quotient comes from the exact remainder ``fmod``, so it is the floor of the exact
    quotient, not of the rounded ``a / b``."""
    zero, one = ir.Constant(a.type, 0.0), ir.Constant(a.type, 1.0)
    rem = em.b.frem(a, b)
    quotient = em.b.fdiv(em.b.fsub(a, rem), b)
    differ = em.b.xor(em.b.fcmp_ordered("<", rem, zero), em.b.fcmp_ordered("<", b, zero))
    adjust = em.b.and_(em.b.fcmp_unordered("!=", rem, zero), differ)
    rem = em.b.select(adjust, em.b.fadd(rem, b), rem)
    quotient = em.b.select(adjust, em.b.fsub(quotient, one), quotient)
    rem = em.b.select(em.b.fcmp_ordered("==", rem, zero), _call(em, "copysign", zero, b), rem)
    floor = _call(em, "floor", quotient)
    round_up = em.b.fcmp_ordered(">", em.b.fsub(quotient, floor), ir.Constant(a.type, 0.5))
    floor = em.b.select(round_up, em.b.fadd(floor, one), floor)
    exact = em.b.fdiv(a, b)  # also the quotient by zero: +-inf, or NaN for 0 / 0
    floor = em.b.select(em.b.fcmp_ordered("==", quotient, zero),
                        _call(em, "copysign", zero, exact), floor)
    return em.b.select(em.b.fcmp_ordered("==", b, zero), exact, floor), rem


def _in_f64(fn):
    """``fn`` evaluated in f64 and rounded back to an f32 ``x``: one rounding of a result
    accurate to well under an f32 ulp."""
    def emit(em, x):
        if x.type != F32:
            return fn(em, x)
        return em.b.fptrunc(fn(em, em.b.fpext(x, F64)), F32)
    return emit


def _sigmoid(em, x):
    one = ir.Constant(x.type, 1.0)
    return em.b.fdiv(one, em.b.fadd(one, _call(em, "exp", em.b.fneg(x))))


FLOAT_BINARY = {
    "add": lambda em, a, b: em.b.fadd(a, b, flags=_fast(em)),
    "sub": lambda em, a, b: em.b.fsub(a, b, flags=_fast(em)),
    "mul": lambda em, a, b: em.b.fmul(a, b, flags=_fast(em)),
    "div": lambda em, a, b: em.b.fdiv(a, b),
    "floordiv": lambda em, a, b: _float_divmod(em, a, b)[0],
    "mod": lambda em, a, b: _float_divmod(em, a, b)[1],
    "pow": lambda em, a, b: _call(em, "pow", a, b),
    "max": lambda em, a, b: _call(em, "maximum", a, b),
    "min": lambda em, a, b: _call(em, "minimum", a, b),
}

FLOAT_UNARY = {
    "neg": lambda em, x: em.b.fneg(x),
    "abs": lambda em, x: _call(em, "fabs", x),
    "exp": lambda em, x: _call(em, "exp", x),
    "exp2": lambda em, x: _call(em, "exp2", x),
    "log": lambda em, x: _call(em, "log", x),
    "log2": lambda em, x: _call(em, "log2", x),
    "sqrt": lambda em, x: _call(em, "sqrt", x),
    "rsqrt": lambda em, x: em.b.fdiv(ir.Constant(x.type, 1.0), _call(em, "sqrt", x)),
    "sin": lambda em, x: _call(em, "sin", x),
    "cos": lambda em, x: _call(em, "cos", x),
    "tanh": _in_f64(lambda em, x: _call(em, "tanh", x)),
    "floor": lambda em, x: _call(em, "floor", x),
    "ceil": lambda em, x: _call(em, "ceil", x),
    "sigmoid": _in_f64(_sigmoid),
    "erf": _in_f64(lambda em, x: em.intrinsic("erf", x.type, [x])),  # libm; no LLVM intrinsic
}

INT_UNARY = {
    "neg": lambda em, x, s: em.b.neg(x),
    "not": lambda em, x, s: em.b.not_(x),
    "abs": lambda em, x, s: em.intrinsic(f"llvm.abs.i{x.type.width}", x.type,
                                         [x, ir.Constant(ir.IntType(1), 0)]) if s else x,
}

FLOAT_PREDICATES = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


# ----------------------------------------------------------------------------- handlers
def emit_const(em, op):
    value, t = op.attrs["value"], op.result.type
    em.consts[op.result] = value
    return [types.constant(t, value)]


def _float_binary(em, name: str, a, b, t: ScalarType):
    """``a name b`` of type ``t``: computed in its compute type, rounded once into ``t``."""
    result = FLOAT_BINARY[name](em, types.widen(em.b, a, t), types.widen(em.b, b, t))
    return types.narrow(em.b, result, t)


def emit_binary(em, op):
    t: ScalarType = op.result.type
    a, b = em.operands(op)
    name = op.attrs["op"]
    if t.is_float:
        return [_float_binary(em, name, a, b, t)]
    if t.is_bool and name in BOOL_BINARY:
        return [BOOL_BINARY[name](em, a, b)]
    return [INT_BINARY[name](em, a, b, t.kind == "int")]


def _float_unary(em, name: str, x, t: ScalarType):
    """``name(x)`` of type ``t``: computed in its compute type, rounded once into ``t``."""
    return types.narrow(em.b, FLOAT_UNARY[name](em, types.widen(em.b, x, t)), t)


def emit_unary(em, op):
    t: ScalarType = op.result.type
    (x,) = em.operands(op)
    name = op.attrs["op"]
    if t.is_float:
        return [_float_unary(em, name, x, t)]
    return [INT_UNARY[name](em, x, t.kind == "int")]


def emit_cmp(em, op):
    t: ScalarType = op.operands[0].type
    a, b = em.operands(op)
    pred = FLOAT_PREDICATES[op.attrs["pred"]]
    if t.is_float:
        a, b = types.widen(em.b, a, t), types.widen(em.b, b, t)
        if pred == "!=":
            return [em.b.fcmp_unordered(pred, a, b)]
        return [em.b.fcmp_ordered(pred, a, b)]
    compare = em.b.icmp_signed if t.kind == "int" else em.b.icmp_unsigned
    return [compare(pred, a, b)]


def emit_select(em, op):
    cond, a, b = em.operands(op)
    return [em.b.select(cond, a, b)]


def emit_cast(em, op):
    return [cast(em, em[op.operands[0]], op.operands[0].type, op.result.type)]


def emit_packed_binary(em, op):
    """A pair's lanes, each exactly as ``binary`` computes it (a GPU's f16x2 instruction
    rounds each lane once, as these do)."""
    a0, a1, b0, b1 = em.operands(op)
    t = op.results[0].type
    return [_float_binary(em, op.attrs["op"], a, b, t) for a, b in ((a0, b0), (a1, b1))]


def emit_packed_unary(em, op):
    """A pair's lanes, each exactly as ``unary`` computes it."""
    t = op.results[0].type
    return [_float_unary(em, op.attrs["op"], a, t) for a in em.operands(op)]


def emit_packed_cast(em, op):
    """A pair of f32 values, each rounded as ``cast`` rounds it."""
    return [cast(em, x, op.operands[0].type, op.attrs["to"]) for x in em.operands(op)]


def cast(em, value, src: ScalarType, dst: ScalarType):
    b = em.b
    if src == dst:
        return value
    if dst == i1:
        if src.is_float:
            wide = types.widen(b, value, src)
            return b.fcmp_unordered("!=", wide, ir.Constant(wide.type, 0.0))
        return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    if src.is_float:
        wide = types.widen(b, value, src)
        if dst.is_float:
            if dst == f64:
                return b.fpext(wide, F64) if wide.type == F32 else wide
            if dst.bits == 32 and wide.type == F64:
                return b.fptrunc(wide, F32)
            return types.narrow(b, wide, dst)
        name = "fptosi.sat" if dst.kind == "int" else "fptoui.sat"
        target = types.register_type(dst)
        return em.intrinsic(f"llvm.{name}.i{target.width}.{_suffix(wide)}", target, [wide])
    if dst.is_float:
        target = types.compute_type(dst)
        convert = b.sitofp if src.kind == "int" else b.uitofp
        return types.narrow(b, convert(value, target), dst)
    target = types.register_type(dst)
    if target.width < value.type.width:
        return b.trunc(value, target)
    if target.width == value.type.width:
        return value
    return b.sext(value, target) if src.kind == "int" else b.zext(value, target)


def emit_thread_index(em, op):
    kind, dim = op.attrs["kind"], op.attrs["dim"]
    frame = em.frame
    if kind == "cta_id":
        return [frame.cta[dim]]
    if kind == "num_ctas":
        return [frame.grid[dim]]
    if kind == "cta_id_in_cluster":
        extent = em.mc.kernel.attrs["cluster"][dim]
        return [em.b.urem(frame.cta[dim], ir.Constant(I32, extent))]
    if kind == "cta_rank_in_cluster":
        return [cluster_rank(em.b, frame.cta, em.mc.kernel)]
    if kind == "num_threads":
        return [ir.Constant(I32, 32 * em.mc.kernel.attrs["num_warps"])]
    return [em.mc.units.thread_index(em.b, kind, frame.unit)]


HANDLERS = {
    "const": emit_const, "binary": emit_binary, "unary": emit_unary, "cmp": emit_cmp,
    "select": emit_select, "cast": emit_cast, "thread_index": emit_thread_index,
    "packed_binary": emit_packed_binary, "packed_unary": emit_packed_unary,
    "packed_cast": emit_packed_cast,
}
