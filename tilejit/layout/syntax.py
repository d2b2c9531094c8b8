"""The two ways to write a layout: the Python builder syntax and the text notation.

    TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1@m)] + R[2:4@warpid] + 5@warpid)

``S[...]`` gives the shard iters, ``R[...]`` replica iters, ``n @ axis`` a stride or offset
on a named axis (a plain int means axis ``m``). Inside the brackets Python hands us a
``slice(extents, strides)``; ``S[8, 4, 2]`` (extents only) means row-major strides on ``m``,
and ``S[8:4@laneid, 2:1]`` (a list of ``extent:stride`` pairs) is accepted too.

The text notation is the paper's: ``(8,2):(4@laneid,1@m) + R[2:4@warpid] + 5@warpid``.
A single iter prints without parentheses (``8:4@laneid``), and a layout that lives on
``m`` alone prints plain ints (``(2,4):(4,1) + 4``); anything else spells every axis out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import LayoutError
from .axes import Axis, AxisValue, as_int, m
from .tile_layout import Iter, TileLayout

__all__ = ["S", "R", "LayoutExpr", "format_layout", "parse_tile_layout"]


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


# --------------------------------------------------------------------------- text
def format_layout(layout: TileLayout) -> str:
    """``str(layout)``: the notation :func:`parse_tile_layout` reads back exactly."""
    plain_m = all(axis is m for axis in layout.axes)

    def stride(value: int, axis: Axis) -> str:
        return str(value) if plain_m else f"{value}@{axis.name}"

    def block(iters) -> str:
        if len(iters) == 1:
            return f"{iters[0].extent}:{stride(iters[0].stride, iters[0].axis)}"
        extents = ",".join(str(it.extent) for it in iters)
        strides = ",".join(stride(it.stride, it.axis) for it in iters)
        return f"({extents}):({strides})"

    text = block(layout.shard)
    if layout.replica:
        text += f" + R[{block(layout.replica)}]"
    for name, value in layout.offset.items():
        text += f" {'-' if value < 0 else '+'} {stride(abs(value), Axis(name))}"
    return text


def parse_tile_layout(text: str) -> TileLayout:
    """Read the text notation (also with ``S[...]`` around the shard, or wrapped in
    ``TileLayout(...)`` as ``repr`` prints it)."""
    return _Parser(text).layout()


_TOKEN = re.compile(r"(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[()\[\]:,@+-])")


class _Parser:
    """Recursive descent over ``block (('+'|'-') (R[block] | int[@axis]))*`` where
    ``block`` is ``extents[:strides]`` and each list is one item or ``(a, b, ...)``."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise LayoutError(f"layout text must be a string, got {text!r}")
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos == len(text):
                break
            match = _TOKEN.match(text, pos)
            if match is None:
                raise LayoutError(f"unexpected character {text[pos]!r} at {pos} in layout "
                                  f"{text!r}")
            self.tokens.append((match.lastgroup, match.group(), pos))
            pos = match.end()
        self.pos = 0

    def error(self, what: str) -> LayoutError:
        where = self.tokens[self.pos][2] if self.pos < len(self.tokens) else len(self.text)
        return LayoutError(f"{what} at {where} in layout {self.text!r}")

    def peek(self, ahead: int = 0) -> str | None:
        k = self.pos + ahead
        return self.tokens[k][1] if k < len(self.tokens) else None

    def peek_kind(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

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
            return _row_major(extents)
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
                break  # a trailing comma, as in (8,)
            values.append(item())
        self.take(")")
        return values

    def integer(self) -> int:
        negative = self.peek() == "-"
        if negative:
            self.take("-")
        if self.peek_kind() != "int":
            raise self.error(f"expected an integer, found {self.peek()!r}")
        value = int(self.take())
        return -value if negative else value

    def stride(self) -> tuple[int, Axis]:
        value = self.integer()
        if self.peek() != "@":
            return value, m
        self.take("@")
        if self.peek_kind() != "name":
            raise self.error(f"expected an axis name after '@', found {self.peek()!r}")
        return value, Axis(self.take())
