"""What the walker's values are, and how errors describe them.

A value in a kernel is either a compile-time Python object (ints, floats, bools, strings,
dtypes, layouts, tuples, the builtin markers) or an IR ``Value`` (a scalar, a buffer, a
region or a barrier array). A few compile-time objects carry IR values: ``BarrierRef``
(``bars[i]``) and tuples such as ``x.shape``. ``Undefined`` marks a name that Python would
know but the IR cannot (assigned in only one branch of a run-time ``if``).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from tilejit.ir.core import Value
from tilejit.ir.types import BufferType, RegionType, ScalarType, f32, i1, i32, i64, promote

__all__ = ["is_value", "is_scalar", "is_tile", "is_number", "is_int_number", "contains_value",
           "python_number_type", "fits", "describe", "BarrierRef", "ElementRef", "Undefined",
           "number_type_promote"]


def is_value(x) -> bool:
    return isinstance(x, Value)


def is_scalar(x) -> bool:
    return isinstance(x, Value) and isinstance(x.type, ScalarType)


def is_tile(x) -> bool:
    """A buffer or a region: something a tile primitive takes."""
    return isinstance(x, Value) and isinstance(x.type, (BufferType, RegionType))


def is_number(x) -> bool:
    """A compile-time number (Python or numpy bool/int/float)."""
    return isinstance(x, numbers.Real)


def is_int_number(x) -> bool:
    return isinstance(x, numbers.Integral)


def contains_value(x) -> bool:
    """True when ``x`` is or holds (in tuples, lists, BarrierRefs) an IR value."""
    if isinstance(x, Value):
        return True
    if isinstance(x, (tuple, list)):
        return any(contains_value(e) for e in x)
    if isinstance(x, dict):
        return any(contains_value(e) for e in x.values())
    return isinstance(x, BarrierRef)


def fits(value: int, dtype: ScalarType) -> bool:
    """Whether the integer ``value`` is representable in ``dtype``."""
    if dtype.is_float:
        return True
    if dtype.is_bool:
        return value in (0, 1)
    if dtype.is_signed:
        return -(1 << (dtype.bits - 1)) <= value < (1 << (dtype.bits - 1))
    return 0 <= value < (1 << dtype.bits)


def python_number_type(x) -> ScalarType:
    """The IR type a compile-time number gets when it must become a run-time value."""
    if isinstance(x, bool):
        return i1
    if is_int_number(x):
        return i32 if fits(int(x), i32) else i64
    return f32


def number_type_promote(a, b) -> ScalarType:
    return promote(python_number_type(a), python_number_type(b))


def describe(x) -> str:
    """A short phrase for error messages: 'a f32 value', 'the compile-time value 3'."""
    if isinstance(x, Value):
        if isinstance(x.type, ScalarType):
            return f"a run-time {x.type} value"
        return f"a {x.type}"
    if isinstance(x, BarrierRef):
        return "a barrier (bars[i])"
    if isinstance(x, ScalarType):
        return f"the dtype {x!r}"
    text = repr(x)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"the compile-time {type(x).__name__} {text}"


@dataclass(frozen=True)
class BarrierRef:
    """``bars[i]``: one mbarrier of an ``alloc_barriers`` array."""

    barrier: Value
    index: object  # an int IR value or a Python int


@dataclass(frozen=True)
class ElementRef:
    """``buf[i, j]`` written as the first argument of an atomic: the element it updates."""

    buffer: Value
    indices: tuple  # int IR values, one per dim


@dataclass(frozen=True)
class Undefined:
    """A name the IR cannot provide here; using it raises ``reason``."""

    reason: str
