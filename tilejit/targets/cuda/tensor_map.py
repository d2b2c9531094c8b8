"""TMA tensor maps: the record a ``cp.async.bulk.tensor`` reads its tensor through, built on
the host at launch from a tensor argument and the box the dispatch rule chose
(``passes/rules/copy_tma``), validated field by field against ``cuTensorMapEncodeTiled``'s
documented requirements (CUDA driver API, "Tensor Map Object Management") and encoded by
the driver (cuda-python's ``cuda.bindings.driver``); the kernel module caches the bytes
per (map, address, shape, strides) (``module.CudaKernelModule.encoded_maps``), so a launch
that hits the cache makes no record at all.

Fields are in tilejit's order (row-major: the outermost dim first, element strides); the
driver's is the reverse (``globalDim[0]`` innermost) with byte strides of all dims but the
innermost, which :meth:`TensorMap.driver_arguments` produces. A kernel receives each map
as a ``const __grid_constant__`` parameter of the 128-byte, 64-byte-aligned ``CUtensorMap``
(``STRUCT``: NVRTC cannot include ``cuda.h``, so the printed source declares it).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from tilejit.errors import LaunchError
from tilejit.ir.types import (ScalarType, bf16, f8e4m3, f8e5m2, f16, f32, f64, i1, i8, i16, i32,
                              i64, u8, u16, u32, u64)

__all__ = ["STRUCT", "TensorMap", "encode"]

STRUCT = "struct __align__(64) tj_tensor_map { unsigned long long opaque[16]; };"
MAP_BYTES = 128
# CUtensorMapDataType: a TMA copy moves bytes, so every dtype of a size has a carrier.
DATA_TYPES = {u8: 0, i8: 0, i1: 0, f8e4m3: 0, f8e5m2: 0, u16: 1, i16: 1, u32: 2, i32: 3,
              u64: 4, i64: 5, f16: 6, f32: 7, f64: 8, bf16: 9}
FLOATS = (f16, bf16, f32, f64)
INTERLEAVES = {"none": 0, "16B": 1, "32B": 2}
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}
OOB_FILLS = {"zero": 0, "nan": 1}


@dataclass(frozen=True)
class TensorMap:
    """One ``cuTensorMapEncodeTiled`` call's arguments (tilejit's dim order)."""

    dtype: ScalarType
    address: int
    dims: tuple            # elements per dim, outermost first
    strides: tuple         # elements; the innermost is 1
    box: tuple
    swizzle: int = 0       # bytes: 0, 32, 64, 128
    element_strides: tuple | None = None   # None: 1 per dim
    interleave: str = "none"
    l2_promotion: int = 0  # bytes: 0, 64, 128, 256
    oob_fill: str = "zero"

    @property
    def rank(self) -> int:
        return len(self.dims)

    def problems(self) -> list[str]:
        """Each requirement the fields break, in words (empty: the driver may encode it)."""
        why, size, rank = [], self.dtype.itemsize, self.rank
        if self.dtype not in DATA_TYPES:
            why.append(f"tensorDataType: TMA has no {self.dtype} elements")
        if self.interleave not in INTERLEAVES:
            why.append(f"interleave: one of {list(INTERLEAVES)}, not {self.interleave!r}")
        low = 3 if self.interleave != "none" else 1
        if not low <= rank <= 5:
            why.append(f"tensorRank: {low} to 5 (interleave {self.interleave}), not {rank}")
        align = 32 if self.interleave == "32B" else 16
        if self.address % align:
            why.append(f"globalAddress: {self.address:#x} is not {align}-byte aligned")
        if any(not 0 < n <= 2 ** 32 for n in self.dims):
            why.append(f"globalDim: each in [1, 2^32], got {list(self.dims)}")
        if any(len(f) != rank for f in (self.strides, self.box)) \
                or (self.element_strides is not None and len(self.element_strides) != rank):
            why.append(f"globalStrides, boxDim, elementStrides: {rank} each")
            return why
        if self.strides[-1] != 1:
            why.append(f"the innermost dim is contiguous (stride 1), not {self.strides[-1]}")
        outer = [s * size for s in self.strides[:-1]]
        if any(b % align or not 0 < b < 2 ** 40 for b in outer):
            why.append(f"globalStrides: multiples of {align} bytes below 2^40, got {outer}")
        for d in range(rank - 1):   # each dim's stride spans the dims inside it
            inner = self.dims[d + 1] * self.strides[d + 1] * size
            if self.strides[d] * size < inner:
                why.append(f"globalStrides: dim {d}'s {self.strides[d] * size} bytes are fewer "
                           f"than the {inner} bytes of the dims inside it")
        if any(not 0 < b <= 256 for b in self.box):
            why.append(f"boxDim: each in [1, 256], got {list(self.box)}")
        inner_box = self.box[-1] * size
        if self.interleave == "none" and inner_box % 16:
            why.append(f"boxDim: the inner dim's {inner_box} bytes are not a multiple of 16")
        strides = self.element_strides or (1,) * rank
        if any(not 0 < e <= 8 for e in strides):
            why.append(f"elementStrides: each in [1, 8], got {list(strides)}")
        if self.swizzle not in SWIZZLES:
            why.append(f"swizzle: 0, 32, 64 or 128 bytes, not {self.swizzle}")
        elif self.interleave == "none" and self.swizzle and inner_box > self.swizzle:
            why.append(f"swizzle: the inner box dim's {inner_box} bytes exceed the "
                       f"{self.swizzle}-byte span")
        elif self.interleave == "32B" and self.swizzle != 32:
            why.append("swizzle: interleave 32B needs the 32-byte swizzle")
        if self.l2_promotion not in L2_PROMOTIONS:
            why.append(f"l2Promotion: 0, 64, 128 or 256 bytes, not {self.l2_promotion}")
        if self.oob_fill not in OOB_FILLS:
            why.append(f"oobFill: 'zero' or 'nan', not {self.oob_fill!r}")
        elif self.oob_fill == "nan" and self.dtype not in FLOATS:
            why.append(f"oobFill: NaN fill needs floating-point elements, not {self.dtype}")
        return why

    def driver_arguments(self) -> tuple:
        """(data type, rank, address, globalDim, globalStrides, boxDim, elementStrides,
        interleave, swizzle, l2Promotion, oobFill) in the driver's order and units."""
        size = self.dtype.itemsize
        return (DATA_TYPES[self.dtype], self.rank, self.address, list(reversed(self.dims)),
                [s * size for s in reversed(self.strides[:-1])], list(reversed(self.box)),
                list(reversed(self.element_strides or (1,) * self.rank)),
                INTERLEAVES[self.interleave], SWIZZLES[self.swizzle],
                L2_PROMOTIONS[self.l2_promotion], OOB_FILLS[self.oob_fill])


def encode(tmap: TensorMap) -> bytes:
    """The 128 bytes of ``tmap``'s CUtensorMap; a LaunchError listing what the fields
    break, or what the driver said."""
    problems = tmap.problems()
    if problems:
        raise LaunchError("no tensor map describes this tensor: " + "; ".join(problems))
    from .driver import _check, _driver
    drv = _driver()
    (kind, rank, address, dims, strides, box, steps, interleave, swizzle, l2,
     fill) = tmap.driver_arguments()
    encoded = _check(drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType(kind), rank, address, dims, strides, box, steps,
        drv.CUtensorMapInterleave(interleave), drv.CUtensorMapSwizzle(swizzle),
        drv.CUtensorMapL2promotion(l2), drv.CUtensorMapFloatOOBfill(fill)),
        "cuTensorMapEncodeTiled")
    return struct.pack("<16Q", *encoded.opaque)
