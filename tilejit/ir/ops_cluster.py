"""Catalogue entries: thread-block clusters (sm_90 on).

``cluster_sync`` is the cluster-wide barrier: every thread of every CTA of the cluster
arrives (releasing its earlier memory accesses, shared memory of other CTAs included) and
waits until all have (acquiring theirs) -- PTX ``barrier.cluster.arrive`` then
``barrier.cluster.wait``. It is also a CTA barrier. A CTA's rank in its cluster is the
``thread_index`` kind ``cta_rank_in_cluster`` (``ops_native``).

``cluster_map(src, rank)`` is distributed shared memory: ``src`` (a shared buffer this CTA
allocated, or its mbarriers) as it lies in the CTA of ``rank`` in the cluster -- the same
offset in that CTA's shared memory (PTX ``mapa``). The result has ``src``'s type and is a
root buffer of its own (its storage is the other CTA's): element accesses and copies go
through it as through ``src``, and ``mbarrier_arrive`` on mapped barriers arrives on the
other CTA's (``mbarrier.arrive.shared::cluster``). The rank must name a CTA of the cluster
(unchecked here: the launch's cluster shape is not the IR's).
"""
from __future__ import annotations

from .opdef import OpGroup, register
from .ops_native import fixed, same_as
from .types import BarrierType, BufferType, MemScope

__all__ = ["CTA_BARRIERS"]

# Ops every thread of the CTA passes together, ordering all their shared-memory accesses
CTA_BARRIERS = frozenset({"sync", "cluster_sync"})

register("cluster_sync", OpGroup.SYNC, results=fixed(),
         doc="cluster-wide barrier: every thread of every CTA of the cluster arrives, then "
             "waits for all (release / acquire, shared memory of the cluster included)")


def _check_cluster_map(op):
    src = op.operands[0]
    owner = getattr(src.owner, "name", None)
    if isinstance(src.type, BarrierType) and owner == "alloc_barrier":
        return None
    if isinstance(src.type, BufferType) and src.type.scope is MemScope.SHARED \
            and owner == "alloc":
        return None
    return (f"cluster_map maps a shared buffer this CTA allocates (alloc_shared) or its "
            f"mbarriers (alloc_barriers) into another CTA, not {src.type}"
            + ("" if owner in ("alloc", "alloc_barrier") else f" made by {owner or 'the kernel'}"))


register("cluster_map", OpGroup.MEMORY, "src:any rank:int", results=same_as(0),
         check=_check_cluster_map,
         doc="src (a shared alloc, or mbarriers) at the same offset in the shared memory of "
             "the cluster's CTA of rank `rank` (distributed shared memory, PTX mapa)")
