"""Index tiles on the nki target: ``tj.arange`` and integer arithmetic on it are affine
functions of a tile's indices, which NKI computes inside ``iota`` and ``affine_select``
(a causal mask) instead of holding them as data.

| tilejit | family | NKI |
|---|---|---|
| ``tj.arange``, ``+ - *`` by numbers, comparisons, on fragments | ``index_tile`` | nothing: folded into the instruction that reads it |
| ``tj.where(dst, pred, tile, number)``, ``pred`` an affine comparison | ``affine_select`` | ``nisa.affine_select`` (``cmp_op(value, 0)``) |
| ``tj.copy(sbuf_tile, index tile)`` | ``iota`` | ``nisa.iota`` |
| ``tj.copy(sbuf_tile, tensor, mask=pred, other=x)`` | ``dma`` (``copy.py``) | ``memset``, ``dma_copy``, ``affine_select`` (:func:`select_tiles`) |

An index tile is a fragment that one tile op writes (``PrimitiveCall.writers``); its value
at logical index ``(i_0, i_1, ...)`` is ``offset + sum(coefs[d] * i_d)`` (:class:`Affine`).
Offsets may be run-time integers (a loop variable: a causal mask's block offsets);
coefficients are compile-time. Per [P, F] tile the rule turns the affine function of the
logical indices into the instruction's partition multiplier, free-dim step and offset.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit.ir.core import Value
from tilejit.ir.types import MemScope, ScalarType, f32, i32
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import IDX, Emitter

from .common import Placed, Tiling, placed, scope_reasons, tiled, tiling

__all__ = ["AFFINE_SELECT", "INDEX_TILE", "IOTA", "IOTA_CHAIN", "Predicate", "over",
           "predicate_of", "select_tiles"]

# tilejit's comparison -> NKI's cmp_op, and the comparison that holds when it does not
CMP = {"ge": "greater_equal", "gt": "greater", "le": "less_equal", "lt": "less",
       "eq": "equal", "ne": "not_equal"}
NEGATED = {"ge": "lt", "gt": "le", "le": "gt", "lt": "ge", "eq": "ne", "ne": "eq"}


@dataclass(frozen=True)
class Affine:
    """``offset + sum(k * s for s, k in scalars) + sum(coefs[d] * i_d)`` over a tile's
    logical indices; ``scalars`` are run-time integers (a loop variable)."""

    coefs: tuple[int, ...]
    offset: int
    scalars: tuple[tuple[Value, int], ...] = ()

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        return Affine(tuple(a + sign * b for a, b in zip(self.coefs, other.coefs)),
                      self.offset + sign * other.offset,
                      self.scalars + tuple((s, sign * k) for s, k in other.scalars))

    def times(self, k: int) -> Affine:
        return Affine(tuple(k * c for c in self.coefs), k * self.offset,
                      tuple((s, k * m) for s, m in self.scalars))

    @property
    def is_constant(self) -> bool:
        return not any(self.coefs) and not self.scalars


@dataclass(frozen=True)
class Predicate:
    """``cmp(value, 0)``, ``cmp`` a tilejit comparison."""

    value: Affine
    cmp: str


def _scalar(value: Value, rank: int) -> Affine | str:
    """An integer scalar as a constant affine function."""
    if not value.type.is_int:
        return f"a {value.type} offset: index tiles are integers"
    owner = value.owner
    if getattr(owner, "name", None) == "const":
        return Affine((0,) * rank, owner.attrs["value"])
    return Affine((0,) * rank, 0, ((value, 1),))


def _broadcast(a: Affine, shape: tuple, to: tuple) -> Affine:
    """``a`` over ``shape``, read as a tile of shape ``to`` (numpy broadcasting): a dim of
    size 1 is always at index 0."""
    coefs = (0,) * (len(to) - len(shape)) + tuple(
        0 if n == 1 else c for c, n in zip(a.coefs, shape))
    return Affine(coefs, a.offset, a.scalars)


def _term(call: PrimitiveCall, value: Value, to: tuple) -> Affine | str:
    """A source of index arithmetic as an affine function over the shape ``to``."""
    if isinstance(value.type, ScalarType):
        return _scalar(value, len(to))
    found = index_of(call, value)
    return found if isinstance(found, str) else _broadcast(found, tuple(value.type.shape), to)


def _view(call: PrimitiveCall, value: Value) -> Affine | str:
    """A view that adds or drops dims of size 1 (``rows[:, None]``)."""
    source = value.owner.operands[0]
    inner = _evaluate(call, source)
    if not isinstance(inner, Affine):
        return inner if isinstance(inner, str) else "a view of a comparison"
    shape, old = tuple(value.type.shape), tuple(source.type.shape)
    if [n for n in shape if n != 1] != [n for n in old if n != 1]:
        return f"a view {list(old)} -> {list(shape)} of an index tile that is not a reshape " \
               "by dims of size 1"
    coefs = iter(c for c, n in zip(inner.coefs, old) if n != 1)
    return Affine(tuple(0 if n == 1 else next(coefs) for n in shape), inner.offset,
                  inner.scalars)


def _apply(name: str, args: list) -> Affine | Predicate | str:
    """One step of index arithmetic on affine functions."""
    if any(isinstance(a, Predicate) for a in args):
        return f"{name} of a comparison: only a comparison's result selects"
    if name == "neg":
        return args[0].times(-1)
    if name in ("add", "sub"):
        return args[0].plus(args[1], 1 if name == "add" else -1)
    if name in CMP:
        return Predicate(args[0].plus(args[1], -1), name)
    if name != "mul":
        return f"{name!r} is not index arithmetic (tj.arange, + - * by numbers, comparisons)"
    other, constant = args if args[1].is_constant else args[::-1]
    if not constant.is_constant:
        return "a product of two index tiles is not affine"
    if constant.scalars:
        return "a product of an index tile and a run-time value: NKI's multipliers and " \
               "steps are compile-time"
    return other.times(constant.offset)


def _expression(call: PrimitiveCall, name: str, steps, shape: tuple, srcs: list[Value]):
    """What pointwise ``name`` (a fused chain: ``steps``) of ``srcs`` into a tile of
    ``shape`` computes, step by step, or why it is no index arithmetic."""
    if name == "iota":
        return _scalar(srcs[0], 1).plus(Affine((1,), 0))
    values = [_term(call, s, shape) for s in srcs]
    for step, _, *args in steps or [(name, None, *range(len(srcs)))]:
        bad = next((values[a] for a in args if isinstance(values[a], str)), None)
        values.append(bad or _apply(step, [values[a] for a in args]))
    return values[-1]


def _evaluate(call: PrimitiveCall, value: Value) -> Affine | Predicate | str:
    """What the one tile op writing fragment ``value`` computes."""
    if getattr(value.owner, "name", None) == "view":
        return _view(call, value)
    writer = call.writers.get(value)
    if writer is None or writer.name != "tile.pointwise":
        return ("not an index tile: a fragment written once by tj.arange or integer "
                "arithmetic on one (NKI engines hold no per-thread data)")
    dst, *srcs = writer.operands
    return _expression(call, writer.attrs["op"], writer.attrs["steps"],
                       tuple(dst.type.shape), srcs)


def index_of(call: PrimitiveCall, value: Value) -> Affine | str:
    """The affine function of index tile ``value`` (a fragment or a view of one), or why it
    is none."""
    found = _evaluate(call, value)
    return "a comparison is not an index" if isinstance(found, Predicate) else found


def predicate_of(call: PrimitiveCall, value: Value) -> Predicate | str:
    """The comparison of index tiles that ``value`` (an i1 fragment) holds."""
    found = _evaluate(call, value)
    if isinstance(found, Affine):
        return "the condition is an index, not a comparison of index tiles"
    if isinstance(found, str):
        return (f"the condition is not a comparison of index tiles (e.g. rows[:, None] >= "
                f"cols[None, :] from tj.arange), which affine_select computes: {found}")
    return found


def _add_times(em: Emitter, total, x, k: int):
    """``total + x * k``, a negative ``k`` as a subtraction (the printed offset reads so)."""
    return em.add(total, em.mul(x, k)) if k >= 0 else em.sub(total, em.mul(x, -k))


def _instruction(em: Emitter, dst: Placed, value: Affine, part, free, picks: dict):
    """(channel_multiplier, pattern, offset) of ``value`` (over dst's logical indices) on
    the tile at ``picks``: the covered digits step the partition and free indices, the
    looped ones add to the offset."""
    offset = value.offset
    for scalar, k in value.scalars:
        offset = _add_times(em, offset, scalar if scalar.type == IDX else
                            em.b.cast(scalar, IDX), k)
    for key, pick in picks.items():
        if key not in (part, free):
            offset = _add_times(em, offset, pick, value.coefs[key[0]] * dst[key].weight)
    multiplier = value.coefs[part[0]] * dst[part].weight
    pattern = ([[value.coefs[free[0]] * dst[free].weight, dst[free].extent]] if free
               else [[0, 1]])
    return multiplier, pattern, em.index(offset)


def _tile_plan(dst: Placed, sources: list[Placed]) -> Plan | Decline:
    t = tiling(dst, sources)
    if isinstance(t, str):
        return Decline(t)
    return Plan([t.shape], {"tiling": t})


# ------------------------------------------------------------------------ index tiles
def index_tile_check(call: PrimitiveCall) -> Plan | Decline:
    dst = call["dst"]
    if dst.role is not MemScope.FRAGMENT:
        return Decline(f"dst is in {dst.role} memory: an index tile is a fragment")
    found = _evaluate(call, dst.value)
    return Decline(found) if isinstance(found, str) else Plan([tuple(dst.shape)])


def index_tile_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    """Nothing: the iota / affine_select that reads the tile computes it."""


# ------------------------------------------------------------------------ affine_select
def _select_sides(call: PrimitiveCall):
    """(the tile, the number, whether the tile is the false side: the comparison is
    negated), or why the select is not one affine_select."""
    a, b = call["a"], call["b"]
    if a.is_scalar == b.is_scalar:
        return "affine_select takes a tile on one side and a number on the other"
    number = a if a.is_scalar else b
    owner = number.value.owner
    if getattr(owner, "name", None) != "const":
        return "the other side is a run-time number: affine_select's on_false_value is " \
               "a compile-time number"
    return (a, owner.attrs["value"], False) if number is b else (b, owner.attrs["value"], True)


def affine_select_check(call: PrimitiveCall) -> Plan | Decline:
    if call.attrs["op"] != "select":
        return Decline(f"{call.attrs['op']!r} is not a select (tj.where)")
    reasons = scope_reasons(call)
    sides = _select_sides(call)
    if isinstance(sides, str):
        reasons.append(sides)
    pred = predicate_of(call, call["cond"].value)
    if isinstance(pred, str):
        reasons.append(pred)
    dst = call["dst"]
    if dst.role is MemScope.PSUM:
        reasons.append("dst is in PSUM: affine_select writes SBUF")
    tiles = [placed(dst)] + ([placed(sides[0])] if not isinstance(sides, str) else [])
    reasons += [t for t in tiles if isinstance(t, str)]
    if reasons:
        return Decline(*reasons)
    if tiles[1].operand.dtype != f32 or dst.dtype != f32:
        return Decline("affine_select here selects f32 tiles")
    return _tile_plan(tiles[0], tiles[1:])


def select_tiles(em: Emitter, pred: Predicate, on_false, t: Tiling) -> None:
    """t's dst = its one source where ``pred`` holds (over dst's logical indices), else
    ``on_false``: one ``affine_select`` per tile of ``t``."""
    def emit(out, regions, picks):
        multiplier, pattern, offset = _instruction(em, t.dst, pred.value, t.part, t.free, picks)
        em.b.create("nki.affine_select", (out, regions[0], offset),
                    {"pattern": pattern, "channel_multiplier": multiplier,
                     "cmp": CMP[pred.cmp], "on_false": float(on_false)})

    tiled(em, t, emit)


def over(pred: Predicate, shape: tuple, to: tuple) -> Predicate:
    """``pred`` of a condition of ``shape``, read over a tile of shape ``to``."""
    return Predicate(_broadcast(pred.value, shape, to), pred.cmp)


def affine_select_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    _, on_false, negated = _select_sides(call)
    pred = predicate_of(call, call["cond"].value)
    pred = over(pred, tuple(call["cond"].shape), tuple(call["dst"].shape))
    if negated:
        pred = Predicate(pred.value, NEGATED[pred.cmp])
    select_tiles(em, pred, on_false, plan.details["tiling"])


# ------------------------------------------------------------------------ iota
def _iota_value(call: PrimitiveCall) -> Affine | str:
    """The index tile a copy writes (or a pointwise chain of index tiles, which
    fuse-pointwise made of the copy) as an affine function over dst's indices."""
    if call.primitive == "copy":
        src = call["src"]
        if src.role is not MemScope.FRAGMENT or len(call.operands) > 2:
            return "src is not an index tile (an unmasked copy from tj.arange ...)"
        found = index_of(call, src.value)
        return found if isinstance(found, str) else \
            _broadcast(found, tuple(src.shape), tuple(call["dst"].shape))
    found = _expression(call, call.attrs["op"], call.attrs["steps"], tuple(call["dst"].shape),
                        [o.value for o in call.operands[1:]])
    return "a comparison into a tile: write it with tj.where" \
        if isinstance(found, Predicate) else found


def iota_check(call: PrimitiveCall) -> Plan | Decline:
    dst = call["dst"]
    reasons = scope_reasons(call)
    found = _iota_value(call)
    if isinstance(found, str):
        reasons.append(found)
    side = placed(dst)
    if isinstance(side, str):
        reasons.append(side)
    if dst.role is MemScope.PSUM:
        reasons.append("dst is in PSUM: iota writes SBUF")
    if dst.dtype not in (i32, f32):
        reasons.append(f"iota writes int32 or float32 tiles, not {dst.dtype}")
    if reasons:
        return Decline(*reasons)
    return _tile_plan(side, [])


def iota_lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    value, t = _iota_value(call), plan.details["tiling"]

    def emit(out, _regions, picks):
        multiplier, pattern, offset = _instruction(em, t.dst, value, t.part, t.free, picks)
        em.b.create("nki.iota", (out, offset),
                    {"pattern": pattern, "channel_multiplier": multiplier})

    tiled(em, t, emit)


INDEX_TILE = register(Rule("index_tile", "pointwise", index_tile_check, index_tile_lower,
                           targets=("nki",), priority=20,
                           doc="an index tile: folded into the iota / affine_select reading it"))
AFFINE_SELECT = register(Rule("affine_select", "pointwise", affine_select_check,
                              affine_select_lower, targets=("nki",), priority=20,
                              doc="nisa.affine_select: tj.where on an affine comparison of "
                                  "index tiles (a causal mask)"))
IOTA = register(Rule("iota", "copy", iota_check, iota_lower, targets=("nki",), priority=20,
                     doc="nisa.iota: an index tile copied into SBUF"))
IOTA_CHAIN = register(Rule("iota", "pointwise", iota_check, iota_lower, targets=("nki",),
                           priority=20, doc="nisa.iota: index arithmetic written into SBUF "
                                            "(a copy fused into it)"))
