"""Catalogue entries: packed pairs of 16-bit floats (a GPU's ``f16x2`` / ``bf16x2``).

Each op computes two lanes at once, each lane exactly as the scalar op does: the pair's
first element in the first operand and result of each pair (a GPU packs it into the low
half of a 32-bit register). ``packed_binary`` covers the binary ops whose f16/bf16
result, computed in f32 and rounded once, is the correctly rounded one (add, sub, mul:
f32 has 2p + 2 bits for both types, so no double rounding) and NaN-propagating max/min;
``packed_unary`` neg and abs (exact: the sign alone changes; a NaN stays a NaN);
``packed_cast`` rounds a pair of f32 values to nearest even. An fma is not here: the
scalar pointwise fma rounds its product and its sum (two roundings), ``fma.rn.f16x2``
once, so the two would differ in the last bit.
"""
from __future__ import annotations

from .attrs import Attr, Choice, SCALAR_TYPE
from .opdef import OpGroup, register
from .types import bf16, f16, f32

__all__ = ["PACKED_BINARY_OPS", "PACKED_TYPES", "PACKED_UNARY_OPS"]

PACKED_BINARY_OPS = ("add", "sub", "mul", "max", "min")
PACKED_UNARY_OPS = ("neg", "abs")
PACKED_TYPES = (f16, bf16)


def _check_pairs(op):
    """Pairs of one 16-bit float type: a0, a1 (and b0, b1 for packed_binary)."""
    types = {value.type for value in op.operands}
    if len(types) != 1:
        names = "a0, a1, b0, b1" if op.name == "packed_binary" else "a0, a1"
        return (f"{op.name} takes pairs of one type ({names}), got "
                f"{', '.join(str(v.type) for v in op.operands)}")
    (t,) = types
    if t not in PACKED_TYPES:
        return f"{op.name} computes pairs of f16 or bf16, not {t}"
    return None


def _check_packed_cast(op):
    if any(value.type != f32 for value in op.operands):
        return ("packed_cast rounds a pair of f32 values, got "
                f"{', '.join(str(v.type) for v in op.operands)}")
    if op.attrs["to"] not in PACKED_TYPES:
        return f"packed_cast rounds to f16 or bf16, not {op.attrs['to']}"
    return None


register("packed_binary", OpGroup.NATIVE, "a0:scalar a1:scalar b0:scalar b1:scalar",
         {"op": Attr(Choice(*PACKED_BINARY_OPS))}, lambda types, attrs: (types[0],) * 2,
         check=_check_pairs,
         doc="(a0 op b0, a1 op b1) on a pair of f16 or bf16 values, each lane as the scalar "
             "binary op computes it (a GPU's add.rn.f16x2 ...); max/min propagate NaN")
register("packed_unary", OpGroup.NATIVE, "a0:scalar a1:scalar",
         {"op": Attr(Choice(*PACKED_UNARY_OPS))}, lambda types, attrs: (types[0],) * 2,
         check=_check_pairs,
         doc="(op a0, op a1) on a pair of f16 or bf16 values, each lane as the scalar unary "
             "op computes it (neg.f16x2, abs.bf16x2)")
register("packed_cast", OpGroup.NATIVE, "x0:scalar x1:scalar", {"to": Attr(SCALAR_TYPE)},
         lambda types, attrs: (attrs["to"],) * 2, check=_check_packed_cast,
         doc="a pair of f32 values rounded to nearest even into f16 or bf16 "
             "(cvt.rn.f16x2.f32)")
