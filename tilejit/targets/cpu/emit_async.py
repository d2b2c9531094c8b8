"""Asynchronous copies on the CPU: ``cp_async_at``, ``cp_async_commit``, ``cp_async_wait``
and ``mbarrier_complete_tx`` (``ir/ops_async.py``).

A chunk lands late, as on a GPU (``deferred.py``: a kernel that reads it before waiting
reads what was there before, and its test sees it): ``cp_async_at`` queues the chunk in its
unit's queue in the open group; ``cp_async_commit`` closes the group; ``cp_async_wait
{pending = N}`` lands the chunks of the groups before the N most recently committed. A
chunk reads ``src_bytes`` from its source and zero-fills the rest of its ``bytes``; with
bounds checks on, an address off the chunk's size is a LaunchError, as the GPU would fault
on it. The race detector records a chunk's writes of shared memory when it is issued.
"""
from __future__ import annotations

from llvmlite import ir

from . import abi, race, types
from .deferred import DeferredQueue
from .emit_sync import mbarrier_complete_tx
from .types import I1, I32, I64, PTR, VOID

__all__ = ["HANDLERS", "QUEUE"]

QUEUE = 16   # chunks a unit keeps in flight
# A queued chunk: dst, src, bytes read, bytes, group; a unit's queue: length, groups
# committed, chunks.
ENTRY = ir.LiteralStructType([PTR, PTR, I64, I32, I32])
DST, SRC, READ, BYTES, GROUP = range(5)
STATE = ir.LiteralStructType([I32, I32, ir.ArrayType(ENTRY, QUEUE)])
LENGTH, COMMITTED, ENTRIES = range(3)
ENTRY_BYTES, STATE_BYTES = 32, 8 + 32 * QUEUE


def _land_chunk(b: ir.IRBuilder, mc, state, i) -> None:
    field = CHUNKS.field
    dst, src = (b.load(field(b, state, ENTRIES, i, f), typ=PTR) for f in (DST, SRC))
    read = b.load(field(b, state, ENTRIES, i, READ), typ=I64)
    nbytes = b.zext(b.load(field(b, state, ENTRIES, i, BYTES), typ=I32), I64)
    b.call(mc.function("llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1]),
           [dst, src, read, ir.Constant(I1, 0)])
    b.call(mc.function("llvm.memset.p0.i64", VOID, [PTR, ir.IntType(8), I64, I1]),
           [b.gep(dst, [read], source_etype=ir.IntType(8)), ir.Constant(ir.IntType(8), 0),
            b.sub(nbytes, read), ir.Constant(I1, 0)])


CHUNKS = DeferredQueue("cp_async", STATE, STATE_BYTES, ENTRY_BYTES, QUEUE, LENGTH, COMMITTED,
                       ENTRIES, GROUP, _land_chunk)


def _aligned(em, op, ptr, nbytes: int) -> None:
    size = ir.Constant(I64, nbytes)
    address = em.b.ptrtoint(ptr, I64)
    ok = em.b.icmp_unsigned("==", em.b.urem(address, size), ir.Constant(I64, 0))
    em.fail_unless(ok, abi.MISALIGNED, em.mc.add_site("misaligned", op), [address, size])


def emit_cp_async_at(em, op):
    dst, dst_offset, src, src_offset, src_bytes = op.operands
    b, nbytes = em.b, op.attrs["bytes"]
    dst_ref, src_ref = em[dst], em[src]
    dst_ptr = dst_ref.element_ptr_at(b, types.to_i64(b, em[dst_offset], dst_offset.type))
    src_ptr = src_ref.element_ptr_at(b, types.to_i64(b, em[src_offset], src_offset.type))
    if em.options.debug or em.options.bounds_check:
        for ptr in (dst_ptr, src_ptr):
            _aligned(em, op, ptr, nbytes)
    itemsize = dst_ref.dtype.itemsize
    for k in range(nbytes // itemsize):
        race.check_access(em, op, dst_ref, em.byte_ptr(dst_ptr, k * itemsize))
    read = types.to_i64(b, em[src_bytes], src_bytes.type)
    read = b.select(b.icmp_unsigned("<", read, ir.Constant(I64, nbytes)), read,
                    ir.Constant(I64, nbytes))
    CHUNKS.enqueue(em, CHUNKS.unit_state(em), {DST: dst_ptr, SRC: src_ptr, READ: read,
                                               BYTES: ir.Constant(I32, nbytes)})
    return []


def emit_cp_async_commit(em, op):
    CHUNKS.commit(em)
    return []


def emit_cp_async_wait(em, op):
    CHUNKS.wait(em, op.attrs["pending"])
    return []


HANDLERS = {"cp_async_at": emit_cp_async_at, "cp_async_commit": emit_cp_async_commit,
            "cp_async_wait": emit_cp_async_wait,
            "mbarrier_complete_tx": mbarrier_complete_tx}
