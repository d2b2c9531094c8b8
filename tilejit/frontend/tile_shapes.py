"""Shapes of tile operands, shared by the tile semantics modules: numpy broadcasting,
their text in messages, and the integer-indexed tile ``table[idx, :]``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["IndexedTile", "broadcast_shapes", "broadcasts_to", "shape_text"]


@dataclass(frozen=True)
class IndexedTile:
    """``table[idx, :]``: a whole buffer with the 1-D integer tile ``idx`` indexing dim
    ``axis`` (the other dims whole). Only ``tj.copy`` takes it: as its src it is a gather of
    rows, as its dst a scatter."""

    buffer: Any
    index: Any
    axis: int

    def __str__(self) -> str:
        return f"a tile indexed by an integer tile on dim {self.axis}"


def broadcast_shapes(shapes) -> tuple | None:
    """numpy broadcasting of static shapes; None when they do not broadcast."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcasts_to(shape, target) -> bool:
    """Whether ``shape`` broadcasts to ``target`` (None dims are run-time and match)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) or None in (s, t) for s, t in zip(reversed(shape), reversed(target)))


def shape_text(shape) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"
