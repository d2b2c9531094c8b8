"""mma_accumulator_layout: the accumulator of an mma.sync.m16n8k16 gemm over a team's warps,
checked element by element against the PTX ISA's C fragment formula (restated here:
c_i row = groupID + 8 * (i >= 2), col = 2 * threadID_in_group + (i & 1)) and the way the
atoms are dealt (warps split the atom rows first, each warp a contiguous block, a warp's
atoms row-major in its registers, four values each)."""
import pytest

from tilejit.layout import TileLayout, mma_m16n8k16_c_layout
from tilejit.layout.fragments import lane_registers, mma_accumulator_layout, mma_atom_layout


def expected_place(row, col, shape, warps):
    grid = (shape[0] // 16, shape[1] // 8)
    split_rows = next(d for d in range(min(warps, grid[0]), 0, -1)
                      if warps % d == 0 and grid[0] % d == 0)
    split_cols = warps // split_rows
    own = (grid[0] // split_rows, grid[1] // split_cols)
    ai, aj = row // 16, col // 8
    warp = (ai // own[0]) * split_cols + aj // own[1]
    atom = (ai % own[0]) * own[1] + aj % own[1]
    r, c = row % 16, col % 8
    lane, i = (r % 8) * 4 + c // 2, (r // 8) * 2 + c % 2
    return warp, lane, 4 * atom + i


@pytest.mark.parametrize("shape, warps", [((16, 8), 1), ((32, 16), 4), ((64, 64), 4),
                                          ((32, 32), 2), ((48, 16), 2), ((128, 64), 8),
                                          ((16, 64), 4)])
def test_every_element_sits_where_the_ptx_fragment_and_the_warp_split_put_it(shape, warps):
    layout = mma_accumulator_layout(shape, warps)
    seen = set()
    for row in range(shape[0]):
        for col in range(shape[1]):
            place = layout.apply(row, col, shape=shape)
            got = (place.get("warpid", 0), place["laneid"], place["m"])
            assert got == expected_place(row, col, shape, warps)
            seen.add(got)
    registers = shape[0] * shape[1] // (32 * warps)
    assert seen == {(w, lane, r) for w in range(warps) for lane in range(32)
                    for r in range(registers)}


def test_the_warp_axis_is_the_callers_and_the_atom_grid_is_dealt_rows_first():
    layout = mma_accumulator_layout((64, 32), 4, warp_axis="wid_in_wg")
    assert {a.name for a in layout.axes} == {"wid_in_wg", "laneid", "m"}
    assert mma_atom_layout((64, 32), 4) == TileLayout.parse("(4,4):(1@warpid,1@m)")
    # a (2, 4) grid: two warps down the rows, two across, each with two atoms of a row
    assert mma_atom_layout((32, 32), 4) == TileLayout.parse("(4,2):(1@warpid,1@m)")


@pytest.mark.parametrize("shape, warps", [((16, 8), 4), ((24, 8), 1), ((16, 12), 1),
                                          ((48, 8), 2), ((16, 24), 4)])
def test_shapes_that_do_not_tile_have_no_layout(shape, warps):
    assert mma_atom_layout(shape, warps) is None
    assert mma_accumulator_layout(shape, warps) is None


def test_lane_registers_reads_a_warp_fragment_backwards():
    table = lane_registers(mma_m16n8k16_c_layout(), (16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        assert table[lane] == tuple((g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1) for i in range(4))
