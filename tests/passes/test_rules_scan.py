"""scan (the ``serial`` family) and argmax/argmin (the ``tree`` family's index fold) through
dispatch + lower-tiles + the IR executor, against ``passes/reference.py`` and numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ir_exec import numpy_dtype, run_kernel
from support.tile_kernels import GENERIC, SIMT, global_matrix, lowered, make_kernel

from tilejit.errors import CompilationError, DispatchError
from tilejit.ir import parse_kernel
from tilejit.ir.ops_tile import SCAN_OPS
from tilejit.ir.types import MemScope, TeamKind, f32, i8, i32
from tilejit.layout import TileLayout
from tilejit.passes import reference as ref

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT
SETTINGS = settings(max_examples=50, deadline=None, derandomize=True, database=None)


def staged_kernel(primitive, shape, op, axis, dtype, out_dtype, out_shape, src_scope=SHARED,
                  src_layout=None, team=None, num_warps=1):
    """src <- x; dst <- primitive(src); out <- dst."""
    keep = tuple(n != 0 for n in out_shape)  # a reduce dropping an axis writes size 0 there

    def body(b, x, out):
        zero = b.const(0, i32)
        src = b.alloc(src_scope, dtype, shape, src_layout)
        b.tile("copy", src, b.region(x, [zero, zero], shape), team=team)
        dst_shape = tuple(n for n in out_shape if n)
        dst = b.alloc(SHARED, out_dtype, dst_shape)
        b.tile(primitive, dst, src, op=op, axis=axis, team=team)
        sizes = tuple(n or 1 for n in out_shape)
        b.tile("copy", b.region(out, [zero, zero], sizes, keep), dst, team=team)
    return make_kernel([("x", global_matrix(dtype)), ("out", global_matrix(out_dtype))], body,
                       num_warps=num_warps)


def scan_kernel(shape, op, axis, dtype, **kw):
    return staged_kernel("scan", shape, op, axis, dtype, dtype, shape, **kw)


def inputs(shape, dtype, seed, low=-2, high=2):
    rng = np.random.default_rng(seed)
    values = rng.uniform(low, high, shape) if dtype.is_float else rng.integers(low, high, shape)
    return values.astype(numpy_dtype(dtype))


@SETTINGS
@given(rows=st.integers(1, 9), cols=st.integers(1, 37), op=st.sampled_from(SCAN_OPS),
       axis=st.integers(0, 1), dtype=st.sampled_from([f32, i32, i8]),
       layout=st.sampled_from(["default", "column-major", "fragment"]),
       team=st.sampled_from([None, TeamKind.WARP]), context=st.sampled_from([GENERIC, SIMT]),
       seed=st.integers(0, 2**16))
def test_scan_matches_numpy(rows, cols, op, axis, dtype, layout, team, context, seed):
    shape = (rows, cols)
    src_layout = TileLayout.parse(f"({rows},{cols}):(1,{rows})") if layout == "column-major" \
        else None
    kernel = scan_kernel(shape, op, axis, dtype, src_scope=FRAGMENT if layout == "fragment"
                         else SHARED, src_layout=src_layout, team=team)
    k, log = lowered(kernel, context)
    assert (log[1].primitive, log[1].rule, log[1].shape) == ("scan", "serial", (1,))
    x = inputs(shape, dtype, seed, *((0.5, 1.5) if op == "prod" else (-2, 2)))
    out = np.zeros(shape, x.dtype)
    run_kernel(k, {"x": x, "out": out})
    expected = ref.scan(out, x, op, axis)
    if dtype.is_float:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    else:  # integer sums and products wrap in the dtype, on both sides
        np.testing.assert_array_equal(out, expected)


def test_an_in_place_scan_reads_each_element_before_overwriting_it():
    def body(b, x, out):
        zero = b.const(0, i32)
        t = b.alloc(FRAGMENT, f32, (3, 7))
        b.tile("copy", t, b.region(x, [zero, zero], (3, 7)))
        b.tile("scan", t, t, op="sum", axis=1)
        b.tile("copy", b.region(out, [zero, zero], (3, 7)), t)
    k, _ = lowered(make_kernel([("x", global_matrix(f32)), ("out", global_matrix(f32))], body))
    x, out = inputs((3, 7), f32, 3), np.zeros((3, 7), np.float32)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_allclose(out, np.cumsum(x, axis=1), rtol=1e-6)


@pytest.mark.parametrize("op", ["sum", "max", "prod"])
@pytest.mark.parametrize("context", [GENERIC, SIMT])
def test_a_scan_past_the_tensor_end_reads_the_identity_and_stores_nothing_there(op, context):
    def body(b, x, out):
        zero = b.const(0, i32)
        b.tile("scan", b.region(out, [zero, zero], (4, 8)), b.region(x, [zero, zero], (4, 8)),
               op=op, axis=1)
    kernel = make_kernel([("x", global_matrix(f32)), ("out", global_matrix(f32))], body)
    k, _ = lowered(kernel, context)
    x = -inputs((3, 5), f32, 5, 1, 2)
    out = np.zeros((3, 5), np.float32)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_allclose(out, ref.scan(out, x, op, 1), rtol=1e-6)


def test_a_scan_over_a_fragment_laid_out_on_lanes_is_left_to_target_families():
    lanes = TileLayout.parse("(32,8):(1@laneid,1@m)")

    def body(b):
        t = b.alloc(FRAGMENT, f32, (32, 8), lanes)
        b.tile("scan", t, t, op="sum", axis=1, team=TeamKind.WARP)
    with pytest.raises(DispatchError, match="dst is distributed over threads"):
        lowered(make_kernel([], body), SIMT)


def test_the_verifier_checks_scan_shapes_and_axis_and_the_text_form_reads_back():
    def good(b):
        src = b.alloc(SHARED, f32, (4, 6))
        b.tile("scan", b.alloc(SHARED, f32, (4, 6)), src, op="prod", axis=1)
    text = str(make_kernel([], good))
    assert "tile.scan(" in text and "{op = prod, axis = 1}" in text
    assert str(parse_kernel(text)) == text
    for dst_shape, axis, message in [((4,), 1, "a scan writes a dst of its src's shape"),
                                     ((4, 6), 2, "axis 2 out of range")]:
        def bad(b, dst_shape=dst_shape, axis=axis):
            b.tile("scan", b.alloc(SHARED, f32, dst_shape), b.alloc(SHARED, f32, (4, 6)),
                   op="sum", axis=axis)
        with pytest.raises(CompilationError, match=message):
            make_kernel([], bad)


# ------------------------------------------------------------------------ argmax/argmin
@SETTINGS
@given(rows=st.integers(1, 9), cols=st.integers(1, 37), op=st.sampled_from(["argmax", "argmin"]),
       axis=st.integers(0, 1), keepdims=st.booleans(), dtype=st.sampled_from([f32, i32, i8]),
       nans=st.booleans(), context=st.sampled_from([GENERIC, SIMT]),
       team=st.sampled_from([None, TeamKind.WARP]), seed=st.integers(0, 2**16))
def test_argmax_and_argmin_match_numpy_with_ties_and_nan(rows, cols, op, axis, keepdims, dtype,
                                                         nans, context, team, seed):
    """Few distinct values make ties common (the lowest index wins); NaN is the extreme."""
    shape = (rows, cols)
    out_shape = tuple((1 if keepdims else 0) if d == axis else n for d, n in enumerate(shape))
    kernel = staged_kernel("reduce", shape, op, axis, dtype, i32, out_shape, team=team)
    k, log = lowered(kernel, context)
    assert (log[1].rule, log[1].shape) == ("tree", (1,))  # no tree for indices
    x = inputs(shape, dtype, seed, -3, 3)
    if dtype.is_float:
        x = np.round(x)
        if nans:
            x[np.random.default_rng(seed).random(shape) < 0.1] = np.nan
    out = np.zeros(tuple(n or 1 for n in out_shape), np.int32)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_array_equal(out, ref.reduce(out, x, op, axis))


def test_argmax_writes_an_integer_tile():
    def body(b):
        b.tile("reduce", b.alloc(SHARED, f32, (4,)), b.alloc(SHARED, f32, (4, 6)),
               op="argmax", axis=1)
    with pytest.raises(CompilationError, match="argmax writes indices: its dst must be an "
                                               "integer tile"):
        make_kernel([], body)


def test_each_lane_finds_the_argmax_of_the_rows_it_holds():
    rows, row = TileLayout.parse("(32,8):(1@laneid,1@m)"), TileLayout.parse("(32):(1@laneid)")

    def body(b, x, out):
        zero = b.const(0, i32)
        src = b.alloc(FRAGMENT, f32, (32, 8), rows)
        b.tile("copy", src, b.region(x, [zero, zero], (32, 8)), team=TeamKind.WARP)
        dst = b.alloc(FRAGMENT, i32, (32,), row)
        b.tile("reduce", dst, src, op="argmax", axis=1, team=TeamKind.WARP)
        b.tile("copy", b.region(out, [zero], (32,)), dst, team=TeamKind.WARP)
    kernel = make_kernel([("x", global_matrix(f32)), ("out", global_matrix(i32, rank=1))], body)
    k, log = lowered(kernel, SIMT)
    assert (log[1].rule, log[1].shape) == ("tree", (1,))
    x = np.round(inputs((32, 8), f32, 9, -3, 3))
    out = np.zeros(32, np.int32)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_array_equal(out, np.argmax(x, axis=1))
