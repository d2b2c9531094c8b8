"""The scheduler of a CTA's (or a cluster's) unit coroutines, and the cluster's geometry.

``tj.schedule`` resumes the units round-robin until all reach their end; a round that
leaves every context's progress counter unchanged while units remain is a deadlock,
reported with the wait record of the first waiting unit. For a kernel with clusters of C
> 1 CTAs it runs the units of all C CTAs, each CTA with its own context (``frames.CTX``)
and arenas, which the peers table of the contexts holds (``ctx_peer``), so that a cluster
barrier and one CTA writing another's shared memory work as on a GPU.
"""
from __future__ import annotations

from llvmlite import ir

from . import abi
from .frames import (CTX, CTX_ERR, CTX_ERROR, CTX_PEERS, CTX_PROGRESS, PEER_CLUSTER,
                     WAIT_RECORD_SLOTS, counted_loop)
from .types import I1, I8, I32, I64, PTR, VOID, alloca

__all__ = ["cluster_coords", "cluster_rank", "ctx_field", "ctx_peer", "emit_scheduler"]


def emit_scheduler(mc, unit_fn: ir.Function, wait_records: int) -> ir.Function:
    """``i32 tj.schedule(ctx, data, sync, cta, grid, slots...)``: run every unit of one CTA
    to the end -- or of one cluster: then ``ctx`` is the first of the cluster's contexts
    (one per CTA, in rank order), ``cta`` the coordinates of its first CTA, and each CTA's
    arenas come from the peers table (``ctx_peer``); ``data`` and ``sync`` are unused."""
    m, count, ctas = mc.module, mc.units.count, mc.units.ctas
    handles_count = count * ctas
    fn = ir.Function(m, ir.FunctionType(I32, list(unit_fn.function_type.args[:1])
                                        + list(unit_fn.function_type.args[2:])), "tj.schedule")
    fn.linkage = "internal"
    ctx0, data0, sync0 = fn.args[:3]
    origin, grid, slots = list(fn.args[3:6]), list(fn.args[6:9]), list(fn.args[9:])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    handles_type = ir.ArrayType(PTR, handles_count)
    handles = alloca(b, handles_type)
    alive, first_waiting, status = alloca(b, I1), alloca(b, I32), alloca(b, I32)
    done_fn = mc.function("llvm.coro.done", I1, [PTR])
    resume_fn = mc.function("llvm.coro.resume", VOID, [PTR])
    destroy_fn = mc.function("llvm.coro.destroy", VOID, [PTR])
    abort = fn.append_basic_block("abort")
    finished = fn.append_basic_block("finished")
    b.store(ir.Constant(I32, 0), status)

    def handle_ptr(unit):
        return b.gep(handles, [ir.Constant(I32, 0), unit], source_etype=handles_type)

    def cta_of(handle) -> _ClusterCta:
        if ctas == 1:
            return _ClusterCta(ctx0, handle, data0, sync0, origin, ir.Constant(I32, 0))
        per_cta = ir.Constant(I32, count)
        rank, unit = b.udiv(handle, per_cta), b.urem(handle, per_cta)
        ctx = b.gep(ctx0, [rank], source_etype=CTX)
        data, sync = (b.load(ctx_peer(b, ctx, kind, rank, ctas), typ=PTR) for kind in (0, 1))
        coords = [b.add(o, c) for o, c in zip(origin, cluster_coords(b, rank, mc.kernel))]
        return _ClusterCta(ctx, unit, data, sync, coords, rank)

    def stop_on_error(cta: _ClusterCta):
        code = b.load(ctx_field(b, cta.ctx, CTX_ERROR), typ=I32)
        failed = b.icmp_unsigned("!=", code, ir.Constant(I32, 0))
        go_on = b.append_basic_block("ok")
        with b.if_then(failed, likely=False):
            b.store(code, status)
            _name_failed_cta(b, cta, grid, ctas)
        b.cbranch(failed, abort, go_on)
        b.position_at_end(go_on)

    def start(handle):  # the ramp runs the unit up to its first suspension
        cta = cta_of(handle)
        b.store(b.call(unit_fn, [cta.ctx, cta.unit, cta.data, cta.sync, *cta.coords, *grid,
                                 *slots]), handle_ptr(handle))
        stop_on_error(cta)

    def progress():
        total = b.load(ctx_field(b, ctx0, CTX_PROGRESS), typ=I64)
        for rank in range(1, ctas):
            ctx = b.gep(ctx0, [ir.Constant(I32, rank)], source_etype=CTX)
            total = b.add(total, b.load(ctx_field(b, ctx, CTX_PROGRESS), typ=I64))
        return total

    # Units not started yet must not be destroyed when an earlier one fails.
    counted_loop(b, handles_count, lambda u: b.store(ir.Constant(PTR, None), handle_ptr(u)),
                 "clear")
    counted_loop(b, handles_count, start, "start")
    round_head = b.append_basic_block("round")
    b.branch(round_head)
    b.position_at_end(round_head)
    before = progress()
    b.store(ir.Constant(I1, 0), alive)

    def resume(handle):
        unit = b.load(handle_ptr(handle), typ=PTR)
        with b.if_then(b.not_(b.call(done_fn, [unit]))):
            b.store(ir.Constant(I1, 1), alive)
            b.call(resume_fn, [unit])
            stop_on_error(cta_of(handle))

    counted_loop(b, handles_count, resume, "resume")
    any_alive = b.load(alive, typ=I1)
    stalled = b.icmp_unsigned("==", progress(), before)
    deadlock = fn.append_basic_block("deadlock")
    next_round = fn.append_basic_block("next_round")
    b.cbranch(any_alive, next_round, finished)
    b.position_at_end(next_round)
    b.cbranch(stalled, deadlock, round_head)

    b.position_at_end(deadlock)
    _report_deadlock(b, cta_of, first_waiting, handle_ptr, done_fn, handles_count,
                     wait_records, grid, ctas)
    b.store(ir.Constant(I32, abi.DEADLOCK), status)
    b.branch(abort)

    def destroy(handle):
        unit = b.load(handle_ptr(handle), typ=PTR)
        with b.if_then(b.icmp_unsigned("!=", unit, ir.Constant(PTR, None))):
            b.call(destroy_fn, [unit])

    def destroy_all():
        counted_loop(b, handles_count, destroy, "destroy")

    b.position_at_end(abort)
    destroy_all()
    b.ret(b.load(status, typ=I32))
    b.position_at_end(finished)
    destroy_all()
    b.ret(ir.Constant(I32, 0))
    return fn


class _ClusterCta:
    """What the scheduler passes one unit: its CTA's context, arenas and coordinates."""

    def __init__(self, ctx, unit, data, sync, coords, rank):
        self.ctx, self.unit, self.data, self.sync = ctx, unit, data, sync
        self.coords, self.rank = coords, rank


def ctx_field(b: ir.IRBuilder, ctx, field: int):
    return b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, field)], source_etype=CTX)


def ctx_peer(b: ir.IRBuilder, ctx, kind: int, rank, ctas: int):
    """Where the peers table of a cluster's contexts holds the ``data`` (kind 0) or ``sync``
    (kind 1) arena of the CTA of ``rank``, or (kind 2) the cluster's own state."""
    table = b.load(ctx_field(b, ctx, CTX_PEERS), typ=PTR)
    index = ir.Constant(I32, 2 * ctas) if kind == PEER_CLUSTER else \
        b.add(rank, ir.Constant(I32, kind * ctas))
    return b.gep(table, [index], source_etype=PTR)


def cluster_coords(b: ir.IRBuilder, rank, kernel) -> list:
    """The offsets (x, y, z) in its cluster of the CTA of ``rank`` (x fastest, as
    ``%cluster_ctarank`` counts)."""
    cx, cy, _ = kernel.attrs["cluster"]
    return [b.urem(rank, ir.Constant(I32, cx)),
            b.urem(b.udiv(rank, ir.Constant(I32, cx)), ir.Constant(I32, cy)),
            b.udiv(rank, ir.Constant(I32, cx * cy))]


def cluster_rank(b: ir.IRBuilder, cta, kernel):
    """The rank in its cluster of the CTA at coordinates ``cta`` (x fastest)."""
    cx, cy, cz = kernel.attrs["cluster"]
    x, y, z = (b.urem(c, ir.Constant(I32, n)) for c, n in zip(cta, (cx, cy, cz)))
    return b.add(x, b.mul(ir.Constant(I32, cx), b.add(y, b.mul(ir.Constant(I32, cy), z))))


def _name_failed_cta(b: ir.IRBuilder, cta: _ClusterCta, grid, ctas: int) -> None:
    """In a cluster the error record names the CTA whose unit failed (``run_ctas`` knows
    only the cluster)."""
    if ctas == 1:
        return
    x, y, z = (b.zext(c, I64) for c in cta.coords)
    gx, gy = (b.zext(g, I64) for g in grid[:2])
    linear = b.add(x, b.mul(gx, b.add(y, b.mul(gy, z))))
    err = b.load(ctx_field(b, cta.ctx, CTX_ERR), typ=PTR)
    b.store(linear, b.gep(err, [ir.Constant(I32, abi.ERR_CTA)], source_etype=I64))


def _report_deadlock(b, cta_of, first, handle_ptr, done_fn, count, wait_records, grid, ctas):
    """Fill the error record from the wait record of the first unit still waiting."""
    b.store(ir.Constant(I32, count), first)

    def find(unit):
        waiting = b.not_(b.call(done_fn, [b.load(handle_ptr(unit), typ=PTR)]))
        unseen = b.icmp_unsigned("==", b.load(first, typ=I32), ir.Constant(I32, count))
        with b.if_then(b.and_(waiting, unseen)):
            b.store(unit, first)

    counted_loop(b, count, find, "find_waiting")
    cta = cta_of(b.load(first, typ=I32))
    err = b.load(ctx_field(b, cta.ctx, CTX_ERR), typ=PTR)
    record = b.gep(cta.sync, [b.add(ir.Constant(I64, wait_records),
                                    b.mul(b.zext(cta.unit, I64),
                                          ir.Constant(I64, WAIT_RECORD_SLOTS * 8)))],
                   source_etype=I8)

    def put(slot, value):
        b.store(value, b.gep(err, [ir.Constant(I32, slot)], source_etype=I64))

    def wait_field(index):
        return b.load(b.gep(record, [ir.Constant(I32, index)], source_etype=I64), typ=I64)

    put(abi.ERR_CODE, ir.Constant(I64, abi.DEADLOCK))
    put(abi.ERR_SITE, wait_field(0))
    put(abi.ERR_UNIT, b.zext(cta.unit, I64))
    put(abi.ERR_VALUES, wait_field(1))
    put(abi.ERR_VALUES + 1, wait_field(2))
    _name_failed_cta(b, cta, grid, ctas)
