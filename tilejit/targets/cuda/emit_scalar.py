"""The cuda printer's scalars: C types, literals and the scalar ops (emit.py prints the
rest). Each op computes what the CPU target computes (``tilejit/targets/cpu/
emit_native.py``), through the prelude's helpers where C does not (``emit_prelude``)."""
from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

import numpy

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation, Value
from tilejit.ir.types import (BarrierType, BufferType, ScalarType, bf16, f8e4m3, f8e5m2, f16,
                              f32, f64, i1, i8, i16, i32, i64, u8, u16, u32, u64)

if TYPE_CHECKING:
    from .emit import CudaPrinter

__all__ = ["C_TYPES", "HANDLERS", "NARROW_FLOATS", "PARAM_FORMATS", "cast_expr", "literal", "narrow",
           "packed_words", "storage_type", "value_type", "wide"]

C_TYPES: dict[ScalarType, str] = {
    i1: "bool", i8: "signed char", i16: "short", i32: "int", i64: "long long",
    u8: "unsigned char", u16: "unsigned short", u32: "unsigned int", u64: "unsigned long long",
    f16: "__half", bf16: "__nv_bfloat16", f32: "float", f64: "double",
    f8e4m3: "__nv_fp8_e4m3", f8e5m2: "__nv_fp8_e5m2",
}
# How the launcher packs a scalar parameter (Python's struct formats); bf16 and the fp8
# types have none, and a kernel taking one packs its arguments one by one (driver.pack_args).
PARAM_FORMATS: dict[ScalarType, str] = {
    i1: "?", i8: "b", i16: "h", i32: "i", i64: "q", u8: "B", u16: "H", u32: "I", u64: "Q",
    f16: "e", f32: "f", f64: "d",
}
NARROW_FLOATS = (f16, bf16, f8e4m3, f8e5m2)   # computed in f32, rounded once per op
_NARROW = {f16: "__float2half_rn", bf16: "__float2bfloat16_rn", f8e4m3: "tj_to_e4m3",
           f8e5m2: "tj_to_e5m2"}


def storage_type(t: ScalarType) -> str:
    """The C type of a buffer element: a bool is a byte, as on the CPU and in torch."""
    return "unsigned char" if t == i1 else C_TYPES[t]


def value_type(t) -> str:
    """The C type of an SSA value: a scalar, or a pointer for a buffer or barriers carried
    through control flow (a double buffer swapped by a loop)."""
    if isinstance(t, ScalarType):
        return C_TYPES[t]
    if isinstance(t, BufferType):
        return storage_type(t.dtype) + "*"
    if isinstance(t, BarrierType):
        return "unsigned long long*"
    raise CompilationError(f"the cuda target cannot hold a value of type {t}")


def compute_type(t: ScalarType) -> ScalarType:
    return f32 if t in NARROW_FLOATS else t


# ------------------------------------------------------------------------------ literals
def _float_literal(value: float, t: ScalarType) -> str:
    if t == f64:
        if math.isfinite(value):
            return repr(float(value))
        bits = struct.unpack("<q", struct.pack("<d", value))[0]
        return f"__longlong_as_double({bits}LL)"
    with numpy.errstate(over="ignore"):
        v32 = float(numpy.float32(value))   # as LLVM rounds the CPU's f32 constants
    if t == f16:
        v32 = struct.unpack("<e", struct.pack("<e", value))[0] if abs(value) < 65520 \
            else math.copysign(math.inf, value)
    if math.isfinite(v32):
        text = repr(v32)
        text = text if ("e" in text or "." in text) else text + ".0"
        f32_text = f"{text}f"
    else:
        bits = struct.unpack("<I", struct.pack("<f", v32))[0]
        f32_text = f"__int_as_float({bits:#010x})"
    return f32_text if t == f32 else f"{_NARROW[t]}({f32_text})"


def literal(value, t: ScalarType) -> str:
    """A constant of type ``t`` as C (the CPU's ``types.constant`` rounding)."""
    if t == i1:
        return "true" if value else "false"
    if t.is_float:
        return _float_literal(float(value), t)
    value = int(value) & ((1 << t.bits) - 1)
    if t.is_signed and value >= 1 << (t.bits - 1):
        value -= 1 << t.bits
    if t.bits == 64:
        if t.is_signed and value == -(1 << 63):
            return "(-9223372036854775807LL - 1)"
        text = f"{value}LL" if t.is_signed else f"{value}ULL"
    elif t == i32 and value == -(1 << 31):
        text = "(-2147483647 - 1)"
    elif t == u32:
        text = f"{value}u"
    else:
        text = str(value)
        if t.bits < 32:
            return f"({C_TYPES[t]}){text}" if value >= 0 else f"({C_TYPES[t]})({text})"
    return f"({text})" if text.startswith("-") else text


# ------------------------------------------------------------------------------ scalars
def wide(p: CudaPrinter, value: Value) -> str:
    """``value`` in its compute type (f16, bf16 and fp8 widen to f32)."""
    return f"tj_f32({p[value]})" if value.type in NARROW_FLOATS else p[value]


def narrow(expr: str, t: ScalarType) -> str:
    return f"{_NARROW[t]}({expr})" if t in NARROW_FLOATS else expr


FLOAT_BINARY = {
    "add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}",
    "floordiv": "tj_ffloordiv({a}, {b})", "mod": "tj_fmod({a}, {b})",
    "max": "tj_maximum({a}, {b})", "min": "tj_minimum({a}, {b})",
    "pow": "{pow}({a}, {b})",
}
INT_BINARY = {
    "add": "tj_add({a}, {b})", "sub": "tj_sub({a}, {b})", "mul": "tj_mul({a}, {b})",
    "div": "tj_div({a}, {b})",
    "floordiv": "tj_floordiv({a}, {b})", "mod": "tj_mod({a}, {b})",
    "max": "tj_max({a}, {b})", "min": "tj_min({a}, {b})",
    "and": "{a} & {b}", "or": "{a} | {b}", "xor": "{a} ^ {b}",
    "shl": "tj_shl<{bits}>({a}, {b})", "shr": "tj_shr<{bits}>({a}, {b})",
}
# numpy's bool arithmetic: add/max are or, mul/div/min are and, sub wraps (xor).
BOOL_BINARY = {"add": "{a} | {b}", "max": "{a} | {b}", "mul": "{a} & {b}",
               "div": "{a} & {b}", "min": "{a} & {b}", "sub": "{a} ^ {b}"}


def packed_words(p: CudaPrinter, values) -> list[str]:
    """The 16- or 8-bit values as 32-bit registers of two or four, the first in the
    lowest bits."""
    bits = values[0].type.bits
    per_word = 32 // bits
    words = []
    for first in range(0, len(values), per_word):
        word = values[first:first + per_word]
        register = p.register_parts.get(word[0], (None,))[0]
        if register and [p.register_parts.get(v) for v in word] == \
                [(register, part) for part in range(per_word)]:
            words.append(register)  # the parts of one register, in place
            continue
        higher = [f"(unsigned)tj_bits({p[v]}) << {bits * i}" for i, v in enumerate(word) if i]
        words.append("(" + " | ".join([*reversed(higher), f"tj_bits({p[word[0]]})"]) + ")")
    return words


def print_binary(p: CudaPrinter, op: Operation) -> None:
    t, name = op.result.type, op.attrs["op"]
    lhs, rhs = op.operands
    if t.is_float:
        expr = FLOAT_BINARY[name].format(a=wide(p, lhs), b=wide(p, rhs),
                                         pow="pow" if t == f64 else "powf")
        p.define(op.result, narrow(expr, t))
        return
    a, b = p[lhs], p[rhs]
    shift = _power_of_two(rhs) if name in ("floordiv", "mod") and t != i1 else None
    if t == i1 and name in BOOL_BINARY:
        expr = f"bool({BOOL_BINARY[name].format(a=a, b=b)})"
    elif shift is not None:
        # Python's // and % by 2**k are exactly an arithmetic shift and a mask (the
        # quotient rounds toward -inf, the remainder is positive): the index math of
        # layouts, printed so that NVVM has no division to simplify.
        expr = f"({a} >> {shift})" if name == "floordiv" else f"({a} & {(1 << shift) - 1})"
        if t.bits < 32:
            expr = f"({C_TYPES[t]}){expr}"
    else:
        expr = INT_BINARY[name].format(a=a, b=b, bits=t.bits)
        if t.bits < 32 and name in ("and", "or", "xor"):
            expr = f"({C_TYPES[t]})({expr})"
    p.define(op.result, expr)


def _power_of_two(value: Value) -> int | None:
    """k where ``value`` is the constant 2**k (k >= 1), else None."""
    owner = value.owner
    constant = owner.attrs["value"] if isinstance(owner, Operation) and owner.name == "const" \
        else None
    if isinstance(constant, bool) or not isinstance(constant, int) or constant < 2 \
            or constant & (constant - 1):
        return None
    return constant.bit_length() - 1


CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def print_cmp(p: CudaPrinter, op: Operation) -> None:
    # C's float comparisons are ordered, except != (true for NaN): the CPU's predicates.
    a, b = (wide(p, v) for v in op.operands)
    p.define(op.result, f"{a} {CMP[op.attrs['pred']]} {b}")


# name -> (f32 function, f64 function); tanh, sigmoid and erf of an f32 are computed in
# f64 and rounded once, as the CPU does.
FLOAT_UNARY = {
    "neg": ("-{x}", "-{x}"), "abs": ("fabsf({x})", "fabs({x})"),
    "exp": ("expf({x})", "exp({x})"), "exp2": ("exp2f({x})", "exp2({x})"),
    "log": ("logf({x})", "log({x})"), "log2": ("log2f({x})", "log2({x})"),
    "sqrt": ("sqrtf({x})", "sqrt({x})"), "rsqrt": ("1.0f / sqrtf({x})", "1.0 / sqrt({x})"),
    "sin": ("sinf({x})", "sin({x})"), "cos": ("cosf({x})", "cos({x})"),
    "floor": ("floorf({x})", "floor({x})"), "ceil": ("ceilf({x})", "ceil({x})"),
    "tanh": ("(float)tanh((double){x})", "tanh({x})"),
    "sigmoid": ("tj_sigmoid((double){x})", "tj_sigmoid64({x})"),
    "erf": ("(float)erf((double){x})", "erf({x})"),
}


# ``approx`` unary ops (single precision): the CUDA fast intrinsics, and ex2.approx for
# exp2 (docs/language.md gives their documented accuracy).
APPROX_UNARY = {"exp": "__expf({x})", "exp2": "tj_exp2_approx({x})", "log": "__logf({x})",
                "log2": "__log2f({x})", "sin": "__sinf({x})", "cos": "__cosf({x})"}


def print_unary(p: CudaPrinter, op: Operation) -> None:
    t, name, (x,) = op.result.type, op.attrs["op"], op.operands
    if op.attrs["approx"]:
        p.define(op.result, narrow(APPROX_UNARY[name].format(x=wide(p, x)), t))
    elif t.is_float:
        f32_form, f64_form = FLOAT_UNARY[name]
        p.define(op.result, narrow((f64_form if t == f64 else f32_form).format(x=wide(p, x)), t))
    elif name == "not":
        p.define(op.result, f"!{p[x]}" if t == i1 else f"({C_TYPES[t]})~{p[x]}")
    elif name == "neg":
        p.define(op.result, f"tj_neg({p[x]})" if t != i1 else p[x])
    elif name == "abs":   # abs(MIN) wraps to MIN, as on the CPU
        p.define(op.result,
                 f"{p[x]} < 0 ? tj_neg({p[x]}) : {p[x]}" if t.kind == "int" else p[x])
    else:
        raise CompilationError(f"unary '{name}' needs a float operand, got {t}")


def print_select(p: CudaPrinter, op: Operation) -> None:
    cond, a, b = (p[v] for v in op.operands)
    p.define(op.result, f"{cond} ? {a} : {b}")


# Saturating float -> int conversions (cvt.rzi: clamps to the range, NaN -> 0).
_F2I = {i32: "__{s}2int_rz", u32: "__{s}2uint_rz", i64: "__{s}2ll_rz", u64: "__{s}2ull_rz"}


def cast_expr(p: CudaPrinter, x: Value, dst: ScalarType) -> str:
    src = x.type
    if src == dst:
        return p[x]
    if dst == i1:
        return f"{wide(p, x)} != 0"   # NaN != 0 holds: an unordered compare, as on the CPU
    if src.is_float and dst.is_float:
        value = wide(p, x)
        if dst in NARROW_FLOATS:
            return narrow(value, dst)
        return f"({C_TYPES[dst]}){value}"
    if src.is_float:   # -> an integer, saturating
        s = "double" if src == f64 else "float"
        value = wide(p, x)
        if dst in _F2I:
            return f"{_F2I[dst].format(s=s)}({value})"
        if dst.kind == "int":
            lo, hi = -(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1
            return f"({C_TYPES[dst]})tj_clamp(__{s}2int_rz({value}), {lo}, {hi})"
        return f"({C_TYPES[dst]})tj_uclamp(__{s}2uint_rz({value}), {(1 << dst.bits) - 1}u)"
    if dst.is_float:   # int -> float: to the compute type, then rounded into dst
        wide_type = compute_type(dst)
        return narrow(f"({C_TYPES[wide_type]}){p[x]}", dst)
    return f"({C_TYPES[dst]}){p[x]}"   # truncation, sign or zero extension (bool: 0/1)


def print_cast(p: CudaPrinter, op: Operation) -> None:
    p.define(op.result, cast_expr(p, op.operands[0], op.result.type))


def print_const(p: CudaPrinter, op: Operation) -> None:
    p.names[op.result] = literal(op.attrs["value"], op.result.type)


_DIMS = "xyz"
THREAD_INDEX = {
    "cta_id": "(int)blockIdx.{d}", "num_ctas": "(int)gridDim.{d}",
    "lane_id": "(int)(threadIdx.x & 31)", "thread_id": "(int)threadIdx.x",
    "warp_id": "(int)(threadIdx.x >> 5)", "warp_id_in_wg": "(int)((threadIdx.x >> 5) & 3)",
    "warpgroup_id": "(int)(threadIdx.x >> 7)",
    "cta_id_in_cluster": "tj_cluster_ctaid_{d}()", "cta_rank_in_cluster": "tj_cluster_ctarank()",
}
CLUSTER_INDEX_MIN_SM = 90   # the %cluster_* special registers; before, a cluster is one CTA


def print_thread_index(p: CudaPrinter, op: Operation) -> None:
    kind, dim = op.attrs["kind"], op.attrs["dim"]
    if kind == "num_threads":
        p.names[op.result] = str(32 * p.num_warps)
        return
    if kind in ("cta_id_in_cluster", "cta_rank_in_cluster") and p.sm < CLUSTER_INDEX_MIN_SM:
        p.names[op.result] = "0"   # clusters are refused there: each CTA is its own
        return
    p.define(op.result, THREAD_INDEX[kind].format(d=_DIMS[dim]),
             hint_from=op.result if op.result.name_hint else None)


HANDLERS = {
    "const": print_const, "binary": print_binary, "cmp": print_cmp, "unary": print_unary,
    "select": print_select, "cast": print_cast, "thread_index": print_thread_index,
}
