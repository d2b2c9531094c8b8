"""bf16 and fp8 (e4m3fn, e5m2) conversions, as small LLVM functions and in Python.

x86 has no bf16/fp8 arithmetic, so values are kept in their storage bits and converted to
f32 around each op. The conversions are branch-free bit manipulation (so loops using them
still vectorize), round to nearest even and treat overflow like torch 2.x casts do:
e4m3fn saturates to +-448 (it has no inf), e5m2 overflows to inf at >= 2**16; NaN stays
NaN. The helpers are internal ``alwaysinline`` functions created on first use in a module.

f64 sources are first rounded to f32 *to odd* (inexact results get their last bit set), so
the second rounding into the narrow format is still a single correct rounding.
"""
from __future__ import annotations

import math
import struct

import numpy as np
from llvmlite import ir

I8, I16, I32, I64 = (ir.IntType(n) for n in (8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
_MASK32 = 0xFFFFFFFF


# ----------------------------------------------------------------------------- Python side
def round_f16(x: float) -> float:
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:  # beyond the largest half after rounding
        return math.copysign(math.inf, x)


def _f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def _bits_f32(bits: int) -> np.float32:
    return np.uint32(bits & _MASK32).view(np.float32)


def _encode_bf16(x: float) -> int:
    bits = _f32_bits(x)
    if math.isnan(x):
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _fp8_encoder(overflow_bits: int, normal_min_bits: int, denorm_magic: int, bias: int,
                 mant_bits: int, overflow_out: int):
    shift = 23 - mant_bits

    def encode(x: float) -> int:
        bits = _f32_bits(x)
        sign, mag = bits & 0x80000000, bits & 0x7FFFFFFF
        if mag >= overflow_bits:
            out = 0x7F if mag > 0x7F800000 else overflow_out
        elif mag < normal_min_bits:
            summed = _bits_f32(mag) + _bits_f32(denorm_magic)
            out = (_f32_bits(summed) - denorm_magic) & 0xFF
        else:
            odd = (mag >> shift) & 1
            out = ((mag + (((bias - 127) << 23) & _MASK32) + (1 << (shift - 1)) - 1 + odd)
                   & _MASK32) >> shift
        return (out | (sign >> 24)) & 0xFF
    return encode


# (first |x| bits that overflow after rounding, smallest normal, denormal magic, bias,
#  mantissa bits, what overflow becomes: 448 for e4m3fn, inf for e5m2); NaN -> 0x7F.
_FP8 = {
    "f8e4m3": (0x43E80001, 121 << 23, 141 << 23, 7, 3, 0x7E),
    "f8e5m2": (143 << 23, 113 << 23, 134 << 23, 15, 2, 0x7C),
}
_ENCODERS = {"bf16": _encode_bf16, **{name: _fp8_encoder(*spec) for name, spec in _FP8.items()}}


def encode(name: str, x: float) -> int:
    """The storage bits of ``x`` in format ``name`` (``bf16``, ``f8e4m3``, ``f8e5m2``)."""
    return _ENCODERS[name](x)


# ----------------------------------------------------------------------------- LLVM side
def _c32(value: int) -> ir.Constant:
    return ir.Constant(I32, value & _MASK32)


def _bf16_to_f32(b, h):
    return b.bitcast(b.shl(b.zext(h, I32), _c32(16)), F32)


def _f32_to_bf16(b, x):
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, _c32(16)), _c32(1))
    rounded = b.lshr(b.add(bits, b.add(lsb, _c32(0x7FFF))), _c32(16))
    quiet_nan = b.or_(b.lshr(bits, _c32(16)), _c32(0x40))
    is_nan = b.fcmp_unordered("uno", x, x)
    return b.trunc(b.select(is_nan, quiet_nan, rounded), I16)


def _e5m2_to_f32(b, q):
    # e5m2 is the top byte of an f16.
    return b.fpext(b.bitcast(b.shl(b.zext(q, I16), ir.Constant(I16, 8)), F16), F32)


def _e4m3_to_f32(b, q):
    wide = b.zext(q, I32)
    sign = b.shl(b.and_(wide, _c32(0x80)), _c32(24))
    exp = b.and_(b.lshr(wide, _c32(3)), _c32(0xF))
    mant = b.and_(wide, _c32(7))
    normal = b.or_(sign, b.or_(b.shl(b.add(exp, _c32(120)), _c32(23)), b.shl(mant, _c32(20))))
    subnormal = b.or_(b.bitcast(b.fmul(b.uitofp(mant, F32), ir.Constant(F32, 2.0 ** -9)), I32),
                      sign)
    bits = b.select(b.icmp_unsigned("==", exp, _c32(0)), subnormal, normal)
    is_nan = b.icmp_unsigned("==", b.and_(wide, _c32(0x7F)), _c32(0x7F))
    return b.select(is_nan, ir.Constant(F32, float("nan")), b.bitcast(bits, F32))


def _f32_to_fp8(name: str):
    overflow_bits, normal_min_bits, denorm_magic, bias, mant_bits, overflow_out = _FP8[name]
    shift = 23 - mant_bits

    def emit(b, x):
        bits = b.bitcast(x, I32)
        sign = b.and_(bits, _c32(0x80000000))
        mag = b.xor(bits, sign)
        overflow = b.select(b.icmp_unsigned(">", mag, _c32(0x7F800000)), _c32(0x7F),
                            _c32(overflow_out))
        summed = b.fadd(b.bitcast(mag, F32), ir.Constant(F32, float(_bits_f32(denorm_magic))))
        denormal = b.sub(b.bitcast(summed, I32), _c32(denorm_magic))
        odd = b.and_(b.lshr(mag, _c32(shift)), _c32(1))
        bias_and_half = (((bias - 127) << 23) + (1 << (shift - 1)) - 1) & _MASK32
        normal = b.lshr(b.add(b.add(mag, _c32(bias_and_half)), odd), _c32(shift))
        out = b.select(b.icmp_unsigned("<", mag, _c32(normal_min_bits)), denormal, normal)
        out = b.select(b.icmp_unsigned(">=", mag, _c32(overflow_bits)), overflow, out)
        return b.trunc(b.or_(out, b.lshr(sign, _c32(24))), I8)
    return emit


def _f64_to_f32_odd(b, x):
    rounded = b.fptrunc(x, F32)
    back = b.fpext(rounded, F64)
    exact = b.fcmp_unordered("ueq", back, x)  # NaN and inf stay as they are
    bits = b.bitcast(rounded, I32)
    away = b.fcmp_ordered(">", b.call(_fabs(b.module), [back]), b.call(_fabs(b.module), [x]))
    toward_zero = b.select(away, b.sub(bits, _c32(1)), bits)
    odd = b.or_(toward_zero, _c32(1))
    return b.bitcast(b.select(exact, bits, odd), F32)


def _fabs(module):
    name = "llvm.fabs.f64"
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(F64, [F64]), name)


_HELPERS = {
    "bf16_to_f32": (F32, I16, _bf16_to_f32),
    "f32_to_bf16": (I16, F32, _f32_to_bf16),
    "f8e5m2_to_f32": (F32, I8, _e5m2_to_f32),
    "f8e4m3_to_f32": (F32, I8, _e4m3_to_f32),
    "f32_to_f8e4m3": (I8, F32, _f32_to_fp8("f8e4m3")),
    "f32_to_f8e5m2": (I8, F32, _f32_to_fp8("f8e5m2")),
    "f64_to_f32_odd": (F32, F64, _f64_to_f32_odd),
}


def helper(module: ir.Module, name: str) -> ir.Function:
    """The conversion function ``name`` in ``module``, created on first use."""
    symbol = f"tj.{name}"
    fn = module.globals.get(symbol)
    if fn is not None:
        return fn
    ret, arg, body = _HELPERS[name]
    fn = ir.Function(module, ir.FunctionType(ret, [arg]), symbol)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(body(b, fn.args[0]))
    return fn
