"""How an on-chip buffer is an NKI tensor, and which part of it one instruction reads.

An SBUF or PSUM buffer (a ``shared`` one counts as SBUF: it is this target's on-chip
memory) is declared as ``nl.ndarray((P, F1, F2, ...))``: its layout's ``P`` iter first,
then its ``F`` iters in descending stride (a PSUM tile's ``Bank`` iters count as ``F`` iters
of a bank's elements: ``(128,2,512):(1@P,1@Bank,1@F)`` is ``(128, 2, 512)``, one bank per
index of dim 1) (docs/nki.md, "Buffers"). That is what NKI's
own indexing addresses, so an instruction's operand is a plain slice of it: the
*physical view* (:class:`Tile`) is an IR ``view`` of the buffer in that shape, and each
instruction reads a ``region`` of the view. The layout must therefore be a dense row-major
nest on ``F`` over one ``P`` iter of stride 1; any other is declined with the reason.

A tile operand (a buffer or a region of one) is described by its :class:`Digit` s: per
logical dim, its layout's iters outer to inner, each the extent it runs on one physical
dim from a base index. A rule picks the digits an instruction covers and loops over the
rest (the TIRx paper's §5.3 matching, ``rules/gemm.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit.errors import LayoutError
from tilejit.ir.types import BufferType, MemScope
from tilejit.layout import Iter, TileLayout
from tilejit.layout.axes import Axis
from tilejit.layout.hw_trainium import PMAX, PSUM_BANK_BYTES, psum_layout, sbuf_layout
from tilejit.passes.dispatch.call import Operand

from .ops import ON_CHIP

__all__ = ["ON_CHIP", "Digit", "Tile", "digits", "split_alike", "tile_of"]

_P, _F = Axis("P"), Axis("F")


@dataclass(frozen=True)
class Tile:
    """The NKI tensor of an on-chip buffer: ``shape[0]`` partitions, then the free dims;
    ``strides[d]`` is dim ``d``'s step on ``F`` (dim 0: on ``P``)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    bank: int = 0   # elements of one PSUM bank: a ``Bank`` iter's unit on ``F``

    @property
    def layout(self) -> TileLayout:
        """The layout of the view of the buffer in this shape (placement unchanged)."""
        axes = [_P] + [_F] * (len(self.shape) - 1)
        return TileLayout.from_iters([Iter(e, s, a) for e, s, a in
                                      zip(self.shape, self.strides, axes)])

    def dim_of(self, axis: str, stride: int) -> int | None:
        if axis == "P":
            return 0 if stride == 1 else None
        if axis == "Bank":
            stride *= self.bank
        return next((d for d in range(1, len(self.shape)) if self.strides[d] == stride), None)


def default_layout(buffer: BufferType):
    """The layout an on-chip buffer without one gets: dim 0 on the partitions."""
    make = psum_layout if buffer.scope is MemScope.PSUM else sbuf_layout
    return make(buffer.shape, 0)


def tile_of(buffer: BufferType) -> Tile | str:
    """The NKI tensor ``buffer`` is declared as, or why its layout has none."""
    try:
        layout = buffer.layout or default_layout(buffer)
    except LayoutError as err:
        return err.message
    if not isinstance(layout, TileLayout):
        return f"layout {layout} is swizzled: NKI tensors are P x F, no swizzles"
    what = f"layout {layout}"
    if layout.replica or any(v for v in layout.offset.values()):
        return f"{what} has replicas or an offset: an NKI tensor places each element once"
    bank = PSUM_BANK_BYTES // buffer.dtype.itemsize if buffer.scope is MemScope.PSUM else 0
    iters = [Iter(it.extent, it.stride * bank, _F) if bank and it.axis.name == "Bank" else it
             for it in layout.shard if it.extent > 1]
    if any(it.axis.name not in ("P", "F") for it in iters):
        return (f"{what} is not on the partitions P and the free dim F"
                + ("" if bank else " (Bank: PSUM tiles only)"))
    parts = [it for it in iters if it.axis.name == "P"]
    if len(parts) > 1 or (parts and parts[0].stride != 1):
        return f"{what} needs one P iter of stride 1 (the partition dim)"
    p = parts[0].extent if parts else 1
    if p > PMAX:
        return f"{what} spans {p} partitions, more than the {PMAX} there are"
    free = sorted((it for it in iters if it.axis.name == "F"), key=lambda it: -it.stride)
    step = 1
    for it in reversed(free):   # dense and row-major, innermost stride 1
        if it.stride != step:
            return (f"{what}: its F iters {[f'{i.extent}:{i.stride}' for i in free]} are "
                    "not a dense row-major nest, which NKI's tensor indexing needs")
        step *= it.extent
    free = free or [Iter(1, 1, _F)]
    return Tile((p, *(it.extent for it in free)), (1, *(it.stride for it in free)), bank)


@dataclass(frozen=True)
class Digit:
    """``extent`` indices ``step`` apart of physical dim ``dim`` from ``base``: one iter of
    an operand's layout (``step`` 1) or the outer part of one (:func:`split_alike`),
    ``weight`` its step in the operand's logical dim."""

    extent: int
    dim: int
    base: int
    weight: int
    step: int = 1


def split_alike(x: list[Digit], y: list[Digit]) -> tuple[list[Digit], list[Digit]] | None:
    """Two operands' digits of one logical dim cut at the same places (``[1024]`` beside
    ``[2, 512]`` becomes ``[2, 512]`` on one dim: the 2 steps 512 indices), or None where
    one's extent does not divide the other's."""
    xs, ys, out_x, out_y = x[::-1], y[::-1], [], []   # inner first
    while xs and ys:
        a, b = xs.pop(0), ys.pop(0)
        if a.extent != b.extent:
            small, big = (a, b) if a.extent < b.extent else (b, a)
            if big.extent % small.extent:
                return None
            f = small.extent
            (xs if big is a else ys).insert(0, Digit(big.extent // f, big.dim, big.base,
                                                     big.weight * f, big.step * f))
            big = Digit(f, big.dim, big.base, big.weight, big.step)
            a, b = (small, big) if small is a else (big, small)
        out_x.append(a)
        out_y.append(b)
    return (out_x[::-1], out_y[::-1]) if not xs and not ys else None


def digits(operand: Operand, tile: Tile) -> list[list[Digit]] | str:
    """Per logical dim of ``operand``, its digits outer to inner, or why they cannot be
    read off (a region start known only at run time, a layout the slice broke)."""
    if operand.layout_error:
        return operand.layout_error
    starts = operand.value.owner.operands[1:] if operand.is_region else ()
    if any(s.owner.name != "const" for s in starts):
        return f"{operand.name} is a region of an on-chip buffer with a run-time start"
    layout = operand.layout
    if layout is None:   # the buffer's default layout, sliced as the operand is
        buffer = operand.buffer_type
        layout = default_layout(buffer)
        if operand.is_region:
            t = operand.value.type
            region = tuple(slice(s.owner.attrs["value"], s.owner.attrs["value"] + n) if keep
                           else s.owner.attrs["value"]
                           for s, n, keep in zip(starts, t.sizes, t.keep))
            try:
                layout = layout.slice(buffer.shape, region)
            except LayoutError as err:
                return err.message
    base = _bases(layout.offset, tile)
    try:
        groups = layout.group_iters(operand.shape)
    except LayoutError as err:
        return err.message
    out = []
    for group in groups:
        dim_digits, weight = [], 1
        for it in reversed(group):
            for extent, dim in reversed(_split(it, tile)):
                if dim is None:
                    return f"{operand.name}'s iter {it} is on no dim of its tensor {tile.shape}"
                dim_digits.append(Digit(extent, dim, base[dim], weight))
                weight *= extent
        out.append(dim_digits[::-1])
    return out


def _split(it: Iter, tile: Tile) -> list[tuple[int, int | None]]:
    """``it`` as (extent, physical dim) pieces outer to inner: a slice's canonical form
    may merge consecutive dims of the tensor into one iter."""
    if it.extent == 1:
        return []
    dim = tile.dim_of(it.axis.name, it.stride)
    if dim is None or it.extent <= tile.shape[dim]:
        return [(it.extent, dim)]
    inner = tile.shape[dim]
    if it.extent % inner:
        return [(it.extent, None)]
    return _split(Iter(it.extent // inner, it.stride * inner, it.axis), tile) + [(inner, dim)]


def _bases(offset, tile: Tile) -> list[int]:
    """The index on each physical dim of the operand's first element."""
    base = [offset.get("P", 0)] + [0] * (len(tile.shape) - 1)
    rest = offset.get("F", 0) + offset.get("Bank", 0) * tile.bank
    for d in range(1, len(tile.shape)):
        base[d], rest = divmod(rest, tile.strides[d])
    return base
