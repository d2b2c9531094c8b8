"""Thread layouts for register fragments: the ones layout inference chooses from.

* :func:`blocked_layout` -- each thread holds runs of ``vector`` contiguous elements of the
  last dimension; consecutive lanes hold consecutive runs (innermost dimensions first, so
  a warp reads whole rows of a tensor), warps split the outermost dimensions first (so a
  row reduction stays inside a warp where the rows allow it), and what is left repeats in
  each thread's registers, outermost. The layout a Triton user knows as "blocked".
* :func:`reduced_layout` -- the layout of a reduction's result: the source's layout with
  the reduced dimension taken out. Its thread iters become replicas (every thread that
  held part of a row holds the row's result), its memory iters go, and the registers left
  are packed again.

* :func:`mma_accumulator_layout` -- the accumulator of ``mma.sync.m16n8k16`` over a team's
  warps: the tile cut into 16x8 atoms, each laid out as the instruction's C fragment
  (``hw_nvidia.mma_m16n8k16_c_layout``); warps split the atoms (:func:`mma_atom_layout`),
  rows first, each warp taking a contiguous block of them, and a warp's atoms follow one
  another in its threads' registers, four values each.
* :func:`lane_registers` -- a warp fragment's layout (an mma operand's) read backwards:
  which element each lane holds in each register.

All are pure layout algebra; ``passes/layout_inference.py`` decides where they apply.
"""
from __future__ import annotations

import functools
import math

from ..errors import LayoutError
from .axes import Axis, AxisKind, m
from .hw_nvidia import (mma_m16n8k16_a_layout, mma_m16n8k16_b_layout, mma_m16n8k16_c_layout,
                        mma_m16n8k32_a_layout, mma_m16n8k32_b_layout)
from .tile_layout import Iter, TileLayout
from .transform import group_iters, tile

__all__ = ["MMA_SHAPES", "blocked_layout", "lane_registers", "mma_accumulator_layout",
           "mma_atom_layout", "mma_operand_layouts", "reduced_layout"]

# (m, n, k) of each mma.sync shape: D (m x n) = A (m x k) @ B (k x n) + C; an "atom" of the
# accumulator is one instruction's m x n tile.
MMA_SHAPES = {"m16n8k16": (16, 8, 16), "m16n8k32": (16, 8, 32)}
_MMA_OPERAND_LAYOUTS = {"m16n8k16": (mma_m16n8k16_a_layout, mma_m16n8k16_b_layout),
                        "m16n8k32": (mma_m16n8k32_a_layout, mma_m16n8k32_b_layout)}


def mma_operand_layouts(inst: str, a_dtype, b_dtype) -> tuple[TileLayout, TileLayout,
                                                               TileLayout]:
    """The warp fragment layouts of A (m x k), B (k x n) and the f32 C (m x n) of ``inst``
    for operands of these types (16-bit for m16n8k16, 8-bit floats for m16n8k32); C is
    laid out alike for both."""
    a_layout, b_layout = _MMA_OPERAND_LAYOUTS[inst]
    return a_layout(a_dtype), b_layout(b_dtype), mma_m16n8k16_c_layout()


def blocked_layout(shape, *, lanes: int, warps: int = 1, warp_axis: str = "warpid",
                   vector: int = 1) -> TileLayout | None:
    """The blocked layout of ``shape`` over ``lanes`` lanes and ``warps`` warps (on
    ``warp_axis``), ``vector`` elements per run at most; None when the shape cannot give
    every thread the same whole number of elements (too few, or extents the thread counts
    do not divide). A narrower run is tried when the shape is too small for ``vector``."""
    shape = tuple(int(n) for n in shape)
    run = vector
    while run >= 1:
        layout = _blocked(shape, lanes, warps, warp_axis, run)
        if layout is not None:
            return layout
        run //= 2
    return None


def _take(count: int, extents: list[int], order) -> list[int] | None:
    """Split ``count`` threads over ``extents`` (dimensions in ``order``, each taking what
    divides it); None when some are left over."""
    taken = [1] * len(extents)
    for d in order:
        share = math.gcd(count, extents[d])
        taken[d], extents[d], count = share, extents[d] // share, count // share
    return taken if count == 1 else None


def _blocked(shape, lanes, warps, warp_axis, run) -> TileLayout | None:
    rank = len(shape)
    if shape[-1] % run:
        return None
    rest = list(shape)
    rest[-1] //= run
    inner_first = range(rank - 1, -1, -1)
    lane = _take(lanes, rest, inner_first)
    warp = _take(warps, rest, range(rank)) if lane is not None else None
    if warp is None:
        return None
    lane_stride, warp_stride = _strides(lane, inner_first), _strides(warp, inner_first)
    registers = _strides([*rest[:-1], rest[-1] * run], inner_first)
    groups = []
    for d in range(rank):
        repeat_stride = registers[d] * (run if d == rank - 1 else 1)
        groups.append([Iter(rest[d], repeat_stride, m),
                       Iter(warp[d], warp_stride[d], Axis(warp_axis)),
                       Iter(lane[d], lane_stride[d], Axis("laneid"))]
                      + ([Iter(run, 1, m)] if d == rank - 1 else []))
    shard = [it for g in groups for it in g if it.extent > 1]
    return TileLayout.from_iters(shard or [Iter(1, 1, m)])


def _strides(extents: list[int], inner_first) -> list[int]:
    """Mixed-radix strides of ``extents``, the first dimension of ``inner_first`` fastest."""
    strides, weight = [0] * len(extents), 1
    for d in inner_first:
        strides[d], weight = weight, weight * extents[d]
    return strides


def reduced_layout(layout: TileLayout, shape, axis: int) -> TileLayout:
    """The layout of ``shape`` reduced over ``axis`` (the same whether the result keeps the
    axis as extent 1 or drops it), holding each result on every thread that held part of
    its row."""
    used, groups = group_iters(layout, shape)
    if not 0 <= axis < len(groups):
        raise LayoutError(f"cannot reduce axis {axis} of a rank-{len(groups)} layout")
    if used.offset.get("m", 0):
        raise LayoutError(f"{layout} has a memory offset: its reduction has no register "
                          "layout of its own")
    threads = [it for it in groups[axis] if it.axis.kind is not AxisKind.MEMORY]
    kept = [it for d, g in enumerate(groups) if d != axis for it in g]
    # Pack the registers that stay: the same order, no holes where the reduced ones were.
    memory = sorted((it for it in kept if it.axis is m), key=lambda it: it.stride)
    packed, weight = {}, 1
    for it in memory:
        packed[id(it)], weight = Iter(it.extent, weight, m), weight * it.extent
    shard = [packed.get(id(it), it) for it in kept]
    return TileLayout.from_iters(shard or [Iter(1, 1, m)], (*used.replica, *threads),
                                 used.offset)


def mma_atom_layout(shape, warps: int, warp_axis: str = "warpid",
                    inst: str = "m16n8k16") -> TileLayout | None:
    """How the atoms of an mma accumulator of ``shape`` are dealt to ``warps`` warps (on
    ``warp_axis``): a layout of the atom grid ``(M / 16, N / 8)`` whose ``m`` counts a warp's
    atoms. Warps split the grid's rows first, then its columns, each warp taking a
    contiguous block; None when the atoms do not tile ``shape`` or the warps cannot share
    them evenly."""
    (rows, cols), (atom_rows, atom_cols, _) = shape, MMA_SHAPES[inst]
    if rows % atom_rows or cols % atom_cols:
        return None
    grid = [rows // atom_rows, cols // atom_cols]
    split = _take(warps, list(grid), range(2))
    if split is None:
        return None
    own = [n // w for n, w in zip(grid, split)]   # a warp's atoms along each dimension
    warp = Axis(warp_axis)
    return TileLayout.from_iters([Iter(split[0], split[1], warp), Iter(own[0], own[1], m),
                                  Iter(split[1], 1, warp), Iter(own[1], 1, m)]).canonicalize()


def mma_accumulator_layout(shape, warps: int, warp_axis: str = "warpid",
                           inst: str = "m16n8k16") -> TileLayout | None:
    """The accumulator of an ``M x N`` gemm computed by ``inst`` over ``warps`` warps:
    each atom of :func:`mma_atom_layout` laid out as the instruction's C fragment. Thread
    registers ``4 * a .. 4 * a + 3`` hold the fragment of the warp's atom ``a``. None where
    :func:`mma_atom_layout` is None."""
    atoms = mma_atom_layout(shape, warps, warp_axis, inst)
    if atoms is None:
        return None
    atom = MMA_SHAPES[inst][:2]
    grid = (shape[0] // atom[0], shape[1] // atom[1])
    return tile(mma_m16n8k16_c_layout(), atoms, grid, atom)   # C of every shape alike


@functools.lru_cache(maxsize=64)
def lane_registers(layout: TileLayout, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Per lane, per register, the row-major index in ``shape`` of the element the warp
    fragment ``layout`` (over ``laneid`` and ``m`` alone, every element once: the mma
    operand layouts) places there. Kept per (layout, shape): the same few fragments are
    read for every gemm a kernel dispatches, by each rule that looks at it, and reading one
    applies the layout to each element (about a millisecond; a cold compile of the example
    f16 matmul read twenty)."""
    size = math.prod(shape)
    lanes = layout.size("laneid")
    table = [[0] * (size // lanes) for _ in range(lanes)]
    for flat in range(size):
        place = layout.apply(flat)
        table[place["laneid"]][place["m"]] = flat
    return tuple(map(tuple, table))
