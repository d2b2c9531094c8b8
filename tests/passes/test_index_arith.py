"""lower-addresses' index arithmetic (``passes/index_arith.py``) and the known bits it reads
(``passes/known_bits.py``): a fragment's index, a thread part plus a register part built
the way the rules build it, gives every thread the offset plain arithmetic gives, and the
register part folds to constants where the parts occupy different bits."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_addresses import _kernel, evaluate, nested_strides

from tilejit.ir.addressing import Addressing, ArrayArith, Storage
from tilejit.ir.types import i32, i64
from tilejit.layout import Axis, Iter, TileLayout, wgmma_accumulator_layout
from tilejit.passes.index_arith import IrArith
from tilejit.passes.known_bits import KnownBits
from tilejit.passes.loopgen import Emitter
from tilejit.passes.rules.matrix_access import IntArith, logical_index

LANES, WARPS = np.meshgrid(np.arange(32), np.arange(4), indexing="ij")   # every thread
THREAD_KINDS = {"laneid": "lane_id", "wid_in_wg": "warp_id_in_wg", "warpid": "warp_id"}


def _offsets(layout, shape, registers):
    """Per register coordinate ``m``: (the offset lower-addresses builds for the element
    the register holds -- its index the thread part plus the register part, as
    ``gemm_wgmma.lower`` makes it -- and the thread-index values it reads)."""
    kernel, b = _kernel()
    with b.insert_into(kernel.body):
        em = Emitter(None, b)
        thread = {axis: em.thread_coord(kind) for axis, kind in THREAD_KINDS.items()}
        thread_part = logical_index(em, layout, shape, thread)
        indices = {m: [em.add(t, r) for t, r in
                       zip(thread_part, logical_index(em, layout, shape, {"m": m}))]
                   for m in registers}
        em.finish()
        arith = IrArith(b, i32)
        private = Addressing.from_layout(layout, shape, thread_private=True)
        built = {m: private.element_offset(arith, [i if isinstance(i, int) else arith.index(i)
                                                   for i in index], shape)
                 for m, index in indices.items()}
    return built, thread, private


def _plain(layout, shape, private, m, thread_values):
    """The same offset in plain integer arithmetic, for every lane and warp at once."""
    thread = logical_index(IntArith, layout, shape, thread_values)
    index = [t + r for t, r in zip(thread, logical_index(IntArith, layout, shape, {"m": m}))]
    return private.element_offset(ArrayArith, index, shape)


def _registers(layout, shape):
    return sorted({layout.apply(i, j, shape=shape).get("m", 0) for i in range(shape[0])
                   for j in range(shape[1])})


@st.composite
def fragment_layouts(draw):
    """(shape, layout) of a fragment over lanes, warps (of a warpgroup or a CTA) and
    registers: each dim split into iters of 2, 4 or 8 (sometimes 3) on random axes, each
    axis's iters nested in a random order, registers sometimes with gaps."""
    warp_axis = draw(st.sampled_from(["wid_in_wg", "warpid"]))
    extents = [[draw(st.sampled_from([2, 2, 4, 8, 3])) for _ in range(draw(st.integers(1, 3)))]
               for _ in range(2)]
    flat = [e for dim in extents for e in dim]
    axes = [draw(st.sampled_from(["m", "laneid", warp_axis])) for _ in flat]
    reach = {a: math.prod(e for e, x in zip(flat, axes) if x == a) for a in set(axes)}
    assume(reach.get("laneid", 1) <= 32 and reach.get(warp_axis, 1) <= 4)
    strides = nested_strides(draw, flat, axes)
    shard = [Iter(e, s, Axis(a)) for e, s, a in zip(flat, strides, axes)]
    shape = tuple(math.prod(dim) for dim in extents)
    return shape, TileLayout.from_iters(shard)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(fragment_layouts())
def test_every_thread_gets_the_offset_plain_arithmetic_gives(shaped):
    shape, layout = shaped
    registers = _registers(layout, shape)
    built, thread, private = _offsets(layout, shape, registers)
    env = {thread["laneid"]: LANES, thread["wid_in_wg"]: WARPS, thread["warpid"]: WARPS}
    values = {"laneid": LANES, "wid_in_wg": WARPS, "warpid": WARPS}
    for m in registers:
        got = built[m] if isinstance(built[m], int) else evaluate(built[m], env)
        assert (got == _plain(layout, shape, private, m, values)).all(), m


@st.composite
def index_sums(draw):
    """(terms, constant, iters): an index ``sum(coordinate // stride % extent * weight) +
    constant`` over thread coordinates (``warp_id`` without a bound of its own), split
    into digits by ``iters`` (extent, storage stride), powers of two or not."""
    term = st.tuples(st.sampled_from(["lane_id", "warp_id_in_wg", "warp_id"]),
                     st.sampled_from([1, 2, 4, 3]), st.sampled_from([2, 4, 8, 16, 3]),
                     st.sampled_from([1, 2, 4, 8, 16, 3, 24]))
    iters = st.lists(st.tuples(st.sampled_from([2, 4, 8, 3]), st.sampled_from([0, 1, 2, 5])),
                     min_size=1, max_size=4)
    return (draw(st.lists(term, min_size=1, max_size=3)),
            draw(st.sampled_from([0, 0, 1, 2, 3, 4, 8, 9, 16, 40])),
            tuple(draw(iters)))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(index_sums(), st.sampled_from([i32, i64]))
def test_digits_of_thread_index_sums_are_those_of_plain_arithmetic(drawn, index_type):
    terms, constant, iters = drawn
    kernel, b = _kernel()
    warps = np.arange(8)[None, :]   # warp_id: 8 warps
    values = {"lane_id": np.arange(32)[:, None], "warp_id": warps, "warp_id_in_wg": warps % 4}
    with b.insert_into(kernel.body):
        em = Emitter(None, b)
        coords = {kind: em.thread_coord(kind) for kind in values}
        index, plain = 0, 0
        for kind, stride, extent, weight in terms:
            index = em.add(index, em.mul(em.mod(em.floordiv(coords[kind], stride), extent),
                                         weight))
            plain = plain + values[kind] // stride % extent * weight
        index = em.add(em.add(index, constant // 2), constant - constant // 2)
        em.finish()
        arith = IrArith(b, index_type)
        addressing = Addressing((iters,), Storage.of({"m": (0, 1 << 20)}))
        built = arith.value(addressing.element_offset(arith, [arith.index(index)], (None,)))
    expected = addressing.element_offset(ArrayArith, [plain + constant], (None,))
    env = {coords[kind]: v for kind, v in values.items()}
    assert (evaluate(built, env) == expected).all()


def test_the_wgmma_accumulators_register_offsets_fold_to_constants():
    # rows lane / 4 + 16 * warp (+ 8, + 64 per row block), columns 2 * (lane % 4) (+ 1,
    # + 8 * j): the register part's bits are clear in the thread part's
    for shape in ((64, 32), (128, 16)):
        layout = wgmma_accumulator_layout(shape)
        registers = _registers(layout, shape)
        built, _, _ = _offsets(layout, shape, registers)
        assert built == {m: m for m in registers}


def _sum(bits_of_a: int, bits_of_b: int):
    """``a + b`` of thread-index digits whose possible bits are the two masks given."""
    kernel, b = _kernel()
    with b.insert_into(kernel.body):
        lane, warp = b.thread_index("lane_id"), b.thread_index("warp_id_in_wg")
        a = b.binary("and", lane, b.const(bits_of_a, i32))
        shift = (bits_of_b & -bits_of_b).bit_length() - 1
        b_ = b.binary("shl", b.binary("and", warp, b.const(bits_of_b >> shift, i32)),
                      b.const(shift, i32))
        return b, kernel, b.binary("add", a, b_)


def test_a_digit_splits_over_a_sum_only_where_a_term_folds():
    b, kernel, x = _sum(0b0111, 0b110000)
    with b.insert_into(kernel.body):
        arith = IrArith(b, i32)
        count = len(kernel.body.ops)
        assert arith.urem(x, 8) is x.owner.operands[0]   # the warp's term drops
        assert arith.udiv(x, 8).owner.operands[0] is x.owner.operands[1]   # the lane's drops
        assert arith.urem(x, 64) is x and arith.udiv(x, 64) == 0
        assert len(kernel.body.ops) == count + 2   # the floordiv and its constant
        plus = arith.add(arith.add(x, 8), 16)      # constants gather
        assert plus.owner.operands[0] is x and plus.owner.operands[1].owner.attrs["value"] == 24
    b, kernel, x = _sum(0b11111, 0b1100000)   # both straddle bit 4: one floordiv of the sum
    with b.insert_into(kernel.body):
        quotient = IrArith(b, i32).udiv(x, 16)
        assert quotient.owner.attrs["op"] == "floordiv" and quotient.owner.operands[0] is x


def test_known_bits_of_the_ops_index_math_uses():
    kernel, b = _kernel()
    with b.insert_into(kernel.body):
        lane, cta = b.thread_index("lane_id"), b.thread_index("cta_id")

        def c(value):
            return b.const(value, i32)
        cases = {
            lane: 31, cta: None,
            b.binary("mod", cta, c(8)): 7, b.binary("mod", cta, c(6)): 7,
            b.binary("and", cta, c(12)): 12, b.binary("floordiv", lane, c(4)): 7,
            b.binary("floordiv", cta, c(4)): None, b.binary("shr", lane, c(3)): 3,
            b.binary("mul", lane, c(4)): 31 << 2, b.binary("mul", lane, c(3)): 127,
            b.binary("add", lane, c(32)): 63, b.binary("add", lane, c(1)): 63,
            b.binary("sub", lane, c(1)): None, b.cast(lane, i64): 31,
            b.binary("shl", lane, c(27)): None,   # past i32's non-negative range
        }
    bits = KnownBits()
    assert {v: bits.mask(v) for v in cases} == cases
