"""What the runtime tells the frontend about a launch: one ``ArgSpec`` per argument and the
``LaunchOptions``. Both are frozen and hashable, so they can be part of a cache key.

The runtime builds them from the call's arguments (tensors, ``tj.TensorSpec``, scalars);
the frontend only reads them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tilejit.ir.types import ScalarType, f32, i1, i32, i64

__all__ = ["ArgSpec", "LaunchOptions", "TENSOR", "SCALAR", "CONSTEXPR"]

TENSOR, SCALAR, CONSTEXPR = "tensor", "scalar", "constexpr"
_SPECIALIZATION_FLAGS = ("aligned16", "div16", "unit_stride", "index64")


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument as the compiler sees it.

    * ``kind == "tensor"``: ``dtype`` is the element type, ``rank`` the number of dims;
      ``shape`` optionally fixes some dims (``None`` entries stay run-time values);
      ``aligned16`` (data pointer 16-byte aligned), ``div16`` (every run-time size and
      non-unit stride divisible by 16) and ``unit_stride`` (innermost stride is 1) are
      specializations the runtime proved for this call; ``index64`` says the tensor is
      large (``runtime.arguments.INDEX64_ELEMENTS`` elements or more), so CTA ids and the
      index math built on them must be 64-bit.
    * ``kind == "scalar"``: ``dtype`` is ``i32``/``i64`` (ints), ``f32`` (floats) or ``i1``;
      ``div16`` says an int is a multiple of 16.
    * ``kind == "constexpr"``: ``value`` is folded at compile time.
    """

    kind: str
    dtype: ScalarType | None = None
    rank: int = 0
    shape: tuple | None = None
    aligned16: bool = False
    div16: bool = False
    unit_stride: bool = False
    index64: bool = False
    value: Any = None

    def __post_init__(self):
        if self.kind not in (TENSOR, SCALAR, CONSTEXPR):
            raise ValueError(f"ArgSpec kind must be tensor, scalar or constexpr, got {self.kind!r}")
        if self.kind != CONSTEXPR and not isinstance(self.dtype, ScalarType):
            raise ValueError(f"a {self.kind} ArgSpec needs a dtype, got {self.dtype!r}")
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(self.shape))
            if len(self.shape) != self.rank:
                raise ValueError(f"shape {self.shape} does not have rank {self.rank}")
        # Hashing a constexpr value that is a list or dict would fail; freeze it.
        if isinstance(self.value, list):
            object.__setattr__(self, "value", tuple(self.value))

    @classmethod
    def tensor(cls, dtype: ScalarType, rank: int, shape: tuple | None = None,
               **flags: bool) -> ArgSpec:
        unknown = set(flags) - set(_SPECIALIZATION_FLAGS)
        if unknown:
            raise ValueError(f"unknown specialization flags {sorted(unknown)}")
        return cls(TENSOR, dtype, rank, shape, **flags)

    @classmethod
    def scalar(cls, dtype: ScalarType, div16: bool = False) -> ArgSpec:
        if div16 and not dtype.is_int:
            raise ValueError(f"only an integer scalar can be divisible by 16, not {dtype}")
        return cls(SCALAR, dtype, div16=div16)

    @classmethod
    def constexpr(cls, value) -> ArgSpec:
        return cls(CONSTEXPR, value=value)

    @classmethod
    def of_python_scalar(cls, value) -> ArgSpec:
        """The spec of a Python bool/int/float argument (ints wider than 32 bits get i64)."""
        if isinstance(value, bool):
            return cls.scalar(i1)
        if isinstance(value, int):
            return cls.scalar(i32 if -2**31 <= value < 2**31 else i64)
        if isinstance(value, float):
            return cls.scalar(f32)
        raise TypeError(f"not a Python scalar: {value!r}")

    @property
    def specialization(self) -> tuple[str, ...]:
        """The specialization flags that are set, for the kernel's ``specialization`` attr."""
        return tuple(flag for flag in _SPECIALIZATION_FLAGS if getattr(self, flag))


@dataclass(frozen=True)
class LaunchOptions:
    """Options that change the generated code (not the grid or the stream)."""

    num_warps: int = 4
    cluster: tuple = field(default=(1, 1, 1))
    target: str | None = None
    arch: str | None = None
    simt: bool = False   # per_thread distribution of tile primitives (TILEJIT_SIMT)
    auto_sync: bool = True   # insert missing barriers (else a hazard is a CompilationError)

    def __post_init__(self):
        cluster = tuple(self.cluster)
        if not 1 <= len(cluster) <= 3 or any(not isinstance(c, int) or c < 1 for c in cluster):
            raise ValueError(f"cluster must be 1 to 3 positive ints, got {self.cluster!r}")
        object.__setattr__(self, "cluster", cluster + (1,) * (3 - len(cluster)))
        if not isinstance(self.num_warps, int) or self.num_warps < 1:
            raise ValueError(f"num_warps must be a positive int, got {self.num_warps!r}")

    @property
    def cluster_size(self) -> int:
        return math.prod(self.cluster)
