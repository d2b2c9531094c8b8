"""copy / pointwise through dispatch + lower-tiles + the IR executor equal numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ir_exec import numpy_dtype, run_kernel
from support.tile_kernels import GENERIC, SIMT, global_matrix, lowered, make_kernel

from tilejit.errors import DispatchError
from tilejit.ir.types import MemScope, TeamKind, f16, f32, i32
from tilejit.layout import ComposeLayout, TileLayout
from tilejit.passes import reference as ref

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT
FLOAT_OPS = ("add", "sub", "mul", "div", "maximum", "minimum", "exp", "sqrt", "neg", "abs",
             "cast", "select", "fma")
INT_OPS = ("add", "sub", "mul", "maximum", "minimum", "neg", "abs", "cast", "select", "fma")
UNARY = ("exp", "sqrt", "neg", "abs", "cast")


def shared_layouts(rows, cols):
    """Placements of a shared tile: row-major, padded rows, column-major, swizzled."""
    return {
        "default": None,
        "padded": TileLayout.parse(f"({rows},{cols}):({cols + 3},1)"),
        "column-major": TileLayout.parse(f"({rows},{cols}):(1,{rows})"),
        "swizzled": ComposeLayout.for_mode("B64", 4, TileLayout.parse(f"({rows},{cols}):({cols},1)")),
    }


def random_array(rng, shape, dtype):
    if dtype.is_float:
        return rng.uniform(0.25, 2.0, shape).astype(numpy_dtype(dtype))
    return rng.integers(-40, 40, shape).astype(numpy_dtype(dtype))


def staged_pointwise(rows, cols, x_dtype, dtype, op, other, layout, team, fill):
    """shared <- x[r0:, c0:] (fill past the end); frag <- op(shared, other); out[r0:, c0:] <- frag.

    ``other`` is a scalar, a tile of y, or a row / column of y broadcast over the tile.
    """
    def body(b, x, y, out, r0, c0):
        zero = b.const(0, i32)
        smem = b.alloc(SHARED, x_dtype, (rows, cols), layout)
        b.tile("copy", smem, b.region(x, [r0, c0], (rows, cols)), config={"fill": fill})
        second = {"scalar": lambda: b.const(2 if dtype.is_int else 1.5, dtype),
                  "tile": lambda: b.region(y, [r0, c0], (rows, cols)),
                  "row": lambda: b.region(y, [zero, c0], (1, cols)),
                  "col": lambda: b.region(y, [r0, zero], (rows, 1))}[other]()
        srcs = {"fma": [smem, second, smem], "select": [smem, second, b.const(0, dtype)]}.get(
            op, [smem] if op in UNARY else [smem, second])
        frag = b.alloc(FRAGMENT, dtype, (rows, cols))
        b.tile("pointwise", frag, *srcs, op=op, team=team)
        b.tile("copy", b.region(out, [r0, c0], (rows, cols)), frag)
    return make_kernel([("x", global_matrix(x_dtype)), ("y", global_matrix(dtype)),
                        ("out", global_matrix(dtype)), ("r0", i32), ("c0", i32)], body,
                       num_warps=2)


def expected_staged(op, dtype, other, x, y, out, r0, c0, rows, cols, fill):
    tile = ref.read_region(x, (r0, c0), (rows, cols), fill=fill)
    second = {"scalar": lambda: np.asarray(2 if dtype.is_int else 1.5),
              "tile": lambda: ref.read_region(y, (r0, c0), (rows, cols)),
              "row": lambda: ref.read_region(y, (0, c0), (1, cols)),
              "col": lambda: ref.read_region(y, (r0, 0), (rows, 1))}[other]()
    srcs = {"fma": [tile, second, tile], "select": [tile, second, 0]}.get(
        op, [tile] if op in UNARY else [tile, second])
    frag = ref.pointwise(op, np.zeros((rows, cols), numpy_dtype(dtype)), *srcs)
    expected = out.copy()
    ref.write_region(expected, (r0, c0), frag)
    return expected


def check_equal(actual, expected):
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=2e-3 if actual.dtype == np.float16
                                   else 1e-6)
    else:
        np.testing.assert_array_equal(actual, expected)


@st.composite
def staged_cases(draw):
    dtype = draw(st.sampled_from([f32, i32, f16]))
    x_dtype = draw(st.sampled_from([dtype, f32 if dtype is not f32 else f16]))
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 40))
    r0, c0 = draw(st.integers(0, 6)), draw(st.integers(0, 20))
    shape = (draw(st.integers(1, r0 + rows + 2)), draw(st.integers(1, c0 + cols + 2)))
    return {
        "dtype": dtype, "x_dtype": x_dtype, "rows": rows, "cols": cols, "r0": r0, "c0": c0,
        "shape": shape, "op": draw(st.sampled_from(FLOAT_OPS if dtype.is_float else INT_OPS)),
        "other": draw(st.sampled_from(["scalar", "tile", "row", "col"])),
        "layout": draw(st.sampled_from(["default", "padded", "column-major", "swizzled"])),
        "team": draw(st.sampled_from([None, TeamKind.WARP])),
        "fill": draw(st.sampled_from([0, -3])),
        "context": draw(st.sampled_from([GENERIC, SIMT])), "seed": draw(st.integers(0, 2**16))}


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(staged_cases())
def test_staged_pointwise_matches_numpy(case):
    c = case
    layout = shared_layouts(c["rows"], c["cols"])[c["layout"]]
    if c["layout"] == "swizzled" and c["x_dtype"].itemsize != 4:
        layout = ComposeLayout.for_mode("B64", c["x_dtype"].itemsize, layout.tile_layout)
    k, _ = lowered(staged_pointwise(c["rows"], c["cols"], c["x_dtype"], c["dtype"], c["op"],
                                    c["other"], layout, c["team"], c["fill"]), c["context"])
    rng = np.random.default_rng(c["seed"])
    x = random_array(rng, c["shape"], c["x_dtype"])
    y = random_array(rng, c["shape"], c["dtype"])
    out = random_array(rng, c["shape"], c["dtype"])
    expected = expected_staged(c["op"], c["dtype"], c["other"], x, y, out, c["r0"], c["c0"],
                               c["rows"], c["cols"], c["fill"])
    run_kernel(k, {"x": x, "y": y, "out": out, "r0": c["r0"], "c0": c["c0"]})
    check_equal(out, expected)


# --------------------------------------------------------------------------- fixed shapes
@pytest.mark.parametrize("context", [GENERIC, SIMT], ids=["team_once", "per_thread"])
def test_96_by_80_tile_at_the_ragged_corner_of_a_tensor(context):
    k, log = lowered(staged_pointwise(96, 80, f32, f32, "mul", "tile", None, None, 0), context)
    assert [r.rule for r in log] == ["vector", "vector", "vector"]
    rng = np.random.default_rng(1)
    x, y, out = (random_array(rng, (150, 130), f32) for _ in range(3))
    expected = expected_staged("mul", f32, "tile", x, y, out, 96, 80, 96, 80, 0)
    run_kernel(k, {"x": x, "y": y, "out": out, "r0": 96, "c0": 80})
    check_equal(out, expected)


def row_copy_kernel(width):
    """out[row, :width] <- exp(x[row, :width]) through a 1-D shared row."""
    def body(b, x, out, row):
        zero = b.const(0, i32)
        smem = b.alloc(SHARED, f32, (width,))
        b.tile("copy", smem, b.region(x, [row, zero], (1, width), keep=(False, True)))
        b.tile("pointwise", smem, smem, op="exp")
        b.tile("copy", b.region(out, [row, zero], (1, width), keep=(False, True)), smem)
    return make_kernel([("x", global_matrix(f32)), ("out", global_matrix(f32)), ("row", i32)],
                       body)


@pytest.mark.parametrize("context", [GENERIC, SIMT], ids=["team_once", "per_thread"])
@pytest.mark.parametrize("row", [3, 7])  # row 7 is past the end: nothing is stored
def test_1000_wide_rows(context, row):
    k, log = lowered(row_copy_kernel(1000), context)
    assert [(r.rule, r.shape) for r in log] == [("vector", (4,))] * 3
    rng = np.random.default_rng(row)
    x, out = random_array(rng, (5, 997), f32), random_array(rng, (5, 997), f32)
    expected = out.copy()
    if row < 5:
        expected[row] = np.exp(x[row])
    run_kernel(k, {"x": x, "out": out, "row": row})
    check_equal(out, expected)


@pytest.mark.parametrize("width", [781, 3])
def test_rows_no_width_divides_run_a_vector_body_and_a_shorter_chunk(width):
    """781 = 195 chunks of 4 and one of 1; 3 = one chunk of 2 and one of 1."""
    k, log = lowered(row_copy_kernel(width), GENERIC)
    assert [(r.rule, r.shape) for r in log] == [("vector", (min(4, width - 1),))] * 3
    rng = np.random.default_rng(width)
    x, out = random_array(rng, (4, width + 5), f32), random_array(rng, (4, width + 5), f32)
    expected = out.copy()
    expected[2, :width] = np.exp(x[2, :width])
    run_kernel(k, {"x": x, "out": out, "row": 2})
    check_equal(out, expected)


@pytest.mark.parametrize("context", [GENERIC, SIMT], ids=["team_once", "per_thread"])
@pytest.mark.parametrize("x_shape, y_shape", [((7, 30), (9, 25)), ((12, 40), (5, 40)),
                                              ((2, 3), (12, 40))])
def test_two_sources_past_different_ends(context, x_shape, y_shape):
    """Each source reads its fill value (0) where it alone is out of bounds."""
    def body(b, x, y, out):
        zero = b.const(0, i32)
        frag = b.alloc(FRAGMENT, f32, (10, 32))
        b.tile("pointwise", frag, b.region(x, [zero, zero], (10, 32)),
               b.region(y, [zero, zero], (10, 32)), op="sub")
        b.tile("copy", b.region(out, [zero, zero], (10, 32)), frag)
    k, _ = lowered(make_kernel([("x", global_matrix(f32)), ("y", global_matrix(f32)),
                                ("out", global_matrix(f32))], body), context)
    rng = np.random.default_rng(3)
    x, y = random_array(rng, x_shape, f32), random_array(rng, y_shape, f32)
    out = np.zeros((12, 40), np.float32)
    run_kernel(k, {"x": x, "y": y, "out": out})
    expected = np.zeros_like(out)
    expected[:10, :32] = ref.read_region(x, (0, 0), (10, 32)) - ref.read_region(y, (0, 0), (10, 32))
    check_equal(out, expected)


# --------------------------------------------------------------------------- per thread
OWNED = [  # (shape, fragment layout, num_warps, team)
    ((32, 8), "(32,8):(1@laneid,1@m)", 1, TeamKind.WARP),
    ((8, 4), "(8,4):(4@laneid,1@m)", 1, TeamKind.WARP),
    ((4, 8), "(4,8):(1@m,4@laneid)", 1, TeamKind.WARP),
    ((32, 4), "(2,16,4):(1@warpid,1@laneid,1@m)", 2, None),
    ((32, 8), "(32,8):(1@laneid,1@m) + R[2:1@warpid]", 2, None),  # replicated on both warps
    ((16, 16), "(2,8,2,4,2):(2@m,4@laneid,4@m,1@laneid,1@m)", 1, TeamKind.WARP),  # mma A
]


@pytest.mark.parametrize("shape, layout, num_warps, team", OWNED, ids=[o[1] for o in OWNED])
def test_fragments_laid_out_over_threads(shape, layout, num_warps, team):
    frag_layout = TileLayout.parse(layout)

    def body(b, x, out):
        zero = b.const(0, i32)
        frag = b.alloc(FRAGMENT, f32, shape, frag_layout)
        b.tile("copy", frag, b.region(x, [zero, zero], shape), team=team)
        b.tile("pointwise", frag, frag, b.const(0.5, f32), op="mul", team=team)
        b.tile("copy", b.region(out, [zero, zero], shape), frag, team=team)
    k, log = lowered(make_kernel([("x", global_matrix(f32)), ("out", global_matrix(f32))], body,
                                 num_warps=num_warps), SIMT)
    assert [r.rule for r in log] == ["scalar"] * 3
    rng = np.random.default_rng(0)
    x = random_array(rng, (shape[0] + 1, shape[1] - 1), f32)  # one column short: masked
    out = np.zeros_like(x)
    run_kernel(k, {"x": x, "out": out})
    check_equal(out, np.concatenate([0.5 * x[:shape[0]], np.zeros((1, shape[1] - 1), np.float32)]))


def test_mismatched_thread_layouts_are_declined():
    rows, cols = TileLayout.parse("(32,4):(1@laneid,1@m)"), TileLayout.parse("(32,4):(1@m,1@laneid)")

    def body(b):
        b.tile("copy", b.alloc(FRAGMENT, f32, (32, 4), rows), b.alloc(FRAGMENT, f32, (32, 4), cols),
               team=TeamKind.WARP)
    with pytest.raises(DispatchError, match=r"thread \(lane, warp\) \(0, 0\) handles dst\[0, 1\] "
                                            r"but holds no copy of src\[0, 1\]"):
        lowered(make_kernel([], body), SIMT)


@pytest.mark.parametrize("team", [TeamKind.WARP, TeamKind.CTA])
def test_an_elected_lane_does_its_team_s_whole_tile(team):
    """Per thread, a warp's elected lane is its team's one active thread: it does the
    whole tile. A CTA team whose elected lanes sit in several warps has run-time-chosen
    threads, which a per-thread split cannot name: a DispatchError saying so."""
    from tilejit.ir.attrs import FilterSpec

    def body(b):
        smem = b.alloc(SHARED, f32, (64,))
        _, then, orelse = b.if_(b.elect_sync(), filter=FilterSpec("elect"))
        with b.insert_into(then):
            b.tile("pointwise", smem, b.const(1.0, f32), op="fill", team=team)
            b.yield_()
        with b.insert_into(orelse):
            b.yield_()
    kernel = make_kernel([], body, num_warps=4)
    assert lowered(kernel, GENERIC)[1][0].rule == "vector"  # one unit per team: fine
    if team is TeamKind.WARP:
        assert lowered(kernel, SIMT)[1][0].rule == "vector"
        return
    with pytest.raises(DispatchError, match=r"elected at run time \(one in each of 4 warps\)"):
        lowered(kernel, SIMT)
