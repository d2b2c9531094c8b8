"""The cuda printer's thread-block cluster ops (``ir/ops_cluster.py``), sm_90 on.

``cluster_sync`` is ``barrier.cluster.arrive`` (release) then ``barrier.cluster.wait``
(acquire), the forms without ``.aligned``: a kernel may reach it under a branch that
differs between a warp's threads.

``cluster_map`` of a shared buffer is a pointer made by ``mapa.u64`` (the generic address of
the same offset in the other CTA's shared memory, which plain loads and stores reach); of
mbarriers it prints nothing: ``mbarrier_arrive`` on it maps the barrier's shared address
with ``mapa.shared::cluster.u32`` and arrives with ``mbarrier.arrive.release.cluster.
shared::cluster``. Only arrivals reach another CTA's mbarriers (PTX waits on the CTA's own).
A rank known at compile time (a constant ``tj.remote`` rank, a multicast mask) must lie in
the kernel's cluster: ``check_ranks``.
"""
from __future__ import annotations

import math

from tilejit.errors import CompilationError
from tilejit.ir.core import Operation
from tilejit.ir.types import BarrierType

from .emit import CLUSTER_MIN_SM, CudaPrinter
from .emit_scalar import storage_type

__all__ = ["HANDLERS"]


def needs_clusters(p: CudaPrinter, op: Operation, what: str) -> None:
    if p.sm < CLUSTER_MIN_SM:
        raise CompilationError(f"{what} needs thread-block clusters (sm_{CLUSTER_MIN_SM} or "
                               f"later); compiling for {p.arch}", op.loc)


def check_ranks(p: CudaPrinter, op: Operation, ranks, what: str) -> None:
    """A GPU has no CTA of a rank past the cluster's (a write there faults or hangs): the
    ranks known at compile time must lie in it."""
    size = math.prod(p.kernel.attrs["cluster"])
    outside = [r for r in ranks if not 0 <= r < size]
    if outside:
        raise CompilationError(f"{what} names CTA rank {outside[0]}, outside the kernel's "
                               f"cluster of {size} CTA{'s' if size > 1 else ''} "
                               f"(cluster={tuple(p.kernel.attrs['cluster'])})", op.loc)


def _static_rank(op: Operation) -> list[int]:
    value = getattr(op.operands[1].owner, "attrs", {}).get("value")
    return [value] if isinstance(value, int) and op.operands[1].owner.name == "const" else []


def remote_barrier(p: CudaPrinter, op: Operation) -> str | None:
    """The shared::cluster address of the mbarrier ``mbarrier_arrive`` names through
    ``cluster_map``, or None for one of the CTA's own."""
    bar = op.operands[0]
    if getattr(bar.owner, "name", None) != "cluster_map":
        return None   # (the verifier lets only mbarrier_arrive take another CTA's)
    needs_clusters(p, op, "tj.remote(...)")
    src, rank = bar.owner.operands
    return f"tj_mapa_shared(&{p[src]}[{p[op.operands[1]]}], {p[rank]})"


def print_cluster_map(p: CudaPrinter, op: Operation) -> None:
    needs_clusters(p, op, "tj.remote(...)")
    check_ranks(p, op, _static_rank(op), "tj.remote(...)")
    if isinstance(op.result.type, BarrierType):
        return   # its mbarrier_arrive maps the address (remote_barrier)
    src, rank = op.operands
    name = p.fresh(op.result.name_hint or f"{p[src]}_remote")
    ctype = storage_type(src.type.dtype)
    p.emit(f"{ctype}* const {name} = tj_mapa({p[src]}, {p[rank]});")
    p.names[op.result] = name


def print_cluster_sync(p: CudaPrinter, op: Operation) -> None:
    needs_clusters(p, op, "tj.cluster_sync()")
    p.emit('asm volatile("barrier.cluster.arrive;\\n\\tbarrier.cluster.wait;" ::: "memory");')


HANDLERS = {"cluster_sync": print_cluster_sync, "cluster_map": print_cluster_map}
