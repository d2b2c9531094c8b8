"""reduce through dispatch + lower-tiles + the IR executor equals numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ir_exec import numpy_dtype, run_kernel
from support.tile_kernels import GENERIC, SIMT, global_matrix, lowered, make_kernel

from tilejit.errors import DispatchError
from tilejit.ir.types import MemScope, TeamKind, f32, i1, i32
from tilejit.layout import TileLayout
from tilejit.passes import reference as ref

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT


def reduce_kernel(shape, op, axis, keepdims, dtype, src_scope=SHARED, src_layout=None,
                  dst_scope=SHARED, dst_layout=None, team=None, num_warps=1):
    """src <- x; dst <- reduce(src); out <- dst (out is x's shape with ``axis`` of size 1)."""
    out_sizes = tuple(1 if d == axis else n for d, n in enumerate(shape))
    dst_shape = out_sizes if keepdims else tuple(n for d, n in enumerate(shape) if d != axis)
    keep = (True, True) if keepdims else tuple(d != axis for d in range(2))

    def body(b, x, out):
        zero = b.const(0, i32)
        src = b.alloc(src_scope, dtype, shape, src_layout)
        b.tile("copy", src, b.region(x, [zero, zero], shape), team=team)
        dst = b.alloc(dst_scope, dtype, dst_shape, dst_layout)
        b.tile("reduce", dst, src, op=op, axis=axis, team=team)
        b.tile("copy", b.region(out, [zero, zero], out_sizes, keep), dst, team=team)
    return make_kernel([("x", global_matrix(dtype)), ("out", global_matrix(dtype))], body,
                       num_warps=num_warps)


def run_reduce(kernel, shape, op, axis, dtype, context, seed=0):
    k, log = lowered(kernel, context)
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-2, 2, shape) if dtype.is_float else rng.integers(-50, 50, shape)
         ).astype(numpy_dtype(dtype))
    out = np.zeros(tuple(1 if d == axis else n for d, n in enumerate(shape)), x.dtype)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_allclose(out, ref.reduce(out, x, op, axis), rtol=1e-5, atol=1e-5)
    return log


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 48), op=st.sampled_from(["sum", "max", "min"]),
       axis=st.integers(0, 1), keepdims=st.booleans(), dtype=st.sampled_from([f32, i32]),
       layout=st.sampled_from(["default", "column-major", "fragment"]),
       team=st.sampled_from([None, TeamKind.WARP]), num_warps=st.integers(1, 2),
       context=st.sampled_from([GENERIC, SIMT]), seed=st.integers(0, 2**16))
def test_reduce_matches_numpy(rows, cols, op, axis, keepdims, dtype, layout, team, num_warps,
                              context, seed):
    shape = (rows, cols)
    src_scope = FRAGMENT if layout == "fragment" else SHARED
    src_layout = TileLayout.parse(f"({rows},{cols}):(1,{rows})") if layout == "column-major" \
        else None
    kernel = reduce_kernel(shape, op, axis, keepdims, dtype, src_scope, src_layout, team=team,
                           num_warps=num_warps)
    log = run_reduce(kernel, shape, op, axis, dtype, context, seed)
    team_size = 32 * (1 if team is TeamKind.WARP else num_warps)
    assert log[1].shape == ((team_size,) if context is SIMT else (1,))


def test_each_lane_reduces_the_rows_it_holds():
    rows, row = TileLayout.parse("(32,8):(1@laneid,1@m)"), TileLayout.parse("(32):(1@laneid)")
    kernel = reduce_kernel((32, 8), "sum", 1, False, f32, FRAGMENT, rows, FRAGMENT, row,
                           team=TeamKind.WARP)
    log = run_reduce(kernel, (32, 8), "sum", 1, f32, SIMT)
    assert (log[1].rule, log[1].shape) == ("tree", (1,))


def test_reducing_across_lanes_of_a_laid_out_fragment_is_left_to_target_families():
    rows = TileLayout.parse("(32,8):(1@laneid,1@m)")
    kernel = reduce_kernel((32, 8), "max", 0, False, f32, FRAGMENT, rows, team=TeamKind.WARP)
    with pytest.raises(DispatchError, match="src is distributed over threads"):
        lowered(kernel, SIMT)


def test_a_tree_needs_a_whole_warp():
    from tilejit.ir.attrs import FilterSpec

    def body(b):
        src, dst = b.alloc(SHARED, f32, (4, 64)), b.alloc(SHARED, f32, (4,))
        _, then, orelse = b.if_(b.const(True, i1), filter=FilterSpec("lane", 0, 16))
        with b.insert_into(then):
            b.tile("reduce", dst, src, op="sum", axis=1, team=TeamKind.WARP)
            b.yield_()
        with b.insert_into(orelse):
            b.yield_()
    with pytest.raises(DispatchError, match="here 16 threads of the warp are active"):
        lowered(make_kernel([], body), SIMT)


@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("context", [GENERIC, SIMT])
def test_a_tile_past_the_tensor_end_reduces_only_the_elements_that_exist(op, context):
    """Missing elements read the op's identity (-inf for max), so a negative row's max is
    not the fill value 0; outputs past the end of ``out`` are not stored."""
    index = op.startswith("arg")

    def body(b, x, out):
        zero = b.const(0, i32)
        b.tile("reduce", b.region(out, [zero], (4,)), b.region(x, [zero, zero], (4, 8)),
               op=op, axis=1)
    out_type = global_matrix(i32 if index else f32, rank=1)
    k, _ = lowered(make_kernel([("x", global_matrix(f32)), ("out", out_type)], body), context)
    x = -np.random.default_rng(1).uniform(1, 2, (3, 5)).astype(np.float32)
    out = np.zeros(3, np.int32 if index else np.float32)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_allclose(out, ref.reduce(out, x, op, 1), rtol=1e-6)
