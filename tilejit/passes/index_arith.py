"""Index arithmetic as IR: :class:`IrArith` builds the ``binary`` ops of
``ir.addressing``'s offsets for ``lower-addresses`` (``passes/addresses.py``), folding
what it knows at compile time -- constants, and through ``known_bits`` the digits of
sums whose terms occupy different bits."""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.core import Operation, Value
from .known_bits import KnownBits, constant_of, power_of_two

__all__ = ["IrArith"]


class IrArith:
    """``ir.addressing.Arith`` building ``binary`` ops of one integer type; Python ints are
    constants, folded until an op needs them. ``memo`` (one per block being built) reuses
    an op the block already has: the accesses of one loop body share their index math.

    Indices are non-negative, so a digit -- ``udiv`` or ``urem`` by 2**k -- of a sum whose
    terms have disjoint possible bits (``known_bits``: a thread part and a register
    part) is the sum of the terms' digits, where that folds a term to a constant or
    drops it; constants added to a sum gather into its constant term."""

    def __init__(self, builder: Builder, type, memo: dict | None = None,
                 bits: KnownBits | None = None):
        self.b, self.type = builder, type
        self.memo = {} if memo is None else memo
        self.bits = KnownBits() if bits is None else bits

    def op(self, name: str, operands: tuple, **attrs) -> Value:
        """The result of ``name(operands) {attrs}``, built once per block."""
        key = (name, tuple(id(v) for v in operands), tuple(sorted(attrs.items())))
        if key not in self.memo:
            self.memo[key] = self.b.create(name, operands, attrs).result
        return self.memo[key]

    def value(self, x) -> Value:
        if not isinstance(x, int):
            return x
        key = ("const", x, self.type)
        if key not in self.memo:
            self.memo[key] = self.b.const(x, self.type)
        return self.memo[key]

    def index(self, value: Value):
        """An index value in this arithmetic's type (a constant folds)."""
        constant = constant_of(value)
        if constant is not None:
            return constant
        return value if value.type == self.type else self.op("cast", (value,), to=self.type)

    @staticmethod
    def const(value: int) -> int:
        return value

    def _binary(self, op: str, x, y, fold):
        cx, cy = constant_of(x), constant_of(y)
        if cx is not None and cy is not None:
            return fold(cx, cy)
        return self.op("binary", (self.value(x), self.value(y)), op=op)

    def add(self, x, y):
        x, y = _folded(x), _folded(y)
        if x == 0 and isinstance(x, int):
            return y
        if y == 0 and isinstance(y, int):
            return x
        for term, constant in ((x, y), (y, x)):   # (a + c1) + c2 -> a + (c1 + c2)
            if isinstance(constant, int) and not isinstance(term, int):
                inner = _plus_constant(term)
                if inner is not None:
                    return self.add(inner[0], inner[1] + constant)
        return self._binary("add", x, y, int.__add__)

    def mul(self, x, y):
        for a, b in ((x, y), (y, x)):
            if isinstance(a, int) and a in (0, 1):
                return 0 if a == 0 else b
        return self._binary("mul", x, y, int.__mul__)

    def udiv(self, x, y):
        return x if constant_of(y) == 1 else self._digit("floordiv", x, y, int.__floordiv__)

    def urem(self, x, y):
        return 0 if constant_of(y) == 1 else self._digit("mod", x, y, int.__mod__)

    def _digit(self, op: str, x, y, fold):
        """``x // y`` or ``x % y``: by 2**k of a value with known bits, only the bits it may
        have (``x`` itself, or 0, when they lie all below or all above the digit), and a
        sum split over its terms where ``KnownBits.splits`` finds that folds one."""
        shift, mask = power_of_two(y), self.bits.mask(x)
        if shift is None or mask is None or constant_of(x) is not None:
            return self._binary(op, x, y, fold)
        low = (1 << shift) - 1
        if op == "floordiv" and not mask >> shift or op == "mod" and not mask & low:
            return 0
        if op == "mod" and mask <= low:
            return x
        terms = self.bits.splits(x, op, shift)
        if terms is not None:
            return self.add(self._digit(op, terms[0], y, fold), self._digit(op, terms[1], y, fold))
        return self._binary(op, x, y, fold)

    def and_(self, x, y):
        return self._binary("and", x, y, int.__and__)

    def or_(self, x, y):
        return self._binary("or", x, y, int.__or__)

    def xor(self, x, y):
        return self._binary("xor", x, y, int.__xor__)

    def shl(self, x, y):
        return self._binary("shl", x, y, int.__lshift__)

    def lshr(self, x, y):
        return self._binary("shr", x, y, int.__rshift__)


def _plus_constant(value: Value) -> tuple[Value, int] | None:
    """(a, c) where ``value`` is ``a + c`` for a constant ``c``."""
    owner = value.owner
    if not (isinstance(owner, Operation) and owner.name == "binary"
            and owner.attrs["op"] == "add"):
        return None
    a, b = owner.operands
    for term, constant in ((a, constant_of(b)), (b, constant_of(a))):
        if constant is not None:
            return term, constant
    return None


def _folded(x):
    """``x`` as an int where it is a constant."""
    constant = constant_of(x)
    return x if constant is None else constant
