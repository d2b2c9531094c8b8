"""The named-axis tile layout: ``L(x) = { D(x) + r + O | r in R }``.

``D`` (the shard) is a list of iters, outer to inner, that splits a logical index into
digits and sends ``digit * stride`` to each iter's axis; ``R`` (the replica) is a set of
iters enumerating extra copies; ``O`` (the offset) is a fixed coordinate per axis. See
shared/LAYOUT_NOTES.md for the algorithms; transform.py holds group/permute/slice/tile.
"""
from __future__ import annotations

import itertools
import math
import re
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

    __slots__ = ("shard", "replica", "offset", "_hash")

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
        seen = dict.fromkeys(it.axis for it in self.shard + self.replica)
        seen.update(dict.fromkeys(Axis(name) for name in self.offset))
        return tuple(seen)

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
        same-axis iters merged, replicas sorted and merged. Placement never changes."""
        offset = dict(self.offset)
        replica = []
        for it in self.replica:
            if it.extent == 1 or it.stride == 0:
                continue  # a stride-0 copy lands where the original is: the set is unchanged
            if it.stride < 0:
                # {0, -s, ..., -(e-1)s} is {0, s, ..., (e-1)s} shifted down by (e-1)s.
                offset[it.axis.name] = offset.get(it.axis.name, 0) + (it.extent - 1) * it.stride
                it = Iter(it.extent, -it.stride, it.axis)
            replica.append(it)
        offset = {name: value for name, value in sorted(offset.items()) if value != 0}
        return TileLayout.from_iters(_canonical_shard(self.shard),
                                     _canonical_replica(replica), offset)

    def equivalent(self, other) -> bool:
        """True iff both layouts place every logical element on the same set of locations
        (axes a layout does not mention count as coordinate 0)."""
        if not isinstance(other, TileLayout):
            return False
        mine, theirs = self.canonicalize(), other.canonicalize()
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
        plain_m = all(axis is m for axis in self.axes)

        def stride(value: int, axis: Axis) -> str:
            return str(value) if plain_m else f"{value}@{axis.name}"

        def block(iters) -> str:
            if len(iters) == 1:
                return f"{iters[0].extent}:{stride(iters[0].stride, iters[0].axis)}"
            extents = ",".join(str(it.extent) for it in iters)
            strides = ",".join(stride(it.stride, it.axis) for it in iters)
            return f"({extents}):({strides})"

        text = block(self.shard)
        if self.replica:
            text += f" + R[{block(self.replica)}]"
        for name, value in self.offset.items():
            text += f" {'-' if value < 0 else '+'} {stride(abs(value), Axis(name))}"
        return text

    def __repr__(self) -> str:
        shard, _, rest = str(self).partition(" ")
        return f"TileLayout(S[{shard}]{' ' + rest if rest else ''})"

    @classmethod
    def parse(cls, text: str) -> "TileLayout":
        """Read the notation :meth:`__str__` prints (also accepts ``S[...]`` around the
        shard and a ``TileLayout(...)`` wrapper, so ``repr`` parses too)."""
        return _Parser(text).layout()


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


def _canonical_replica(replica: list[Iter]) -> tuple[Iter, ...]:
    # A replica is a set: sort (axis, larger strides first) and merge any pair that tiles
    # exactly, re-sorting after each merge, until nothing changes.
    iters = sorted(replica, key=lambda it: (it.axis.name, -it.stride, -it.extent))
    changed = True
    while changed:
        changed = False
        for k in range(len(iters) - 1):
            outer, inner = iters[k], iters[k + 1]
            if outer.axis is inner.axis and inner.extent * inner.stride == outer.stride:
                iters[k:k + 2] = [Iter(outer.extent * inner.extent, inner.stride, inner.axis)]
                iters.sort(key=lambda it: (it.axis.name, -it.stride, -it.extent))
                changed = True
                break
    return tuple(iters)


def _replica_set(layout: TileLayout) -> frozenset:
    return frozenset(frozenset((k, v) for k, v in shift.items() if v != 0)
                     for shift in layout.replica_offsets())


# --------------------------------------------------------------------- parser
_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[()\[\]:,@+-]))")


class _Parser:
    """Recursive descent over ``block (('+'|'-') (R[block] | int[@axis]))*`` where
    ``block`` is ``extents[:strides]`` and each list is one item or ``(a, b, ...)``."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise LayoutError(f"layout text must be a string, got {text!r}")
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if match is None:
                bad = text[pos:].lstrip()[0]
                raise LayoutError(f"unexpected character {bad!r} at {text.index(bad, pos)} "
                                  f"in layout {text!r}")
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        self.pos = 0

    def error(self, what: str) -> LayoutError:
        where = self.tokens[self.pos][2] if self.pos < len(self.tokens) else len(self.text)
        return LayoutError(f"{what} at {where} in layout {self.text!r}")

    def peek(self, offset: int = 0) -> str | None:
        k = self.pos + offset
        return self.tokens[k][1] if k < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise self.error(f"expected {expected or 'more text'!r}, found {token!r}")
        self.pos += 1
        return token

    def layout(self) -> TileLayout:
        if not self.tokens:
            raise LayoutError("empty layout text")
        wrapped = self.peek() == "TileLayout" and self.peek(1) == "("
        if wrapped:
            self.pos += 2
        shard = self.bracketed("S") if self.peek() == "S" else self.block()
        replica: list[Iter] = []
        offset: list[tuple[Axis, int]] = []
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            if self.peek() == "R" and self.peek(1) == "[":
                if sign < 0:
                    raise self.error("a replica cannot be subtracted")
                replica.extend(self.bracketed("R"))
            else:
                value, axis = self.stride()
                offset.append((axis, sign * value))
        if wrapped:
            self.take(")")
        if self.pos != len(self.tokens):
            raise self.error(f"unexpected {self.peek()!r}")
        return TileLayout.from_iters(shard, replica, offset)

    def bracketed(self, letter: str) -> list[Iter]:
        self.take(letter)
        self.take("[")
        iters = self.block()
        self.take("]")
        return iters

    def block(self) -> list[Iter]:
        extents = self.items(self.integer)
        if self.peek() != ":":  # extents only: row-major on m, like S[8, 4, 2]
            strides, stride = [], 1
            for extent in reversed(extents):
                strides.append((stride, m))
                stride *= extent
            strides.reverse()
        else:
            self.take(":")
            strides = self.items(self.stride)
        if len(extents) != len(strides):
            raise self.error(f"{len(extents)} extents but {len(strides)} strides")
        return [Iter(e, s, axis) for e, (s, axis) in zip(extents, strides)]

    def items(self, item) -> list:
        if self.peek() != "(":
            return [item()]
        self.take("(")
        values = [item()]
        while self.peek() == ",":
            self.take(",")
            if self.peek() == ")":
                break
            values.append(item())
        self.take(")")
        return values

    def integer(self) -> int:
        sign = -1 if self.peek() == "-" else 1
        if sign < 0:
            self.take("-")
        kind = self.tokens[self.pos][0] if self.pos < len(self.tokens) else None
        if kind != "int":
            raise self.error(f"expected an integer, found {self.peek()!r}")
        return sign * int(self.take())

    def stride(self) -> tuple[int, Axis]:
        value = self.integer()
        if self.peek() != "@":
            return value, m
        self.take("@")
        kind = self.tokens[self.pos][0] if self.pos < len(self.tokens) else None
        if kind != "name":
            raise self.error(f"expected an axis name after '@', found {self.peek()!r}")
        return value, Axis(self.take())
