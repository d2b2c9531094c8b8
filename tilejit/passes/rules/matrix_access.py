"""Warp fragments as matrices of 8 rows of 16 bytes in shared memory (8x8 16-bit elements,
or 8x16 8-bit ones for ldmatrix): what the ``mma`` gemm's ``ldmatrix`` operand loads and
the ``stmatrix`` copy share.

``matrix_load`` finds the ldmatrix/stmatrix whose lane layout
(``layout/hw_nvidia.ldmatrix_layout``) places a fragment's elements exactly as the
fragment does, by enumerating both; ``rows_in_place`` proves from a shared operand's
storage offsets (``storage_offsets``, which wgmma's descriptors are read from too) that
every 16-byte row is contiguous and aligned, as both instructions need (and,
for the ``vec`` copy, that shorter runs are); ``logical_index`` reads a layout's element index back from thread and
register coordinates, the same code in every thread.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from ...ir.addressing import ArrayArith
from ...ir.ops_native import LDMATRIX_ROW, LDMATRIX_ROW_BYTES
from ...ir.types import TeamKind
from ...layout import TileLayout, ldmatrix_layout
from ...layout.fragments import lane_registers
from ...layout.hw_nvidia import LDMATRIX_NUMS
from ...layout.transform import group_iters
from ..addresses import buffer_addressing
from ..dispatch.call import Operand
from ..effects import root_buffer
from ..loopgen import Emitter, Index

__all__ = ["WARP_COORD", "WARP_TEAMS", "IntArith", "MatrixLoad", "logical_index", "matrix_load",
           "region_starts", "rows_in_place", "storage_offsets"]

WARP_TEAMS = (TeamKind.WARP, TeamKind.WARPGROUP, TeamKind.CTA)   # teams of whole warps
WARP_COORD = {TeamKind.WARPGROUP: "warp_id_in_wg", TeamKind.CTA: "warp_id"}   # a warp's number


class IntArith:
    """The Emitter's index arithmetic on Python ints (indices worked out at compile time)."""
    add, mul = staticmethod(operator.add), staticmethod(operator.mul)
    mod, floordiv = staticmethod(operator.mod), staticmethod(operator.floordiv)


@dataclass(frozen=True)
class MatrixLoad:
    """A warp fragment as one ldmatrix (or stmatrix): ``num`` matrices, ``.trans`` or not,
    and each matrix's first element in the fragment's stored coordinates (row, contiguous
    column)."""

    num: int
    trans: bool
    origins: tuple[tuple[int, int], ...]

    def describe(self, instruction: str = "ldmatrix") -> str:
        return f"{instruction}.x{self.num}" + (".trans" if self.trans else "")

    def steps(self) -> list[tuple[int, int]]:
        """How the origin moves per bit of the matrix number: lanes compute their row's
        origin from these (origins that are not affine in the bits are not taken)."""
        first = self.origins[0]
        return [(self.origins[bit][0] - first[0], self.origins[bit][1] - first[1])
                for bit in (1, 2) if bit < self.num]

    def origin(self, j: int) -> tuple[int, int]:
        row, col = self.origins[0]
        for bit, (dr, dc) in enumerate(self.steps()):
            if j >> bit & 1:
                row, col = row + dr, col + dc
        return row, col

    def lane_row(self, em: Emitter, lane) -> tuple[Index, Index]:
        """The stored (row, column) this lane's address names, relative to the fragment:
        lane ``8 * j + r`` names row ``r`` of matrix ``j`` (lanes past ``8 * num`` repeat the
        pattern, so every address is valid)."""
        matrix = em.mod(em.floordiv(lane, LDMATRIX_ROW), self.num)
        row, col = em.add(em.mod(lane, LDMATRIX_ROW), self.origins[0][0]), self.origins[0][1]
        for bit, (dr, dc) in enumerate(self.steps()):
            digit = em.mod(em.floordiv(matrix, 1 << bit), 2)
            row, col = em.add(row, em.mul(digit, dr)), em.add(col, em.mul(digit, dc))
        return row, col


def matrix_load(wanted: list[list[int]], shape, stored_transposed: bool,
                element_bytes: int = 2) -> MatrixLoad | None:
    """The ldmatrix that delivers the warp fragment ``wanted`` (per lane, per register, the
    row-major index in ``shape`` of its element: ``fragments.lane_registers``) of
    ``element_bytes``-byte elements to every lane, or the stmatrix that stores it, when
    there is one: its layout and the fragment's must place every element alike, up to where
    each matrix starts."""
    per_register, row_length = 4 // element_bytes, LDMATRIX_ROW_BYTES // element_bytes
    num = len(wanted[0]) // per_register
    if num not in LDMATRIX_NUMS:
        return None

    def stored(flat):
        row, col = divmod(flat, shape[1])
        return (col, row) if stored_transposed else (row, col)

    def in_matrix(place):   # ldmatrix's (matrix, row, column) of a flat (num, 8, row) index
        matrix, rest = divmod(place, LDMATRIX_ROW * row_length)
        return (matrix, *divmod(rest, row_length))
    for trans in (False, True) if element_bytes == 2 else (False,):
        delivered = lane_registers(ldmatrix_layout(num, trans, element_bytes),
                                   (num, LDMATRIX_ROW, row_length))
        origins = []
        for j in range(num):   # where lane 0's first value of matrix j puts the matrix
            _, row, col = in_matrix(delivered[0][per_register * j])
            first = stored(wanted[0][per_register * j])
            origins.append((first[0] - row, first[1] - col))

        def agrees(place, flat):
            j, row, col = in_matrix(place)
            return stored(flat) == (origins[j][0] + row, origins[j][1] + col)
        if all(agrees(place, flat) for got, want in zip(delivered, wanted)
               for place, flat in zip(got, want)):
            load = MatrixLoad(num, trans, tuple(origins))
            return load if all(load.origin(j) == origins[j] for j in range(num)) else None
    return None


def region_starts(operand: Operand) -> list:
    """The starts of a region operand's dims (None where known only at run time), else 0s."""
    if not operand.is_region:
        return [0] * len(operand.shape)
    return [getattr(s.owner, "attrs", {}).get("value") for s in operand.value.owner.operands[1:]]


def storage_offsets(operand: Operand, starts=None) -> np.ndarray | str:
    """The storage offset (elements from the root buffer's start) of each element of a 2-D
    shared ``operand``, or why it is not known at compile time. ``starts`` (one per dim of
    the region's buffer) stands for the region's own, e.g. a run-time start taken as 0;
    a dim the region drops stays at its start."""
    value = operand.value
    region = value.owner if operand.is_region else None
    buf = region.operands[0] if region is not None else value
    starts = region_starts(operand) if starts is None else starts
    if None in starts:
        return f"{operand.name} is a region with run-time starts"
    root = root_buffer(buf)
    if getattr(root.owner, "name", None) != "alloc" or root.owner.attrs.get("per_team"):
        return f"{operand.name} is not a shared buffer of the CTA's own"
    addressing = buffer_addressing(buf)
    if addressing is None:
        return f"{operand.name}'s storage is not known here"
    keep = region.attrs["keep"] if region is not None else [True] * len(starts)
    sizes = iter(operand.shape)
    axes = [np.arange(next(sizes)) + start if kept else np.array([start])
            for start, kept in zip(starts, keep)]
    grid = np.meshgrid(*axes, indexing="ij")
    offsets = addressing.element_offset(ArrayArith, grid, buf.type.shape)
    return np.asarray(offsets).reshape(operand.shape)


def rows_in_place(operand: Operand, length: int = LDMATRIX_ROW) -> str | None:
    """Why the runs of ``length`` elements of ``operand`` along its last dim (8: ldmatrix's
    rows) are not each contiguous and aligned to their size in shared memory (None: they
    are; the buffer's own start is aligned to SHARED_ALIGNMENT)."""
    offsets = storage_offsets(operand)
    if isinstance(offsets, str):
        return offsets
    cols = operand.shape[-1]
    if cols % length:
        return f"{operand.name}'s rows are not {length}-element runs"
    runs = offsets.reshape(-1, cols // length, length)
    if not (runs - runs[..., :1] == np.arange(length)).all():
        return (f"{operand.name}'s layout does not keep {length} consecutive elements of a "
                "row together")
    if (runs[..., 0] % length).any():
        return (f"{operand.name}'s rows do not start {length * operand.dtype.itemsize}-byte "
                "aligned")
    return None


def logical_index(em: Emitter, layout: TileLayout, shape, location: dict) -> list[Index]:
    """The logical index of the element ``layout`` places at ``location`` (axis name ->
    coordinate, absent axes 0): each iter's digit read back from its axis's coordinate.
    Exact for layouts without replicas whose iters on one axis do not overlap, as the mma
    fragments; it adds up over the axes, so a lane's part and a register's part are
    computed apart (the register's folds to constants)."""
    _, groups = group_iters(layout, shape)
    index = []
    for group in groups:
        value, weight = 0, 1
        for it in reversed(group):
            digit = em.mod(em.floordiv(location.get(it.axis.name, 0), it.stride), it.extent)
            value = em.add(value, em.mul(digit, weight))
            weight *= it.extent
        index.append(value)
    return index
