"""Execution scope: which threads are active, and how they group into teams.

The TIRx paper (§4) describes the scope at every program point by two things: the *active
thread set* ``A`` (who is executing) and the *team kind* (at what granularity a tile
primitive cooperates). Filters (``if tj.warp_id() == 0``) shrink ``A``; team switches
(``with tj.warpgroup()``) change the kind and split ``A`` into an inter-team layout (which
teams exist) and an intra-team layout (the threads of one team).

:class:`ActiveSet` is ``A`` for one CTA of a cluster. Per thread axis it keeps a half-open
range -- lanes, warps, CTAs in the cluster -- so it always is the paper's layout
``(l, w, c):(1@laneid, 1@warpid, 1@cbx) + (l0@laneid, w0@warpid, c0@cbx)``, with two
refinements:

* **Strided warps.** ``warp_id_in_wg() == 0`` applied to warps ``[0, 8)`` keeps warps
  ``{0, 4}``: the first warp of every warpgroup. That is the usual way to pick one issuing
  warp per consumer warpgroup, and it is still one affine layout,
  ``(2):(4@warpid)``, with the same pattern in every warpgroup. So the warp set is
  ``{w in [w0, w1) : w % 4 in [v0, v1)}``; it is kept in a canonical form (see
  :func:`_warp_pattern`) and any warp set that is neither a contiguous range nor "the same
  warps of each of a run of warpgroups" (e.g. ``{1, 4}``) is rejected with a ScopeError.
* **Elected lanes.** ``elect_sync()`` keeps one lane per active warp, chosen at run time
  among the active lanes. The lane range then holds the *candidates*; the layout shows
  the lowest candidate (which is the lane ``elect.sync`` picks on current hardware), and a
  later lane filter that would cut the candidates is rejected: the elected lane is not
  known at compile time.

:func:`decompose` implements the team switch and rejects non-uniform teams (warps
``[3, 7)`` into warpgroups). :class:`ExecScope` is what every tile op carries after the
scope-analysis pass; its ``str`` is the text the IR prints and :meth:`ExecScope.parse`
reads it back exactly.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import ScopeError
from ..layout import Iter, TileLayout, cbx, laneid, warpid, wgid, wid_in_wg
from .types import TeamKind

__all__ = ["ActiveSet", "ExecScope", "decompose", "FILTER_FUNCTIONS", "describe_filter",
           "LANES_PER_WARP", "TEAM_WARP_AXIS", "WARPS_PER_WARPGROUP", "team_warps"]

LANES_PER_WARP = 32
WARPS_PER_WARPGROUP = 4
# The layout axis that numbers a team's warps (inside a warpgroup: wid_in_wg).
TEAM_WARP_AXIS = {TeamKind.WARP: "warpid", TeamKind.WARPGROUP: "wid_in_wg",
                  TeamKind.CTA: "warpid", TeamKind.CLUSTER: "warpid"}


def team_warps(kind: TeamKind, cta_warps: int) -> int:
    """The warps of one ``kind`` team in a CTA of ``cta_warps`` warps."""
    return {TeamKind.WARP: 1, TeamKind.WARPGROUP: WARPS_PER_WARPGROUP}.get(kind, cta_warps)
_FULL_WG = (0, WARPS_PER_WARPGROUP)

# The source spelling of each filter axis, for error messages.
FILTER_FUNCTIONS = {
    "lane": "lane_id()", "warp": "warp_id()", "warp_in_wg": "warp_id_in_wg()",
    "warpgroup": "warpgroup_id()", "thread": "thread_id()", "cta": "cta_id_in_cluster()",
    "elect": "elect_sync()",
}


def describe_filter(axis: str, lo: int | None = None, hi: int | None = None) -> str:
    """The filter as the user would write it: ``warp_id() == 0``, ``2 <= warp_id() < 4``."""
    fn = FILTER_FUNCTIONS.get(axis, f"{axis}()")
    if axis == "elect":
        return fn
    if hi == lo + 1:
        return f"{fn} == {lo}"
    return f"{fn} < {hi}" if lo == 0 else f"{lo} <= {fn} < {hi}"


# --------------------------------------------------------------------------- helpers
def _as_range(values) -> tuple[int, int] | None:
    """``(lo, hi)`` when the sorted ints ``values`` are exactly ``lo, lo+1, ..., hi-1``."""
    values = sorted(values)
    if values and values[-1] - values[0] + 1 == len(values):
        return values[0], values[-1] + 1
    return None


def _warp_pattern(warps) -> tuple[int, int, int, int] | None:
    """Canonical ``(w0, w1, v0, v1)`` for a warp set, or None when it has no uniform form.

    A contiguous run of warps is ``(w0, w1, 0, 4)``. Otherwise the set must be the same
    in-group warps ``[v0, v1)`` of each of a run of warpgroups ``[g0, g1)``; then
    ``w0 = 4*g0 + v0`` and ``w1 = 4*(g1-1) + v1`` (the first and one past the last member).
    """
    warps = sorted(set(warps))
    if not warps:
        return None
    run = _as_range(warps)
    if run is not None:
        return (*run, *_FULL_WG)
    per_group: dict[int, list[int]] = {}
    for w in warps:
        per_group.setdefault(w // WARPS_PER_WARPGROUP, []).append(w % WARPS_PER_WARPGROUP)
    groups = _as_range(per_group)
    in_group = {tuple(v) for v in per_group.values()}
    if groups is None or len(in_group) != 1:
        return None
    v_range = _as_range(next(iter(in_group)))
    if v_range is None:
        return None
    (g0, g1), (v0, v1) = groups, v_range
    return WARPS_PER_WARPGROUP * g0 + v0, WARPS_PER_WARPGROUP * (g1 - 1) + v1, v0, v1


def _span_text(noun: str, lo: int, hi: int) -> str:
    return f"{noun} {lo}" if hi == lo + 1 else f"{noun}s {lo}..{hi - 1}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


# --------------------------------------------------------------------------- active set
@dataclass(frozen=True)
class ActiveSet:
    """The active threads of a CTA: lanes x warps x CTAs-in-cluster (each a range).

    ``warps_in_wg != (0, 4)`` marks a strided warp set: only the warps of ``[w0, w1)``
    whose position in their warpgroup lies in ``warps_in_wg``. ``elected`` means one lane
    per active warp, picked at run time among ``lanes``. ``cta`` counts CTAs by their rank
    in the cluster (``cta_id_in_cluster`` flattened), the ``cbx`` axis of the layouts.
    """

    num_warps: int
    cluster_size: int
    lanes: tuple[int, int]
    warps: tuple[int, int]
    ctas: tuple[int, int]
    warps_in_wg: tuple[int, int] = _FULL_WG
    elected: bool = False

    def __post_init__(self):
        if self.num_warps < 1 or self.cluster_size < 1:
            raise ScopeError(f"a kernel needs at least one warp and one CTA, got "
                             f"num_warps={self.num_warps}, cluster size {self.cluster_size}")
        for name, (lo, hi), extent in (("lanes", self.lanes, LANES_PER_WARP),
                                       ("warps", self.warps, self.num_warps),
                                       ("ctas", self.ctas, self.cluster_size),
                                       ("warps_in_wg", self.warps_in_wg, WARPS_PER_WARPGROUP)):
            if not 0 <= lo < hi <= extent:
                raise ScopeError(f"active {name} [{lo}, {hi}) must be a non-empty range "
                                 f"inside [0, {extent})")
        members = [w for w in range(*self.warps)
                   if self.warps_in_wg[0] <= w % WARPS_PER_WARPGROUP < self.warps_in_wg[1]]
        if _warp_pattern(members) != (*self.warps, *self.warps_in_wg):
            raise ScopeError(f"warps [{self.warps[0]}, {self.warps[1]}) with in-warpgroup "
                             f"range {list(self.warps_in_wg)} is not in canonical form")

    @classmethod
    def entry(cls, num_warps: int, cluster_size: int = 1) -> "ActiveSet":
        """Every thread of the CTA (and of every CTA in the cluster): the kernel entry."""
        return cls(num_warps, cluster_size, (0, LANES_PER_WARP), (0, num_warps),
                   (0, cluster_size))

    # ----------------------------------------------------------------- membership
    @property
    def strided(self) -> bool:
        return self.warps_in_wg != _FULL_WG

    @property
    def _warpgroups(self) -> tuple[int, int]:
        """``[g0, g1)``: the warpgroups holding active warps."""
        return (self.warps[0] // WARPS_PER_WARPGROUP,
                (self.warps[1] - 1) // WARPS_PER_WARPGROUP + 1)

    @property
    def warp_ids(self) -> tuple[int, ...]:
        v0, v1 = self.warps_in_wg
        return tuple(w for w in range(*self.warps) if v0 <= w % WARPS_PER_WARPGROUP < v1)

    @property
    def whole_warpgroups(self) -> bool:
        """Every thread of each warpgroup it touches is active (what a ``.sync.aligned``
        warpgroup instruction needs)."""
        warps = set(self.warp_ids)
        return (not self.elected and tuple(self.lanes) == (0, LANES_PER_WARP)
                and all({w - w % WARPS_PER_WARPGROUP + i for i in range(WARPS_PER_WARPGROUP)}
                        <= warps for w in warps))

    @property
    def lane_ids(self) -> range:
        """The active lanes (the candidates when ``elected``)."""
        return range(*self.lanes)

    @property
    def lanes_per_warp(self) -> int:
        return 1 if self.elected else self.lanes[1] - self.lanes[0]

    @property
    def num_threads(self) -> int:
        """Active threads per CTA."""
        return self.lanes_per_warp * len(self.warp_ids)

    def describe(self) -> str:
        """Plain-words description for error messages."""
        if self.strided:
            warps = "warps {" + ", ".join(map(str, self.warp_ids)) + "}"
        else:
            warps = _span_text("warp", *self.warps)
        lanes = _span_text("lane", *self.lanes)
        if self.elected:
            lanes = f"one elected lane of {lanes}"
        ctas = f", {_span_text('CTA', *self.ctas)}" if self.cluster_size > 1 else ""
        return f"{warps}, {lanes}{ctas}"

    # ----------------------------------------------------------------- filters
    def narrow(self, axis: str, lo: int | None = None, hi: int | None = None) -> "ActiveSet":
        """Intersect with the filter ``lo <= <axis id> < hi`` (``axis="elect"``: no range)."""
        if axis == "elect":
            return replace(self, elected=True)  # electing among one lane changes nothing
        self._check_range(axis, lo, hi)
        text = describe_filter(axis, lo, hi)
        return self._keep(axis, lambda i: lo <= i < hi, f"filter {text}",
                          lambda: self._empty_message(axis, lo, hi, text))

    def complement(self, axis: str, lo: int | None = None,
                   hi: int | None = None) -> "ActiveSet":
        """The threads that fail the filter (an ``if``'s else-branch).

        Raises ScopeError, with the reason, when that set is empty or not representable.
        """
        text = describe_filter(axis, lo, hi)
        if axis == "elect":
            raise ScopeError(f"the else-branch of {text} runs the lanes that were not "
                             "elected, and which lane is elected is decided at run time")
        self._check_range(axis, lo, hi)
        return self._keep(axis, lambda i: not lo <= i < hi, f"the else-branch of {text}",
                          lambda: f"no thread runs the else-branch of {text}: all of "
                                  f"{self.describe()} pass the filter")

    def _check_range(self, axis: str, lo, hi) -> None:
        if axis not in FILTER_FUNCTIONS:
            raise ScopeError(f"unknown filter axis {axis!r}; one of {', '.join(FILTER_FUNCTIONS)}")
        if not (isinstance(lo, int) and isinstance(hi, int)):
            raise ScopeError(f"a filter on {axis} needs static integer bounds, got [{lo}, {hi})")
        if lo >= hi:
            raise ScopeError(f"filter range [{lo}, {hi}) on {FILTER_FUNCTIONS[axis]} is "
                             f"{'empty' if lo == hi else 'inverted'}")

    def _axis_extent(self, axis: str) -> tuple[int, str]:
        """How many ids the axis has, and that fact in words."""
        nw = self.num_warps
        return {
            "lane": (LANES_PER_WARP, f"a warp has {LANES_PER_WARP} lanes"),
            "warp": (nw, f"the kernel has {_plural(nw, 'warp')}"),
            "warp_in_wg": (min(nw, WARPS_PER_WARPGROUP),
                           f"a warpgroup has {WARPS_PER_WARPGROUP} warps" if nw >= 4
                           else f"the kernel has {_plural(nw, 'warp')}"),
            "warpgroup": (-(-nw // WARPS_PER_WARPGROUP),
                          f"the kernel has {_plural(nw, 'warp')} "
                          f"({_plural(-(-nw // WARPS_PER_WARPGROUP), 'warpgroup')})"),
            "thread": (nw * LANES_PER_WARP,
                       f"the kernel has {_plural(nw * LANES_PER_WARP, 'thread')}"),
            "cta": (self.cluster_size, f"the cluster has {_plural(self.cluster_size, 'CTA')}"),
        }[axis]

    def _empty_message(self, axis: str, lo: int, hi: int, text: str) -> str:
        extent, fact = self._axis_extent(axis)
        if lo >= extent:
            return f"filter leaves no active thread: {text} but {fact}"
        return f"filter leaves no active thread: {text} but only {self.describe()} are active here"

    def _keep(self, axis: str, keep: Callable[[int], bool], what: str,
              empty: Callable[[], str]) -> "ActiveSet":
        """The subset whose id on ``axis`` satisfies ``keep``, if it is representable."""
        if axis == "cta":
            ctas = [c for c in range(*self.ctas) if keep(c)]
            if not ctas:
                raise ScopeError(empty())
            return replace(self, ctas=self._require_range(ctas, "CTAs", what))
        if axis == "lane":
            lanes = [lane for lane in self.lane_ids if keep(lane)]
            if not lanes:
                raise ScopeError(empty())
            return self._with_lanes(self.warp_ids, lanes, what)
        if axis == "thread":
            return self._keep_threads(keep, what, empty)
        warp_key = {"warp": lambda w: w,
                    "warpgroup": lambda w: w // WARPS_PER_WARPGROUP,
                    "warp_in_wg": lambda w: w % WARPS_PER_WARPGROUP}[axis]
        warps = [w for w in self.warp_ids if keep(warp_key(w))]
        if not warps:
            raise ScopeError(empty())
        return self._with_warps(warps, what)

    def _keep_threads(self, keep, what, empty) -> "ActiveSet":
        # A thread range is warp*32 + lane: it keeps a lane set per warp. The result is a
        # product (warps x lanes) only when every surviving warp keeps the same lanes.
        per_warp = {}
        for w in self.warp_ids:
            lanes = tuple(lane for lane in self.lane_ids if keep(w * LANES_PER_WARP + lane))
            if lanes:
                per_warp[w] = lanes
        if not per_warp:
            raise ScopeError(empty())
        if len(set(per_warp.values())) > 1:
            parts = [f"{_span_text('lane', lanes[0], lanes[-1] + 1)} of warp {w}"
                     if _as_range(lanes) else f"lanes {list(lanes)} of warp {w}"
                     for w, lanes in per_warp.items()]
            raise ScopeError(
                f"{what} keeps {' but '.join(parts)}: a thread range must cover whole warps "
                "or stay inside one warp, so that every active warp keeps the same lanes")
        return self._with_lanes(list(per_warp), next(iter(per_warp.values())), what)

    def _with_lanes(self, warps, lanes, what: str) -> "ActiveSet":
        if self.elected and tuple(lanes) != tuple(self.lane_ids):
            raise ScopeError(f"{what} cuts the lanes after elect_sync(): the elected lane is "
                             "chosen at run time, so which lanes stay active is not static; "
                             "filter the lanes before electing")
        narrowed = self._with_warps(warps, what)
        return replace(narrowed, lanes=self._require_range(lanes, "lanes", what))

    def _with_warps(self, warps, what: str) -> "ActiveSet":
        pattern = _warp_pattern(warps)
        if pattern is None:
            shown = ", ".join(map(str, sorted(warps)))
            raise ScopeError(
                f"{what} keeps warps {{{shown}}}: neither a contiguous range nor the same "
                "warps of each warpgroup, so the active threads are not statically "
                "representable for tile primitives")
        w0, w1, v0, v1 = pattern
        return replace(self, warps=(w0, w1), warps_in_wg=(v0, v1))

    @staticmethod
    def _require_range(values, noun: str, what: str) -> tuple[int, int]:
        run = _as_range(values)
        if run is None:
            raise ScopeError(f"{what} keeps {noun} {sorted(values)}: not a contiguous range, "
                             "so the active threads are not statically representable")
        return run

    # ----------------------------------------------------------------- layouts
    def _lane_iters(self):
        return [Iter(self.lanes_per_warp, 1, laneid)], {laneid: self.lanes[0]}

    def _warp_iters(self):
        """Warps as iters on ``warpid``: one run, or (warpgroups, warps in each)."""
        if not self.strided:
            return [Iter(self.warps[1] - self.warps[0], 1, warpid)], {warpid: self.warps[0]}
        (g0, g1), (v0, v1) = self._warpgroups, self.warps_in_wg
        return ([Iter(g1 - g0, WARPS_PER_WARPGROUP, warpid), Iter(v1 - v0, 1, warpid)],
                {warpid: self.warps[0]})

    def _cta_iters(self):
        return [Iter(self.ctas[1] - self.ctas[0], 1, cbx)], {cbx: self.ctas[0]}

    def as_layout(self) -> TileLayout:
        """The paper's ``(l, w, c):(1@laneid, 1@warpid, 1@cbx) + (l0, w0, c0)``."""
        return _layout(self._lane_iters(), self._warp_iters(), self._cta_iters())

    # ----------------------------------------------------------------- text
    def __str__(self) -> str:
        lane = f"lane {self.lanes[0]}:{self.lanes[1]}" + (" elect" if self.elected else "")
        if self.strided:  # the same warps [v0, v1) of each warpgroup in [g0, g1)
            g0, g1 = self._warpgroups
            warp = f"wg {g0}:{g1} in_wg {self.warps_in_wg[0]}:{self.warps_in_wg[1]}"
        else:
            warp = f"warp {self.warps[0]}:{self.warps[1]}"
        return (f"{lane}, {warp}, cta {self.ctas[0]}:{self.ctas[1]}; "
                f"num_warps={self.num_warps}, cluster={self.cluster_size}")

    _TEXT = re.compile(
        r"lane (\d+):(\d+)( elect)?, (?:warp (\d+):(\d+)|wg (\d+):(\d+) in_wg (\d+):(\d+)), "
        r"cta (\d+):(\d+); num_warps=(\d+), cluster=(\d+)\Z")

    @classmethod
    def parse(cls, text: str) -> "ActiveSet":
        match = cls._TEXT.match(text.strip())
        if match is None:
            raise ScopeError(f"not an active thread set: {text!r}")
        elect = match.group(3) is not None
        l0, l1, _, w0, w1, g0, g1, v0, v1, c0, c1, nw, nc = (
            int(g) if g is not None and g.isdigit() else None for g in match.groups())
        if w0 is not None:
            warps, wig = (w0, w1), _FULL_WG
        else:
            warps = (WARPS_PER_WARPGROUP * g0 + v0, WARPS_PER_WARPGROUP * (g1 - 1) + v1)
            wig = (v0, v1)
        return cls(nw, nc, (l0, l1), warps, (c0, c1), wig, elect)


def _layout(*parts) -> TileLayout:
    """Join (iters, offsets) parts into one layout, dropping extent-1 iters and zero
    offsets the way canonicalize does (a single thread keeps one extent-1 iter)."""
    shard, offset = [], {}
    for iters, offsets in parts:
        shard += [it for it in iters if it.extent > 1]
        offset.update({axis: value for axis, value in offsets.items() if value})
    if not shard:
        first_iters = next((iters for iters, _ in parts if iters), None)
        shard = [Iter(1, 1, first_iters[0].axis if first_iters else laneid)]
    return TileLayout.from_iters(shard, (), offset)


# --------------------------------------------------------------------------- team switch
def _warpgroup_factors(active: ActiveSet):
    """(inter, intra) parts of the warp set split into (warpgroup, warp-in-group)."""
    if active.strided:
        (g0, g1), (v0, v1) = active._warpgroups, active.warps_in_wg
        groups = g1 - g0
    else:
        w0, w1 = active.warps
        g0, g_last = w0 // WARPS_PER_WARPGROUP, (w1 - 1) // WARPS_PER_WARPGROUP
        if g0 == g_last:  # inside one warpgroup: one team, maybe not all 4 warps
            groups, v0, v1 = 1, w0 % WARPS_PER_WARPGROUP, (w1 - 1) % WARPS_PER_WARPGROUP + 1
        elif w0 % WARPS_PER_WARPGROUP == 0 and w1 % WARPS_PER_WARPGROUP == 0:
            groups, v0, v1 = g_last - g0 + 1, 0, WARPS_PER_WARPGROUP
        else:
            raise ScopeError(_non_uniform_message(w0, w1))
    inter = ([Iter(groups, 1, wgid)], {wgid: g0})
    intra = ([Iter(v1 - v0, 1, wid_in_wg)], {wid_in_wg: v0})
    return inter, intra


def _non_uniform_message(w0: int, w1: int) -> str:
    shares = []
    for g in range(w0 // WARPS_PER_WARPGROUP, (w1 - 1) // WARPS_PER_WARPGROUP + 1):
        lo = max(w0, g * WARPS_PER_WARPGROUP)
        hi = min(w1, (g + 1) * WARPS_PER_WARPGROUP)
        shares.append((g, hi - lo))
    text = " and ".join(f"warpgroup {g}{' would get' if i == 0 else ''} {_plural(n, 'warp')}"
                        for i, (g, n) in enumerate(shares))
    if len({n for _, n in shares}) == 1:
        text += " (at different positions in the group)"
    return (f"warps [{w0}, {w1}) cross a warpgroup boundary: {text}; a warpgroup switch "
            "needs every team to hold the same warps, so align the warp range to groups of "
            "4 or keep it inside one warpgroup")


def decompose(active: ActiveSet, kind: TeamKind) -> tuple[TileLayout, TileLayout]:
    """Split ``active`` into ``(inter, intra)`` for teams of ``kind``.

    ``inter`` enumerates the team instances, ``intra`` the threads of one team (offsets
    give the first active thread of each). Raises ScopeError for non-uniform teams.
    """
    lanes, warps, ctas = active._lane_iters(), active._warp_iters(), active._cta_iters()
    one = ([], {})
    if kind is TeamKind.THREAD:
        return _layout(lanes, warps, ctas), _layout(one)
    if kind is TeamKind.WARP:
        return _layout(warps, ctas), _layout(lanes)
    if kind is TeamKind.WARPGROUP:
        inter, intra = _warpgroup_factors(active)
        return _layout(inter, ctas), _layout(lanes, intra)
    if kind is TeamKind.CTA:
        return _layout(ctas), _layout(lanes, warps)
    if kind is TeamKind.CLUSTER:
        return _layout(([Iter(1, 1, cbx)], {})), _layout(lanes, warps, ctas)
    raise ScopeError(f"unknown team kind {kind!r}")


# --------------------------------------------------------------------------- exec scope
@dataclass(frozen=True)
class ExecScope:
    """What a tile primitive runs under: team kind, active set and its decomposition."""

    kind: TeamKind
    active: ActiveSet
    inter: TileLayout
    intra: TileLayout

    @classmethod
    def of(cls, kind: TeamKind, active: ActiveSet) -> "ExecScope":
        inter, intra = decompose(active, kind)
        return cls(kind, active, inter, intra)

    @property
    def team_size(self) -> int:
        """Active threads in one team."""
        return math.prod(it.extent for it in self.intra.shard)

    @property
    def num_teams(self) -> int:
        """Team instances in one cluster."""
        return math.prod(it.extent for it in self.inter.shard)

    @property
    def threads_per_team_pattern(self) -> dict[str, range]:
        """Active coordinates of one team per intra axis, e.g. for a full warpgroup
        ``{"laneid": range(0, 32), "wid_in_wg": range(0, 4)}``."""
        pattern = {}
        for it in self.intra.shard:
            start = self.intra.offset.get(it.axis.name, 0)
            pattern[it.axis.name] = range(start, start + it.extent * it.stride, it.stride)
        return pattern

    @property
    def full_team(self) -> bool:
        """Every thread of each team is active (e.g. a warpgroup rule needs 4 x 32)."""
        return self.team_size == _FULL_TEAM_SIZE[self.kind](self.active)

    def __str__(self) -> str:
        return f"{self.kind}({self.active})"

    _TEXT = re.compile(r"(\w+)\((.*)\)\Z")

    @classmethod
    def parse(cls, text: str) -> "ExecScope":
        match = cls._TEXT.match(text.strip())
        if match is None:
            raise ScopeError(f"not an execution scope: {text!r}")
        try:
            kind = TeamKind.parse(match.group(1))
        except ValueError as err:
            raise ScopeError(str(err)) from None
        return cls.of(kind, ActiveSet.parse(match.group(2)))


_FULL_TEAM_SIZE = {
    TeamKind.THREAD: lambda a: 1,
    TeamKind.WARP: lambda a: LANES_PER_WARP,
    TeamKind.WARPGROUP: lambda a: LANES_PER_WARP * WARPS_PER_WARPGROUP,
    TeamKind.CTA: lambda a: LANES_PER_WARP * a.num_warps,
    TeamKind.CLUSTER: lambda a: LANES_PER_WARP * a.num_warps * a.cluster_size,
}
