"""Asynchronous copies on the CPU: ``cp_async_at``, ``cp_async_commit``, ``cp_async_wait``
and ``mbarrier_complete_tx`` (``ir/ops_async.py``).

A ``cp_async_at`` lands when it is issued: copying at once is one legal schedule of the
asynchronous copy (the hardware may complete it at any time before the thread's
``cp_async_wait`` retires its group), so commit and wait have nothing left to do. A
deferred copy would make a missing wait observable, but needs a per-unit queue of pending
copies in the CTA's arena; the race detector still sees every chunk's writes of shared
memory at its ``cp_async_at``. The chunk reads ``src_bytes`` from its source and
zero-fills the rest of its ``bytes``; with bounds checks on, an address off the chunk's
size is a LaunchError, as the GPU would fault on it.
"""
from __future__ import annotations

from llvmlite import ir

from . import abi, race, types
from .emit_memory import fill_bytes
from .emit_sync import mbarrier_complete_tx
from .types import I1, I64, VOID

__all__ = ["HANDLERS"]


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
    memcpy = em.mc.function("llvm.memcpy.p0.p0.i64", VOID, [types.PTR, types.PTR, I64, I1])
    b.call(memcpy, [dst_ptr, src_ptr, read, ir.Constant(I1, 0)])
    fill_bytes(b, em.mc, em.byte_ptr(dst_ptr, read), b.sub(ir.Constant(I64, nbytes), read),
               byte=0)
    return []


def emit_nothing(em, op):
    """Commit and wait: every copy already landed when it was issued."""
    return []


HANDLERS = {"cp_async_at": emit_cp_async_at, "cp_async_commit": emit_nothing,
            "cp_async_wait": emit_nothing, "mbarrier_complete_tx": mbarrier_complete_tx}
