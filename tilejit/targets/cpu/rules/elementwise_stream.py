"""copy and pointwise between global tensors on the CPU: family ``stream``.

The generic ``vector`` family emits each chunk of ``W`` elements element by element (load
the sources, compute, store), an unrolled loop that LLVM's SLP vectorizer turns into
vector instructions -- when it can prove that a store does not change what a later load of
the chunk reads. Between two kernel arguments it cannot (they might overlap), so a
pointwise op that reads and writes global tensors stays scalar; staging through fragments
(private memory) avoids that at the price of extra passes.

``stream`` emits the same chunks, the same masking and the same computation
(``passes/rules/elementwise``), but orders each full chunk as *all loads, then all
computations and stores*: one unrolled loop loads the chunk of every source into a
``W``-element scratch fragment (private memory, which becomes registers), a second one
computes and stores. Nothing has to move across a store to a global tensor, so loads and
stores each become vector accesses without any aliasing fact, and a pointwise op streams
from global tensors to a global tensor in one pass. Instruction shape ``(W,)``, 32-byte
chunks first (``STREAM_BYTES``).

Semantics: within a chunk every source element is read before any destination element of
the chunk is written (as if the chunk were copied through registers). Operands that overlap
without coinciding see that order instead of the element-by-element one; exactly
coinciding operands (``x = x + y``) are unaffected.

f32 ``exp``/``exp2``/``log`` (alone or steps of a fused chain) are computed by the ``poly``
family's polynomials (``math_vector.polynomial_step``), so they vectorize here too.

``config={"cache": "stream"}`` asks for streaming stores: the full chunks are stored with
non-temporal stores (the CPU instruction ``cpu.store_streaming``), which bypass the caches
-- no read-for-ownership of the destination lines and no eviction of useful data -- for
outputs larger than the caches that are not read again soon (like Triton's ``.cs`` cache
modifier). Masked edges store normally.

Legality contract (else ``Decline``; ``vector``/``scalar`` take over): the ``vector``
family's contract (static unit-stride innermost dims, a tail chunk for the rest of the
extent), the ``team_once`` distribution, and at least two tile operands in global memory
(otherwise the alias scopes of private memory already let ``vector`` vectorize) -- or,
with ``config={"cache": "stream"}``, a destination in global memory --, and no per-element
mask (a masked copy's stores are conditional, not whole chunks).
"""
from __future__ import annotations

from tilejit.ir.types import MemScope
from tilejit.passes.dispatch import Decline, Plan, PrimitiveCall, Rule, register
from tilejit.passes.loopgen import Emitter
from tilejit.passes.rules import elementwise

from .common import team_once_reasons
from .math_vector import polynomial_step

__all__ = ["STREAM_COPY", "STREAM_POINTWISE"]


CACHE_POLICIES = (None, "stream")
# Chunks of this many bytes come first when the vector register is wider: streaming from
# and to memory, 256-bit accesses were measured faster than 512-bit ones on Zen 4 (a
# vector add of 2^26 floats: 32.4 ms against 34-44 ms, numpy 32 ms; BENCHMARKS.md).
STREAM_BYTES = 32


def check(call: PrimitiveCall) -> Plan | Decline:
    reasons = team_once_reasons(call)
    if call.primitive == "copy" and len(call.operands) > 2:
        # Its chunks store whole; a mask needs a branch per element (vector applies it).
        reasons.append("a masked copy stores element by element: the vector family does")
    cache = call.config.get("cache")
    if cache not in CACHE_POLICIES:
        reasons.append(f"config cache={cache!r} is not one of {CACHE_POLICIES[1:]}")
    elif cache == "stream":
        if call.operands[0].role is not MemScope.GLOBAL:
            reasons.append("config cache='stream' needs a destination in global memory")
    elif sum(o.role is MemScope.GLOBAL for o in call.tiles) < 2:
        reasons.append("fewer than two operands in global memory: the vector family's "
                       "chunks vectorize already")
    if reasons:
        return Decline(*reasons)
    plan = elementwise.check_vector(call)
    if isinstance(plan, Decline):
        return plan
    # Streams from memory: 32-byte vectors first (see STREAM_BYTES).
    widest = STREAM_BYTES // max(o.dtype.itemsize for o in call.operands)
    shapes = sorted(plan.shapes, key=lambda s: (s[-1] > widest, -s[-1]))
    return Plan(tuple(shapes), plan.details)


def lower(call: PrimitiveCall, plan: Plan, em: Emitter) -> None:
    dst, srcs = call.operands[0], call.operands[1:]
    domain = [em.fuse(call.tiles)] if plan.details["fused"] else list(dst.shape)
    inst = (1,) * (len(domain) - 1) + plan.shape[-1:]

    step = polynomial_step(em)   # exp/exp2/log vectorize as polynomials here too

    def sequential(checked, outside):
        def element(idx):
            values = [em.fill_value(s) if s.name in outside else em.load(s, idx, checked)
                      for s in srcs]
            em.store(dst, elementwise.compute(em, call, values, idx, step), idx, checked)
        return element

    width = inst[-1]
    streaming = call.config.get("cache") == "stream"
    tiles = [s for s in srcs if not s.is_scalar]
    # One register-sized scratch per source (an alloca that SROA turns into registers).
    scratch = {s.name: em.once(("stream", s.name), lambda s=s: em.b.alloc(
        MemScope.FRAGMENT, s.dtype, (width,))) for s in tiles}

    def chunk(base):
        def at(w):
            return list(base[:-1]) + [em.add(base[-1], w)]

        def fetch(w):  # every load of the chunk first ...
            for s in tiles:
                em.b.store(scratch[s.name], em.load(s, at(w)), [em.index(w)])

        def compute(w):  # ... then every store
            values = [s.value if s.is_scalar else em.b.load(scratch[s.name], [em.index(w)])
                      for s in srcs]
            value = elementwise.compute(em, call, values, at(w), step)
            if not streaming:
                em.store(dst, value, at(w))
                return
            if value.type != dst.dtype:
                value = em.b.cast(value, dst.dtype)
            indices = [em.index(i) for i in em.operand_index(dst, at(w))]
            em.b.create("cpu.store_streaming", [em.storage(dst), value, *indices])
        em.loop(0, width, 1, fetch, unroll=width)
        em.loop(0, width, 1, compute, unroll=width)

    def body(box, checked, outside):
        if checked or box.step != tuple(inst):  # masked or tail pieces: one at a time
            return lambda base: em.unrolled(base, box.step, sequential(checked, outside))
        return chunk

    em.each([(box, body(box, checked, outside))
             for box, checked, outside in em.pieces(dst, srcs, domain, inst)])


def _rules(primitive: str) -> Rule:
    return register(Rule("stream", primitive, check, lower, targets=("cpu",), priority=10,
                         doc="chunks loaded whole, then stored whole: vectorizes between "
                             "global tensors"))


STREAM_COPY, STREAM_POINTWISE = _rules("copy"), _rules("pointwise")
