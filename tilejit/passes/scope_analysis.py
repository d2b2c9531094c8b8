"""Scope analysis: give every tile op the ExecScope it runs under (TIRx §4).

The pass walks the kernel body keeping the current team kind and active thread set. The
body starts at team ``cta`` with every thread of the cluster active.

* ``team`` ops switch the kind for their region. The switch is checked by decomposing the
  active set, so a non-uniform switch (warps ``[3, 7)`` into warpgroups) fails at the
  ``team`` op even when no tile op follows.
* ``if`` ops with a ``filter`` attribute narrow the active set in the then-branch (a range
  that is not a warps x lanes product, such as ``thread_id() < 100``, leaves the set "not
  statically representable", like the else-branch below, and so does a range no active
  thread is in: that branch is dead code, fine unless a tile op is in it). The
  else-branch gets the complement when that is again a representable set (``warp_id()
  == 0`` on warps ``[0, 4)`` leaves ``[1, 4)``); otherwise its set is marked "not
  statically representable": native ops are fine there, a tile op is a ScopeError that
  says why. An ``if`` without a filter is native control flow on run-time values; both
  branches inherit the scope (the paper leaves native control flow unrestricted), but a
  tile op under it must be reached by its whole team: when the condition can differ
  between the team's threads (``uniformity``), the tile op is a ScopeError. The same holds
  for ``for`` bounds and ``while`` conditions.
* ``for`` / ``while`` bodies and any other region inherit the scope.
* In a per-thread kernel a native element access (``t[i, j]``) of a fragment or local laid
  out over threads is a ScopeError unless the active threads are the one thread holding
  every element: each thread stores only its own elements (``place-fragments``), so
  another element would be read from, or written to, the thread's own slot.
* A warpgroup instruction (``setmaxnreg``: ``.sync.aligned``, every thread of the
  warpgroup at once) must sit at team ``warpgroup`` (``with tj.warpgroup():``), under
  control flow uniform over each warpgroup, with whole warpgroups active.
* Each ``tile.*`` op gets ``scope = ExecScope(kind, active, inter, intra)``, where the kind
  is the op's own ``team`` attribute (a scoped spelling such as ``tj.wg.copy``) or else
  the current kind.

The IR is rebuilt functionally: every op is recreated with ``op.replace`` and uses are
remapped through a value map, so the input kernel is left untouched. This is a plain
top-down walk rather than a ``Rewriter`` pattern set because the scope flows down from the
enclosing ops *and* depends on which branch of an ``if`` an op sits in, which a pattern
(seeing only its parent ops) cannot tell.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import ScopeError, TilejitError, reraise_located
from ..ir.core import Block, KernelIR, Operation, Value
from ..ir.opdef import OpGroup
from ..ir.scope import (LANES_PER_WARP, WARPS_PER_WARPGROUP, ActiveSet, ExecScope,
                        decompose, describe_filter)
from ..ir.ops_native import ACCESS_OPS
from ..ir.storage import layout_reach, on_threads
from ..ir.types import BufferType, MemScope, RegionType, TeamKind
from ..layout import Axis, AxisKind
from .dispatch.call import operand_names
from .dispatch.registry import PER_THREAD, context_for
from .effects import root_buffer
from .ownership import owners_at
from .uniformity import uniform_within

__all__ = ["run", "ScopeState", "entry_state"]

WARPGROUP_OPS = frozenset({"setmaxnreg"})


@dataclass(frozen=True)
class ScopeState:
    """The scope at a program point. ``active is None`` means the active threads are not
    statically representable; ``why`` then says which construct made them so."""

    kind: TeamKind
    active: ActiveSet | None
    why: str = ""
    # The enclosing native control flow is the same for every thread only within teams of
    # this kind (``steered_by`` names the construct that made it so).
    uniform: TeamKind = TeamKind.CLUSTER
    steered_by: str = ""


def entry_state(kernel: KernelIR) -> ScopeState:
    """Team ``cta``, everything active: the scope at the top of a kernel body."""
    cluster_size = math.prod(kernel.attrs["cluster"])
    return ScopeState(TeamKind.CTA, ActiveSet.entry(kernel.attrs["num_warps"], cluster_size))


def run(kernel: KernelIR) -> KernelIR:
    """The kernel with a ``scope`` attribute on every tile op."""
    per_thread = context_for(kernel).distribution == PER_THREAD
    annotator = _Annotator(uniform_within(kernel), thread_counts(kernel), per_thread)
    body = annotator.block(kernel.body, entry_state(kernel))
    return kernel.replace(body=body)


def thread_counts(kernel: KernelIR) -> dict[str, int]:
    """Per thread axis of the layouts, how many coordinates the kernel's CTA has on it
    (the grid's axes are known only at launch, so they are not listed)."""
    warps = kernel.attrs["num_warps"]
    in_wg = min(warps, WARPS_PER_WARPGROUP)
    cx, cy, cz = kernel.attrs["cluster"]
    return {"laneid": LANES_PER_WARP, "warpid": warps, "wid_in_wg": in_wg,
            "tid_in_wg": LANES_PER_WARP * in_wg, "wgid": max(1, warps // WARPS_PER_WARPGROUP),
            "tx": LANES_PER_WARP * warps, "cbx": cx, "cby": cy, "cbz": cz}


def check_thread_axes(layout, counts: dict[str, int]) -> None:
    """A ScopeError when ``layout`` places elements on thread coordinates the kernel does
    not have (warp 5 of a 4-warp CTA): no thread would hold them on a GPU."""
    tile = getattr(layout, "tile_layout", layout)
    for axis in tile.axes:
        count = counts.get(axis.name)
        if count is None:
            continue
        iters = [it for it in tile.shard + tile.replica if it.axis is axis]
        base = tile.offset.get(axis.name, 0)
        low = base + sum(min(0, (it.extent - 1) * it.stride) for it in iters)
        high = base + sum(max(0, (it.extent - 1) * it.stride) for it in iters)
        if low < 0 or high >= count:
            raise ScopeError(f"the layout {layout} places elements on {axis.name} {low}..{high}"
                             f", but the kernel has {axis.name} 0..{count - 1} (num_warps="
                             f"{counts['warpid']}): no thread would hold them")


def check_native_access(op: Operation, state: ScopeState) -> None:
    """A ScopeError when native access ``op`` may reach an element of a buffer laid out
    over threads that the accessing thread does not hold (per-thread kernels)."""
    root = root_buffer(op.operands[0])
    t = root.type
    if t.scope not in (MemScope.FRAGMENT, MemScope.LOCAL) or not on_threads(t.layout):
        return
    tile = getattr(t.layout, "tile_layout", t.layout)
    one_place = all(low == high for axis, (low, high) in layout_reach(tile).items()
                    if Axis(axis).kind is AxisKind.THREAD)   # on one thread (and replicas)
    active = state.active
    if one_place and active is not None and owners_at(t.layout, 0) == {
            (lane, warp) for lane in active.lane_ids for warp in active.warp_ids}:
        return   # only threads holding every element run it
    name = f"'{root.name_hint}'" if root.name_hint else "tile"
    raise ScopeError(f"element access ({op.name}) of the {t.scope} {name} laid out over "
                     f"threads by {t.layout}: per thread, each thread holds only the elements "
                     "that layout gives it, so this thread may not hold the element. Use an "
                     "unlaid-out fragment (tj.fragment(shape, dtype)) or a shared buffer "
                     "(tj.alloc_shared) for element access, or tile primitives on this one")


def check_warpgroup_op(op: Operation, state: ScopeState) -> None:
    """A ScopeError unless every thread of whole warpgroups reaches ``op`` together."""
    if state.kind is not TeamKind.WARPGROUP:
        raise ScopeError(f"{op.name} is run by a whole warpgroup at once, but here the team is "
                         f"{state.kind}: put it under `with tj.warpgroup():`")
    if state.uniform < TeamKind.WARPGROUP:
        raise ScopeError(f"{op.name} needs every thread of its warpgroup, but {state.steered_by} "
                         f"can differ between them (it is the same only within each "
                         f"{state.uniform})")
    if state.active is None or not state.active.whole_warpgroups:
        where = state.why if state.active is None else \
            f"the active threads are {state.active.describe()}"
        raise ScopeError(f"{op.name} needs every thread of each warpgroup it runs in, but {where}")


class _Annotator:
    def __init__(self, uniform: dict[Value, TeamKind], thread_counts: dict[str, int],
                 per_thread: bool):
        self.values: dict[Value, Value] = {}  # old value -> its counterpart in the new IR
        self.uniform = uniform                # old value -> the team it is uniform within
        self.thread_counts = thread_counts    # thread axis -> how many coordinates exist
        self.per_thread = per_thread          # native accesses of laid-out tiles are checked

    def block(self, block: Block, state: ScopeState) -> Block:
        new = Block(tuple(Value(arg.type, arg.name_hint) for arg in block.args))
        self.values.update(zip(block.args, new.args))
        for op in block.ops:
            new.ops.append(self.op(op, state))
        return new

    def op(self, op: Operation, state: ScopeState) -> Operation:
        try:
            region_states = self.region_states(op, state)
            attrs = {}
            if op.opdef.group is OpGroup.TILE:
                attrs["scope"] = tile_scope(op, state)
                self.check_same_tiles(op, attrs["scope"].kind)
            elif op.name in ("alloc", "view") and op.attrs["layout"] is not None:
                check_thread_axes(op.attrs["layout"], self.thread_counts)
            elif op.name in ACCESS_OPS and self.per_thread:
                check_native_access(op, state)
            elif op.name in WARPGROUP_OPS:
                check_warpgroup_op(op, state)
        except TilejitError as err:
            reraise_located(err, op.loc)
        regions = [self.block(region, region_state)
                   for region, region_state in zip(op.regions, region_states)]
        new = op.replace(operands=[self.values.get(v, v) for v in op.operands],
                         attrs=attrs, regions=regions)
        self.values.update(zip(op.results, new.results))
        return new

    def check_same_tiles(self, op: Operation, kind: TeamKind) -> None:
        """Every thread of the team must name the same tiles and scalars: a tile whose
        window starts at a per-warp or per-thread position would be read or written once,
        with one thread's start (``x[tj.warp_id() * 16:...]`` at team cta), and a scalar
        that differs per thread (``tj.add(t, t, tj.lane_id())``) would be one thread's."""
        primitive = op.name.removeprefix("tile.")
        if primitive == "pointwise":   # users wrote tj.add, tj.exp...
            primitive = op.attrs["op"]
        for name, value in zip(operand_names(op.name.removeprefix("tile."), op.attrs,
                                             len(op.operands)), op.operands):
            uniform = self.uniform.get(value, TeamKind.CLUSTER)
            if uniform >= kind:
                continue
            what = (f"its {name} tile starts at a position" if isinstance(
                value.type, (BufferType, RegionType)) else f"its scalar operand {name} is a value")
            raise ScopeError(
                f"tj.{primitive} runs at team {kind}, but {what} that differs between the "
                f"threads of one {kind} (it is the same only within each {uniform}). Run the "
                f"primitive at that team (`tj.{uniform}.{primitive}(...)` or "
                f"`with tj.{uniform}():`), or compute it from values the whole {kind} shares")

    def region_states(self, op: Operation, state: ScopeState) -> list[ScopeState]:
        """The scope inside each region of ``op``."""
        if op.name == "team":
            kind = op.attrs["kind"]
            if state.active is not None:
                decompose(state.active, kind)  # raises on a non-uniform switch
            return [replace(state, kind=kind)]
        if op.name == "if" and op.attrs.get("filter") is not None:
            return list(filter_states(op.attrs["filter"], state))
        steering = {"if": op.operands[:1], "for": op.operands[:3],
                    "while": _loop_condition(op)}.get(op.name, ())
        uniform = min((self.uniform.get(v, TeamKind.CLUSTER) for v in steering),
                      default=TeamKind.CLUSTER)
        if uniform < state.uniform:
            what = {"if": "the condition of the `if`", "for": "the bounds of the `for` loop",
                    "while": "the condition of the `while` loop"}[op.name]
            state = replace(state, uniform=uniform,
                            steered_by=f"{what} at line {op.loc.line}")
        return [state] * len(op.regions)


def filter_states(spec, state: ScopeState) -> tuple[ScopeState, ScopeState]:
    """(then, else) scopes of an ``if`` whose condition is the thread filter ``spec``."""
    if state.active is None:
        return state, state
    text = describe_filter(spec.axis, spec.lo, spec.hi)
    try:
        then_state = replace(state, active=state.active.narrow(spec.axis, spec.lo, spec.hi))
    except ScopeError as err:
        # Not representable (`if thread_id() < 100` cuts a warp), or no thread at all (a
        # filter nested in a contradicting one: dead code): fine for native code.
        then_state = replace(state, active=None, why=f"in the then-branch of `if {text}`: "
                                                     f"{err.message}")
    try:
        else_state = replace(state, active=state.active.complement(spec.axis, spec.lo, spec.hi))
    except ScopeError as err:
        else_state = replace(state, active=None, why=f"in the else-branch of `if {text}`: "
                                                     f"{err.message}")
    return then_state, else_state


def _loop_condition(op: Operation) -> tuple:
    condition = op.regions[0].terminator if op.name == "while" else None
    return condition.operands[:1] if condition is not None else ()


def tile_scope(op: Operation, state: ScopeState) -> ExecScope:
    """The ExecScope of tile op ``op`` under ``state``."""
    kind = state.kind if op.attrs.get("team") is None else op.attrs["team"]
    if state.uniform < kind:
        raise ScopeError(
            f"{op.name} runs at team {kind}, but {state.steered_by} can differ between the "
            f"threads of one {kind} (it is the same only within each {state.uniform}), so "
            "part of the team would reach the primitive without the rest. Steer it with a "
            "thread filter on one axis (`if tj.warp_id() == 0:`; nest `if A:` / `if B:` "
            "instead of `if A and B:` with an `else`), or run it at a finer team "
            f"(`with tj.{state.uniform}():`)")
    if state.active is None:
        raise ScopeError(f"{op.name} needs a statically known set of active threads, but "
                         f"{state.why}. Move the tile primitive out of this branch, or give "
                         "it its own filter (e.g. an `if` with the complementary range)")
    return ExecScope.of(kind, state.active)
