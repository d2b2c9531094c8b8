"""IR scalar types as LLVM types.

A value lives in a *register type*; a buffer element in a *storage type*. They differ only
for ``i1`` (a byte in memory, like numpy and torch bools). Float formats the CPU has no
arithmetic for (f16, bf16, fp8) are held in registers in their storage bits and computed
in f32: every arithmetic op widens its operands, computes in f32 and narrows the result,
so each op rounds exactly like hardware with native support would.
"""
from __future__ import annotations

from llvmlite import ir

from tilejit.ir.types import (
    ScalarType,
    bf16,
    f8e4m3,
    f8e5m2,
    f16,
    f32,
    f64,
    i1,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
)

from . import floats

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

REGISTER_TYPES: dict[ScalarType, ir.Type] = {
    i1: I1, i8: I8, i16: I16, i32: I32, i64: I64, u8: I8, u16: I16, u32: I32, u64: I64,
    f16: F16, bf16: I16, f8e4m3: I8, f8e5m2: I8, f32: F32, f64: F64,
}
# Formats whose values are widened to f32 for arithmetic.
NARROW_FLOATS = (f16, bf16, f8e4m3, f8e5m2)


def opaque(value):
    """``value`` (an alloca or global) typed as an opaque ``ptr``.

    llvmlite's IR layer gives allocas and globals typed pointers (``T*``); everything here
    addresses memory through opaque pointers with explicit element types, as LLVM does."""
    value.type = PTR
    return value


def alloca(b: ir.IRBuilder, typ: ir.Type, align: int | None = None):
    slot = b.alloca(typ)
    if align:
        slot.align = align
    return opaque(slot)


def register_type(t: ScalarType) -> ir.Type:
    return REGISTER_TYPES[t]


def storage_type(t: ScalarType) -> ir.Type:
    return I8 if t == i1 else REGISTER_TYPES[t]


def compute_type(t: ScalarType) -> ir.Type:
    """The type arithmetic on ``t`` happens in."""
    return F32 if t in NARROW_FLOATS else REGISTER_TYPES[t]


def widen(b: ir.IRBuilder, value, t: ScalarType):
    """``value`` (register form of ``t``) in the compute type of ``t``."""
    if t == f16:
        return b.fpext(value, F32)
    if t in NARROW_FLOATS:
        return b.call(floats.helper(b.module, f"{t.name}_to_f32"), [value])
    return value


def narrow(b: ir.IRBuilder, value, t: ScalarType):
    """``value`` (an f32, or an f64 for f64 sources) rounded into the register form of ``t``."""
    if t in NARROW_FLOATS and value.type == F64:
        value = b.call(floats.helper(b.module, "f64_to_f32_odd"), [value])
    if t == f16:
        return b.fptrunc(value, F16)
    if t in NARROW_FLOATS:
        return b.call(floats.helper(b.module, f"f32_to_{t.name}"), [value])
    return value


def constant(t: ScalarType, value) -> ir.Constant:
    """A Python number as a register constant of type ``t``."""
    if t == i1:
        return ir.Constant(I1, int(bool(value)))
    if t == f16:
        return ir.Constant(F16, floats.round_f16(float(value)))
    if t in (bf16, f8e4m3, f8e5m2):
        return ir.Constant(REGISTER_TYPES[t], floats.encode(t.name, float(value)))
    if t.is_float:
        return ir.Constant(REGISTER_TYPES[t], float(value))
    return ir.Constant(REGISTER_TYPES[t], int(value) & ((1 << t.bits) - 1))


def load(b: ir.IRBuilder, ptr, t: ScalarType, align: int | None = None, tag=None):
    """Load an element of type ``t``; ``tag(instruction)`` may attach metadata."""
    value = b.load(ptr, typ=storage_type(t), align=align or t.itemsize)
    if tag is not None:
        tag(value)
    return b.trunc(value, I1) if t == i1 else value


def store(b: ir.IRBuilder, value, ptr, t: ScalarType, align: int | None = None, tag=None):
    if t == i1:
        value = b.zext(value, I8)
    instruction = b.store(value, ptr, align=align or t.itemsize)
    if tag is not None:
        tag(instruction)


def to_i64(b: ir.IRBuilder, value, t: ScalarType):
    """An integer register value as i64 (sign-extended when ``t`` is signed)."""
    if value.type == I64:
        return value
    if t.kind == "int" and value.type.width < 64:
        return b.sext(value, I64)
    return b.zext(value, I64) if value.type.width < 64 else b.trunc(value, I64)


def int_bits(b: ir.IRBuilder, value):
    """Any scalar register value as i64 bits (for exchanging through memory)."""
    if isinstance(value.type, (ir.HalfType, ir.FloatType, ir.DoubleType)):
        width = {F16: 16, F32: 32, F64: 64}[value.type]
        value = b.bitcast(value, ir.IntType(width))
    return value if value.type == I64 else b.zext(value, I64)


def from_int_bits(b: ir.IRBuilder, bits, typ: ir.Type):
    """Inverse of :func:`int_bits`."""
    if isinstance(typ, ir.IntType):
        return bits if typ.width == 64 else b.trunc(bits, typ)
    width = {F16: 16, F32: 32, F64: 64}[typ]
    narrow_bits = bits if width == 64 else b.trunc(bits, ir.IntType(width))
    return b.bitcast(narrow_bits, typ)
