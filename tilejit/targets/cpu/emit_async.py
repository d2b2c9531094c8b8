"""Asynchronous copies on the CPU: ``cp_async_at``, ``cp_async_commit``, ``cp_async_wait``
and ``mbarrier_complete_tx`` (``ir/ops_async.py``).

A chunk lands late, so that a kernel that reads it before waiting reads what was there
before (and its test sees it), as on a GPU: ``cp_async_at`` queues the chunk in its unit's
queue (in the CTA's sync arena: zeroed when a CTA starts), tagged with the unit's current
group; ``cp_async_commit`` closes the group; ``cp_async_wait {pending = N}`` lands every
queued chunk of the groups before the N most recently committed, in issue order (the
queue's prefix: groups only grow along it). Chunks of a group never committed are not
waited for, as PTX's ``cp.async.wait_group`` does not. A full queue lands its chunks
early: landing sooner is always a legal schedule. A chunk reads ``src_bytes`` from its
source and zero-fills the rest of its ``bytes``; with bounds checks on, an address off the
chunk's size is a LaunchError, as the GPU would fault on it. The race detector records a
chunk's writes of shared memory when it is issued.
"""
from __future__ import annotations

from llvmlite import ir

from . import abi, race, types
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


def _field(b: ir.IRBuilder, state, *path):
    return b.gep(state, [ir.Constant(I32, 0), *(ir.Constant(I32, p) if isinstance(p, int)
                                                  else p for p in path)], source_etype=STATE)


def _state(em):
    """This unit's queue."""
    base = em.mc.sync_state("cp_async", em.mc.units.count * STATE_BYTES)
    offset = em.b.add(ir.Constant(I64, base),
                      em.b.mul(em.b.zext(em.frame.unit, I64), ir.Constant(I64, STATE_BYTES)))
    return em.byte_ptr(em.frame.sync, offset)


def _drain_fn(mc) -> ir.Function:
    """``tj.cp_async.drain(state, limit)``: land the queued chunks of groups below
    ``limit`` (a prefix of the queue) and keep the rest."""
    fn = mc.module.globals.get("tj.cp_async.drain")
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, ir.FunctionType(VOID, [PTR, I32]), "tj.cp_async.drain")
    fn.linkage = "internal"
    state, limit = fn.args
    entry, head, check, land, done = (fn.append_basic_block(name) for name in
                                      ("entry", "head", "check", "land", "done"))
    b = ir.IRBuilder(entry)
    length = b.load(_field(b, state, LENGTH), typ=I32)
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I32)
    i.add_incoming(ir.Constant(I32, 0), entry)
    b.cbranch(b.icmp_signed("<", i, length), check, done)
    b.position_at_end(check)
    group = b.load(_field(b, state, ENTRIES, i, GROUP), typ=I32)
    b.cbranch(b.icmp_signed("<", group, limit), land, done)
    b.position_at_end(land)
    dst, src = (b.load(_field(b, state, ENTRIES, i, f), typ=PTR) for f in (DST, SRC))
    read = b.load(_field(b, state, ENTRIES, i, READ), typ=I64)
    nbytes = b.zext(b.load(_field(b, state, ENTRIES, i, BYTES), typ=I32), I64)
    b.call(mc.function("llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1]),
           [dst, src, read, ir.Constant(I1, 0)])
    b.call(mc.function("llvm.memset.p0.i64", VOID, [PTR, ir.IntType(8), I64, I1]),
           [b.gep(dst, [read], source_etype=ir.IntType(8)), ir.Constant(ir.IntType(8), 0),
            b.sub(nbytes, read), ir.Constant(I1, 0)])
    i.add_incoming(b.add(i, ir.Constant(I32, 1)), land)
    b.branch(head)
    b.position_at_end(done)
    kept = b.sub(length, i)
    b.call(mc.function("llvm.memmove.p0.p0.i64", VOID, [PTR, PTR, I64, I1]),
           [_field(b, state, ENTRIES, 0), _field(b, state, ENTRIES, i),
            b.mul(b.zext(kept, I64), ir.Constant(I64, ENTRY_BYTES)), ir.Constant(I1, 0)])
    b.store(kept, _field(b, state, LENGTH))
    b.ret_void()
    return fn


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
    state = _state(em)
    with b.if_then(b.icmp_signed("==", b.load(_field(b, state, LENGTH), typ=I32),
                                 ir.Constant(I32, QUEUE)), likely=False):
        b.call(_drain_fn(em.mc), [state, ir.Constant(I32, 2 ** 31 - 1)])   # land them all
    length = b.load(_field(b, state, LENGTH), typ=I32)
    group = b.load(_field(b, state, COMMITTED), typ=I32)
    for index, value in ((DST, dst_ptr), (SRC, src_ptr), (READ, read),
                         (BYTES, ir.Constant(I32, nbytes)), (GROUP, group)):
        b.store(value, _field(b, state, ENTRIES, length, index))
    b.store(b.add(length, ir.Constant(I32, 1)), _field(b, state, LENGTH))
    return []


def emit_cp_async_commit(em, op):
    b, state = em.b, _state(em)
    committed = _field(b, state, COMMITTED)
    b.store(b.add(b.load(committed, typ=I32), ir.Constant(I32, 1)), committed)
    return []


def emit_cp_async_wait(em, op):
    b, state = em.b, _state(em)
    committed = b.load(_field(b, state, COMMITTED), typ=I32)
    limit = b.sub(committed, ir.Constant(I32, op.attrs["pending"]))
    b.call(_drain_fn(em.mc), [state, limit])
    return []


HANDLERS = {"cp_async_at": emit_cp_async_at, "cp_async_commit": emit_cp_async_commit,
            "cp_async_wait": emit_cp_async_wait,
            "mbarrier_complete_tx": mbarrier_complete_tx}
