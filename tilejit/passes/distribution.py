"""How the instances of a primitive are spread over the threads of its team.

The target chooses the mode (``DispatchContext.distribution``); :func:`choose` picks the
distribution of one call:

* :class:`Uniform` -- every executing unit visits every instance: ``team_once`` (the
  code runs inside ``single``, once per team instance) or a team of one thread.
* :class:`Cyclic` -- ``per_thread`` for tiles not distributed over threads: thread ``t``
  of a ``T``-thread team takes instances ``t, t+T, ...`` in row-major order; ``t`` is the
  thread's position in the intra-team layout of the active set.
* :class:`Owned` -- ``per_thread`` for a fragment whose layout places elements on thread
  axes: each thread visits the elements the layout gives it (every copy, for replicated
  layouts). The thread's coordinate on each axis is decoded into the layout's digits once
  (hoisted); the memory iters become loops. Thread coordinates are relative to the team
  (``warpid`` counts warps inside a warpgroup team).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..errors import LayoutError
from ..ir.core import Value
from ..ir.scope import LANES_PER_WARP, TEAM_WARP_AXIS, ExecScope
from ..ir.types import MemScope, TeamKind
from ..layout import AxisKind, Iter, TileLayout
from ..layout.transform import group_iters
from .dispatch.call import Operand, PrimitiveCall
from .dispatch.registry import TEAM_ONCE, Decline
from .loopgen import Box, Emitter
from .ownership import (OWNED_AXES, active_threads, misread, owners, owners_at, unflatten,
                        unowned_element)

__all__ = ["Cyclic", "Decoded", "Distribution", "Owned", "Uniform", "choose", "team_thread"]

# Absolute coordinates of the axes an intra-team layout uses.
_ABSOLUTE = {"laneid": "lane_id", "warpid": "warp_id", "wid_in_wg": "warp_id_in_wg",
             "wgid": "warpgroup_id", "cbx": "cta_id_in_cluster"}


class Distribution:
    """Emits the loops that visit the instances of ``(box, body)`` items.

    ``splits_boxes``: any box can be visited (so a domain may be split into full and
    remainder boxes); False when the placement of one operand decides who visits what.
    ``checks_chunks``: a static domain that may run past a tensor's end is better visited
    as one box of checked elements than split (:meth:`Emitter.pieces`).
    """

    splits_boxes = True
    checks_chunks = False

    def emit(self, em: Emitter, items) -> None:
        raise NotImplementedError


class Uniform(Distribution):
    def emit(self, em: Emitter, items) -> None:
        em.nest(items)

    def __str__(self) -> str:
        return "uniform"


@dataclass(frozen=True)
class Cyclic(Distribution):
    team_size: int
    checks_chunks = True

    def emit(self, em: Emitter, items) -> None:
        for box, body in items:
            self._emit_box(em, box, body)

    def _emit_box(self, em: Emitter, box: Box, body) -> None:
        with em.hoisted():
            counts = [em.floordiv(em.sub(hi, lo), step)
                      for lo, hi, step in zip(box.lo, box.hi, box.step)]
            total = 1
            for c in counts:
                total = em.mul(total, c)
        t = team_thread(em, em.call.scope)

        def visit(e):
            idx = [0] * len(counts)
            for d in reversed(range(len(counts))):
                q = e if d == 0 else em.mod(e, counts[d])
                e = e if d == 0 else em.floordiv(e, counts[d])
                idx[d] = em.add(box.lo[d], em.mul(q, box.step[d]))
            body(idx)
        em.loop(t, total, self.team_size, visit, unroll=box.unroll)

    def __str__(self) -> str:
        return f"cyclic over {self.team_size} threads"


# Pairs of thread axes that name the same hardware coordinate (a lane: laneid and
# tid_in_wg's low bits; a warp: warpid, wid_in_wg and tid_in_wg's high bits).
_ADDING_AXES = (("laneid", "tid_in_wg"), ("warpid", "wid_in_wg"), ("warpid", "tid_in_wg"),
                ("wid_in_wg", "tid_in_wg"))

# Hardware order of the thread axes, fastest first: consecutive threads of a team are
# consecutive lanes, so cyclic instances t, t+1, ... sit in neighbouring lanes.
_AXIS_ORDER = {"laneid": 0, "wid_in_wg": 1, "warpid": 1, "wgid": 2, "cbx": 3}


def _digit(em: Emitter, coord, it: Iter, outermost: bool):
    """The digit of iter ``it`` in a coordinate; the outermost iter of an axis needs no
    ``mod`` (an in-range coordinate never reaches past it)."""
    digit = em.floordiv(coord, it.stride)
    return digit if outermost else em.mod(digit, it.extent)


def team_thread(em: Emitter, scope: ExecScope):
    """The thread's position ``t`` in its team, ``0 <= t < team_size``, lanes fastest
    (hoisted)."""
    def make():
        iters = sorted((it for it in scope.intra.shard if it.extent > 1),
                       key=lambda it: (_AXIS_ORDER[it.axis.name], it.stride))
        t, weight = 0, 1
        for it in iters:
            coord = em.sub(em.thread_coord(_ABSOLUTE[it.axis.name]),
                           scope.intra.offset.get(it.axis.name, 0))
            outermost = all(o.axis is not it.axis or o.stride <= it.stride for o in iters)
            t = em.add(t, em.mul(_digit(em, coord, it, outermost), weight))
            weight *= it.extent
        return em.index(t)
    return em.once("team_thread", make)


# --------------------------------------------------------------------------- owned
def _relative_coord(em: Emitter, axis: str, kind: TeamKind):
    """The thread's coordinate on ``axis`` inside its team."""
    if axis == "laneid":
        return em.thread_coord("lane_id")
    if axis == "wid_in_wg" or (axis == "warpid" and kind is TeamKind.WARPGROUP):
        return em.thread_coord("warp_id_in_wg")
    if axis == "warpid":
        return em.thread_coord("warp_id") if kind >= TeamKind.CTA else 0
    return em.add(em.mul(em.thread_coord("warp_id_in_wg"), LANES_PER_WARP),
                  em.thread_coord("lane_id"))  # tid_in_wg




@dataclass(frozen=True)
class _Loop:
    extent: int
    weight: int
    dim: int


@dataclass(frozen=True)
class Decoded:
    """A thread's place in an ``Owned`` driver's layout: its digit of each thread iter
    (keyed by the iter's id), per dim the part of the index those digits give (its first
    element), and the check that its coordinates name elements at all (None: they do)."""
    digits: dict
    base: tuple
    owns: Value | None


@dataclass
class Owned(Distribution):
    """Each thread visits the elements of ``driver`` its layout places on it."""

    splits_boxes = False

    driver: Operand
    scope: ExecScope
    axes: dict[str, list[Iter]] = field(default_factory=dict)  # thread axis -> its iters
    offsets: dict[str, int] = field(default_factory=dict)
    guarded: list[str] = field(default_factory=list)  # axes whose coordinate may miss
    thread_terms: list[tuple[Iter, int, int]] = field(default_factory=list)  # iter, dim, weight
    loops: list[_Loop] = field(default_factory=list)
    copies: list[Iter] = field(default_factory=list)   # replica iters on decoded axes
    # Where the driver is a source, or a destination whose copies share one location
    # (shared memory stores only the base), only the thread holding copy 0 of an element
    # handles it (every copy's owner would store it, and a read-modify-write would apply
    # twice).
    one_copy: bool = False
    _owners: list | None = None

    @classmethod
    def analyze(cls, call: PrimitiveCall, driver: Operand) -> Owned | Decline:
        layout, shape, name = driver.layout, tuple(driver.shape), driver.name
        if not isinstance(layout, TileLayout):
            return Decline(f"{name}'s swizzled layout cannot be distributed over threads")
        if call.team is TeamKind.THREAD:
            return Decline(f"{name} is distributed over threads but the team is one thread")
        try:
            used, groups = group_iters(layout, shape)
        except LayoutError as err:
            return Decline(f"{name}'s layout does not fit its shape: {err.message}")
        owned = cls(driver, call.scope, offsets=dict(used.offset))
        # The iters as the dims split them (an iter straddling two dims is two here), so
        # the digits decoded per axis are the ones the loops and thread terms weigh.
        split = [it for group in groups for it in group]
        for axis in used.axes:
            if axis.kind is not AxisKind.THREAD:
                continue
            if axis.name not in OWNED_AXES:
                return Decline(f"{name} is placed on thread axis {axis.name}, which the "
                               f"per-thread distribution does not decode")
            # An iter of extent 1 places nothing: it must not guard its axis.
            iters = sorted((it for it in split + list(used.replica)
                            if it.axis is axis and it.extent > 1), key=lambda it: it.stride)
            if not iters and not used.offset.get(axis.name, 0):
                continue
            for inner, outer in itertools.pairwise(iters):
                if inner.stride <= 0 or outer.stride < inner.stride * inner.extent:
                    return Decline(f"{name}'s iters on {axis.name} overlap, so a thread's "
                                   "coordinate does not name its elements")
            owned.axes[axis.name] = iters
        for first, second in _ADDING_AXES:
            if first in owned.axes and second in owned.axes:
                return Decline(f"{name} is placed on both {first} and {second}, whose "
                               "coordinates add up to one thread's: the per-thread "
                               "distribution decodes each axis alone")
        # A coordinate no axis of the layout spreads (a slice of a tile's first rows keeps
        # no warp iter) is the offset's, 0 without one: the other threads hold nothing.
        for axis, spreading in (("laneid", ("laneid", "tid_in_wg")),
                                (TEAM_WARP_AXIS[call.team],
                                 ("warpid", "wid_in_wg", "tid_in_wg"))):
            if not any(a in owned.axes for a in spreading):
                owned.axes[axis] = []
        owned.copies = [it for it in used.replica if it.axis.name in owned.axes]
        owned._plan_loops(groups)
        owned._plan_guards()
        lost = owned._unowned_element()
        return Decline(lost) if lost else owned

    def _plan_loops(self, groups) -> None:
        for dim, group in enumerate(groups):
            weight = math.prod(it.extent for it in group)
            for it in group:
                weight //= it.extent
                if it.extent == 1:   # one digit, always 0: no term, no loop
                    continue
                if it.axis.name in self.axes:
                    self.thread_terms.append((it, dim, weight))
                elif self.loops and self.loops[-1].dim == dim \
                        and self.loops[-1].weight == it.extent * weight:
                    last = self.loops.pop()  # contiguous in the logical index: one loop
                    self.loops.append(_Loop(last.extent * it.extent, weight, dim))
                else:
                    self.loops.append(_Loop(it.extent, weight, dim))

    def _plan_guards(self) -> None:
        active = active_threads(self.scope)
        for axis, iters in self.axes.items():
            span, dense = 1, True
            for it in iters:
                dense &= it.stride == span
                span *= it.extent
            offset = self.offsets.get(axis, 0)
            coords = {_relative_value(axis, lane, warp) - offset for lane, warp in active}
            if not dense or min(coords) < 0 or max(coords) >= span:
                self.guarded.append(axis)

    def owner_sets(self) -> list[frozenset]:
        """Per flat element of the driver, its owners (enumerated: for inspection only)."""
        if self._owners is None:
            self._owners = owners(self.driver.layout, self.driver.shape)
        return self._owners

    def _unowned_element(self) -> str | None:
        layout, shape = self.driver.layout, self.driver.shape
        flat = unowned_element(layout, shape, active_threads(self.scope))
        if flat is None:
            return None
        threads = owners_at(layout, flat)
        return (f"{self.driver.name}{list(unflatten(flat, shape))} lives on (lane, warp) "
                f"{sorted(threads)[:4]}, none of which is active here")

    def check_reads(self, operand: Operand,
                    accessed: Callable[[tuple], Iterable[tuple]]) -> str | None:
        """Why a thread would touch an element of ``operand`` it holds no copy of, if it
        would: ``accessed(p)`` lists the operand indices used at driver element ``p``
        (answered in closed form when it only passes ``p``'s indices along, see
        :func:`misread`). Never for shared memory: it is stored over its thread axes, so
        every thread reaches every element."""
        if operand.role is MemScope.SHARED:
            return None
        if not isinstance(operand.layout, TileLayout):
            return f"{operand.name} is distributed over threads with a non-affine layout"
        found = misread(self.driver.layout, self.driver.shape, operand.layout, operand.shape,
                        accessed, active_threads(self.scope))
        if found is None:
            return None
        p, q, missing = found
        return (f"thread (lane, warp) {min(missing)} handles "
                f"{self.driver.name}{list(p)} but holds no copy of "
                f"{operand.name}{list(q)}: the layouts place them differently")

    def decode(self, em: Emitter) -> Decoded:
        """The thread's coordinates decoded into the layout's digits (once per primitive,
        in the prologue)."""
        return em.once(("owned", self.driver.name), lambda: self._decode(em))

    def _decode(self, em: Emitter) -> Decoded:
        kind = self.scope.kind
        coords, digits = {}, {}
        for axis, iters in self.axes.items():
            coords[axis] = em.index(em.sub(_relative_coord(em, axis, kind),
                                           self.offsets.get(axis, 0)))
            # A digit is taken mod its extent even where the coordinate never reaches past
            # it (a no-op there) so that the target compiler knows its range: the register
            # of an element at ``base + constant`` then folds to a constant (nvcc keeps a
            # fragment it cannot index statically in local memory). Not needed for an iter
            # reaching lane 32: a lane coordinate is below 32 on every target.
            for it in iters:
                evident = axis == "laneid" and self.offsets.get(axis, 0) == 0 \
                    and it.stride * it.extent == LANES_PER_WARP
                digits[id(it)] = _digit(em, coords[axis], it, outermost=evident)
        base = [0] * len(self.driver.shape)
        for it, dim, weight in self.thread_terms:
            base[dim] = em.add(base[dim], em.mul(digits[id(it)], weight))
        checks = [em.b.cmp("eq", em.index(_recompose(em, self.axes[a], digits)), coords[a])
                  for a in self.guarded]
        if self.one_copy:
            checks += [em.b.cmp("eq", em.index(digits[id(it)]), em.index(0))
                       for it in self.copies]
        return Decoded(digits, tuple(base), em.all_of(checks))

    def emit(self, em: Emitter, items) -> None:
        """Visit this thread's elements (one box: the driver's whole domain)."""
        ((_, body),) = items
        decoded = self.decode(em)

        def level(k: int, idx: list):
            if k == len(self.loops):
                body(idx)
                return
            loop = self.loops[k]
            em.loop(0, loop.extent, 1, lambda q: level(k + 1, [
                em.add(i, em.mul(q, loop.weight)) if d == loop.dim else i
                for d, i in enumerate(idx)]))

        _if_owner(em, decoded, lambda: level(0, list(decoded.base)))

    def run_extent(self) -> int:
        """How many consecutive elements of the last dim each of this thread's runs holds
        (its unit-step loop of that dim; 1: single elements)."""
        last = len(self.driver.shape) - 1
        inner = [loop for loop in self.loops if loop.dim == last and loop.weight == 1]
        return inner[0].extent if inner else 1

    def misaligned_runs(self, count: int) -> str | None:
        """Why this thread's runs of the last dim do not each start at a multiple of
        ``count`` (every other step of its last-dim index -- loops and thread terms -- is a
        multiple of ``count``); None: they do."""
        last = len(self.driver.shape) - 1
        steps = [loop.weight for loop in self.loops if loop.dim == last and loop.weight != 1]
        steps += [weight for _, dim, weight in self.thread_terms if dim == last]
        if any(step % count for step in steps):
            return (f"{self.driver.name}'s layout {self.driver.layout} starts a thread's runs "
                    f"of {count} at indices of the last dim that are not multiples of {count}")
        return None

    def by_runs(self, count: int) -> Owned:
        """This distribution visiting the first element of each run of ``count``
        consecutive elements of the last dim: its unit-step loop of that dim (whose extent
        ``count`` divides) goes in steps of ``count``."""
        last = len(self.driver.shape) - 1
        loops = [_Loop(loop.extent // count, count, loop.dim)
                 if (loop.dim, loop.weight) == (last, 1) else loop for loop in self.loops]
        return dataclasses.replace(self, loops=loops)

    def held_offsets(self) -> list[list[int]]:
        """Per dim of the driver, the distinct offsets from the thread's base
        (``Decoded.base``) of the indices of the elements it holds, ascending. Its elements
        are every combination of one index per dim: each memory loop moves one dim."""
        offsets = [[0] for _ in self.driver.shape]
        for loop in self.loops:
            offsets[loop.dim] = [o + q * loop.weight
                                 for o in offsets[loop.dim] for q in range(loop.extent)]
        return [sorted(set(dim)) for dim in offsets]

    def visit_held(self, em: Emitter, body: Callable[[list], None]) -> None:
        """``body(indices)`` once for all of this thread's elements, with no loop:
        ``indices[d]`` lists the thread's indices on dim ``d`` (its base plus each of
        :meth:`held_offsets`), so a rule can keep every element in its own register."""
        decoded = self.decode(em)
        _if_owner(em, decoded, lambda: body([[em.add(base, o) for o in offsets]
                                             for base, offsets in zip(decoded.base,
                                                                      self.held_offsets())]))

    def __str__(self) -> str:
        return f"owned by the threads of {self.driver.name}'s layout {self.driver.layout}"


def _relative_value(axis: str, lane: int, warp: int) -> int:
    return {"laneid": lane, "warpid": warp, "wid_in_wg": warp,
            "tid_in_wg": warp * LANES_PER_WARP + lane}[axis]


def _if_owner(em: Emitter, decoded: Decoded, visit: Callable[[], None]) -> None:
    """``visit()``, under the check that the thread's coordinates name elements."""
    if decoded.owns is None:
        visit()
        return
    _, then, orelse = em.b.if_(decoded.owns)
    with em.b.insert_into(then):
        visit()
        em.b.yield_()
    with em.b.insert_into(orelse):
        em.b.yield_()


def _recompose(em: Emitter, iters, digits):
    total = 0
    for it in iters:
        total = em.add(total, em.mul(digits[id(it)], it.stride))
    return total





# --------------------------------------------------------------------------- choice
def choose(call: PrimitiveCall, drivers: Sequence[Operand]):
    """The distribution of ``call``: a Uniform/Cyclic/Owned, or a Decline saying why
    the team cannot share the work. ``drivers`` are the operands whose shape is the
    iteration domain, the first one distributed over threads leads."""
    if call.context.distribution == TEAM_ONCE:
        return Uniform()
    lead = next((o for o in drivers if o.thread_axes), None)
    owned = None
    if lead is not None:
        owned = Owned.analyze(call, lead)
        if isinstance(owned, Owned):   # copies held apart only in each thread's registers
            owned.one_copy = lead is not call.operands[0] \
                or lead.role not in (MemScope.FRAGMENT, MemScope.LOCAL)
            return owned
        if lead.role is not MemScope.SHARED:
            return owned
    # Registers laid out over threads are read and written by their holders alone; shared
    # memory laid out over threads is stored over those axes, so any thread reaches it:
    # a shared driver whose layout names no owner per element (iters or copies that
    # overlap on an axis, lanes and tid_in_wg together, a one-thread team) splits
    # cyclically like an unplaced tile.
    spread = [o.name for o in call.tiles if o.thread_axes and o.role is not MemScope.SHARED]
    if spread:
        return Decline(*(owned.reasons if owned else ()),
                       f"{', '.join(spread)} is distributed over threads but does not "
                       "span the iteration space, so no thread owns a whole instance")
    size = call.scope.team_size
    if size == 1:   # one thread of the team is active (a thread team, an elected lane)
        return Uniform()
    if call.scope.active.elected:
        return Decline("the team's active lanes are elected at run time (one in each of "
                       f"{size} warps); a per-thread split needs the active threads "
                       "statically")
    return Cyclic(size)
