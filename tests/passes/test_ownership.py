"""Ownership in closed form (``tilejit.passes.ownership``): who holds which element of a
fragment laid out over threads, answered from the layouts' thread digits, against the
per-element enumeration it replaces (kept as the reference)."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.tile_kernels import SIMT, lowered, make_kernel

from tilejit.ir.types import MemScope, TeamKind, f32
from tilejit.layout import Iter, TileLayout
from tilejit.layout import hw_nvidia as hw
from tilejit.passes import distribution, ownership
from tilejit.passes.ownership import (ThreadProjection, misread, misread_enumerated,
                                      unowned_element, unowned_element_enumerated)

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

WARP = {(lane, 0) for lane in range(32)}
WARPGROUP = {(lane, w) for lane in range(32) for w in range(4)}


def same(p):
    return [p]


def forbid_enumeration(monkeypatch):
    """From here on, an ownership question that falls back to per-element enumeration
    fails the test."""
    def boom(*_):
        raise AssertionError("ownership fell back to enumerating elements")
    for module in (ownership, distribution):   # each calls it by its own global name
        monkeypatch.setattr(module, "owners", boom)


# ------------------------------------------------------------------ random layouts
AXES = ["m", "m", "laneid", "laneid", "warpid", "wid_in_wg", "tid_in_wg", "wgid"]
STRIDES = st.sampled_from([0, 1, 1, 2, 3, 4, 5, 8, 16, 32, -1])
DIMS = st.sampled_from([1, 2, 3, 4, 5, 6, 8, 12])


@st.composite
def factors(draw, n):
    """An ordered factorization of ``n``, with the odd extent-1 iter."""
    out = []
    while n > 1:
        d = draw(st.sampled_from([d for d in range(2, n + 1) if n % d == 0]))
        out.append(d)
        n //= d
    if draw(st.integers(0, 5)) == 0:
        out.insert(draw(st.integers(0, len(out))), 1)
    return draw(st.permutations(out)) if out else [1]


@st.composite
def layouts(draw, shape):
    """A layout of ``shape``: whole iters per dimension, or (sometimes) a factorization of
    the total size that need not line up with the dimensions. Replicas and offsets on any
    axis, thread axes often."""
    if draw(st.integers(0, 5)) == 0:
        extents = draw(factors(math.prod(shape)))
    else:
        extents = [e for n in shape for e in draw(factors(n))]
    shard = [Iter(e, draw(STRIDES), draw(st.sampled_from(AXES))) for e in extents]
    replica = [Iter(draw(st.integers(1, 4)), draw(STRIDES), draw(st.sampled_from(AXES)))
               for _ in range(draw(st.integers(0, 2)))]
    offset = {a: draw(st.sampled_from([-1, 1, 2, 3, 7, 32]))
              for a in draw(st.sets(st.sampled_from(AXES), max_size=2))}
    return TileLayout.from_iters(shard, replica, offset)


@st.composite
def active_sets(draw):
    if draw(st.booleans()):
        return WARPGROUP
    lo = draw(st.integers(0, 31))
    hi = draw(st.integers(lo + 1, 32))
    warps = draw(st.sets(st.integers(0, 3), min_size=1))
    return {(lane, w) for lane in range(lo, hi) for w in warps}


@st.composite
def shapes(draw, max_size=288):
    shape = tuple(draw(st.lists(DIMS, min_size=1, max_size=3)))
    while math.prod(shape) > max_size:
        shape = shape[1:]
    return shape


@st.composite
def reads(draw, shape):
    """(operand shape, accessed) of a kind the rules use -- the same element, a broadcast,
    a reduction over an inserted axis -- or another index map: a permutation, a driver
    index used twice, the corner of a larger operand, one that computes with an index."""
    kind = draw(st.sampled_from(["same", "broadcast", "reduce", "transpose", "twice",
                                 "corner", "computed"]))
    event(kind)
    if kind == "same":
        return shape, same
    if kind == "broadcast":
        rank = draw(st.integers(1, len(shape)))
        oshape = tuple(1 if draw(st.booleans()) else n for n in shape[len(shape) - rank:])
        return oshape, lambda p: [tuple(0 if n == 1 else i for n, i in
                                        zip(oshape, list(p)[len(p) - rank:]))]
    if kind == "reduce":
        axis, k = draw(st.integers(0, len(shape))), draw(st.integers(1, 6))
        oshape = shape[:axis] + (k,) + shape[axis:]
        return oshape, lambda p: [tuple(p[:axis]) + (a,) + tuple(p[axis:]) for a in range(k)]
    if kind == "transpose":
        return shape[::-1], lambda p: [tuple(reversed(p))]
    if kind == "corner":  # the driver covers the leading corner of a larger operand
        return tuple(n * draw(st.integers(1, 3)) + draw(st.integers(0, 2)) for n in shape), same
    if kind == "twice":
        return shape + shape[:1], lambda p: [tuple(p) + (p[0],)]
    return shape, lambda p: [tuple((i + 1) % n for i, n in zip(p, shape))]  # computes


@FAST
@given(st.data())
def test_unowned_element_matches_the_enumeration(data):
    shape = data.draw(shapes())
    layout = data.draw(layouts(shape))
    active = data.draw(active_sets())
    event("grouped" if ThreadProjection.of(layout, shape) else "enumerated")
    enumerated = unowned_element_enumerated(layout, shape, active)
    event("unowned" if enumerated is not None else "all owned")
    assert unowned_element(layout, shape, active) == enumerated


@FAST
@given(st.data())
def test_misread_matches_the_enumeration(data):
    shape = data.draw(shapes(max_size=160))
    driver = data.draw(layouts(shape))
    oshape, accessed = data.draw(reads(shape))
    operand = data.draw(layouts(oshape))
    active = data.draw(active_sets())
    enumerated = misread_enumerated(driver, shape, operand, oshape, accessed, active)
    event("misread" if enumerated is not None else "every read owned")
    assert misread(driver, shape, operand, oshape, accessed, active) == enumerated


@FAST
@given(st.data())
def test_a_layout_read_through_itself_is_always_owned(data):
    """Both sides of the closed form agree on one layout, replicas and offsets included."""
    shape = data.draw(shapes())
    layout = data.draw(layouts(shape))
    assert misread(layout, shape, layout, shape, same, data.draw(active_sets())) is None


# ------------------------------------------------------------------ hardware layouts
def wgmma(n, warp_axis):
    return hw.wgmma_acc_layout(n, warp_axis=warp_axis)


HW = [  # (name, layout, shape, active threads)
    ("mma A", hw.mma_m16n8k16_a_layout(), (16, 16), WARP),
    ("mma B", hw.mma_m16n8k16_b_layout(), (16, 8), WARP),
    ("mma C", hw.mma_m16n8k16_c_layout(), (16, 8), WARP),
    *[(f"wgmma acc N={n} {axis}", wgmma(n, axis), (64, n), WARPGROUP)
      for n in (8, 24, 64, 256) for axis in ("wid_in_wg", "warpid", "tid_in_wg")],
    ("wg_local", hw.wg_local_layout(16), (128, 16), WARPGROUP),
    ("row per warp", TileLayout.parse("(4,32,8):(1@warpid,1@laneid,1@m)"), (4, 256), WARPGROUP),
]
HW_IDS = [h[0] for h in HW]


@pytest.mark.parametrize("name, layout, shape, active", HW, ids=HW_IDS)
def test_hardware_layouts_own_every_element_without_enumerating(name, layout, shape, active,
                                                                 monkeypatch):
    expected = (unowned_element_enumerated(layout, shape, active),
                misread_enumerated(layout, shape, layout, shape, same, active))
    assert expected == (None, None)
    forbid_enumeration(monkeypatch)
    assert unowned_element(layout, shape, active) is None
    assert misread(layout, shape, layout, shape, same, active) is None


def test_a_warp_holds_no_other_warps_rows():
    layout = wgmma(64, "wid_in_wg")
    one_warp = {(lane, 1) for lane in range(32)}
    assert unowned_element(layout, (64, 64), one_warp) == 0  # row 0 lives on warp 0
    assert unowned_element_enumerated(layout, (64, 64), one_warp) == 0


# Rows of the wgmma accumulator: row r on lanes 4*(r % 8) .. +3 of warp r // 16, each lane
# holding every row its quad owns (the layout of a row reduction's result).
ROWS = TileLayout.parse("(4,2,8):(1@wid_in_wg,1@m,4@laneid) + R[4:1@laneid]")
ROWS_KEPT = TileLayout.parse("(4,2,8,1):(1@wid_in_wg,1@m,4@laneid,1@m) + R[4:1@laneid]")
ROWS_PER_WARP = TileLayout.parse("(4):(1@warpid) + R[32:1@laneid]")
ROWS_PER_WARP_KEPT = TileLayout.parse("(4,1):(1@warpid,1@m) + R[32:1@laneid]")


def broadcast(oshape):
    rank = len(oshape)
    return lambda p: [tuple(0 if n == 1 else i for n, i in zip(oshape, list(p)[len(p) - rank:]))]


@pytest.mark.parametrize("driver, shape, operand, oshape, accessed, active, expected", [
    # a row vector broadcast along the accumulator's columns: every lane of a quad holds it
    (wgmma(256, "wid_in_wg"), (64, 256), ROWS_KEPT, (64, 1), broadcast((64, 1)), WARPGROUP,
     None),
    (TileLayout.parse("(4,32,8):(1@warpid,1@laneid,1@m)"), (4, 256), ROWS_PER_WARP_KEPT, (4, 1),
     broadcast((4, 1)), WARPGROUP, None),
    # a row reduction needs each thread to hold whole rows: lanes 1..3 of the quad do not
    (ROWS, (64,), wgmma(256, "wid_in_wg"), (64, 256), lambda p: [(p[0], a) for a in range(256)],
     WARPGROUP, ((0,), (0, 0), frozenset({(1, 0), (2, 0), (3, 0)}))),
    (ROWS_PER_WARP, (4,), TileLayout.parse("(4,32,8):(1@warpid,1@laneid,1@m)"), (4, 256),
     lambda p: [(p[0], a) for a in range(256)], WARPGROUP,
     ((0,), (0, 0), frozenset((lane, 0) for lane in range(1, 32)))),
    # mma C and mma A's left half place elements alike; mma B puts rows on other lanes
    (hw.mma_m16n8k16_c_layout(), (16, 8), hw.mma_m16n8k16_a_layout(), (16, 16), same, WARP,
     None),
    (hw.mma_m16n8k16_c_layout(), (16, 8), hw.mma_m16n8k16_b_layout(), (16, 8), same, WARP,
     ((0, 1), (0, 1), frozenset({(0, 0)}))),
], ids=["acc+row vector", "row-per-warp+row vector", "acc row reduction",
        "row-per-warp reduction", "mma C as mma A", "mma C as mma B"])
def test_reads_between_hardware_layouts(driver, shape, operand, oshape, accessed, active,
                                        expected, monkeypatch):
    assert misread_enumerated(driver, shape, operand, oshape, accessed, active) == expected
    forbid_enumeration(monkeypatch)
    assert misread(driver, shape, operand, oshape, accessed, active) == expected


def test_digits_that_do_not_nest_are_walked_per_dimension(monkeypatch):
    """Digits 3 x 2 on one side, 2 x 3 on the other: no common mixed radix, so each
    dimension's coordinates are walked (still never the elements)."""
    threes = TileLayout.parse("(4,3,2):(1@m,1@laneid,3@laneid)")
    twos = TileLayout.parse("(4,2,3):(1@m,3@laneid,1@laneid)")
    cases = [(threes, twos, same), (threes, threes, same),
             (threes, twos, lambda p: [(p[0], a) for a in range(6)])]
    expected = [misread_enumerated(a, (4, 6), b, (4, 6), acc, WARP) for a, b, acc in cases]
    assert expected[0] == ((0, 1), (0, 1), frozenset({(3, 0)})) and expected[1] is None
    forbid_enumeration(monkeypatch)
    assert [misread(a, (4, 6), b, (4, 6), acc, WARP) for a, b, acc in cases] == expected


# ------------------------------------------------------------------ through dispatch
def test_a_64x256_accumulator_dispatches_per_thread_without_enumerating(monkeypatch):
    forbid_enumeration(monkeypatch)
    acc, rows = wgmma(256, "wid_in_wg"), ROWS_KEPT

    def body(b):
        frag = b.alloc(MemScope.FRAGMENT, f32, (64, 256), acc)
        row = b.alloc(MemScope.FRAGMENT, f32, (64, 1), rows)
        b.tile("pointwise", frag, b.const(1.0, f32), op="fill", team=TeamKind.WARPGROUP)
        b.tile("pointwise", frag, frag, row, op="mul", team=TeamKind.WARPGROUP)
    _, log = lowered(make_kernel([], body, num_warps=4), SIMT)
    assert [r.rule for r in log] == ["scalar", "scalar"]
