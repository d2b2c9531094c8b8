"""Known bits of index values: which bits an integer value may have set.

``lower-addresses`` (``IrArith``) splits logical indices into a layout's digits with
division and remainder by powers of two. A fragment's index there is a thread part plus a
register part (``rules/matrix_access.logical_index``), and the two occupy different bits
(a row ``lane / 4 + 16 * warp`` has bit 3 clear; the register part adds 0 or 8), so each
digit of the sum is the sum of the parts' digits -- the register's a constant. That needs
to know which bits a value may have set: :meth:`KnownBits.mask` bounds them, from the op
that defines the value.

A mask is an int ``m >= 0`` promising ``0 <= value`` and ``value & ~m == 0``; None is
nothing known (a value that may be negative has no mask). The lanes of a warp and the
warps of a warpgroup have fixed counts on every target (``ir.scope``); anything else a
thread index counts (CTAs, warps of a CTA) has no mask of its own, though the rules' own
remainders bound what they take of it.
"""
from __future__ import annotations

from ..ir.core import Operation, Value
from ..ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP

__all__ = ["KnownBits", "constant_of", "power_of_two"]

_THREAD_MASKS = {"lane_id": LANES_PER_WARP - 1, "warp_id_in_wg": WARPS_PER_WARPGROUP - 1}


def constant_of(x) -> int | None:
    """The integer ``x`` is (a Python int, or the result of an integer ``const``); asked of
    every operand the index arithmetic sees, so it tests types exactly (bool is no int)."""
    if type(x) is int:
        return x
    owner = getattr(x, "owner", None)
    if type(owner) is Operation and owner.name == "const":
        value = owner.attrs["value"]
        return value if type(value) is int else None
    return None


def power_of_two(x) -> int | None:
    """k where ``x`` is the constant 2**k, else None."""
    value = constant_of(x)
    return value.bit_length() - 1 if value and value > 0 and not value & (value - 1) else None


def _below(bound: int) -> int:
    """The mask of the values 0 .. ``bound``."""
    return (1 << bound.bit_length()) - 1


def _binary_mask(op: str, rhs: Value, a: int | None, b: int | None) -> int | None:
    """The mask of ``lhs op rhs`` from the operands' masks ``a`` and ``b``."""
    if op == "and":   # a non-negative operand bounds the result alone
        known = [m for m in (a, b) if m is not None]
        return known[0] & known[-1] if known else None
    divisor, shift = constant_of(rhs), power_of_two(rhs)
    if op == "mod" and divisor is not None and divisor > 0:   # floor mod: 0 <= r < divisor
        if shift is not None:
            return divisor - 1 if a is None else a & (divisor - 1)
        return _below(divisor - 1 if a is None else min(a, divisor - 1))
    if a is None or b is None:
        return None
    if op in ("or", "xor", "max", "min"):
        return a | b
    if op == "add":
        return a | b if not a & b else _below(a + b)
    if op == "mul":   # by 2**k (the rules' constants are on the right): a shift
        return a << shift if shift is not None else _below(a * b)
    if op == "floordiv" and divisor is not None and divisor > 0:
        return a >> shift if shift is not None else _below(a // divisor)
    if op in ("shr", "shl") and divisor is not None:   # a count: b is that constant
        return a >> divisor if op == "shr" else a << divisor
    return None


class KnownBits:
    """Masks of values, each worked out once (an address-lowering pass asks of the same
    thread coordinates and index sums for every access)."""

    def __init__(self):
        self._masks: dict[Value, int | None] = {}
        self._splits: dict[tuple, tuple | None] = {}

    def mask(self, x) -> int | None:
        """The bits ``x`` (an int or an integer Value) may have set; None: unknown."""
        if not isinstance(x, Value):
            return x if x >= 0 else None
        if x not in self._masks:
            self._masks[x] = self._of(x)
        return self._masks[x]

    def _of(self, value: Value) -> int | None:
        owner, t = value.owner, value.type
        if not isinstance(owner, Operation) or not getattr(t, "is_int", False) or t.is_bool:
            return None
        if owner.name == "const":
            found = constant_of(value)
        elif owner.name == "thread_index":
            found = _THREAD_MASKS.get(owner.attrs["kind"])
        elif owner.name == "cast":
            found = self.mask(owner.operands[0])
        elif owner.name == "binary":
            lhs, rhs = owner.operands
            found = _binary_mask(owner.attrs["op"], rhs, self.mask(lhs), self.mask(rhs))
        else:
            found = None
        # a mask past the type's non-negative range may have wrapped or read as negative
        limit = t.bits - 1 if t.is_signed else t.bits
        return found if found is not None and found >= 0 and found.bit_length() <= limit \
            else None

    def disjoint_terms(self, x) -> tuple | None:
        """(a, b) where ``x`` is ``a + b`` of non-negative values whose possible bits do not
        overlap (so ``x`` is ``a | b``, and each shift or low-bit mask of ``x`` is the sum
        of ``a``'s and ``b``'s); None otherwise."""
        owner = getattr(x, "owner", None)
        if not (isinstance(owner, Operation) and owner.name == "binary"
                and owner.attrs["op"] == "add"):
            return None
        a, b = owner.operands
        masks = self.mask(a), self.mask(b)
        if None in masks or masks[0] & masks[1]:
            return None
        return a, b

    def splits(self, x, op: str, shift: int) -> tuple | None:
        """``disjoint_terms(x)`` where taking ``op`` by 2**``shift`` (``floordiv`` or
        ``mod``) of the terms, recursively, folds one of them (a constant, or bits that
        the digit drops): the sum of digits then costs no more ops than the digit of the
        sum; None otherwise."""
        key = (x, op, shift)
        if key not in self._splits:
            terms = self.disjoint_terms(x)
            self._splits[key] = terms if terms is not None and any(
                self._folds(t, op, shift) for t in terms) else None
        return self._splits[key]

    def _folds(self, x, op: str, shift: int) -> bool:
        if constant_of(x) is not None:
            return True
        mask = self.mask(x)
        digit = mask >> shift if op == "floordiv" else mask & ((1 << shift) - 1)
        return not digit or self.splits(x, op, shift) is not None
