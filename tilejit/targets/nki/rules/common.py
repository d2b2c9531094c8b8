"""What the NKI families share: an operand's placement as digits, the loop nest around an
instruction, and the region of each operand that one instruction reads or writes.

An instruction covers two digits of each tile operand -- one on the partitions, one on
the free dim -- and the rule loops over every other digit (docs/nki.md). A *pick* says,
for one digit ``(logical dim, digit index)``, either the index it is fixed at (a loop
variable) or :class:`Keep`: the instruction covers ``size`` indices from ``start``.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit.ir.core import Value
from tilejit.ir.types import MemScope, i1
from tilejit.passes.dispatch import TEAM_ONCE, Operand, PrimitiveCall
from tilejit.passes.loopgen import Emitter, Index

from ..tiles import ON_CHIP, Digit, Tile, digits, split_alike, tile_of

__all__ = ["Keep", "Placed", "Tiling", "hbm_operand_reasons", "hbm_region", "loop_name",
           "named", "nest", "on_chip_region", "past_first", "placed", "scope_reasons", "tiled",
           "tiling"]


@dataclass(frozen=True)
class Keep:
    """The instruction covers ``size`` indices of a digit from ``start``."""

    start: Index
    size: int


@dataclass(frozen=True)
class Placed:
    """An on-chip operand: its NKI tensor and its digits per logical dim."""

    operand: Operand
    tile: Tile
    digits: list[list[Digit]]

    def find(self, dim: int | None = None, on_partitions: bool | None = None):
        """(logical dim, index) of each digit, optionally of one logical dim and on (or
        off) the partitions."""
        return [(d, j) for d, group in enumerate(self.digits) for j, g in enumerate(group)
                if (dim is None or d == dim)
                and (on_partitions is None or (g.dim == 0) == on_partitions)]

    def __getitem__(self, key: tuple[int, int]) -> Digit:
        return self.digits[key[0]][key[1]]


def scope_reasons(call: PrimitiveCall) -> list[str]:
    if call.context.distribution != TEAM_ONCE:
        return [f"NKI instructions cover a whole tile from one instruction stream (team_once),"
                f" not {call.context.distribution}"]
    return []


def placed(operand: Operand) -> Placed | str:
    """``operand`` as digits of its NKI tensor, or why it has none."""
    if operand.role not in ON_CHIP:
        return f"{operand.name} is in {operand.role} memory, not SBUF or PSUM"
    tile = tile_of(operand.buffer_type)
    if isinstance(tile, str):
        return f"{operand.name}: {tile}"
    found = digits(operand, tile)
    return f"{operand.name}: {found}" if isinstance(found, str) else Placed(operand, tile, found)


def nest(em: Emitter, loops: list[tuple[int, bool, str]], body) -> None:
    """Nested loops, outer first, each ``(trips, independent, name of its variable)``;
    ``body(ivs)``."""
    def level(i: int, ivs: list):
        if i == len(loops):
            body(ivs)
            return ()
        trips, independent, name = loops[i]

        def step(iv):
            if not isinstance(iv, int):
                iv.name_hint = name
            return level(i + 1, ivs + [iv])
        return em.loop(0, trips, 1, step, independent=independent)
    level(0, [])


def named(value: Value, name: str) -> Value:
    """``value``, printed as ``name``."""
    value.name_hint = name
    return value


def loop_name(prefix: str, key: tuple[int, int], keys) -> str:
    """A loop variable's name: ``prefix`` and the logical dim, the digit too where the
    dim has several loops."""
    d, j = key
    return f"{prefix}{d}" + (f"_{j}" if sum(k[0] == d for k in keys) > 1 else "")


def _root(value: Value) -> tuple[Value, list, tuple]:
    """(buffer, per-dim start, which dims the operand keeps) of a buffer or region."""
    owner = value.owner
    if getattr(owner, "name", None) == "region":
        return owner.operands[0], list(owner.operands[1:]), tuple(owner.attrs["keep"])
    return value, [0] * value.type.rank, (True,) * value.type.rank


def on_chip_region(em: Emitter, p: Placed, picks: dict) -> Value:
    """The region of ``p``'s NKI tensor one instruction reads or writes: kept digits as
    ranges (in tensor dim order: the partitions first), the others at their picks (0 if
    none). A tensor with one kept dim keeps its first free dim too: instructions take
    [P, F] tiles."""
    buffer, _, _ = _root(p.operand.value)
    view = em.once(("nki.view", buffer), lambda: em.b.view(buffer, p.tile.shape, p.tile.layout))
    rank = len(p.tile.shape)
    starts: list[Index] = list(_bases(p))
    sizes, keep = [1] * rank, [False] * rank
    for key in p.find():
        digit, pick = p[key], picks.get(key, 0)
        if isinstance(pick, Keep):
            starts[digit.dim] = em.add(starts[digit.dim], pick.start)
            sizes[digit.dim], keep[digit.dim] = pick.size, True
        else:
            starts[digit.dim] = em.add(starts[digit.dim], em.mul(pick, digit.step))
    if sum(keep) == 1 and rank > 1:
        keep[1] = True
    return em.b.region(view, [em.index(s) for s in starts], sizes, keep)


def _bases(p: Placed) -> list[int]:
    bases = [0] * len(p.tile.shape)
    for key in p.find():
        bases[p[key].dim] = p[key].base
    return bases


def hbm_region(em: Emitter, operand: Operand, like: Placed, picks: dict) -> Value:
    """The region of the tensor in HBM that matches ``like``'s region under ``picks``: the
    same logical indices (``operand`` has ``like``'s logical shape). A kept digit must be
    the innermost of its logical dim, so that its indices are a range."""
    buffer, starts, kept_dims = _root(operand.value)
    starts = [s.owner.attrs["value"] if getattr(s.owner, "name", None) == "const" else s
              for s in starts]   # constants fold into the slices
    sizes, keep = [1] * len(starts), [False] * len(starts)
    dims = [d for d, kept in enumerate(kept_dims) if kept]
    for d, group in enumerate(like.digits):
        root_dim = dims[d]
        for j, digit in enumerate(group):
            pick = picks.get((d, j), 0)
            if isinstance(pick, Keep):
                sizes[root_dim], keep[root_dim] = pick.size, True
                pick = pick.start
            starts[root_dim] = em.add(starts[root_dim], em.mul(pick, digit.weight))
    if sum(keep) == 1:   # the tile's free dim is a logical dim of size 1
        keep[next(d for d in dims if operand.shape[dims.index(d)] == 1 and not keep[d])] = True
    return em.b.region(buffer, [em.index(s) for s in starts], sizes, keep)


def past_first(em: Emitter, ivs: list, always: bool) -> Value:
    """An i1: true when ``always``, else true past the first trip of any loop of ``ivs``
    (a matmul's ``accumulate``: the first one into a PSUM tile overwrites it)."""
    value = None
    for iv in [] if always else [iv for iv in ivs if not isinstance(iv, int)]:
        past = em.b.cmp("ne", iv, em.const(0))
        value = past if value is None else em.b.binary("or", value, past)
    return value if value is not None else em.const(always, i1)


@dataclass(frozen=True)
class Tiling:
    """An engine instruction per [partitions, free] tile of ``dst``: the digits it covers
    (``part``, ``free``: keys of ``dst``) and, per source, which of dst's logical dims it
    shares (a [P, 1] column, broadcast along the free dim, shares only the partitions')."""

    part: tuple[int, int]
    free: tuple[int, int] | None
    dims: tuple[tuple[int | None, ...], ...]   # per source: dst dim -> its dim (None: 1)
    dst: Placed          # the operands with the dims they share cut alike
    sources: tuple[Placed, ...]

    @property
    def shape(self) -> tuple[int, int]:
        """One instruction's [partitions, free] extent."""
        return self.dst[self.part].extent, self.dst[self.free].extent if self.free else 1


def _cut_alike(dst: Placed, sources: list[Placed], shared: list[tuple]) -> \
        tuple[Placed, list[Placed]] | str:
    """dst and the sources with each dim they share cut at the same places
    (``tiles.split_alike``: a PSUM tile on banks beside an SBUF tile on ``F``)."""
    cuts = list(dst.digits)
    for _ in range(2):   # the second pass cuts the sources at every place dst now has
        out = []
        for src, dims in zip(sources, shared):
            mine = list(src.digits)
            for d in (d for d in dims if d is not None):
                alike = split_alike(mine[d], cuts[d])
                if alike is None:
                    return f"{src.operand.name} and dst split dim {d} differently"
                mine[d], cuts[d] = alike
            out.append(Placed(src.operand, src.tile, mine))
        sources = out
    return Placed(dst.operand, dst.tile, cuts), sources


def tiling(dst: Placed, sources: list[Placed]) -> Tiling | str:
    """How one instruction per tile of ``dst`` covers every source, or why it cannot:
    a full source must split its dims as dst does and hold the same digits on the
    partitions; a broadcast source must be 1 along every dim it does not share."""
    shape = dst.operand.shape
    dims = []
    for src in sources:
        mine = src.operand.shape
        if len(mine) != len(shape):
            return f"{src.operand.name} {list(mine)} has another rank than dst {list(shape)}"
        if any(n != m and m != 1 for n, m in zip(shape, mine)):
            return f"{src.operand.name} {list(mine)} does not broadcast to {list(shape)}"
        dims.append(tuple(d if n == m else None for d, (n, m) in enumerate(zip(shape, mine))))
    cut = _cut_alike(dst, sources, dims)
    if isinstance(cut, str):
        return cut
    dst, sources = cut
    parts = dst.find(on_partitions=True)
    if len(parts) != 1:
        return f"{dst.operand.name} has {len(parts)} digits on the partitions, not one"
    part = parts[0]
    for src, shared in zip(sources, dims):
        if shared[part[0]] is None:
            return f"{src.operand.name} broadcasts along dst's partitions: a transpose"
        if src[part].dim != 0:
            return (f"{src.operand.name} and dst hold different digits on the partitions: "
                    "moving data across partitions is a transpose")
    free = [key for key in dst.find(on_partitions=False) if key[0] != part[0] and all(
                shared[key[0]] is None or (src[key].dim != 0 and src[key].step == 1)
                for src, shared in zip(sources, dims)) and dst[key].step == 1]
    best = max(free, key=lambda key: dst[key].extent, default=None)
    return Tiling(part, best, tuple(dims), dst, tuple(sources))


def tiled(em: Emitter, t: Tiling, emit) -> None:
    """Loops over every digit of dst that ``t`` does not cover (each independent: no two
    tiles share an element of dst); ``emit(dst_region, source_regions, picks)`` per tile
    (``picks``: dst's digits, as for ``on_chip_region``)."""
    dst, sources = t.dst, t.sources
    covered = {key: Keep(0, dst[key].extent) for key in (t.part, t.free) if key}
    keys = [key for key in dst.find() if key not in covered]
    loops = [(dst[key].extent, True, loop_name("i", key, keys)) for key in keys]

    def body(ivs):
        picks = {**covered, **dict(zip(keys, ivs))}
        regions = [on_chip_region(em, src, {(shared[d], j): pick
                                            for (d, j), pick in picks.items()
                                            if shared[d] is not None})
                   for src, shared in zip(sources, t.dims)]
        emit(on_chip_region(em, dst, picks), regions, picks)

    nest(em, loops, body)


def hbm_operand_reasons(operand: Operand) -> list[str]:
    if operand.role is not MemScope.GLOBAL:
        return []
    if not operand.is_static:
        return [f"{operand.name} has run-time sizes: NKI shapes are compile-time (pass a "
                "region with static sizes)"]
    return []
