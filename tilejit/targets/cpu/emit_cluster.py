"""Thread-block clusters on the CPU: the cluster barrier and distributed shared memory.

The CTAs of a cluster run together (``frames.emit_scheduler``), each with its own context
and arenas; the cluster's own state (``ModuleContext.cluster_state``) is reached through
the peers table. ``cluster_sync`` is a rendezvous of every unit of every CTA still
running: the last to arrive bumps the generation, the others suspend until it moves, and a
cluster whose units all wait elsewhere is a deadlock reported at the wait of the first.
With clusters of one CTA it is ``sync``. In SIMT mode the race detector's clocks count
the threads of the whole cluster: ``cluster_sync`` releases into and acquires a clock of
the cluster's own arena.

``cluster_map(src, rank)`` is ``src`` at the same offset of the arena of the CTA of
``rank`` (shared buffers in the data arena, mbarriers in the sync arena), read from the
peers table; a rank outside the cluster fails the launch (a GPU faults). The mapped
buffer keeps that CTA's arenas, so that the race detector checks its accesses against
the shadow of the CTA that holds it, and the mapped mbarrier's race clocks are its.
"""
from __future__ import annotations

from dataclasses import replace

from llvmlite import ir

from tilejit.ir.types import i32

from . import abi, emit_native, race
from .emit_memory import BufferRef
from .emit_sync import emit_sync, rendezvous_field
from .frames import CTX, CTX_ALIVE, PEER_CLUSTER, PEER_DATA, PEER_SYNC
from .scheduler import cluster_rank, ctx_field, ctx_peer
from .types import I32, I64, PTR

__all__ = ["HANDLERS"]


def own_rank(em):
    """The rank of the unit's CTA in its cluster."""
    return cluster_rank(em.b, em.frame.cta, em.mc.kernel)


def cluster_contexts(em) -> list:
    """The contexts of every CTA of the unit's cluster, in rank order."""
    b, ctas = em.b, em.mc.units.ctas
    first = b.gep(em.frame.ctx, [b.sub(ir.Constant(I32, 0), own_rank(em))], source_etype=CTX)
    return [b.gep(first, [ir.Constant(I32, rank)], source_etype=CTX) for rank in range(ctas)]


def emit_cluster_sync(em, op):
    ctas = em.mc.units.ctas
    if ctas == 1:
        return emit_sync(em, op)
    b, frame = em.b, em.frame
    state = b.load(ctx_peer(b, frame.ctx, PEER_CLUSTER, None, ctas), typ=PTR)
    base = em.byte_ptr(state, em.mc.cluster_state("barrier", 8))
    count, generation = rendezvous_field(em, base, 0), rendezvous_field(em, base, 1)
    gen0 = b.load(generation, typ=I32)
    clocks = race.Rendezvous.for_cluster(em, gen0)
    if clocks is not None:
        clocks.arrive(em)
    b.store(b.add(b.load(count, typ=I32), ir.Constant(I32, 1)), count)
    frame.progress()
    site = em.mc.add_site("wait", op, what="cluster_sync() (cluster barrier)")
    contexts = cluster_contexts(em)

    def ready():   # finished units no longer take part
        alive = ir.Constant(I32, 0)
        for ctx in contexts:
            alive = b.add(alive, b.load(ctx_field(b, ctx, CTX_ALIVE), typ=I32))
        release = b.and_(b.icmp_unsigned(">=", b.load(count, typ=I32), alive),
                         b.icmp_unsigned("==", b.load(generation, typ=I32), gen0))
        with b.if_then(release):
            b.store(ir.Constant(I32, 0), count)
            if clocks is not None:
                clocks.released(em)
            b.store(b.add(gen0, ir.Constant(I32, 1)), generation)
        return b.icmp_unsigned("!=", b.load(generation, typ=I32), gen0)

    frame.wait_until(em, ready, site)
    if clocks is not None:
        clocks.depart(em)
    return []


def emit_cluster_map(em, op):
    src, rank = em.operands(op)
    if op.operands[1].type != i32:
        rank = emit_native.cast(em, rank, op.operands[1].type, i32)
    return [in_cta(em, op, src, rank, op.result.name_hint)]


def in_cta(em, op, src, rank, name: str | None = None):
    """``src`` (a BufferRef of shared memory or a BarrierRef of this CTA) at the same offset
    in the cluster's CTA of ``rank`` (an i32 value or int)."""
    b, frame, ctas = em.b, em.frame, em.mc.units.ctas
    rank = ir.Constant(I32, rank) if isinstance(rank, int) else rank
    what = src.name
    site = em.mc.add_site("bounds", op, buffer=f"CTA ranks of the cluster (tj.remote({what}))",
                          scope="cluster", rank=1, access="tj.remote")
    em.fail_unless(b.icmp_unsigned("<", rank, ir.Constant(I32, ctas)), abi.OUT_OF_BOUNDS,
                   site, [b.sext(rank, I64)], [ctas])

    def peer(kind: int, own):
        if ctas == 1:   # the only CTA is rank 0: its own arenas (there is no peers table)
            return own
        return b.load(ctx_peer(b, frame.ctx, kind, rank, ctas), typ=PTR)

    data, sync = peer(PEER_DATA, frame.data), peer(PEER_SYNC, frame.sync)
    if isinstance(src, BufferRef):
        offset = b.sub(b.ptrtoint(src.ptr, I64), b.ptrtoint(frame.data, I64))
        return replace(src, ptr=em.byte_ptr(data, offset), arenas=(data, sync),
                       name=name or f"{what} of another CTA")
    offset = b.sub(b.ptrtoint(src.ptr, I64), b.ptrtoint(frame.sync, I64))
    return replace(src, ptr=em.byte_ptr(sync, offset), name=f"{what} of another CTA",
                   sync=sync)


HANDLERS = {"cluster_sync": emit_cluster_sync, "cluster_map": emit_cluster_map}
