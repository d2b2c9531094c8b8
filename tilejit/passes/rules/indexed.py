"""Copies that move elements to computed positions, on any target: ``permute`` (tj.trans,
x.T), ``gather`` and ``scatter`` (docs/language.md "Building, converting and indexing
tiles").

One element at a time, through the loop generator like the ``scalar`` element family:
the loops run over a domain (the destination for permute and gather, the broadcast shape of
index and source for scatter), and each element's position in the other operand is
computed from its domain indices -- permuted, or with the ``axis`` index replaced by the
index tile's element. Loads and stores take *logical* indices, so whatever the layouts of
the tiles (thread axes, padding, swizzles), the result is the logical one.

Bounds: an index outside the indexed operand's extent along ``axis`` (negative, or past
the end of its tensor, a run-time size), or a position past its end on another dim, is
masked: a gather reads ``other`` (default 0) there, a scatter writes nothing. Every access
to the indexed operand is checked, so it may be a whole tensor of run-time shape (an
embedding table). A source region of a permute reads the copy's fill past its tensor's end.

Order: scatter visits its domain in row-major order, so with ``team_once`` (the CPU) the
last of several writes to one element wins. Split over threads (``per_thread``), writes of
duplicate indices race, as on a GPU.

Legality contract (else ``Decline``): element loops reach every operand; the index tile
does not run past its tensor (load it into a fragment first); split over threads
(``per_thread``), no operand is laid out over threads (an element's partner may live on any
thread). Instruction shape ``(1,)``.
"""
from __future__ import annotations

from ...ir.types import i64
from ..dispatch.call import Operand, PrimitiveCall
from ..dispatch.registry import Decline, Plan, Rule, register
from ..distribution import Owned, choose
from ..loopgen import Box, Emitter
from .common import element_access_reasons, verdict

__all__ = ["SCALAR_GATHER", "SCALAR_PERMUTE", "SERIAL_SCATTER"]

# The operand that the computed positions index, per primitive.
_INDEXED = {"permute": "src", "gather": "src", "scatter": "dst"}


def _domain(call: PrimitiveCall) -> tuple[int, ...]:
    """The shape the loops run over (numpy broadcasting of index and src for scatter)."""
    if call.primitive != "scatter":
        return tuple(call["dst"].shape)
    index, src = call["index"].shape, call["src"].shape
    src = (1,) * (len(index) - len(src)) + tuple(src)
    return tuple(max(a, b) for a, b in zip(index, src))


def check(call: PrimitiveCall) -> Plan | Decline:
    indexed = _INDEXED[call.primitive]
    checked = (indexed,) if call.primitive != "permute" else ()
    reasons = element_access_reasons(call, checked=checked)
    if call.primitive != "permute" and call["index"].may_oob:
        reasons.append("index may run past the end of its tensor: load it into a fragment "
                       "first (with mask= and other=)")
    if reasons:
        return Decline(*reasons)
    domain = _domain(call)
    dist = choose(call, [o for o in call.tiles if tuple(o.shape) == domain])
    if isinstance(dist, Owned):  # per_thread: one unit cannot reach another's registers
        spread = ", ".join(o.name for o in call.tiles if o.thread_axes)
        return Decline(f"{spread} is laid out over threads, but an element's partner may "
                       "live on any thread")
    return dist if isinstance(dist, Decline) else verdict([], [(1,)], distribution=dist)


def _extent(em: Emitter, o: Operand, d: int):
    """The extent of ``o``'s dim ``d`` that an access must stay under, as an i64 constant or
    value: static, the valid part of a region running past its tensor, or a run-time dim."""
    limit = em.limits(o)[d]
    if limit is None:
        return em.once(("dim", o.name, d), lambda: em.b.buffer_dim(o.value, d))
    if isinstance(limit, int):
        return em.const(limit, i64)
    return em.once(("i64", o.name, d), lambda: em.b.cast(limit, i64))


def _inside(em: Emitter, o: Operand, position: list, domain, axis: int):
    """The i1 value saying ``position`` (indices of ``o``; ``position[axis]`` an index
    loaded from the index tile, the others domain indices) is inside ``o``, or None when
    it always is."""
    conds = []
    for d, i in enumerate(position):
        limit = em.limits(o)[d]
        if d != axis and isinstance(limit, int) and limit >= domain[d]:
            continue  # a domain index always fits
        wide = em.b.cast(em.index(i), i64) if em.index(i).type != i64 else em.index(i)
        if d == axis:
            conds.append(em.b.cmp("ge", wide, em.const(0, i64)))
        conds.append(em.b.cmp("lt", wide, _extent(em, o, d)))
    return em.all_of(conds)


def _guarded(em: Emitter, ok, then, otherwise=None):
    """``then()`` where ``ok`` holds, else ``otherwise()`` (both give a value or nothing)."""
    if ok is None:
        return then()
    results = [] if otherwise is None else [em.call["dst"].dtype]
    op, then_block, else_block = em.b.if_(ok, results)
    with em.b.insert_into(then_block):
        value = then()
        em.b.yield_([] if otherwise is None else [em.b.cast(value, results[0])
                                                  if value.type != results[0] else value])
    with em.b.insert_into(else_block):
        em.b.yield_([] if otherwise is None else [otherwise()])
    return op.results[0] if results else None


def _load_at(em: Emitter, o: Operand, position: list):
    return em.b.load(em.storage(o), [em.index(i) for i in position])


def lower_permute(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src, dims = call["dst"], call["src"], call.attrs["dims"]

    def element(idx):
        position = [0] * len(dims)
        for k, d in enumerate(dims):
            position[d] = idx[k]
        em.store(dst, em.load(src, position, src.may_oob), idx, dst.may_oob)

    em.each([(Box.full(dst.shape), element)])


def lower_gather(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, src, index, axis = call["dst"], call["src"], call["index"], call.attrs["axis"]

    def element(idx):
        position = list(idx)
        position[axis] = em.load(index, idx)
        value = _guarded(em, _inside(em, src, position, dst.shape, axis),
                         lambda: _load_at(em, src, position), lambda: em.other(dst.dtype))
        em.store(dst, value, idx, dst.may_oob)

    em.each([(Box.full(dst.shape), element)])


def lower_scatter(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, index, src, axis = call["dst"], call["index"], call["src"], call.attrs["axis"]
    domain = _domain(call)

    def element(idx):
        position = list(idx)
        position[axis] = em.load(index, idx)
        value = em.load(src, idx, src.may_oob)   # past its tensor's end: the fill, as copies read
        if value.type != dst.dtype:
            value = em.b.cast(value, dst.dtype)

        def write():
            em.b.store(em.storage(dst), value, [em.index(i) for i in position])
        _guarded(em, _inside(em, dst, position, domain, axis), write)

    em.each([(Box.full(domain), element)])


SCALAR_PERMUTE = register(Rule("scalar", "permute", check, lower_permute, fallback=True,
                               doc="one element at a time, the source read at permuted indices"))
SCALAR_GATHER = register(Rule("scalar", "gather", check, lower_gather, fallback=True,
                              doc="one element at a time, masked where the index is out of range"))
SERIAL_SCATTER = register(Rule("serial", "scatter", check, lower_scatter, fallback=True,
                               doc="one element at a time in row-major order (last write wins)"))
