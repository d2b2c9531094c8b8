"""The Python builder syntax for layouts.

    TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1@m)] + R[2:4@warpid] + 5@warpid)

``S[...]`` gives the shard iters, ``R[...]`` replica iters, ``n @ axis`` a stride or offset
on a named axis (a plain int means axis ``m``). Inside the brackets Python hands us a
``slice(extents, strides)``; ``S[8, 4, 2]`` (extents only) means row-major strides on ``m``,
and ``S[8:4@laneid, 2:1]`` (a list of ``extent:stride`` pairs) is accepted too.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LayoutError
from .axes import Axis, AxisValue, as_int, m
from .tile_layout import Iter, TileLayout

__all__ = ["S", "R", "LayoutExpr"]


@dataclass(frozen=True, repr=False)
class LayoutExpr:
    """A layout under construction: ``S[...] + R[...] + offsets``. Pass it to TileLayout."""

    shard: tuple[Iter, ...] | None = None
    replica: tuple[Iter, ...] = ()
    offset: tuple[tuple[Axis, int], ...] = ()

    def __add__(self, other) -> "LayoutExpr":
        other = _as_expr(other)
        if self.shard is not None and other.shard is not None:
            raise LayoutError("a layout has one shard part S[...]; list all its iters in it")
        return LayoutExpr(self.shard if self.shard is not None else other.shard,
                          self.replica + other.replica, self.offset + other.offset)

    def __radd__(self, other) -> "LayoutExpr":
        return _as_expr(other) + self

    def __sub__(self, other) -> "LayoutExpr":
        other = _as_expr(other)
        if other.shard is not None or other.replica:
            raise LayoutError("only offsets (k@axis or k) can be subtracted from a layout")
        return self + LayoutExpr(offset=tuple((axis, -value) for axis, value in other.offset))

    def __str__(self) -> str:
        parts = []
        if self.shard is not None:
            parts.append(f"S[{_block_text(self.shard)}]")
        if self.replica:
            parts.append(f"R[{_block_text(self.replica)}]")
        parts += [f"{value}@{axis.name}" for axis, value in self.offset]
        return " + ".join(parts)

    __repr__ = __str__


def _block_text(iters) -> str:
    extents = ",".join(str(it.extent) for it in iters)
    strides = ",".join(f"{it.stride}@{it.axis.name}" for it in iters)
    return f"({extents}):({strides})"


def _as_expr(value) -> LayoutExpr:
    if isinstance(value, LayoutExpr):
        return value
    if isinstance(value, AxisValue):
        return LayoutExpr(offset=((value.axis, value.value),))
    if isinstance(value, TileLayout):
        return LayoutExpr(value.shard, value.replica, tuple(
            (Axis(name), v) for name, v in value.offset.items()))
    return LayoutExpr(offset=((m, as_int(value, "a layout offset")),))


def _stride(value) -> tuple[int, Axis]:
    if isinstance(value, AxisValue):
        return value.value, value.axis
    return as_int(value, "a stride"), m


def _listed(value, what: str) -> list:
    if isinstance(value, (tuple, list)):
        if not value:
            raise LayoutError(f"empty {what} list")
        for item in value:
            if isinstance(item, (tuple, list)):
                raise LayoutError(f"nested {what} {value!r}: list the iters flat, outer to inner")
        return list(value)
    return [value]


def _row_major(extents) -> list[Iter]:
    extents = [as_int(e, "an extent") for e in _listed(extents, "extent")]
    iters, stride = [], 1
    for extent in reversed(extents):
        iters.append(Iter(extent, stride, m))
        stride *= extent
    return iters[::-1]


def _pair(key: slice) -> list[Iter]:
    if key.step is not None:
        raise LayoutError(f"unexpected second ':' in {key!r}; write extents:strides")
    if key.start is None or key.stop is None:
        raise LayoutError("write both extents and strides: S[(e0, e1):(s0, s1)]")
    extents = _listed(key.start, "extent")
    strides = _listed(key.stop, "stride")
    if len(extents) != len(strides):
        raise LayoutError(f"{len(extents)} extents {tuple(extents)} but {len(strides)} "
                          f"strides {tuple(strides)}")
    return [Iter(extent, *_stride(stride)) for extent, stride in zip(extents, strides)]


def iters_of(key) -> tuple[Iter, ...]:
    """Turn what Python passes to ``S[...]`` / ``R[...]`` into iters."""
    if isinstance(key, slice):
        return tuple(_pair(key))
    if isinstance(key, tuple) and key and all(isinstance(k, slice) for k in key):
        return tuple(it for k in key for it in _pair(k))
    if isinstance(key, tuple) and any(isinstance(k, slice) for k in key):
        raise LayoutError(f"mixed extents and extent:stride pairs in {key!r}")
    return tuple(_row_major(key))


class _IterBuilder:
    """``S`` and ``R``: index them to get the shard or the replica part of a layout."""

    def __init__(self, letter: str):
        self.letter = letter

    def __getitem__(self, key) -> LayoutExpr:
        iters = iters_of(key)
        if self.letter == "S":
            return LayoutExpr(shard=iters)
        return LayoutExpr(replica=iters)

    def __repr__(self) -> str:
        return self.letter


S = _IterBuilder("S")
R = _IterBuilder("R")
