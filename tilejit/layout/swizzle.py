"""Shared-memory XOR swizzles composed over a tile layout.

A swizzle is not affine, so it cannot live inside a TileLayout; instead a ComposeLayout
takes the ``m`` coordinate a tile layout produces and permutes it:

    x = m >> M;  f(x) = x ^ ((x & ((2**B - 1) << S)) >> S);  addr = (f(x) << M) + (m % 2**M)

``M`` (per_element) is log2 of the elements in one 16-byte chunk, ``B`` (swizzle_len) the
number of chunk-index bits flipped, ``S`` (atom_len) how far above them the bits that
flip them sit. With ``S >= B`` the two bit ranges are disjoint, which makes ``f`` its own
inverse and so a bijection.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from ..errors import LayoutError
from .axes import as_axis, as_int
from .tile_layout import TileLayout

__all__ = ["SwizzleMode", "ComposeLayout", "parse_layout"]

_CHUNK_BYTES = 16  # shared-memory swizzles move whole 16-byte chunks
_ATOM_LEN = 3  # the flipping bits start 8 chunks (one 128-byte row) up, in every mode


class SwizzleMode(enum.Enum):
    """The TMA / wgmma shared-memory swizzle modes; the value is ``swizzle_len``."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3

    @property
    def swizzle_len(self) -> int:
        return self.value

    @property
    def bytes(self) -> int:
        """The swizzle span in bytes (0 for NONE)."""
        return 0 if self is SwizzleMode.NONE else _CHUNK_BYTES << self.value


@dataclass(frozen=True)
class ComposeLayout:
    """``swizzle(per_element, swizzle_len, atom_len) ∘ tile_layout``."""

    per_element: int
    swizzle_len: int
    atom_len: int
    tile_layout: TileLayout

    def __post_init__(self):
        for name in ("per_element", "swizzle_len", "atom_len"):
            object.__setattr__(self, name, as_int(getattr(self, name), f"swizzle {name}"))
        if self.per_element < 0 or self.swizzle_len < 0:
            raise LayoutError(f"swizzle needs per_element >= 0 and swizzle_len >= 0, got "
                              f"{self.per_element} and {self.swizzle_len}")
        if self.atom_len < self.swizzle_len:
            raise LayoutError(f"swizzle atom_len {self.atom_len} < swizzle_len "
                              f"{self.swizzle_len}: the flipped and flipping bits overlap")
        tile = self.tile_layout
        if not isinstance(tile, TileLayout):
            tile = TileLayout(tile)  # an S[...] expression or layout text
        object.__setattr__(self, "tile_layout", tile)

    @classmethod
    def for_mode(cls, mode, elem_bytes: int, tile_layout) -> "ComposeLayout":
        """The swizzle of ``mode`` (a SwizzleMode or its name) for elements of
        ``elem_bytes`` bytes, e.g. fp16 with B128 gives ``(3, 3, 3)``."""
        if isinstance(mode, str):
            try:
                mode = SwizzleMode[mode.upper()]
            except KeyError:
                raise LayoutError(f"unknown swizzle mode {mode!r}; expected one of "
                                  f"{[m.name for m in SwizzleMode]}") from None
        if not isinstance(mode, SwizzleMode):
            raise LayoutError(f"expected a SwizzleMode, got {mode!r}")
        elem_bytes = as_int(elem_bytes, "element size in bytes")
        if elem_bytes <= 0 or _CHUNK_BYTES % elem_bytes:
            raise LayoutError(f"element size {elem_bytes} bytes does not divide a "
                              f"{_CHUNK_BYTES}-byte swizzle chunk")
        per_element = (_CHUNK_BYTES // elem_bytes).bit_length() - 1
        return cls(per_element, mode.swizzle_len, _ATOM_LEN, tile_layout)

    # ----------------------------------------------------------------- mapping
    def swizzle(self, address: int) -> int:
        """The swizzled ``m`` coordinate of the unswizzled ``address``."""
        address = as_int(address, "a swizzle address")
        low_mask = (1 << self.per_element) - 1
        chunk = address >> self.per_element
        flip_bits = ((1 << self.swizzle_len) - 1) << self.atom_len
        chunk ^= (chunk & flip_bits) >> self.atom_len
        return (chunk << self.per_element) + (address & low_mask)

    def apply(self, *coord, shape=None) -> dict[str, int]:
        """Like TileLayout.apply, with the ``m`` coordinate swizzled."""
        return self._swizzled(self.tile_layout.apply(*coord, shape=shape))

    def locations(self, *coord, shape=None) -> list[dict[str, int]]:
        found = {tuple(sorted(self._swizzled(loc).items()))
                 for loc in self.tile_layout.locations(*coord, shape=shape)}
        return [dict(items) for items in sorted(found)]

    def _swizzled(self, location: dict[str, int]) -> dict[str, int]:
        if "m" in location:
            location = {**location, "m": self.swizzle(location["m"])}
        return location

    def size(self, axis=None) -> int:
        return self.tile_layout.size(axis)

    def span(self, axis=None) -> int:
        """The tile's span; on ``m`` rounded up to whole swizzle blocks, since the swizzle
        only moves addresses within aligned blocks of ``2**(per_element + swizzle_len)``."""
        span = self.tile_layout.span(axis)
        if axis is not None and as_axis(axis).name != "m":
            return span
        block = 1 << (self.per_element + self.swizzle_len)
        return -(-span // block) * block

    def visualize(self, shape, path=None):
        """Draw the swizzled layout over a logical ``shape`` (as TileLayout.visualize)."""
        from .visualize import visualize
        return visualize(self, shape, path)

    # ----------------------------------------------------------------- normal form
    def canonicalize(self) -> "ComposeLayout":
        return ComposeLayout(self.per_element, self.swizzle_len, self.atom_len,
                             self.tile_layout.canonicalize())

    def equivalent(self, other) -> bool:
        """Same swizzle (any swizzle_len 0 is the identity) over equivalent tiles."""
        if isinstance(other, TileLayout):
            return self.swizzle_len == 0 and self.tile_layout.equivalent(other)
        if not isinstance(other, ComposeLayout):
            return False
        if self.swizzle_len == 0 and other.swizzle_len == 0:
            return self.tile_layout.equivalent(other.tile_layout)
        return ((self.per_element, self.swizzle_len, self.atom_len)
                == (other.per_element, other.swizzle_len, other.atom_len)
                and self.tile_layout.equivalent(other.tile_layout))

    # ----------------------------------------------------------------- text
    def __str__(self) -> str:
        return (f"swizzle({self.per_element},{self.swizzle_len},{self.atom_len}, "
                f"{self.tile_layout})")

    def __repr__(self) -> str:
        return (f"ComposeLayout({self.per_element}, {self.swizzle_len}, {self.atom_len}, "
                f"{self.tile_layout!r})")

    @classmethod
    def parse(cls, text: str) -> "ComposeLayout":
        """Read ``swizzle(M,B,S, <tile layout>)``."""
        if not isinstance(text, str):
            raise LayoutError(f"layout text must be a string, got {text!r}")
        match = _SWIZZLE_TEXT.match(text)
        if match is None:
            raise LayoutError(f"expected 'swizzle(M,B,S, <tile layout>)', got {text!r}")
        per_element, swizzle_len, atom_len, tile = match.groups()
        return cls(int(per_element), int(swizzle_len), int(atom_len), TileLayout.parse(tile))


_SWIZZLE_TEXT = re.compile(r"\s*swizzle\s*\(\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,(.*)\)\s*\Z",
                           re.DOTALL)


def parse_layout(text: str) -> TileLayout | ComposeLayout:
    """Parse either notation: a tile layout or ``swizzle(M,B,S, <tile layout>)``."""
    if isinstance(text, str) and text.lstrip().startswith("swizzle"):
        return ComposeLayout.parse(text)
    return TileLayout.parse(text)
