"""AWS Trainium (NKI) on-chip buffer layouts: SBUF and PSUM over partitions ``P`` x free ``F``.

Facts (AWS Neuron NKI docs: "NKI Programming Model" / "Trainium Architecture Guide for
NKI", ``nki.language.tile_size``, ``nki.compiler.psum.alloc``):

* SBUF and PSUM are two-dimensional: 128 partitions (``tile_size.pmax``) x a per-partition
  free dimension addressed in bytes; a tile's partition dimension is one-dimensional and
  at most 128, any number of free dimensions flatten onto ``F``.
* SBUF is 24 MiB per NeuronCore = 192 KiB per partition; PSUM is 2 MiB = 16 KiB per
  partition in 8 banks of 2 KiB (one matmul output tile <= one bank, 512 fp32).

``F`` counts elements of the tile's dtype (not bytes), ``P`` partitions.
"""
from __future__ import annotations

from ..errors import LayoutError
from .hw_nvidia import _check_int, _layout, dtype_bytes

__all__ = [
    "PMAX", "SBUF_PARTITION_BYTES", "PSUM_PARTITION_BYTES", "PSUM_BANK_BYTES",
    "sbuf_layout", "psum_layout",
]

PMAX = 128
SBUF_PARTITION_BYTES = 192 * 1024
PSUM_PARTITION_BYTES = 16 * 1024
PSUM_BANK_BYTES = 2 * 1024


def _split_partition(p: int, num_partitions: int | None) -> int:
    """Number of hardware partitions used for a logical partition extent ``p``."""
    if num_partitions is not None:
        _check_int("num_partitions", num_partitions, 1, PMAX)
        if p % num_partitions:
            raise LayoutError(f"partition extent {p} is not a multiple of num_partitions "
                              f"{num_partitions}")
        return num_partitions
    if p <= PMAX:
        return p
    for inner in range(PMAX, 0, -1):  # largest divisor of p that fits on the partitions
        if p % inner == 0:
            break
    if inner == 1:
        raise LayoutError(f"partition extent {p} (> {PMAX}) has no divisor in [2, {PMAX}]: "
                          f"it cannot be split evenly over the partitions; pad it or pick "
                          f"another partition_dim")
    return inner


def _pf_layout(kind, shape, partition_dim, dtype, num_partitions, partition_offset,
               free_offset, capacity):
    shape = tuple(shape)
    if not shape:
        raise LayoutError(f"{kind}: shape must have rank >= 1")
    for i, d in enumerate(shape):
        _check_int(f"shape[{i}]", d)
    nd = len(shape)
    if isinstance(partition_dim, bool) or not isinstance(partition_dim, int) or \
            not -nd <= partition_dim < nd:
        raise LayoutError(f"{kind}: partition_dim {partition_dim!r} out of range for rank {nd}")
    pd = partition_dim % nd
    p = shape[pd]
    inner = _split_partition(p, num_partitions)
    outer = p // inner
    _check_int("partition_offset", partition_offset, 0)
    _check_int("free_offset", free_offset, 0)
    if partition_offset + inner > PMAX:
        raise LayoutError(f"{kind}: {inner} partitions + partition_offset {partition_offset} "
                          f"exceed the {PMAX} partitions")
    # F is row-major over the non-partition iters in logical order (the outer part of a
    # split partition dimension sits where that dimension sits).
    f_extents = [d for i, d in enumerate(shape) if i != pd]
    f_extents.insert(pd, outer)
    free = 1
    for d in f_extents:
        free *= d
    if dtype is not None:
        nbytes = (free + free_offset) * dtype_bytes(dtype)
        if nbytes > capacity:
            raise LayoutError(f"{kind}: {free + free_offset} elements x {dtype_bytes(dtype)} B "
                              f"= {nbytes} B per partition exceed the {capacity} B available")
    iters, stride = [], free
    for i, d in enumerate(f_extents):
        stride //= d
        if i == pd:
            if outer > 1:
                iters.append((outer, stride, "F"))
            iters.append((inner, 1, "P"))
        else:
            iters.append((d, stride, "F"))
    return _layout(iters, offset={"P": partition_offset, "F": free_offset})


def sbuf_layout(shape, partition_dim: int = 0, *, dtype=None, num_partitions=None,
                partition_offset: int = 0, free_offset: int = 0):
    """SBUF tile layout: ``shape[partition_dim]`` on ``P``, the rest row-major on ``F``.

    A partition extent above 128 is split ``outer x inner`` (``inner`` = largest divisor
    <= 128, or ``num_partitions``) with the outer part on ``F`` — e.g. ``(256, 512)`` gives
    the paper's ``(2,128,512):(512@F,1@P,1@F)``. Non-power-of-two extents are fine
    (``(96, 300)``, ``(384, 7)``). With ``dtype``, the per-partition footprint is checked
    against the 192 KiB per partition. Raises ``LayoutError`` on impossible requests.
    """
    return _pf_layout("sbuf_layout", shape, partition_dim, dtype, num_partitions,
                      partition_offset, free_offset, SBUF_PARTITION_BYTES)


def psum_layout(shape, partition_dim: int = 0, *, dtype="float32", num_partitions=None,
                partition_offset: int = 0, free_offset: int = 0):
    """PSUM tile layout: ``P`` x ``Bank`` x ``F``, the mapping of :func:`sbuf_layout` with
    whole 2 KiB banks on ``Bank`` (``(128, 1024)`` f32 is ``(128,2,512):(1@P,1@Bank,1@F)``);
    the per-partition footprint must fit the 16 KiB of PSUM (8 banks; one matmul output
    tile fits one bank)."""
    layout = _pf_layout("psum_layout", shape, partition_dim, dtype, num_partitions,
                        partition_offset, free_offset, PSUM_PARTITION_BYTES)
    return _on_banks(layout, PSUM_BANK_BYTES // dtype_bytes(dtype or "float32"))


def _on_banks(layout, bank: int):
    """``layout`` with the free offsets of whole banks (``bank`` elements each) on ``Bank``:
    ``P`` x ``Bank`` x ``F``, ``F`` inside one bank. A tile of one bank or less, with a free
    offset, or whose free iters do not split at a bank's end stays on ``F`` alone."""
    shard = layout.shard
    free = [it for it in shard if it.axis.name == "F"]
    if layout.offset or sum((it.extent - 1) * it.stride for it in free) < bank:
        return layout
    iters = []
    for it in shard:
        e, st, a = it.extent, it.stride, it.axis.name
        if a != "F" or st * e <= bank:
            iters.append((e, st, a))
        elif st % bank == 0:
            iters.append((e, st // bank, "Bank"))
        elif bank % st == 0 and e % (bank // st) == 0:   # the iter crosses a bank's end
            iters += [(e // (bank // st), 1, "Bank"), (bank // st, st, "F")]
        else:
            return layout
    return _layout(iters)
