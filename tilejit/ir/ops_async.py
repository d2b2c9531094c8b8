"""Catalogue entries: asynchronous copies and their completion (PTX ``cp.async`` groups,
an mbarrier's transaction bytes).

``cp_async`` is a thread's copy of one chunk of ``bytes`` (4, 8 or 16) from a global
tensor into shared memory that completes later: by the time the thread's
``cp_async_wait {pending = N}`` returns, every chunk of all but its N most recently
committed groups (``cp_async_commit``) has landed. A chunk reads ``src_bytes`` (at most
``bytes``, read at run time) from its source and zero-fills the rest: the masked edge of
a tile past its tensor's end. Its logical form names the first element of the chunk on
both sides (dst's indices, then src's); ``lower-addresses`` makes the flat
``cp_async_at`` of both root buffers. ``mbarrier_complete_tx`` completes ``bytes`` of a
barrier's expected transaction count, as the copy engine does when an asynchronous copy
lands (an announced ``mbarrier_expect_tx``).
"""
from __future__ import annotations

from .attrs import INT, Attr
from .opdef import OpGroup
from .opdef import register as _register
from .ops_native import fixed, is_root_buffer
from .types import MemScope, ScalarType

__all__ = ["CP_ASYNC_BYTES", "cp_async_problem"]

MEMORY, SYNC = OpGroup.MEMORY, OpGroup.SYNC
CP_ASYNC_BYTES = (4, 8, 16)   # PTX cp.async's cp-size


def cp_async_problem(dtype: ScalarType, nbytes: int) -> str | None:
    """Why one cp.async cannot move a chunk of ``nbytes`` of ``dtype`` (None: it can)."""
    if nbytes not in CP_ASYNC_BYTES:
        return f"cp.async moves 4, 8 or 16 bytes, not {nbytes}"
    if nbytes % dtype.itemsize:
        return f"{nbytes} bytes are not whole {dtype} elements"
    return None


def _check_sides(op, dst, src) -> str | None:
    if dst.type.scope is not MemScope.SHARED:
        return f"{op.name} writes shared memory, not {dst.type.scope}"
    if src.type.scope is not MemScope.GLOBAL:
        return f"{op.name} reads global memory, not {src.type.scope}"
    if dst.type.dtype != src.type.dtype:
        return f"{op.name} copies bytes: dst holds {dst.type.dtype}, src {src.type.dtype}"
    return cp_async_problem(dst.type.dtype, op.attrs["bytes"])


def _check_cp_async(op):
    dst, src, _, *indices = op.operands
    rank = dst.type.rank + src.type.rank
    if len(indices) != rank:
        return (f"cp_async takes dst's {dst.type.rank} then src's {src.type.rank} indices, "
                f"got {len(indices)}")
    return _check_sides(op, dst, src)


def _check_cp_async_at(op):
    dst, _, src, _, _ = op.operands
    for side in (dst, src):
        if not is_root_buffer(side):
            return "cp_async_at needs root buffers (an alloc, a kernel argument), not views"
    return _check_sides(op, dst, src)


def _check_pending(op):
    return None if op.attrs["pending"] >= 0 else \
        f"cp_async_wait keeps a non-negative number of groups pending, not {op.attrs['pending']}"


_register("cp_async", MEMORY, "dst:memory src:memory src_bytes:int *indices:int",
          {"bytes": Attr(INT)}, fixed(), check=_check_cp_async,
          doc="a thread's asynchronous copy of one chunk: dst's indices then src's, of the "
              "chunk's first element; src_bytes read, the rest of bytes zero-filled")
_register("cp_async_at", MEMORY, "dst:buffer dst_offset:int src:buffer src_offset:int "
          "src_bytes:int", {"bytes": Attr(INT)}, fixed(), check=_check_cp_async_at,
          doc="the flat cp_async: element offsets into both root buffers")
_register("cp_async_commit", SYNC, results=fixed(),
          doc="closes the thread's group of cp_async issued since the last commit")
_register("cp_async_wait", SYNC, attrs={"pending": Attr(INT)}, results=fixed(),
          check=_check_pending,
          doc="waits until at most `pending` of the thread's committed groups are in flight")
_register("mbarrier_complete_tx", SYNC, "bar:barrier index:int bytes:int", results=fixed(),
          doc="completes bytes of the barrier's expected transaction count (an asynchronous "
              "copy landed)")
