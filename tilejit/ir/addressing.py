"""Addresses of on-chip buffers: logical index -> element offset in the buffer's storage.

Every target stores an on-chip buffer over all the axes its layout reaches (``m``
innermost, then thread, partition, ... axes: :class:`Storage`), row-major without a
layout (``ir/storage.py`` sizes it) -- except a per-thread kernel's private buffer laid out
over threads, stored without its thread axes, over ``m`` alone on a GPU
(``thread_private``: the thread axes' digits weigh 0, since each thread holds only its own
elements). :class:`Addressing` groups the layout's shard by the buffer shape
(``TileLayout.group_iters``), so each logical dimension owns a list of mixed-radix iters
whose storage strides give the element offset; ``ComposeLayout`` adds
its XOR swizzle to the result.

The arithmetic is generic over :class:`Arith`: the address-lowering pass builds it as IR
ops (``passes/addresses.py``), the CPU emitter as LLVM instructions, dispatch rules as
numpy arrays (:class:`ArrayArith`); indices are non-negative, so division and remainder
may be unsigned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tilejit.errors import CompilationError, LayoutError
from tilejit.layout import ComposeLayout

from .storage import layout_reach, stored_reach, swizzle_period

__all__ = ["Arith", "ArrayArith", "Addressing", "Iters", "Storage", "row_major_flat", "row_major_indices"]


class Arith(Protocol):
    """Integer arithmetic on some representation of values (llvmlite's IRBuilder has these
    names; ``const`` makes a constant of the index type)."""

    def const(self, value: int) -> Any: ...
    def add(self, a, b) -> Any: ...
    def mul(self, a, b) -> Any: ...
    def udiv(self, a, b) -> Any: ...
    def urem(self, a, b) -> Any: ...
    def and_(self, a, b) -> Any: ...
    def or_(self, a, b) -> Any: ...
    def xor(self, a, b) -> Any: ...
    def shl(self, a, b) -> Any: ...
    def lshr(self, a, b) -> Any: ...


class ArrayArith:
    """:class:`Arith` on numpy integer arrays: the offsets of many elements at once, for
    rules that check where a whole tile lies (offsets are non-negative, so unsigned
    division is floor division)."""

    const = staticmethod(int)
    add, mul = staticmethod(np.add), staticmethod(np.multiply)
    udiv, urem = staticmethod(np.floor_divide), staticmethod(np.remainder)
    and_, or_, xor = staticmethod(np.bitwise_and), staticmethod(np.bitwise_or), \
        staticmethod(np.bitwise_xor)
    shl, lshr = staticmethod(np.left_shift), staticmethod(np.right_shift)


Iters = tuple[tuple[int, int], ...]  # (extent, storage stride) outer -> inner


@dataclass(frozen=True)
class Storage:
    """The linear storage of an on-chip buffer: every axis its layout reaches (``m``
    innermost, then the others in order of appearance) gets a ``[low, high]`` range of
    coordinates and a weight, so a location is ``sum(weight * (coordinate - low))``.

    The CPU has no lanes, warps or partitions of its own, so a tile laid out over them is
    stored over all of its axes (but one thread's private part without them); a view
    reinterprets the buffer's storage, never its own.
    Replicas are copies of the base location: only the base is stored.
    """

    axes: tuple[tuple[str, int, int, int], ...]  # (axis, low, high, weight)

    @classmethod
    def of(cls, reach: dict[str, tuple[int, int]]) -> Storage:
        """The storage over ``reach`` (``ir.storage.layout_reach``: ``m`` starts at 0)."""
        axes, weight = [], 1
        for name in sorted(reach, key=lambda a: a != "m"):  # m innermost
            low, high = reach[name]
            axes.append((name, low, high, weight))
            weight *= high - low + 1
        return cls(tuple(axes))

    @property
    def size(self) -> int:
        """Elements the storage holds."""
        return math.prod(high - low + 1 for _, low, high, _ in self.axes) if self.axes else 1

    def reach(self, name: str) -> tuple[int, int]:
        """The coordinates held on axis ``name`` (only 0 on an axis the storage lacks)."""
        return next(((low, high) for axis, low, high, _ in self.axes if axis == name), (0, 0))

    def weight(self, name: str) -> int:
        """0 for an axis the storage lacks (a view only ever places coordinate 0 there)."""
        return next((weight for axis, _, _, weight in self.axes if axis == name), 0)


@dataclass(frozen=True)
class Addressing:
    """Logical index -> element offset: per-dimension iters, a constant, a swizzle."""

    dims: tuple[Iters, ...] | None      # None: split the row-major flat index by ``flat``
    storage: Storage                    # the allocation's storage (a view shares its buffer's)
    flat: Iters | None = None
    offset: int = 0
    swizzle: tuple[int, int, int] | None = None  # (per_element, swizzle_len, atom_len)

    @property
    def span(self) -> int:
        """Elements the buffer's storage holds."""
        return self.storage.size

    @classmethod
    def row_major(cls, shape) -> Addressing:
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        count = math.prod(shape)
        return cls(tuple(((n, s),) for n, s in zip(shape, strides)),
                   Storage.of({"m": (0, count - 1)}))

    @classmethod
    def from_layout(cls, layout, shape, storage: Storage | None = None,
                    thread_private: bool = False) -> Addressing:
        """The addressing of a buffer laid out by ``layout``; ``storage``: the storage of
        the buffer a view reinterprets (default: a buffer of its own); ``thread_private``:
        one thread's part of it (``ir.storage.held_per_thread``), stored without the
        thread axes."""
        tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
        if tile.size() != math.prod(shape):
            raise CompilationError(f"layout {layout} has {tile.size()} elements, the buffer "
                                   f"shape {list(shape)} has {math.prod(shape)}")
        reach = layout_reach(tile)
        swizzle = None
        if isinstance(layout, ComposeLayout):
            swizzle = (layout.per_element, layout.swizzle_len, layout.atom_len)
            if set(reach) != {"m"} or reach["m"][0] < 0:
                raise CompilationError(f"the swizzled layout {layout} reaches "
                                       f"{_describe_reach(reach)}: a swizzle permutes "
                                       "non-negative memory offsets (axis m) only")
            block = swizzle_period(layout)
            reach["m"] = (0, -(-(reach["m"][1] + 1) // block) * block - 1)
        if thread_private:
            reach = stored_reach(tile, thread_private)
        if storage is None:
            storage = Storage.of(reach)
        else:
            _check_within(layout, reach, storage)

        def stored(iters) -> Iters:
            return tuple((it.extent, it.stride * storage.weight(it.axis.name)) for it in iters)
        try:
            dims, flat = tuple(stored(g) for g in tile.group_iters(shape)), None
        except LayoutError:  # iters straddle dimensions: go through the flat index
            dims, flat = None, stored(tile.shard)
        offset = sum(weight * (tile.offset.get(name, 0) - low)
                     for name, low, _, weight in storage.axes)
        return cls(dims, storage, flat, offset, swizzle)

    def element_offset(self, b: Arith, indices, shape):
        """The offset of the element at ``indices`` (a buffer of ``shape``) in the storage."""
        if self.dims is None:
            m = _digits(b, row_major_flat(b, indices, shape), self.flat)
        else:
            m = b.const(0)
            for index, iters in zip(indices, self.dims):
                m = b.add(m, _digits(b, index, iters))
        if self.offset:
            m = b.add(m, b.const(self.offset))
        return m if self.swizzle is None else _swizzle(b, m, *self.swizzle)


def _describe_reach(reach) -> str:
    return ", ".join(f"{name} [{low}, {high}]" for name, (low, high) in reach.items())


def _check_within(layout, reach, storage: Storage) -> None:
    for name, (low, high) in reach.items():
        stored_low, stored_high = storage.reach(name)
        if low < stored_low or high > stored_high:
            raise CompilationError(f"the view's layout {layout} reaches {name} [{low}, "
                                   f"{high}], outside the viewed buffer's [{stored_low}, "
                                   f"{stored_high}]")


def _digits(b: Arith, index, iters: Iters):
    """Sum of digit * stride of ``index`` split over ``iters``; the outermost absorbs the rest."""
    total = b.const(0)
    for extent, stride in reversed(iters[1:]):
        c = b.const(extent)
        if stride:
            total = b.add(total, b.mul(b.urem(index, c), b.const(stride)))
        index = b.udiv(index, c)
    if iters and iters[0][1]:
        total = b.add(total, b.mul(index, b.const(iters[0][1])))
    return total


def _swizzle(b: Arith, m, per_element: int, swizzle_len: int, atom_len: int):
    low = b.and_(m, b.const((1 << per_element) - 1))
    chunk = b.lshr(m, b.const(per_element))
    flip = b.and_(chunk, b.const(((1 << swizzle_len) - 1) << atom_len))
    chunk = b.xor(chunk, b.lshr(flip, b.const(atom_len)))
    return b.or_(b.shl(chunk, b.const(per_element)), low)


def row_major_flat(b: Arith, indices, shape):
    """The row-major flat index of ``indices`` in ``shape``."""
    flat = b.const(0)
    for index, extent in zip(indices, shape):
        flat = b.add(b.mul(flat, b.const(extent)), index)
    return flat


def row_major_indices(b: Arith, flat, shape) -> list:
    """The indices in ``shape`` of the row-major flat index ``flat``."""
    indices = []
    for extent in reversed(shape):
        indices.append(b.urem(flat, b.const(extent)))
        flat = b.udiv(flat, b.const(extent))
    return indices[::-1]
