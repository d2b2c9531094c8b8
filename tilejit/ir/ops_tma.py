"""Catalogue entries: TMA bulk tensor copies and their completion (PTX
``cp.async.bulk.tensor``, bulk async groups, the async-proxy fence).

``tma_load`` copies a box of ``box`` elements of a global tensor into shared memory in one
instruction of one thread: the box's elements are stored densely in row-major order (the
last dim fastest), their 16-byte chunks permuted by the ``swizzle`` mode (0, 32, 64 or
128 bytes: ``layout/swizzle.py``'s ``SwizzleMode``), elements past the tensor's end read
as zero; the box's bytes, all of them, complete on ``bar[bar_index]``'s transaction count
(an ``mbarrier_arrive_expect_tx`` announced them). A load with ``multicast`` (a mask of
CTA ranks, bit r for the cluster's CTA of rank r; 0: none) writes the box at the same
offset of the shared memory of every CTA of the mask and completes its bytes on the
mbarrier at the same offset in each (PTX ``.multicast::cluster``): one CTA loads what
several use. ``tma_store`` writes a box of shared
memory, stored the same way, back into the tensor (elements past its end are not
written); it belongs to the thread's open bulk group: ``bulk_commit`` closes that group,
``bulk_wait {pending = N}`` returns once all but the N most recently committed groups
have written global memory (with ``read``: once they have read their shared memory, which
may then be reused). ``fence_proxy_async`` orders the thread's earlier generic-proxy
accesses of shared memory before later async-proxy ones (a TMA store reading what threads
wrote).

The logical forms name the box's first element on both sides (dst's indices, then src's,
as ``cp_async``) with ``box`` over the global side's dims; ``lower-addresses`` makes the
flat ``tma_load_at`` / ``tma_store_at``: the shared side is its root buffer and the
element offset of the box, the global side its root tensor and the box's coordinates in
it (a dim a region drops is a box dim of 1).
"""
from __future__ import annotations

import math

from .attrs import BOOL, INT, Attr, Tuple
from .opdef import OpGroup
from .opdef import register as _register
from .ops_native import fixed, is_root_buffer
from .types import MemScope, ScalarType

__all__ = ["MULTICAST_CTAS", "TMA_MAX_BOX", "TMA_MAX_RANK", "TMA_SWIZZLES", "box_bytes",
           "box_problem", "multicast_ranks", "swizzled_byte"]

MEMORY, SYNC = OpGroup.MEMORY, OpGroup.SYNC
TMA_MAX_RANK = 5            # cuTensorMapEncodeTiled: tensorRank 1..5 (tiled, no interleave)
TMA_MAX_BOX = 256           # boxDim[i] <= 256
TMA_SWIZZLES = (0, 32, 64, 128)   # swizzle span in bytes; 0: none
TMA_CHUNK = 16              # the inner box dim's bytes are a multiple of this


def box_problem(dtype: ScalarType, box, swizzle: int) -> str | None:
    """Why a TMA box of ``box`` elements of ``dtype`` with ``swizzle`` cannot be encoded
    (None: it can); the constraints of cuTensorMapEncodeTiled's boxDim and swizzle."""
    if not 1 <= len(box) <= TMA_MAX_RANK:
        return f"a TMA box has rank 1 to {TMA_MAX_RANK}, not {len(box)}"
    if any(not 1 <= n <= TMA_MAX_BOX for n in box):
        return f"TMA box dims lie in [1, {TMA_MAX_BOX}], got {list(box)}"
    if swizzle not in TMA_SWIZZLES:
        return f"TMA swizzles 0, 32, 64 or 128 bytes, not {swizzle}"
    inner = box[-1] * dtype.itemsize
    if inner % TMA_CHUNK:
        return f"a TMA box's inner dim spans a multiple of {TMA_CHUNK} bytes, not {inner}"
    if swizzle and inner > swizzle:
        return f"a TMA box's inner dim of {inner} bytes exceeds its {swizzle}-byte swizzle span"
    return None


def swizzled_byte(offset, swizzle: int):
    """The shared byte a TMA box's byte ``offset`` (from a swizzle-period-aligned start; an
    int or a numpy array) lands at: bits [4, 4 + log2(swizzle / 16)) XOR the bits 3 above
    them."""
    if not swizzle:
        return offset
    return offset ^ (((offset >> 7) & (swizzle // TMA_CHUNK - 1)) << 4)


def _check_box(op, shared, tensor, box_rank: int) -> str | None:
    if shared.type.scope is not MemScope.SHARED:
        return f"{op.name}'s box lies in shared memory, not {shared.type.scope}"
    if tensor.type.scope is not MemScope.GLOBAL:
        return f"{op.name}'s tensor lies in global memory, not {tensor.type.scope}"
    if shared.type.dtype != tensor.type.dtype:
        return (f"{op.name} copies bytes: shared holds {shared.type.dtype}, the tensor "
                f"{tensor.type.dtype}")
    box = op.attrs["box"]
    if len(box) != box_rank:
        return f"{op.name}'s box has one dim per dim of its tensor ({box_rank}), got {list(box)}"
    return box_problem(tensor.type.dtype, box, op.attrs["swizzle"])


def _check_logical(shared_first: bool):
    def check(op):
        dst, src, *_ = op.operands
        indices = _indices(op)
        if len(indices) != dst.type.rank + src.type.rank:
            return (f"{op.name} takes dst's {dst.type.rank} then src's {src.type.rank} "
                    f"indices, got {len(indices)}")
        shared, tensor = (dst, src) if shared_first else (src, dst)
        return _check_box(op, shared, tensor, tensor.type.rank)
    return check


def _indices(op):
    return op.operands[4:] if op.name == "tma_load" else op.operands[2:]


def _check_flat(shared_index: int, tensor_index: int, first_coord: int):
    def check(op):
        shared, tensor = op.operands[shared_index], op.operands[tensor_index]
        for side in (shared, tensor):
            if not is_root_buffer(side):
                return f"{op.name} needs root buffers (an alloc, a kernel argument), not views"
        coords = len(op.operands) - first_coord
        if coords != tensor.type.rank:
            return f"{op.name} takes one coordinate per dim of its tensor ({tensor.type.rank}), " \
                   f"got {coords}"
        return _check_box(op, shared, tensor, tensor.type.rank)
    return check


def _check_multicast(check):
    def checked(op):
        mask = op.attrs["multicast"]
        if not 0 <= mask < 1 << MULTICAST_CTAS:
            return (f"{op.name}'s multicast is a mask of the cluster's {MULTICAST_CTAS} CTA "
                    f"ranks at most, not {mask:#x}")
        return check(op)
    return checked


def multicast_ranks(op) -> list[int]:
    """The CTA ranks a load writes: those of its multicast mask (none: the issuer's)."""
    mask = op.attrs["multicast"]
    return [r for r in range(MULTICAST_CTAS) if mask >> r & 1]


def _check_pending(op):
    return None if op.attrs["pending"] >= 0 else \
        f"bulk_wait keeps a non-negative number of groups pending, not {op.attrs['pending']}"


def box_bytes(op) -> int:
    """The bytes a TMA op moves: its whole box."""
    return math.prod(op.attrs["box"]) * op.operands[0].type.dtype.itemsize


BOX = {"box": Attr(Tuple(INT)), "swizzle": Attr(INT, 0)}
LOAD = {**BOX, "multicast": Attr(INT, 0)}
MULTICAST_CTAS = 16   # PTX ctaMask is 16 bits: the largest (non-portable) cluster
_register("tma_load", MEMORY, "dst:memory src:memory bar:barrier bar_index:int *indices:int",
          LOAD, fixed(), check=_check_multicast(_check_logical(True)),
          doc="one thread's bulk copy of a box of a global tensor into shared memory, "
              "completing the box's bytes on bar[bar_index]: dst's then src's indices of the "
              "box's first element")
_register("tma_load_at", MEMORY, "dst:buffer dst_offset:int src:buffer bar:barrier "
          "bar_index:int *coords:int", LOAD, fixed(),
          check=_check_multicast(_check_flat(0, 2, 5)),
          doc="the flat tma_load: the box's element offset in dst, its coordinates in src")
_register("tma_store", MEMORY, "dst:memory src:memory *indices:int", BOX, fixed(),
          check=_check_logical(False),
          doc="one thread's bulk copy of a shared box into a global tensor, in its open bulk "
              "group: dst's then src's indices of the box's first element")
_register("tma_store_at", MEMORY, "dst:buffer src:buffer src_offset:int *coords:int", BOX,
          fixed(), check=_check_flat(1, 0, 3),
          doc="the flat tma_store: the box's coordinates in dst, its element offset in src")
_register("bulk_commit", SYNC, results=fixed(),
          doc="closes the thread's bulk group of tma_store issued since the last commit")
_register("bulk_wait", SYNC, attrs={"pending": Attr(INT), "read": Attr(BOOL, False)},
          results=fixed(), check=_check_pending,
          doc="waits until at most `pending` of the thread's committed bulk groups are in "
              "flight (with read: until they have read their shared memory)")
_register("fence_proxy_async", SYNC, results=fixed(),
          doc="orders the thread's generic-proxy shared accesses before its async-proxy ones")
