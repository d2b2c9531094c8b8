"""``copy(dst, src)`` on a NeuronCore: family ``dma`` (HBM <-> SBUF, ``nisa.dma_copy``),
family ``tensor_copy`` (on chip: SBUF or PSUM into SBUF, converting the dtype) and family
``nc_transpose`` (on chip, partitions and free dim swapped: through the Tensor Engine).

Each instruction moves one [partitions, free] tile of the on-chip operand: its digit on
``P`` and one digit on ``F`` (the longest the other side allows); every other digit is an
independent loop (no two instructions touch the same element). Shapes are compile-time
here, so a tile whose region of a tensor ends early is a static slice, not a mask (a tile at
a loop variable's start gets a static one from ``peel.py``, which peels the last iteration).

A load that ends early or has a mask fills its tile first (``nisa.memset`` with ``other``,
default 0: what the elements past the end read as on every target), then copies the
static slice; a mask, an affine comparison of index tiles (``rules/affine.py``), then
selects ``other`` where it is false (``nisa.affine_select``, in place). A masked store is
declined: a DMA writes whole slices.

* ``dma``: the tensor side's region covers the same logical indices; each covered digit
  must be the innermost of its logical dim there (a tensor slice is a range). A DMA copies
  in C order, so when the partitions hold the later logical dim (K on P for a row-major
  [M, K] tensor) the tile crosses ``nc_transpose`` (Tensor Engine, through PSUM, at most
  128 x 128 a time) and an SBUF staging tile on the tensor's side.
* ``tensor_copy``: both tiles split their logical dims alike and hold the same digit on
  the partitions (an engine cannot move data across partitions: that is a transpose).
* ``nc_transpose``: each tile's partition digit is the other's free digit (at most 128
  each); ``nisa.nc_transpose`` turns it into PSUM and ``tensor_copy`` lands it.
"""
from __future__ import annotations

from tilejit.ir.types import MemScope, f32
from tilejit.layout.hw_trainium import PMAX, psum_layout, sbuf_layout
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import Emitter

from .affine import over, predicate_of, select_tiles
from .common import (Keep, Placed, hbm_operand_reasons, hbm_region, loop_name, named, nest,
                     on_chip_region, placed, scope_reasons, tiled, tiling)

__all__ = ["DMA", "TENSOR_COPY", "TRANSPOSE"]


def _common(call: PrimitiveCall) -> list[str]:
    reasons = scope_reasons(call)
    dst, src = call["dst"], call["src"]
    if src.is_scalar or tuple(dst.shape) != tuple(src.shape):
        reasons.append(f"dst {list(dst.shape)} and src {list(src.shape)} differ: NKI "
                       "copies do not broadcast")
    return reasons


def _unmasked(call: PrimitiveCall) -> list[str]:
    if len(call.tiles) > 2:
        return ["a masked copy: only a load from HBM into SBUF takes a mask here (family dma)"]
    return []


def _fill(call: PrimitiveCall, clip: dict):
    """A load's fill: (value, the mask's predicate over dst's indices or None) when the load
    is masked or cut short (the elements it leaves get ``other``, as on every target), None
    when neither; or why NKI cannot mask it."""
    masked = len(call.tiles) > 2
    if not masked and not clip:
        return None
    dst = call["dst"]
    value = call.attrs["other"]
    value = call.config.get("fill", 0) if value is None else value
    if not masked:
        return value, None
    if dst.role is MemScope.GLOBAL:
        return "a masked store: a DMA writes whole slices (store a static region instead)"
    pred = predicate_of(call, call["mask"].value)
    if isinstance(pred, str):
        return f"mask: {pred}"
    if dst.dtype != f32:
        return "a masked load here fills f32 tiles (affine_select)"
    return value, over(pred, tuple(call["mask"].shape), tuple(dst.shape))


def _tile_digits(p: Placed, free_ok) -> tuple | str:
    """(partition digit, free digit or None) one instruction covers: the free digit the
    longest on F that ``free_ok(key)`` allows, in another logical dim."""
    parts = p.find(on_partitions=True)
    if len(parts) != 1:
        return f"{p.operand.name} has {len(parts)} digits on the partitions, not one"
    part = parts[0]
    free = [key for key in p.find(on_partitions=False) if key[0] != part[0] and free_ok(key)]
    return part, max(free, key=lambda key: p[key].extent, default=None)


def _loops(p: Placed, covered) -> tuple[list, list]:
    """One independent loop per digit no instruction covers (no two write one element)."""
    keys = [key for key in p.find() if key not in covered]
    return [(p[key].extent, True, loop_name("i", key, keys)) for key in keys], keys


# ------------------------------------------------------------------------------ dma
def _dma_sides(call: PrimitiveCall):
    dst, src = call["dst"], call["src"]
    return (dst, src) if src.role is MemScope.GLOBAL else (src, dst)


def dma_check(call: PrimitiveCall) -> Plan | Decline:
    reasons = _common(call)
    chip, tensor = _dma_sides(call)
    if tensor.role is not MemScope.GLOBAL or chip.role is MemScope.GLOBAL:
        return Decline(*reasons, "a DMA here moves a tile between a tensor in HBM and SBUF")
    if chip.role is MemScope.PSUM:
        reasons.append(f"{chip.name} is in PSUM, which DMA does not reach: drain it into "
                       "SBUF first")
    reasons += hbm_operand_reasons(tensor)
    p = placed(chip)
    if isinstance(p, str) or reasons:
        return Decline(*reasons, *([p] if isinstance(p, str) else []))
    found = _tile_digits(p, lambda key: p[key].weight == 1)
    if isinstance(found, str):
        return Decline(found)
    part, free = found
    if p[part].weight != 1:
        return Decline(f"{chip.name}'s partition digit is not the innermost of its logical "
                       "dim, so its indices in the tensor are not a range")
    if free is None and 1 not in chip.shape:
        return Decline(f"{chip.name} has no free digit a tensor slice can match")
    # the tensor keeps its dims in logical order, the tile the partitions first
    transposed = free is not None and free[0] < part[0]
    clip = _ragged(tensor, p, (part, free))
    if isinstance(clip, str):
        return Decline(clip)
    fill = _fill(call, clip if chip is call["dst"] else {})
    if isinstance(fill, str):
        return Decline(fill)
    if fill:
        t = tiling(p, [p])   # the mask selects between dst and the fill, in place
        if isinstance(t, str):
            return Decline(t)
        fill = (*fill, t)
    details = {"part": part, "free": free, "transposed": transposed, "clip": clip,
               "fill": fill}
    if clip:   # one instruction per tile, cut to the tensor's end
        rows, cols = (clip.get(key, p[key].extent if key else 1) for key in (part, free))
        if transposed and cols > PMAX:
            return Decline(f"a transposed tile of {cols} columns running past the end of "
                           f"{tensor.name}: at most {PMAX} cross the Tensor Engine")
        return Plan([(rows, cols)], details)
    free_sizes = [1] if free is None else \
        [c for c in range(p[free].extent, 0, -1) if p[free].extent % c == 0
         and (not transposed or c <= PMAX)]
    return Plan([(p[part].extent, c) for c in free_sizes], details)


def _ragged(tensor, p: Placed, covered) -> dict | str:
    """The covered digits cut short where the tile runs past its tensor's end, by how far
    it reaches (shapes are specialized here, so a static start makes the cut a static
    slice), or why it cannot be cut."""
    if not tensor.may_oob:
        return {}
    region = tensor.value.owner
    buffer, starts = region.operands[0], region.operands[1:]
    dims = [d for d, kept in enumerate(region.attrs["keep"]) if kept]
    clip = {}
    for d in tensor.oob_dims:
        start, extent = starts[d].owner, buffer.type.shape[d]
        if extent is None or getattr(start, "name", None) != "const":
            return (f"{tensor.name} may run past its end at a run-time start: NKI slices are "
                    "static (a tile loop in tj.static_range gives its tiles static starts)")
        keys = p.find(dim=dims.index(d))
        if len(keys) != 1 or keys[0] not in covered:
            return (f"{tensor.name} runs past its end along a dim {p.operand.name} splits "
                    "over several digits: only a tile one instruction covers is cut short")
        clip[keys[0]] = extent - start.attrs["value"]
    return clip


def dma_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    chip, tensor = _dma_sides(call)
    p = placed(chip)
    part, free = plan.details["part"], plan.details["free"]
    rows, chunk = plan.shape
    covered = {part: Keep(0, rows)}
    if free:
        covered[free] = Keep(0, chunk)
    loops, keys = _loops(p, covered)
    if free and chunk < p[free].extent and not plan.details["clip"]:
        loops.append((p[free].extent // chunk, True, "chunk"))
        keys.append(free)
    loading = chip is call["dst"]

    def body(ivs):
        picks = {**covered, **dict(zip(keys, ivs))}
        if free and keys and keys[-1] == free:
            picks[free] = Keep(em.mul(ivs[-1], chunk), chunk)
        tile, hbm = on_chip_region(em, p, picks), hbm_region(em, tensor, p, picks)
        if not plan.details["transposed"]:
            em.b.create("nki.dma_copy", (tile, hbm) if loading else (hbm, tile))
            return
        # The tensor's slice is [free, partitions]: staged in SBUF on the tensor's side,
        # it crosses the Tensor Engine's transpose.
        stage = named(em.b.alloc(MemScope.SHARED, chip.dtype, (chunk, rows),
                                 sbuf_layout((chunk, rows))), "staged")
        if loading:
            em.b.create("nki.dma_copy", (stage, hbm))
            _turn(em, tile, stage, (chunk, rows), chip.dtype)
        else:
            _turn(em, stage, tile, (rows, chunk), chip.dtype)
            em.b.create("nki.dma_copy", (hbm, stage))

    if plan.details["fill"]:   # the elements the DMA leaves, then the ones the mask drops
        value, pred, t = plan.details["fill"]
        tiled(em, t, lambda out, _regions, _picks:
              em.b.create("nki.memset", (out, em.const(value, chip.dtype))))
    nest(em, loops, body)
    if plan.details["fill"] and pred:
        select_tiles(em, pred, value, t)


def _turn(em: Emitter, dst, src, shape, dtype) -> None:
    """``dst`` = ``src`` ([rows, cols] = ``shape``) transposed: ``nc_transpose`` into a PSUM
    tile, then ``tensor_copy`` out of it (engines cannot move data across partitions)."""
    rows, cols = shape
    flipped = named(em.b.alloc(MemScope.PSUM, dtype, (cols, rows), psum_layout((cols, rows))),
                    "transposed")
    em.b.create("nki.transpose", (flipped, src))
    em.b.create("nki.tensor_copy", (dst, flipped))


# ------------------------------------------------------------------------- tensor_copy
def tensor_copy_check(call: PrimitiveCall) -> Plan | Decline:
    reasons = _common(call) + _unmasked(call)
    sides = [placed(call[name]) for name in ("dst", "src")]
    reasons += [p for p in sides if isinstance(p, str)]
    if call["dst"].role is MemScope.PSUM:
        reasons.append("dst is in PSUM: engines write it through nc_matmul")
    if reasons:
        return Decline(*reasons)
    dst, src = sides
    t = tiling(dst, [src])
    if isinstance(t, str):
        return Decline(t)
    return Plan([t.shape], {"tiling": t})


def tensor_copy_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    def emit(dst, sources, _picks):
        em.b.create("nki.tensor_copy", (dst, *sources))
    tiled(em, plan.details["tiling"], emit)


# --------------------------------------------------------------------------- transpose
def transpose_check(call: PrimitiveCall) -> Plan | Decline:
    reasons = _common(call) + _unmasked(call)
    sides = [placed(call[name]) for name in ("dst", "src")]
    reasons += [p for p in sides if isinstance(p, str)]
    if MemScope.PSUM in (call["dst"].role, call["src"].role):
        reasons.append("a transpose reads SBUF and lands in SBUF (through PSUM)")
    if reasons:
        return Decline(*reasons)
    dst, src = sides
    if [[g.extent for g in group] for group in dst.digits] != \
            [[g.extent for g in group] for group in src.digits]:
        return Decline("dst and src split their logical dims differently")
    src_parts, dst_parts = src.find(on_partitions=True), dst.find(on_partitions=True)
    if len(src_parts) != 1 or len(dst_parts) != 1:
        return Decline("dst and src need one digit each on the partitions")
    to_free, to_part = src_parts[0], dst_parts[0]
    if to_free == to_part or src[to_part].dim == 0 or dst[to_free].dim == 0:
        return Decline("dst's partitions do not hold a free digit of src and src's a free "
                       "digit of dst: not a partition <-> free transpose")
    rows, cols = src[to_free].extent, src[to_part].extent
    if max(rows, cols) > PMAX:
        return Decline(f"a [{rows}, {cols}] transpose: the Tensor Engine turns at most "
                       f"{PMAX} x {PMAX}")
    return Plan([(rows, cols)], {"part": to_free, "free": to_part})


def transpose_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src = placed(call["dst"]), placed(call["src"])
    rows, cols = plan.shape
    covered = {plan.details["part"]: Keep(0, rows), plan.details["free"]: Keep(0, cols)}
    loops, keys = _loops(src, covered)

    def body(ivs):
        picks = {**covered, **dict(zip(keys, ivs))}
        _turn(em, on_chip_region(em, dst, picks), on_chip_region(em, src, picks),
              (rows, cols), src.operand.dtype)

    nest(em, loops, body)


DMA = register(Rule("dma", "copy", dma_check, dma_lower, targets=("nki",), priority=10,
                    doc="nisa.dma_copy between HBM and SBUF"))
TENSOR_COPY = register(Rule("tensor_copy", "copy", tensor_copy_check, tensor_copy_lower,
                            targets=("nki",), priority=10,
                            doc="nisa.tensor_copy on chip (SBUF or PSUM into SBUF)"))
TRANSPOSE = register(Rule("nc_transpose", "copy", transpose_check, transpose_lower,
                         targets=("nki",), priority=5,
                         doc="an on-chip copy that swaps partitions and free dim: "
                             "nisa.nc_transpose through PSUM"))
