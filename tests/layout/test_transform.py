"""group, permute, slice and tile, with the notes' worked examples."""
import itertools

import pytest

from tilejit.errors import LayoutError
from tilejit.layout import Iter, R, S, TileLayout, laneid, m, pid, warpid

TENSOR_CORE = TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1@m)]
                         + R[2:4@warpid] + 5@warpid)
COL_MAJOR_24 = TileLayout(S[(24, 24):(1, 24)])


def coords(shape):
    return itertools.product(*(range(n) for n in shape))


def assert_same_placement(a, b, shape):
    for c in coords(shape):
        assert a.locations(*c, shape=shape) == b.locations(*c, shape=shape), c


# ---------------------------------------------------------------- group
def test_group_splits_an_iter():
    assert TileLayout(S[12:1]).group((3, 4)) == TileLayout(S[(3, 4):(4, 1)])


def test_group_keeps_a_layout_that_already_fits():
    assert TENSOR_CORE.group((8, 16)) == TENSOR_CORE
    assert TENSOR_CORE.group_iters((8, 16)) == ((Iter(8, 4, laneid),),
                                                (Iter(2, 1, warpid), Iter(4, 1, laneid),
                                                 Iter(2, 1, m)))


def test_group_size_one_dimensions_own_nothing():
    assert TileLayout(S[12:1]).group_iters((1, 3, 1, 4)) == ((), (Iter(3, 4),), (),
                                                             (Iter(4, 1),))


def test_group_falls_back_to_the_canonical_form():
    grouped = TileLayout(S[(2, 6):(6, 1)]).group((3, 4))
    assert grouped == TileLayout(S[(3, 4):(4, 1)])


def test_group_column_major_24():
    grouped = COL_MAJOR_24.group((4, 6, 4, 6))
    assert grouped == TileLayout(S[(4, 6, 4, 6):(6, 1, 144, 24)])
    for i, j in coords((24, 24)):
        a, b = divmod(i, 6)
        c, d = divmod(j, 6)
        assert grouped.apply(a, b, c, d, shape=(4, 6, 4, 6)) == {"m": i + 24 * j}


@pytest.mark.parametrize("layout, shape, message", [
    (S[(3, 4):(8, 1)], (2, 6), "crosses the boundary"),
    (S[12:1], (5, 3), "has 15 elements"),
    (S[12:1], (0, 12), "positive"),
    (S[12:1], (), "at least one"),
    (S[12:1], (3.0, 4), "integer"),
])
def test_group_errors(layout, shape, message):
    with pytest.raises(LayoutError, match=message):
        TileLayout(layout).group(shape)


# ---------------------------------------------------------------- permute
def test_permute_column_major_24_is_a_transpose():
    transposed = COL_MAJOR_24.permute((1, 0))
    assert transposed == TileLayout(S[(24, 24):(24, 1)])
    for i, j in coords((24, 24)):
        assert transposed.apply(j, i, shape=(24, 24)) == COL_MAJOR_24.apply(i, j, shape=(24, 24))


def test_permute_by_groups_keeps_placement():
    swapped = TENSOR_CORE.permute((1, 0), shape=(8, 16))
    assert swapped.shard == (Iter(2, 1, warpid), Iter(4, 1, laneid), Iter(2, 1, m),
                             Iter(8, 4, laneid))
    assert swapped.replica == TENSOR_CORE.replica and swapped.offset == TENSOR_CORE.offset
    for i, j in coords((8, 16)):
        assert swapped.locations(j, i, shape=(16, 8)) == TENSOR_CORE.locations(i, j, shape=(8, 16))


def test_permute_three_dims():
    layout = TileLayout(S[(2, 3, 5):(1, 2, 6)])
    moved = layout.permute((2, 0, 1))
    assert moved == TileLayout(S[(5, 2, 3):(6, 1, 2)])
    for a, b, c in coords((2, 3, 5)):
        assert moved.apply(c, a, b, shape=(5, 2, 3)) == layout.apply(a, b, c, shape=(2, 3, 5))


@pytest.mark.parametrize("order", [(0, 0), (0, 1, 2), (1,), (1, 2), ("a", 0)])
def test_permute_errors(order):
    with pytest.raises(LayoutError):
        COL_MAJOR_24.permute(order)


# ---------------------------------------------------------------- slice
def check_slice(parent, shape, region):
    sliced = parent.slice(shape, region)
    begins = [(r.start or 0) if isinstance(r, slice) else r for r in region]
    extents = [((r.stop if r.stop is not None else n) - (r.start or 0)) if isinstance(r, slice)
               else 1 for r, n in zip(region, shape)]
    for c in coords(extents):
        parent_coord = [b + x for b, x in zip(begins, c)]
        assert sliced.locations(*c, shape=extents) == \
            parent.locations(*parent_coord, shape=shape)
    return sliced


def test_slice_worked_example():
    sliced = TileLayout(S[(4, 4):(4, 1)]).slice((16,), (slice(4, 12),))
    assert sliced == TileLayout(S[(2, 4):(4, 1)] + 4)
    assert str(sliced) == "(2,4):(4,1) + 4"


def test_slice_across_an_outer_step_uses_an_extra_iter():
    # rows of 4 with pitch 8: elements 2..5 sit at 2, 3, 8, 9
    sliced = check_slice(TileLayout(S[(4, 4):(8, 1)]), (16,), (slice(2, 6),))
    assert sliced == TileLayout(S[(2, 2):(6, 1)] + 2)


def test_slice_inferred_from_samples():
    sliced = check_slice(TileLayout(S[(2, 3, 2):(6, 2, 1)]), (12,), (slice(1, 7),))
    assert sliced.equivalent(TileLayout(S[6:1] + 1))


def test_slice_column_major_24():
    sliced = check_slice(COL_MAJOR_24, (24, 24), (slice(4, 12), slice(6, 18)))
    assert sliced == TileLayout(S[(8, 12):(1, 24)] + 148)
    row = check_slice(COL_MAJOR_24, (24, 24), (5, slice(None)))
    assert row == TileLayout(S[24:24] + 5)
    tiles = COL_MAJOR_24.group((4, 6, 4, 6))
    check_slice(tiles, (4, 6, 4, 6), (slice(1, 3), slice(2, 5), slice(0, 4), slice(3, 6)))


def test_slice_tensor_core_tile():
    sliced = check_slice(TENSOR_CORE, (8, 16), (slice(2, 6), slice(8, 16)))
    assert sliced == TileLayout(S[(4, 4, 2):(4@laneid, 1@laneid, 1@m)] + R[2:4@warpid]
                                + 8@laneid + 6@warpid)


def test_slice_keeps_replicas():
    layout = TileLayout(S[(2, 32, 128):(1@pid, 128@m, 1@m)] + R[2:2@pid])
    sliced = check_slice(layout, (64, 128), (slice(32, 64), slice(0, 128)))
    assert sliced == TileLayout(S[(32, 128):(128@m, 1@m)] + R[2:2@pid] + 1@pid)


def test_slice_single_element():
    sliced = COL_MAJOR_24.slice((24, 24), (3, 7))
    assert sliced.size() == 1 and sliced.apply(0) == {"m": 3 + 24 * 7}


@pytest.mark.parametrize("layout, shape, region, message", [
    (S[(4, 4):(8, 1)], (16,), (slice(2, 7),), "not one layout"),
    (TENSOR_CORE, (8, 16), (slice(0, 8), slice(4, 12)), "not one layout"),
    (S[(24, 24):(1, 24)], (24, 24), (slice(0, 24, 2),), "step"),
    (S[(24, 24):(1, 24)], (24, 24), (slice(4, 4),), "empty"),
    (S[(24, 24):(1, 24)], (24, 24), (slice(20, 30),), "outside"),
    (S[(24, 24):(1, 24)], (24, 24), (slice(-2, 3),), "outside"),
    (S[(24, 24):(1, 24)], (24, 24), (0, 0, 0), "more dimensions"),
    (S[(24, 24):(1, 24)], (24, 25), (0,), "elements"),
])
def test_slice_errors(layout, shape, region, message):
    with pytest.raises(LayoutError, match=message):
        TileLayout(layout).slice(shape, region)


# ---------------------------------------------------------------- tile
def test_tile_worked_example():
    registers = TileLayout(S[(1, 2):(2, 1)])
    lanes = TileLayout(S[(8, 4):(4@laneid, 1@laneid)])
    warp_view = registers.tile(lanes, (8, 4), (1, 2))
    assert warp_view == TileLayout(S[(32, 2):(1@laneid, 1)])
    for i, j in coords((8, 8)):
        assert warp_view.apply(i, j, shape=(8, 8)) == {"laneid": 4 * i + j // 2, "m": j % 2}


def test_tile_scales_outer_strides_by_the_tile_span():
    inner = TileLayout(S[(2, 3):(3, 1)])         # a 2x3 tile spanning 6 elements
    outer = TileLayout(S[(2, 2):(1, 2)] + 1)     # 2x2 tiles, column-major, one tile in
    tiled = inner.tile(outer, (2, 2), (2, 3))
    for i, j in coords((4, 6)):
        o = outer.apply(i // 2, j // 3, shape=(2, 2))["m"]
        t = inner.apply(i % 2, j % 3, shape=(2, 3))["m"]
        assert tiled.apply(i, j, shape=(4, 6)) == {"m": 6 * o + t}


def test_tile_over_threads_and_replicas():
    inner = TileLayout(S[4:1@laneid] + R[2:1@warpid])  # one copy spans 2 warps
    outer = TileLayout(S[3:1@warpid] + R[2:1@pid])
    tiled = inner.tile(outer, (3,), (4,))
    assert tiled.replica == (Iter(2, 1, pid), Iter(2, 1, warpid))
    for x in range(12):
        warps = {loc["warpid"] for loc in tiled.locations(x)}
        assert warps == {2 * (x // 4), 2 * (x // 4) + 1}


def test_tile_errors():
    with pytest.raises(LayoutError, match="same rank"):
        TileLayout(S[4:1]).tile(TileLayout(S[4:1]), (4,), (2, 2))
    with pytest.raises(LayoutError, match="elements"):
        TileLayout(S[4:1]).tile(TileLayout(S[4:1]), (4,), (3,))
