"""Simulated units: how many threads one unit of native code stands for.

The backend picks the coarsest granularity G in {cta, warpgroup, warp, thread} at which
all native code is uniform, from the ``thread_index`` kinds the kernel uses: ``lane_id``
or ``thread_id`` -> thread, ``warp_id``/``warp_id_in_wg``/``elect_sync`` -> warp,
``warpgroup_id`` -> warpgroup, none -> cta. A unit stands for every active thread of its
team; side effects that count threads are scaled by that number
(:func:`threads_per_unit`).

``mma_sync``, ``ldmatrix_at`` and ``stmatrix_at`` make G = thread: each lane holds its own
part of the matrices.

An atomic whose old value is used makes G = thread: the threads a coarser unit stood for
would each have seen another old value. An unused one is exact at any G (adds are scaled;
max, min, xchg and compare-and-swap give the same memory however often they repeat).

``elect_sync`` keeps a warp-unit only when it is used as the condition of ``if`` ops
with an ``elect`` filter and no results: the unit then runs the then-branch for the
elected lane and the else-branch for the others. Any other use makes G = thread.

How units run is in ``frames``: one unit per CTA is a plain function, several are
coroutines resumed by a per-CTA scheduler. The CTAs of a cluster (``ctas`` > 1) run
together: one scheduler resumes the units of all of them, so that a cluster barrier and
one CTA waiting on another's shared memory work as on a GPU.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.core import KernelIR, Operation
from tilejit.ir.ops_native import ATOMIC_ACCESSES
from tilejit.ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP, ActiveSet
from tilejit.ir.types import TeamKind

from .types import I32

THREAD, WARP, WARPGROUP, CTA = TeamKind.THREAD, TeamKind.WARP, TeamKind.WARPGROUP, TeamKind.CTA
GRANULARITY_OF_INDEX = {"lane_id": THREAD, "thread_id": THREAD, "warp_id": WARP,
                        "warp_id_in_wg": WARP, "warpgroup_id": WARPGROUP}
_TEAM_THREADS = {THREAD: 1, WARP: LANES_PER_WARP, WARPGROUP: LANES_PER_WARP * WARPS_PER_WARPGROUP}


# --------------------------------------------------------------------------- granularity
def natural_granularity(kernel: KernelIR) -> TeamKind:
    users = defaultdict(list)
    for op in kernel.walk():
        for value in op.operands:
            users[value].append(op)
    granularity = CTA
    for op in kernel.walk():
        if op.name == "thread_index":
            granularity = min(granularity, GRANULARITY_OF_INDEX.get(op.attrs["kind"], CTA))
        elif op.name == "elect_sync":
            branch_only = all(_is_elect_branch(user, op.result) for user in users[op.result])
            granularity = min(granularity, WARP if branch_only else THREAD)
        elif op.name in ("mma_sync", "ldmatrix_at", "stmatrix_at"):
            granularity = THREAD  # each lane holds its own fragment values
        elif op.name in ATOMIC_ACCESSES and users[op.result]:
            granularity = THREAD  # each thread sees another old value
    return granularity


def _is_elect_branch(user: Operation, value) -> bool:
    spec = user.attrs.get("filter") if user.name == "if" else None
    return (spec is not None and spec.axis == "elect" and user.operands[0] is value
            and not user.results)


@dataclass(frozen=True)
class UnitModel:
    kind: TeamKind
    num_warps: int
    ctas: int = 1     # CTAs run together: the kernel's cluster (its barrier needs them all)

    @classmethod
    def for_kernel(cls, kernel: KernelIR, forced: TeamKind | None) -> UnitModel:
        natural = natural_granularity(kernel)
        if forced is not None and forced > natural:
            raise CompilationError(f"cannot simulate this kernel with {forced} units: its "
                                   f"native code differs between {natural}s", kernel.loc)
        return cls(forced or natural, kernel.attrs["num_warps"],
                   math.prod(kernel.attrs["cluster"]))

    def instances(self, team: TeamKind) -> int:
        """Team instances of kind ``team`` in one CTA."""
        if team > CTA:
            raise CompilationError(f"{team}-wide teams are not supported on the CPU target: "
                                   "its CTAs run independently")
        return {THREAD: LANES_PER_WARP * self.num_warps, WARP: self.num_warps,
                WARPGROUP: -(-self.num_warps // WARPS_PER_WARPGROUP), CTA: 1}[team]

    @property
    def count(self) -> int:
        return self.instances(self.kind)

    @property
    def scheduled(self) -> int:
        """Units run together: those of every CTA of a cluster."""
        return self.count * self.ctas

    @property
    def coroutine(self) -> bool:
        return self.scheduled > 1

    def units_per_team(self, team: TeamKind) -> int:
        """Units forming one team instance of ``team`` (1 when units are that coarse)."""
        if team <= self.kind:
            return 1
        if team is CTA:
            return self.count
        return _TEAM_THREADS[team] // _TEAM_THREADS[self.kind]

    def active_units(self, active: ActiveSet) -> list[int]:
        if self.kind is THREAD:
            lanes = [active.lanes[0]] if active.elected else list(active.lane_ids)
            return [w * LANES_PER_WARP + lane for w in active.warp_ids for lane in lanes]
        if self.kind is WARP:
            return list(active.warp_ids)
        if self.kind is WARPGROUP:
            return sorted({w // WARPS_PER_WARPGROUP for w in active.warp_ids})
        return [0]

    # ------------------------------------------------------------- thread ids
    def warp_id(self, b: ir.IRBuilder, unit):
        if self.kind is THREAD:
            return b.lshr(unit, ir.Constant(I32, 5))
        if self.kind is WARP:
            return unit
        raise AssertionError(f"warp id asked of {self.kind} units")

    def thread_index(self, b: ir.IRBuilder, kind: str, unit):
        if kind == "thread_id" and self.kind is THREAD:
            return unit
        if kind == "lane_id" and self.kind is THREAD:
            return b.and_(unit, ir.Constant(I32, LANES_PER_WARP - 1))
        if kind == "warp_id" and self.kind <= WARP:
            return self.warp_id(b, unit)
        if kind == "warp_id_in_wg" and self.kind <= WARP:
            return b.and_(self.warp_id(b, unit), ir.Constant(I32, WARPS_PER_WARPGROUP - 1))
        if kind == "warpgroup_id" and self.kind <= WARPGROUP:
            per_group = self.units_per_team(WARPGROUP)
            return b.udiv(unit, ir.Constant(I32, per_group)) if per_group > 1 else unit
        raise AssertionError(f"{kind} is not uniform in {self.kind} units")

    def warps_in_unit(self, b: ir.IRBuilder, unit, active: ActiveSet | None):
        """Active warps a unit covers (a Python int when static)."""
        if self.kind is WARP:
            return 1
        if self.kind is CTA:
            return len(active.warp_ids) if active is not None else self.num_warps
        full, rest = divmod(self.num_warps, WARPS_PER_WARPGROUP)
        if rest == 0 or self.count == 1:
            return min(self.num_warps, WARPS_PER_WARPGROUP)
        is_last = b.icmp_unsigned("==", unit, ir.Constant(I32, full))
        return b.select(is_last, ir.Constant(I32, rest), ir.Constant(I32, WARPS_PER_WARPGROUP))


def threads_per_unit(em):
    """How many threads the current unit stands for at this point (int when static)."""
    units, state, b = em.mc.units, em.state, em.b
    team = state.single_team
    if team is not None and units.kind < team:
        return 1  # a rendezvous single runs once for its whole team
    if units.kind is THREAD:
        return 1
    warps = units.warps_in_unit(b, em.frame.unit, state.active)
    if team is None or team is THREAD:
        return _times(b, warps, state.lanes)
    if team is WARP:
        return warps
    if team is WARPGROUP and units.kind is CTA:
        ids = state.active.warp_ids if state.active else range(units.num_warps)
        return len({w // WARPS_PER_WARPGROUP for w in ids})
    return 1


def _times(b, value, factor: int):
    if isinstance(value, int):
        return value * factor
    return b.mul(value, ir.Constant(I32, factor))


def instance_counts(units: UnitModel, active: ActiveSet, team: TeamKind) -> list[int]:
    """Active units per team instance (for rendezvous counts)."""
    per_team = units.units_per_team(team)
    counts = [0] * math.ceil(units.count / per_team)
    for unit in units.active_units(active):
        counts[unit // per_team] += 1
    return counts
