"""IR types: scalars, memory scopes, team kinds, buffers, regions and barriers.

Every type is a frozen value object (hashable, usable as a dict key) whose ``str`` is its
textual IR form; ``tilejit.ir.parser`` reads those forms back.
"""
from __future__ import annotations

import enum
import functools
import json
from dataclasses import dataclass
from typing import Union

__all__ = [
    "ScalarType", "SCALAR_TYPES", "PUBLIC_NAMES", "promote", "scalar_type_of",
    "i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
    "f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2",
    "MemScope", "TeamKind", "BufferType", "RegionType", "BarrierType", "Type",
]


@dataclass(frozen=True)
class ScalarType:
    """A scalar element type. ``str`` is the IR spelling (``f32``), ``repr`` the public one."""

    name: str
    kind: str  # "int" | "uint" | "float" | "bool"
    bits: int

    def __post_init__(self):
        if self.kind not in ("int", "uint", "float", "bool"):
            raise ValueError(f"bad scalar kind {self.kind!r}")

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """Integers of either signedness and bool (everything usable as an index or mask)."""
        return self.kind in ("int", "uint", "bool")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_signed(self) -> bool:
        return self.kind in ("int", "float")

    @property
    def itemsize(self) -> int:
        """Storage size in bytes (bool and fp8 take one byte)."""
        return max(1, self.bits // 8)

    def torch_dtype(self):
        import torch
        return getattr(torch, _TORCH_NAMES[self.name])

    def numpy_dtype(self):
        import numpy
        if self.name not in _NUMPY_NAMES:
            raise TypeError(f"numpy has no dtype for {self!r}")
        return numpy.dtype(_NUMPY_NAMES[self.name])

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"tj.{PUBLIC_NAMES[self.name]}"


i1 = ScalarType("i1", "bool", 1)
i8 = ScalarType("i8", "int", 8)
i16 = ScalarType("i16", "int", 16)
i32 = ScalarType("i32", "int", 32)
i64 = ScalarType("i64", "int", 64)
u8 = ScalarType("u8", "uint", 8)
u16 = ScalarType("u16", "uint", 16)
u32 = ScalarType("u32", "uint", 32)
u64 = ScalarType("u64", "uint", 64)
f16 = ScalarType("f16", "float", 16)
bf16 = ScalarType("bf16", "float", 16)
f32 = ScalarType("f32", "float", 32)
f64 = ScalarType("f64", "float", 64)
f8e4m3 = ScalarType("f8e4m3", "float", 8)
f8e5m2 = ScalarType("f8e5m2", "float", 8)

SCALAR_TYPES: dict[str, ScalarType] = {t.name: t for t in (
    i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, f8e4m3, f8e5m2)}

# IR name -> name under the package root (tj.float32 is f32).
PUBLIC_NAMES = {
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2",
}
_TORCH_NAMES = {**PUBLIC_NAMES, "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
_NUMPY_NAMES = {k: v for k, v in PUBLIC_NAMES.items() if k not in ("bf16", "f8e4m3", "f8e5m2")}

_BY_EXTERNAL_NAME = {**{v: SCALAR_TYPES[k] for k, v in _NUMPY_NAMES.items()},
                     **{v: SCALAR_TYPES[k] for k, v in _TORCH_NAMES.items()}}


def scalar_type_of(dtype) -> "ScalarType | None":
    """The ScalarType of a tilejit/torch/numpy dtype or a dtype name; None when unknown."""
    if isinstance(dtype, ScalarType):
        return dtype
    text = dtype.__name__ if isinstance(dtype, type) else str(dtype).removeprefix("torch.")
    return _BY_EXTERNAL_NAME.get(text) or SCALAR_TYPES.get(text)


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """numpy-like promotion: float beats int, wider wins, bf16 with f16 gives f32."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_float:
        if a.bits == b.bits:  # bf16/f16, or the two fp8 flavours
            return f32 if a.bits == 16 else f16
        return a if a.bits > b.bits else b
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    if a.kind == b.kind:
        return a if a.bits > b.bits else b
    signed, unsigned = (a, b) if a.kind == "int" else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    # A signed type that holds every unsigned value needs twice the bits (u32 + i32 -> i64).
    return SCALAR_TYPES.get(f"i{min(64, unsigned.bits * 2)}", i64)


class _LowerCaseText(enum.Enum):
    def __str__(self) -> str:
        return self.name.lower()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    @classmethod
    def parse(cls, text: str):
        try:
            return cls[text.upper()]
        except KeyError:
            choices = ", ".join(str(m) for m in cls)
            raise ValueError(f"unknown {cls.__name__} {text!r} (one of: {choices})") from None


class MemScope(_LowerCaseText):
    """Where a buffer lives."""

    GLOBAL = 0
    SHARED = 1
    LOCAL = 2
    FRAGMENT = 3
    TMEM = 4
    SBUF = 5
    PSUM = 6


@functools.total_ordering
class TeamKind(_LowerCaseText):
    """Cooperating thread groups, ordered by size: THREAD < WARP < ... < CLUSTER."""

    THREAD = 0
    WARP = 1
    WARPGROUP = 2
    CTA = 3
    CLUSTER = 4

    def __lt__(self, other):
        if not isinstance(other, TeamKind):
            return NotImplemented
        return self.value < other.value


def _dims(values) -> str:
    return "[" + ", ".join("?" if v is None else str(v) for v in values) + "]"


@dataclass(frozen=True, eq=False)
class BufferType:
    """A multi-dimensional buffer in a memory scope.

    ``shape``/``strides`` entries are ``None`` when known only at run time (GLOBAL only).
    ``layout`` is a TileLayout/ComposeLayout; None means strided by ``strides`` for GLOBAL
    and "decided by a pass" elsewhere.
    """

    dtype: ScalarType
    shape: tuple
    scope: MemScope
    layout: object = None
    strides: tuple | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(self.strides))
        if not isinstance(self.dtype, ScalarType) or not isinstance(self.scope, MemScope):
            raise TypeError(f"bad buffer type ({self.dtype!r}, {self.scope!r})")
        if any(d is not None and (not isinstance(d, int) or d < 0) for d in self.shape):
            raise ValueError(f"bad buffer shape {self.shape}")
        if self.scope is not MemScope.GLOBAL:
            if None in self.shape:
                raise ValueError(f"a {self.scope} buffer needs a static shape, got {_dims(self.shape)}")
            if self.strides is not None:
                raise ValueError("only global buffers have strides")
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise ValueError(f"strides {_dims(self.strides)} do not match shape {_dims(self.shape)}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return None not in self.shape

    def _key(self):
        layout = None if self.layout is None else (type(self.layout).__name__, str(self.layout))
        return (self.dtype, self.shape, self.scope, layout, self.strides)

    def __eq__(self, other):
        return isinstance(other, BufferType) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self) -> str:
        text = f"buffer<{self.scope}, {self.dtype}, {_dims(self.shape)}"
        if self.strides is not None:
            text += f", strides={_dims(self.strides)}"
        if self.layout is not None:
            text += f", layout={json.dumps(str(self.layout))}"
        return text + ">"


@dataclass(frozen=True)
class RegionType:
    """A static-size window into a buffer; ``keep[i] is False`` drops an integer-indexed dim."""

    buffer: BufferType
    sizes: tuple
    keep: tuple

    def __post_init__(self):
        object.__setattr__(self, "sizes", tuple(self.sizes))
        object.__setattr__(self, "keep", tuple(self.keep))
        if not len(self.sizes) == len(self.keep) == self.buffer.rank:
            raise ValueError(f"region sizes {_dims(self.sizes)} / keep do not match "
                             f"rank-{self.buffer.rank} {self.buffer}")
        if any(not k and s != 1 for s, k in zip(self.sizes, self.keep)):
            raise ValueError(f"a dropped region dimension must have size 1, got {_dims(self.sizes)}")

    @property
    def shape(self) -> tuple:
        return tuple(s for s, k in zip(self.sizes, self.keep) if k)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> ScalarType:
        return self.buffer.dtype

    @property
    def scope(self) -> MemScope:
        return self.buffer.scope

    def __str__(self) -> str:
        text = f"region<{self.buffer}, {_dims(self.sizes)}"
        if not all(self.keep):
            text += ", keep=[" + ", ".join("true" if k else "false" for k in self.keep) + "]"
        return text + ">"


@dataclass(frozen=True)
class BarrierType:
    """``count`` mbarriers in shared memory."""

    count: int = 1

    def __str__(self) -> str:
        return f"barrier<{self.count}>"


Type = Union[ScalarType, BufferType, RegionType, BarrierType]
