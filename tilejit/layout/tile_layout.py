"""The named-axis tile layout: ``L(x) = { D(x) + r + O | r in R }``.

``D`` (the shard) is a list of iters, outer to inner, that splits a logical index into
digits and sends ``digit * stride`` to each iter's axis; ``R`` (the replica) is a set of
iters enumerating extra copies; ``O`` (the offset) is a fixed coordinate per axis. See
shared/LAYOUT_NOTES.md for the algorithms; transform.py holds group/permute/slice/tile.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import LayoutError
from .axes import Axis, AxisValue, as_axis, as_int, m

__all__ = ["Iter", "OffsetMap", "TileLayout"]

# Above this many replica combinations `equivalent` stops enumerating replica sets.
_MAX_REPLICA_ENUMERATION = 1 << 20


@dataclass(frozen=True)
class Iter:
    """One iter: ``extent`` digits, each step moving ``stride`` along ``axis``.

    ``Iter(4, 1@laneid)`` is accepted as shorthand for ``Iter(4, 1, laneid)``.
    """

    extent: int
    stride: int
    axis: Axis = None  # type: ignore[assignment]  # None means m, fixed in __post_init__

    def __post_init__(self):
        stride, axis = self.stride, self.axis
        if isinstance(stride, AxisValue):
            if axis is not None and as_axis(axis) is not stride.axis:
                raise LayoutError(f"iter stride {stride} contradicts axis {axis}")
            stride, axis = stride.value, stride.axis
        extent = as_int(self.extent, "an iter extent")
        if extent <= 0:
            raise LayoutError(f"iter extents must be positive, got {extent}")
        object.__setattr__(self, "extent", extent)
        object.__setattr__(self, "stride", as_int(stride, "an iter stride"))
        object.__setattr__(self, "axis", m if axis is None else as_axis(axis))

    def __str__(self) -> str:
        return f"{self.extent}:{self.stride}@{self.axis.name}"


class OffsetMap(Mapping):
    """An immutable, hashable ``axis name -> int`` map (the layout offset ``O``).

    Keys are axis names; lookups also accept :class:`Axis` objects. Entries given twice for
    one axis are summed, so ``+ 2@m + 3@m`` is ``+ 5@m``.
    """

    __slots__ = ("_values",)

    def __init__(self, entries=()):
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        values: dict[str, int] = {}
        for axis, value in pairs:
            name = as_axis(axis).name
            values[name] = values.get(name, 0) + as_int(value, f"the offset on {name}")
        self._values = values

    def __getitem__(self, key) -> int:
        return self._values[key.name if isinstance(key, Axis) else key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(frozenset(self._values.items()))

    def __repr__(self) -> str:
        return f"OffsetMap({self._values!r})"


def _as_iters(iters, what: str) -> tuple[Iter, ...]:
    if isinstance(iters, Iter):
        iters = (iters,)
    result = tuple(iters)
    for it in result:
        if not isinstance(it, Iter):
            raise LayoutError(f"{what} must hold Iter objects, got {it!r}")
    return result


class TileLayout:
    """An immutable named-axis layout. Build it with ``TileLayout(S[...] + R[...] + k@axis)``,
    :meth:`from_iters` or :meth:`parse`. ``==`` is structural; :meth:`equivalent` compares
    placements."""

    __slots__ = ("shard", "replica", "offset", "_hash", "_axes")

    def __init__(self, spec):
        from .syntax import LayoutExpr  # syntax.py builds on this module
        if isinstance(spec, TileLayout):
            parts = (spec.shard, spec.replica, spec.offset)
        elif isinstance(spec, str):
            parsed = TileLayout.parse(spec)
            parts = (parsed.shard, parsed.replica, parsed.offset)
        elif isinstance(spec, LayoutExpr):
            if spec.shard is None:
                raise LayoutError(f"a layout needs a shard part S[...]; got only {spec}")
            parts = (spec.shard, spec.replica, spec.offset)
        else:
            raise LayoutError("TileLayout expects S[...] (+ R[...]) (+ offsets), a layout "
                              f"string or a TileLayout, got {spec!r}")
        self._set(*parts)

    @classmethod
    def from_iters(cls, shard, replica=(), offset=None) -> "TileLayout":
        layout = cls.__new__(cls)
        layout._set(shard, replica, {} if offset is None else offset)
        return layout

    def _set(self, shard, replica, offset) -> None:
        shard = _as_iters(shard, "the shard")
        if not shard:
            raise LayoutError("a layout needs at least one shard iter")
        replica = _as_iters(replica, "the replica")
        offset = offset if isinstance(offset, OffsetMap) else OffsetMap(offset)
        object.__setattr__(self, "shard", shard)
        object.__setattr__(self, "replica", replica)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "_hash", hash((shard, replica, offset)))
        axes = dict.fromkeys(it.axis for it in shard + replica)
        axes.update(dict.fromkeys(Axis(name) for name in offset))
        object.__setattr__(self, "_axes", tuple(axes))

    def __setattr__(self, key, value):
        raise AttributeError("TileLayout is immutable; build a new one")

    def __reduce__(self):
        return (TileLayout.from_iters, (self.shard, self.replica, dict(self.offset)))

    # ----------------------------------------------------------------- structure
    def __eq__(self, other) -> bool:
        if not isinstance(other, TileLayout):
            return NotImplemented
        return (self.shard == other.shard and self.replica == other.replica
                and self.offset == other.offset)

    def __hash__(self) -> int:
        return self._hash

    @property
    def axes(self) -> tuple[Axis, ...]:
        """Every axis the layout mentions, in order of first appearance."""
        return self._axes

    def size(self, axis=None) -> int:
        """Number of logical elements; with ``axis``, the product of the shard extents on it."""
        if axis is None:
            return math.prod(it.extent for it in self.shard)
        axis = as_axis(axis)
        return math.prod(it.extent for it in self.shard if it.axis is axis)

    def span(self, axis=None) -> int:
        """``offset + 1 + sum((extent - 1) * |stride|)`` over the shard and replica iters on
        ``axis`` (default ``m``): how far the layout reaches along that axis. Replicas count
        because the copies occupy that room too."""
        axis = m if axis is None else as_axis(axis)
        return self.offset.get(axis.name, 0) + self.extent_span(axis)

    def extent_span(self, axis) -> int:
        """:meth:`span` without the offset: the footprint one copy of the tile needs."""
        axis = as_axis(axis)
        return 1 + sum((it.extent - 1) * abs(it.stride)
                       for it in self.shard + self.replica if it.axis is axis)

    # ----------------------------------------------------------------- evaluation
    def flat_index(self, coord, shape=None) -> int:
        """The flat logical index of ``coord`` (one int, or a coordinate in ``shape``)."""
        if len(coord) == 1 and isinstance(coord[0], (tuple, list)):
            coord = tuple(coord[0])  # apply((i, j), shape=...) reads as apply(i, j, ...)
        coord = tuple(as_int(c, "a coordinate") for c in coord)
        if shape is None:
            if len(coord) != 1:
                raise LayoutError(f"a {len(coord)}-d coordinate {coord} needs shape=")
            if coord[0] < 0:
                raise LayoutError(f"logical index {coord[0]} is negative")
            return coord[0]
        shape = tuple(as_int(n, "a shape extent") for n in shape)
        if len(coord) != len(shape):
            raise LayoutError(f"coordinate {coord} has {len(coord)} dims, shape {shape} "
                              f"has {len(shape)}")
        flat = 0
        for c, n in zip(coord, shape):
            if n <= 0:
                raise LayoutError(f"shape extents must be positive, got {shape}")
            if not 0 <= c < n:
                raise LayoutError(f"coordinate {coord} is outside shape {shape}")
            flat = flat * n + c
        return flat

    def digits(self, index: int) -> tuple[int, ...]:
        """Split a flat index over the shard extents (outer to inner). The outermost digit
        takes whatever is left, so an out-of-range index keeps walking the outer stride."""
        digits = []
        for it in reversed(self.shard[1:]):
            index, digit = divmod(index, it.extent)
            digits.append(digit)
        digits.append(index)
        return tuple(reversed(digits))

    def apply(self, *coord, shape=None) -> dict[str, int]:
        """The base coordinate ``D(x) + O`` of one logical element, keyed by axis name.
        Every axis the layout mentions appears; replicas are not added."""
        if not coord:
            raise LayoutError("apply needs a coordinate")
        index = self.flat_index(coord, shape)
        result = {axis.name: 0 for axis in self.axes}
        for digit, it in zip(self.digits(index), self.shard):
            result[it.axis.name] += digit * it.stride
        for name, value in self.offset.items():
            result[name] += value
        return result

    def replica_offsets(self) -> list[dict[str, int]]:
        """Each replica combination ``r`` as an ``axis name -> int`` dict (first: all zero)."""
        combos = []
        for digits in itertools.product(*(range(it.extent) for it in self.replica)):
            shift: dict[str, int] = {}
            for digit, it in zip(digits, self.replica):
                shift[it.axis.name] = shift.get(it.axis.name, 0) + digit * it.stride
            combos.append(shift)
        return combos

    def locations(self, *coord, shape=None) -> list[dict[str, int]]:
        """Every physical location of one logical element (base plus each replica), sorted
        and without duplicates."""
        base = self.apply(*coord, shape=shape)
        found = set()
        for shift in self.replica_offsets():
            location = dict(base)
            for name, value in shift.items():
                location[name] += value
            found.add(tuple(sorted(location.items())))
        return [dict(items) for items in sorted(found)]

    # ----------------------------------------------------------------- normal form
    def canonicalize(self) -> "TileLayout":
        """The normal form (LAYOUT_NOTES): no extent-1 iters, no zero offsets, adjacent
        same-axis iters merged, replicas sorted and merged. Neither :meth:`apply` nor
        :meth:`locations` changes, so slices and groups of the form agree with the layout.

        Two more rules make the form unique: a stride-0 shard iter moves to axis ``m`` (it
        moves nothing, so its axis is noise), and a stride-0 replica iter goes (an exact
        duplicate). A negative replica stride stays: making it positive would move the base
        that :meth:`apply` returns to another copy (:meth:`equivalent` does that instead)."""
        replica = [it for it in self.replica if it.extent > 1 and it.stride != 0]
        offset = {name: value for name, value in sorted(self.offset.items()) if value != 0}
        return TileLayout.from_iters(_canonical_shard(self.shard),
                                     _canonical_replica(replica), offset)

    def equivalent(self, other) -> bool:
        """True iff both layouts place every logical element on the same set of locations
        (axes a layout does not mention count as coordinate 0)."""
        if hasattr(other, "tile_layout"):  # a ComposeLayout decides (swizzle.py)
            return other.equivalent(self)
        if not isinstance(other, TileLayout):
            return False
        mine, theirs = _lowest_copy_form(self), _lowest_copy_form(other)
        if mine == theirs:
            return True
        if mine.shard != theirs.shard or mine.offset != theirs.offset:
            return False
        # Overlapping replica iters can spell one replica set in several ways; compare the
        # sets themselves when they are small enough to enumerate.
        if max(math.prod(it.extent for it in lay.replica) for lay in (mine, theirs)) \
                > _MAX_REPLICA_ENUMERATION:
            return False
        return _replica_set(mine) == _replica_set(theirs)

    # ----------------------------------------------------------------- transforms
    def group_iters(self, shape) -> tuple[tuple[Iter, ...], ...]:
        """The shard split into one tuple of whole iters per logical dimension of ``shape``."""
        from .transform import group_iters
        return group_iters(self, shape)[1]

    def group(self, shape) -> "TileLayout":
        from .transform import group
        return group(self, shape)

    def permute(self, order, shape=None) -> "TileLayout":
        from .transform import permute
        return permute(self, order, shape)

    def slice(self, shape, region) -> "TileLayout":
        from .transform import slice_layout
        return slice_layout(self, shape, region)

    def tile(self, outer: "TileLayout", outer_shape, inner_shape) -> "TileLayout":
        from .transform import tile
        return tile(self, outer, outer_shape, inner_shape)

    def visualize(self, shape, path=None):
        """Draw the layout over a logical ``shape`` (imports matplotlib only when called)."""
        from .visualize import visualize
        return visualize(self, shape, path)

    # ----------------------------------------------------------------- text
    def __str__(self) -> str:
        """The paper's notation, e.g. ``(8,2):(4@laneid,1@m) + R[2:4@warpid] + 5@warpid``."""
        from .syntax import format_layout
        return format_layout(self)

    def __repr__(self) -> str:
        shard, _, rest = str(self).partition(" ")
        return f"TileLayout(S[{shard}]{' ' + rest if rest else ''})"

    @classmethod
    def parse(cls, text: str) -> "TileLayout":
        """Read the notation :meth:`__str__` prints (also accepts ``S[...]`` around the
        shard and a ``TileLayout(...)`` wrapper, so ``repr`` parses too)."""
        from .syntax import parse_tile_layout
        return parse_tile_layout(text)


def _canonical_shard(shard) -> tuple[Iter, ...]:
    merged: list[Iter] = []
    for it in shard:
        if it.extent == 1:
            continue
        if it.stride == 0:
            it = Iter(it.extent, 0, m)  # a zero stride goes nowhere; pin one spelling
        if merged and merged[-1].axis is it.axis and it.extent * it.stride == merged[-1].stride:
            it = Iter(merged.pop().extent * it.extent, it.stride, it.axis)
        merged.append(it)
    return tuple(merged) or (Iter(1, 1, m),)


def _replica_order(it: Iter):
    return it.axis.name, -abs(it.stride), -it.stride, -it.extent


def _canonical_replica(replica: list[Iter]) -> tuple[Iter, ...]:
    # A replica is a set: sort (axis, larger |stride| first) and merge any pair that tiles
    # exactly, re-sorting after each merge, until nothing changes.
    iters = sorted(replica, key=_replica_order)
    changed = True
    while changed:
        changed = False
        for k in range(len(iters) - 1):
            outer, inner = iters[k], iters[k + 1]
            if outer.axis is inner.axis and inner.extent * inner.stride == outer.stride:
                iters[k:k + 2] = [Iter(outer.extent * inner.extent, inner.stride, inner.axis)]
                iters.sort(key=_replica_order)
                changed = True
                break
    return tuple(iters)


def _lowest_copy_form(layout: TileLayout) -> TileLayout:
    """The canonical form with every replica stride made positive and the base moved to
    the lowest copy on each axis: one spelling of each set of locations, for comparing
    placements (``8:1 + R[2:-1]`` and ``8:1 + R[2:1] - 1`` place every element alike)."""
    canonical = layout.canonicalize()
    offset = dict(canonical.offset)
    replica = []
    for it in canonical.replica:
        if it.stride < 0:
            # {0, -s, ..., -(e-1)s} is {0, s, ..., (e-1)s} shifted down by (e-1)s.
            offset[it.axis.name] = offset.get(it.axis.name, 0) + (it.extent - 1) * it.stride
            it = Iter(it.extent, -it.stride, it.axis)
        replica.append(it)
    return TileLayout.from_iters(canonical.shard, replica, offset).canonicalize()


def _replica_set(layout: TileLayout) -> frozenset:
    return frozenset(frozenset((k, v) for k, v in shift.items() if v != 0)
                     for shift in layout.replica_offsets())
