"""sync-hazards: cross-thread races on shared memory and fragments, fixed or refused.

TIRx leaves synchronization to the kernel's schedule: nothing orders two tile primitives,
or a primitive and a native access, unless a barrier does. The CPU's ``team_once``
lowering would hide a missing barrier (each primitive is a rendezvous there); a GPU would
not. This pass finds every such hazard on the tile IR, after scope analysis (every tile op
knows its team and active threads), and before fusion, so that errors name the user's own
lines and fusion sees the barriers it must not fold across.

Model (docs/lowering.md "Synchronization hazards"):

* An **access** is (buffer, the threads that perform it, read or write, line). A tile
  primitive run by team T is performed by T's active threads, and which thread touches
  which element is decided later (dispatch), so any thread of the team may touch any
  element of its operands. A native ``load``/``store`` is performed by every active thread
  at that point, each at its own indices. Only shared buffers and fragments count (global
  memory, locals and atomics are out of the model). An access through a region of the
  buffer reaches only that region: along each dimension where the region starts at a
  compile-time constant, its elements lie in [start, start + size) (a start known only at
  run time, or a view, reaches anywhere), so that consumers writing their own constant
  slices of one buffer do not race, while slices that overlap still do.
* A **hazard** is two accesses to overlapping parts of the same buffer, at least one a
  write, that two different
  threads may make, with no barrier ordering them on some path. For a fragment, threads
  differ only when the two accesses' active sets differ (a fragment's elements stay with
  the threads its layout names) -- except, where primitives split per thread, a fragment
  not laid out over threads: a cyclic split hands its elements to other threads from one
  primitive to the next, so it races as shared memory does. Two accesses by one and the same thread, or by one op
  repeated with the same threads, or native accesses of the same threads at the same
  index values, do not race.
* **Barriers**: ``sync`` orders everything before it; a ``single {team = K}`` rendezvous
  orders accesses whose threads lie in one K instance among its active threads; an
  mbarrier orders an access whose threads then arrive on it (``mbarrier_arrive``,
  ``mbarrier_expect_tx {arrive}``, or an async copy that completes on it) before the
  accesses of threads that then wait on it. The phase and the index are not compared: any
  wait on the same barrier array counts, so pipelines never see a false race.
* **Paths**: the branches of an ``if`` whose condition differs between a CTA's threads run
  concurrently, so each is checked after the other; a loop body is walked until its
  pending accesses settle, so iteration i's write meets iteration i+1's read.

With ``auto_sync`` (the kernel option, default on) each hazard gets the narrowest barrier
that orders it (``sync`` when the threads span warpgroups, an empty ``single {team =
warpgroup}`` or ``single {team = warp}`` -- a named barrier or a warp sync on a GPU --
within one) at the latest point before the second access where every thread involved
arrives and control flow is uniform over that team (hoisted out of loops the first access
is not in); the barrier's ``reason`` attribute says why. Where no such point exists (the
accesses sit in divergent or thread-filtered code, where a barrier would deadlock) the
hazard is a :class:`SyncHazardError` naming both lines; with ``auto_sync=False`` every
hazard is.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import CompilationError
from ..ir.core import Block, KernelIR, Operation, Value
from ..ir.opdef import OpGroup
from ..ir.ops_cluster import CTA_BARRIERS
from ..ir.scope import WARPS_PER_WARPGROUP, ActiveSet, describe_filter
from ..ir.types import BufferType, MemScope, RegionType, TeamKind
from ..layout.axes import AxisKind
from .dispatch.registry import PER_THREAD, context_for
from .effects import root_buffer, spin_flags
from .scope_analysis import ScopeState, entry_state, filter_states
from .uniformity import uniform_within

__all__ = ["Access", "Hazard", "SyncHazardError", "find_hazards", "run"]

_TRACKED = (MemScope.SHARED, MemScope.FRAGMENT)
_LOOPS = frozenset({"for", "while"})
_FLAG_OPS = frozenset({"load", "store", "atomic", "atomic_cas"})
# where an async primitive's (barrier, index) operands start: it completes on that barrier
_BARRIER_OPERAND = {"tile.copy_async": 2, "tile.gemm_async": 3}
_MAX_BARRIERS = 256                          # insertions before we call it a compiler bug


class SyncHazardError(CompilationError):
    """Two accesses race, and no barrier was (or could be) inserted between them."""


# ----------------------------------------------------------------------------- accesses
@dataclass(frozen=True, eq=False)
class Access:
    """One buffer that one op reads or writes, and who does it."""

    op: Operation
    root: Value                    # the alloc (or block argument) the buffer comes from
    threads: ActiveSet | None      # None: not statically known
    team: TeamKind                 # the primitive's team; THREAD for native accesses
    write: bool
    extent: tuple | None = None    # the part of root it reaches (`_extent`)

    @property
    def scope(self) -> MemScope:
        return _buffer_type(self.root).scope

    @property
    def native(self) -> bool:
        return self.op.opdef.group is not OpGroup.TILE

    def describe(self) -> str:
        verb = "written" if self.write else "read"
        who = ("by each thread" if self.native else f"by tj.{self.op.name.removeprefix('tile.')} "
               f"at team {self.team}")
        threads = "threads not statically known" if self.threads is None \
            else self.threads.describe()
        return f"{verb} at line {self.op.loc.line} {who} ({threads})"


def _on_threads(root: Value) -> bool:
    """Whether the buffer's layout places its elements on thread axes."""
    layout = _buffer_type(root).layout
    tile = getattr(layout, "tile_layout", layout)
    return tile is not None and any(axis.kind is AxisKind.THREAD for axis in tile.axes)


def buffer_name(root: Value) -> str:
    kind = str(_buffer_type(root).scope)
    owner = root.owner
    line = f" allocated at line {owner.loc.line}" if isinstance(owner, Operation) else ""
    return f"{kind} buffer {root.name_hint}" if root.name_hint else f"{kind} buffer{line}"


def _buffer_type(value: Value) -> BufferType:
    t = value.type
    return t.buffer if isinstance(t, RegionType) else t




def _extent(value: Value) -> tuple | None:
    """The part of its root buffer that ``value`` names, per dimension of the root: ``(start,
    stop)`` where a region starts at a compile-time constant, None along a dimension whose
    start is known only at run time; None for all of it (the root itself, or a region of a
    view, which reshapes)."""
    owner = value.owner
    if not isinstance(owner, Operation) or owner.name != "region" \
            or root_buffer(owner.operands[0]) is not owner.operands[0]:
        return None
    starts = (_constant(start) for start in owner.operands[1:])
    return tuple(None if start is None else (start, start + size)
                 for start, size in zip(starts, owner.attrs["sizes"]))


def _constant(value: Value) -> int | None:
    owner = value.owner
    return owner.attrs["value"] if isinstance(owner, Operation) and owner.name == "const" \
        else None


def _apart(a: tuple | None, b: tuple | None) -> bool:
    """Whether two extents of one buffer share no element: some dimension where both are
    known at compile time and their ranges do not meet."""
    return a is not None and b is not None and any(
        x is not None and y is not None and (x[1] <= y[0] or y[1] <= x[0])
        for x, y in zip(a, b))


def _tracked(value: Value) -> bool:
    return isinstance(value.type, (BufferType, RegionType)) and \
        _buffer_type(value).scope in _TRACKED


def accesses(op: Operation, state: ScopeState) -> list[Access]:
    """The tracked accesses ``op`` makes (the memory an element or tile atomic updates is
    left out: the atomic is the synchronization; a tile atomic's source is a plain read)."""
    if op.opdef.group is OpGroup.TILE:
        scope = op.attrs["scope"]
        out = []
        for index, value in enumerate(op.operands):
            if not _tracked(value) or (index == 0 and op.name == "tile.atomic"):
                continue
            root, part = root_buffer(value), _extent(value)
            if index == 0:      # every primitive's first operand is the one it writes
                out.append(Access(op, root, scope.active, scope.kind, True, part))
            if index > 0 or op.name in ("tile.gemm", "tile.gemm_async"):
                out.append(Access(op, root, scope.active, scope.kind, False, part))
        return out
    if op.name in ("load", "store") and _tracked(op.operands[0]):
        buf = op.operands[0]
        return [Access(op, root_buffer(buf), state.active, TeamKind.THREAD, op.name == "store",
                       _extent(buf))]
    return []


def _indices(op: Operation) -> tuple:
    return tuple(op.operands[2:] if op.name == "store" else op.operands[1:])


# ----------------------------------------------------------------------------- thread sets
def _within(inner: ActiveSet | None, outer: ActiveSet | None) -> bool:
    """Every thread of ``inner`` is in ``outer``."""
    if inner is None or outer is None:
        return False
    return (set(inner.warp_ids) <= set(outer.warp_ids)
            and outer.lanes[0] <= inner.lanes[0] and inner.lanes[1] <= outer.lanes[1]
            and outer.ctas[0] <= inner.ctas[0] and inner.ctas[1] <= outer.ctas[1]
            and (inner.elected or not outer.elected))


def _one_thread(threads: ActiveSet | None) -> bool:
    return (threads is not None and threads.num_threads == 1
            and threads.ctas[1] - threads.ctas[0] == 1)


def _barrier_kind(a: Access, b: Access) -> TeamKind:
    """The barrier that orders ``a`` and ``b``: the narrowest team one of whose instances
    holds the threads of both, short of the CTA (a warpgroup barrier over all of a CTA's
    warps is its ``sync``)."""
    if a.threads is None or b.threads is None:
        return TeamKind.CTA
    return _team_holding(a.threads, b.threads)


def _team_holding(a: ActiveSet, b: ActiveSet) -> TeamKind:
    warps = set(a.warp_ids) | set(b.warp_ids)
    if len(warps) == 1 and a.num_warps > 1:
        return TeamKind.WARP
    if len({w // WARPS_PER_WARPGROUP for w in warps}) == 1 and a.num_warps > WARPS_PER_WARPGROUP:
        return TeamKind.WARPGROUP
    return TeamKind.CTA


def _may_race(a: Access, b: Access, elements_move: bool) -> bool:
    """Whether two different threads may make ``a`` and ``b`` (same buffer, one a write).
    ``elements_move``: the kernel splits primitives per thread, so the elements of a
    fragment not laid out over threads go to other threads from one primitive to the next
    (a cyclic split of a copy in 16-element chunks, then of a row reduction), as shared
    memory's do; a fragment laid out over threads keeps each element with its owners."""
    if a.scope is MemScope.FRAGMENT and not (elements_move and not _on_threads(a.root)):
        return a.threads != b.threads
    if a.threads is not None and a.threads == b.threads:
        if _one_thread(a.threads):
            return False
        if a.op is b.op and a.team is b.team:    # the same op, split over threads alike
            return False
        if a.native and b.native and _indices(a.op) == _indices(b.op):
            return False                         # each thread at its own index
    return True


# ----------------------------------------------------------------------------- pending state
@dataclass(frozen=True)
class _Pending:
    """An access not yet ordered by a CTA barrier, and what has ordered it since."""

    access: Access
    fences: frozenset = frozenset()     # (team kind, active set) rendezvous passed since
    released: frozenset = frozenset()   # mbarriers its threads arrived on since
    acquired: frozenset = frozenset()   # thread sets that waited on one of those since
    waited: frozenset = frozenset()     # mbarriers its threads had waited on before it

    def orders(self, later: Access) -> bool:
        first = self.access
        for kind, active in self.fences:
            if (_within(first.threads, active) and _within(later.threads, active)
                    and _team_holding(first.threads, later.threads) <= kind):
                return True
        return any(_within(later.threads, waiter) for waiter in self.acquired)

    def merge(self, other: "_Pending") -> "_Pending":
        return replace(self, fences=self.fences & other.fences,
                       released=self.released & other.released,
                       acquired=self.acquired & other.acquired,
                       waited=self.waited & other.waited)


# The walk's state: (op, index) -> _Pending for every access no CTA barrier has ordered
# yet, and under _WAITS the (mbarrier, waiting threads) waits made since that barrier.
_WAITS = "waits"


def _records(state: dict):
    return ((k, p) for k, p in state.items() if k != _WAITS)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, pending in b.items():
        if key == _WAITS:
            out[key] = a.get(key, frozenset()) & pending
        else:
            out[key] = out[key].merge(pending) if key in out else pending
    if _WAITS in a and _WAITS not in b:
        out[_WAITS] = frozenset()
    return out


@dataclass(frozen=True, eq=False)
class Hazard:
    """``first`` then ``second`` may race; ``kind`` is the barrier that orders them."""

    first: Access
    second: Access
    kind: TeamKind

    def describe(self) -> str:
        return (f"{buffer_name(self.first.root)} is {self.first.describe()}, then "
                f"{self.second.describe()}, with no barrier between them that both "
                "sets of threads pass")


# ----------------------------------------------------------------------------- the walk
class _Walker:
    """Walks the kernel once, collecting hazards in the order they are met."""

    def __init__(self, kernel: KernelIR):
        self.uniform = uniform_within(kernel)
        self.hazards: list[Hazard] = []
        self.seen: set[tuple[Operation, Operation]] = set()
        self.tentative: dict[tuple[Operation, Operation], tuple[Hazard, frozenset]] = {}
        self.resolved: set[tuple[Operation, Operation]] = set()
        self.state_of: dict[Block, ScopeState] = {}
        self.parent: dict[Block, Operation | None] = {kernel.body: None}
        self.block_of: dict[Operation, Block] = {}
        self.relevant: set[Operation] = set()
        self._index(kernel.body)
        self.flags = spin_flags(kernel)
        self.elements_move = context_for(kernel).distribution == PER_THREAD

    def _index(self, block: Block) -> bool:
        any_relevant = False
        for op in block.ops:
            self.block_of[op] = block
            inner = False
            for region in op.regions:
                self.parent[region] = op
                inner |= self._index(region)
            if inner or self._is_relevant(op):
                self.relevant.add(op)
                any_relevant = True
        return any_relevant

    @staticmethod
    def _is_relevant(op: Operation) -> bool:
        return (op.name in ("single", "mbarrier_arrive", "mbarrier_expect_tx",
                            "mbarrier_wait", *CTA_BARRIERS)
                or any(_tracked(v) for v in op.operands[:1 if op.name in ("load", "store")
                                                        else len(op.operands)]))

    # -- blocks and ops
    def block(self, block: Block, state: ScopeState, pending: dict) -> dict:
        self.state_of.setdefault(block, state)
        for op in block.ops:
            if op in self.relevant:
                pending = self.op(op, state, pending)
        return pending

    def op(self, op: Operation, state: ScopeState, pending: dict) -> dict:
        name = op.name
        if name in CTA_BARRIERS:
            return {}
        if name == "single":
            pending = self.fence(op.attrs["team"], state.active, pending)
            pending = self.block(op.regions[0], state, pending)
            return self.fence(op.attrs["team"], state.active, pending)
        if name == "mbarrier_arrive" or (name == "mbarrier_expect_tx" and op.attrs["arrive"]):
            return self.release(op.operands[0], state.active, pending)
        if name == "mbarrier_wait":
            return self.acquire(op.operands[0], state.active, pending)
        if name in _FLAG_OPS and _tracked(op.operands[0]) and root_buffer(op.operands[0]) in self.flags:
            return self.flag(op, state, pending)
        if name in _LOOPS:
            return self.loop(op, state, pending)
        if name == "if":
            return self.branches(op, state, pending)
        if op.regions:   # team, ...
            for region, region_state in zip(op.regions, self.region_states(op, state)):
                pending = self.block(region, region_state, pending)
            return pending
        return self.access(op, state, pending)

    def access(self, op: Operation, state: ScopeState, pending: dict) -> dict:
        made = accesses(op, state)
        first = _BARRIER_OPERAND.get(op.name)   # an async primitive completing on an mbarrier
        barrier = op.operands[first] if first is not None and len(op.operands) > first else None
        for later in made:
            for _, earlier in list(_records(pending)):
                first = earlier.access
                if first.root is not later.root or not (first.write or later.write) \
                        or _apart(first.extent, later.extent):
                    continue
                if _may_race(first, later, self.elements_move) and not earlier.orders(later):
                    self.check(Hazard(first, later, _barrier_kind(first, later)),
                               earlier.waited, barrier)
        pending = dict(pending)
        waits = pending.get(_WAITS, frozenset())
        for index, made_access in enumerate(made):
            released = frozenset({barrier}) if barrier is not None else frozenset()
            waited = frozenset(bar for bar, who in waits if _within(made_access.threads, who))
            pending[(op, index)] = _Pending(made_access, released=released, waited=waited)
        return pending

    def check(self, hazard: Hazard, waited: frozenset, barrier: Value | None) -> None:
        """Report ``hazard``, unless the walk met its accesses in an order no run has: the
        first one's threads had waited on an mbarrier that the second one (run once, in no
        loop) then completes -- an async copy on that barrier, or its threads' later
        arrive (that case stays tentative until the arrive is seen)."""
        second = hazard.second.op
        if waited and not any(o.name in _LOOPS for o in self.enclosing(second)[1:]):
            if barrier is not None and barrier in waited:
                return
            self.tentative.setdefault((hazard.first.op, second), (hazard, waited))
            return
        self.report(hazard)

    def report(self, hazard: Hazard) -> None:
        key = (hazard.first.op, hazard.second.op)
        if key not in self.seen:
            self.seen.add(key)
            self.hazards.append(hazard)

    def result(self) -> list[Hazard]:
        """The hazards met, then the tentative ones no arrive resolved."""
        late = [h for key, (h, _) in self.tentative.items()
                if key not in self.resolved and key not in self.seen]
        return self.hazards + late

    # -- barriers
    @staticmethod
    def fence(kind: TeamKind, active: ActiveSet | None, pending: dict) -> dict:
        if kind >= TeamKind.CTA and _covers_cta(active):
            return {}
        return {k: p if k == _WAITS else replace(p, fences=p.fences | {(kind, active)})
                for k, p in pending.items()}

    def release(self, barrier: Value, active: ActiveSet | None, pending: dict) -> dict:
        out = dict(pending)
        for key, p in _records(pending):
            if _within(p.access.threads, active):
                out[key] = replace(p, released=p.released | {barrier})
                self.resolved.update(pair for pair, (_, waited) in self.tentative.items()
                                     if pair[1] is key[0] and barrier in waited)
        return out

    @staticmethod
    def acquire(barrier: Value, active: ActiveSet | None, pending: dict) -> dict:
        out = dict(pending)
        if active is None:
            return out
        for key, p in _records(pending):
            if barrier in p.released:
                out[key] = replace(p, acquired=p.acquired | {active})
        out[_WAITS] = pending.get(_WAITS, frozenset()) | {(barrier, active)}
        return out

    def flag(self, op: Operation, state: ScopeState, pending: dict) -> dict:
        """A flag another thread spins on: its store releases what the storing threads did
        before, its loads (and atomics) acquire it, like an mbarrier's arrive and wait."""
        flag = root_buffer(op.operands[0])
        if op.name != "store":
            pending = self.acquire(flag, state.active, pending)
        if op.name != "load":
            pending = self.release(flag, state.active, pending)
        return pending

    # -- control flow
    def loop(self, op: Operation, state: ScopeState, entry: dict) -> dict:
        """Walk the body until the pending accesses at its start settle (iteration i's
        accesses meet iteration i+1's); a loop may run no iteration."""
        states = self.region_states(op, state)
        start, out = entry, entry
        for _ in range(4):
            out = start
            for region, region_state in zip(op.regions, states):
                out = self.block(region, region_state, out)
            following = _merge(entry, out)
            if following == start:
                break
            start = following
        if op.name == "while":   # leaves after its `before` region
            return self.block(op.regions[0], states[0], start)
        return _merge(entry, out)

    def branches(self, op: Operation, state: ScopeState, pending: dict) -> dict:
        then_state, else_state = self.region_states(op, state)
        then_block, else_block = op.regions
        both = all(any(o in self.relevant for o in b.ops) for b in op.regions)
        if both and self.uniform.get(op.operands[0], TeamKind.CLUSTER) < TeamKind.CTA:
            # different threads take the branches at the same time: each after the other
            then_first = self.block(then_block, then_state, pending)
            else_first = self.block(else_block, else_state, pending)
            after_then = self.block(else_block, else_state, then_first)
            after_else = self.block(then_block, then_state, else_first)
            return _merge(after_then, after_else)
        return _merge(self.block(then_block, then_state, pending),
                      self.block(else_block, else_state, pending))

    def region_states(self, op: Operation, state: ScopeState) -> list[ScopeState]:
        """The scope inside each region (as scope analysis computes it, without checks)."""
        if op.name == "team":
            return [replace(state, kind=op.attrs["kind"])]
        if op.name == "if" and op.attrs.get("filter") is not None:
            return list(filter_states(op.attrs["filter"], state))
        steering = {"if": op.operands[:1], "for": op.operands[:3]}.get(op.name, ())
        if op.name == "while":
            steering = op.regions[0].terminator.operands[:1]
        uniform = min((self.uniform.get(v, TeamKind.CLUSTER) for v in steering),
                      default=TeamKind.CLUSTER)
        if uniform < state.uniform:
            state = replace(state, uniform=uniform, steered_by=f"line {op.loc.line}")
        return [state] * len(op.regions)

    # -- where a barrier can go
    def enclosing(self, op: Operation) -> list[Operation]:
        """``op`` and the ops around it, innermost first."""
        chain = [op]
        while (parent := self.parent[self.block_of[chain[-1]]]) is not None:
            chain.append(parent)
        return chain

    def insertion_point(self, hazard: Hazard) -> Operation | None:
        """The op to put the barrier before: the latest point before the second access
        that does not hold the first inside it, where every thread involved arrives and
        control is uniform over the barrier's team; hoisted out of loops that do not hold
        the first access. None when there is no such point."""
        around_first = set(self.enclosing(hazard.first.op)[1:])
        valid = []
        for candidate in self.enclosing(hazard.second.op):
            if candidate in around_first:
                break
            if self._uniform_for(hazard, self.state_of[self.block_of[candidate]]):
                valid.append(candidate)
            elif valid:
                break
        if not valid:
            return None
        loops = [c for c in valid[1:] if c.name in _LOOPS]
        return loops[-1] if loops else valid[0]

    @staticmethod
    def _uniform_for(hazard: Hazard, state: ScopeState) -> bool:
        kind = hazard.kind
        if state.uniform < kind or state.active is None:
            return False
        if kind is TeamKind.CTA:
            return _covers_cta(state.active)
        return _within(hazard.first.threads, state.active) and \
            _within(hazard.second.threads, state.active)


def _covers_cta(active: ActiveSet | None) -> bool:
    """Every thread of the CTA is active (a CTA barrier would not deadlock)."""
    return (active is not None and active.lanes == (0, 32) and not active.elected
            and active.warps == (0, active.num_warps) and not active.strided)


# ----------------------------------------------------------------------------- the pass
def find_hazards(kernel: KernelIR) -> list[Hazard]:
    """Every hazard of ``kernel`` (tile ops must carry their ``scope``), in program order."""
    walker = _Walker(kernel)
    walker.block(kernel.body, entry_state(kernel), {})
    return walker.result()


def run(kernel: KernelIR) -> KernelIR:
    """The pass: with ``auto_sync`` insert a barrier per hazard, one at a time (each may
    order others), until none is left; otherwise, or where none fits, raise."""
    auto = kernel.attrs.get("auto_sync", True)
    for _ in range(_MAX_BARRIERS):
        walker = _Walker(kernel)
        walker.block(kernel.body, entry_state(kernel), {})
        hazards = walker.result()
        if not hazards:
            return kernel
        hazard = hazards[0]
        if not auto:
            raise _error(hazard, "the kernel has auto_sync=False. Add "
                         f"{_spelling(hazard.kind)} before line {hazard.second.op.loc.line}, "
                         "or drop auto_sync=False to have it inserted")
        where = walker.insertion_point(hazard)
        if where is None:
            raise _error(hazard, _divergent_reason(walker, hazard))
        kernel = _insert(kernel, where, _barrier(hazard, where))
    raise CompilationError(f"internal compiler error in pass 'sync-hazards': more than "
                           f"{_MAX_BARRIERS} barriers inserted", kernel.loc)


def _spelling(kind: TeamKind) -> str:
    return {TeamKind.CTA: "`tj.sync()`", TeamKind.WARPGROUP: "a warpgroup barrier",
            TeamKind.WARP: "a warp barrier"}[kind]


def _error(hazard: Hazard, why: str) -> SyncHazardError:
    return SyncHazardError(f"race on {hazard.describe()}: {why}", hazard.second.op.loc)


def _divergent_reason(walker: _Walker, hazard: Hazard) -> str:
    """Why no barrier fits: the innermost thread filter around the second access, else
    the control flow that differs between threads."""
    where = "in divergent or thread-filtered code"
    state = walker.state_of[walker.block_of[hazard.second.op]]
    if state.steered_by:
        where = f"under control flow that differs between threads (at {state.steered_by})"
    for op in walker.enclosing(hazard.second.op)[1:]:
        spec = op.attrs.get("filter") if op.name == "if" else None
        if spec is not None:
            where = (f"under `if {describe_filter(spec.axis, spec.lo, spec.hi)}` "
                     f"(line {op.loc.line})")
            break
    return (f"no barrier can be inserted, as the accesses sit {where}: not every thread "
            f"of the {hazard.kind} reaches a point between them, and a barrier there would "
            "deadlock. Order them with an mbarrier (arrive after the first access, wait "
            "before the second) or with a barrier every thread reaches")


def _barrier(hazard: Hazard, where: Operation) -> Operation:
    first, second = hazard.first, hazard.second
    reason = (f"auto_sync: {buffer_name(first.root)} {'written' if first.write else 'read'} "
              f"at line {first.op.loc.line}, {'written' if second.write else 'read'} at "
              f"line {second.op.loc.line}")
    if hazard.kind is TeamKind.CTA:
        return Operation("sync", attrs={"reason": reason}, loc=where.loc)
    body = Block((), [Operation("yield", loc=where.loc)])
    return Operation("single", attrs={"team": hazard.kind, "reason": reason}, result_types=(),
                     regions=(body,), loc=where.loc)


def _insert(kernel: KernelIR, before: Operation, barrier: Operation) -> KernelIR:
    """``kernel`` rebuilt with ``barrier`` placed just before the op ``before``."""
    values: dict[Value, Value] = {}

    def rebuild(block: Block) -> Block:
        new = Block(tuple(Value(arg.type, arg.name_hint) for arg in block.args))
        values.update(zip(block.args, new.args))
        for op in block.ops:
            if op is before:
                new.ops.append(barrier)
            copy = op.replace(operands=[values.get(v, v) for v in op.operands],
                              regions=[rebuild(region) for region in op.regions])
            values.update(zip(op.results, copy.results))
            new.ops.append(copy)
        return new

    return kernel.replace(body=rebuild(kernel.body))
