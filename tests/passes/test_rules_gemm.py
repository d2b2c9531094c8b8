"""gemm through dispatch + lower-tiles + the IR executor equals numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ir_exec import numpy_dtype, run_kernel
from support.tile_kernels import GENERIC, SIMT, global_matrix, lowered, make_kernel, skeleton

from tilejit.errors import DispatchError
from tilejit.ir.types import MemScope, TeamKind, f16, f32, i32
from tilejit.layout import ComposeLayout, TileLayout
from tilejit.passes import reference as ref

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT


def gemm_kernel(m, n, k, ta, tb, accum, in_dtype, dtype, c_scope=FRAGMENT, c_layout=None,
                a_layout=None, team=None, num_warps=1, config=None):
    """A, B, C staged on chip; C (+)= op(A) @ op(B); C written back."""
    a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))

    def body(b, a, bm, c):
        zero = b.const(0, i32)

        def stage(src, shape, scope, layout, dt):
            tile = b.alloc(scope, dt, shape, layout)
            b.tile("copy", tile, b.region(src, [zero, zero], shape), team=team)
            return tile
        sa = stage(a, a_shape, SHARED, a_layout, in_dtype)
        sb = stage(bm, b_shape, SHARED, None, in_dtype)
        sc = stage(c, (m, n), c_scope, c_layout, dtype)
        b.tile("gemm", sc, sa, sb, transpose_a=ta, transpose_b=tb, accum=accum, team=team,
               config=config or {})
        b.tile("copy", b.region(c, [zero, zero], (m, n)), sc, team=team)
    return make_kernel([("A", global_matrix(in_dtype)), ("B", global_matrix(in_dtype)),
                        ("C", global_matrix(dtype))], body, num_warps=num_warps)


def run_gemm(kernel, m, n, k, ta, tb, accum, in_dtype, dtype, context, seed=0):
    lk, log = lowered(kernel, context)
    rng = np.random.default_rng(seed)

    def rand(shape, dt):
        values = rng.uniform(-1, 1, shape) if dt.is_float else rng.integers(-9, 9, shape)
        return values.astype(numpy_dtype(dt))
    a = rand((k, m) if ta else (m, k), in_dtype)
    b = rand((n, k) if tb else (k, n), in_dtype)
    c = rand((m, n), dtype)
    expected = ref.gemm(c, a, b, ta, tb, accum)
    run_kernel(lk, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    return log[-2]


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(m=st.integers(1, 12), n=st.integers(1, 12), k=st.integers(1, 9), ta=st.booleans(),
       tb=st.booleans(), accum=st.booleans(),
       dtypes=st.sampled_from([(f32, f32), (f16, f32), (i32, i32)]),
       c_scope=st.sampled_from([FRAGMENT, SHARED]), swizzle_a=st.booleans(),
       team=st.sampled_from([None, TeamKind.WARP]), context=st.sampled_from([GENERIC, SIMT]),
       seed=st.integers(0, 2**16))
def test_gemm_matches_numpy(m, n, k, ta, tb, accum, dtypes, c_scope, swizzle_a, team, context,
                            seed):
    in_dtype, dtype = dtypes
    rows, cols = (k, m) if ta else (m, k)
    a_layout = ComposeLayout.for_mode("B32", in_dtype.itemsize,
                                      TileLayout.parse(f"({rows},{cols}):({cols},1)")) \
        if swizzle_a else None
    kernel = gemm_kernel(m, n, k, ta, tb, accum, in_dtype, dtype, c_scope, None, a_layout, team,
                         num_warps=2)
    rec = run_gemm(kernel, m, n, k, ta, tb, accum, in_dtype, dtype, context, seed)
    bm, bn, _ = rec.shape
    assert m % bm == 0 and n % bn == 0 and bm * bn <= 32


def test_the_largest_register_block_is_chosen_and_config_picks_another():
    rec = run_gemm(gemm_kernel(12, 16, 4, False, False, True, f32, f32), 12, 16, 4, False,
                   False, True, f32, f32, GENERIC)
    assert (rec.rule, rec.shape, rec.fallback) == ("fma", (4, 8, 1), True)
    rec = run_gemm(gemm_kernel(12, 16, 4, False, True, False, f32, f32, config={"shape": (3, 2, 1)}),
                   12, 16, 4, False, True, False, f32, f32, GENERIC)
    assert rec.shape == (3, 2, 1)


def test_each_thread_computes_the_c_elements_it_holds():
    c_layout = TileLayout.parse("(8,4):(4@laneid,1@laneid)")
    kernel = gemm_kernel(8, 4, 6, True, False, True, f32, f32, FRAGMENT, c_layout,
                         team=TeamKind.WARP)
    rec = run_gemm(kernel, 8, 4, 6, True, False, True, f32, f32, SIMT)
    assert rec.shape == (1, 1, 1)


def test_a_thread_carries_every_c_element_it_holds_through_one_k_loop():
    """16x8 over a warp: a thread holds rows r, r + 8 and columns c, c + 1 of C. It loads
    them once, carries the 4 through one k loop that loads 2 of A and 2 of B per step,
    then stores them."""
    c_layout = TileLayout.parse("(2,8,4,2):(2@m,4@laneid,1@laneid,1@m)")
    kernel = gemm_kernel(16, 8, 5, False, False, True, f32, f32, FRAGMENT, c_layout,
                         team=TeamKind.WARP)
    rec = run_gemm(kernel, 16, 8, 5, False, False, True, f32, f32, SIMT)
    assert (rec.rule, rec.shape) == ("fma", (2, 2, 1))
    text = skeleton(lowered(kernel, SIMT)[0])
    assert text.count("carry=") == 1
    assert "\n".join(["load"] * 4 + ["for carry=4"] + ["  load"] * 4 + ["store"] * 4) in text


def test_operands_spread_over_threads_are_declined_per_thread():
    spread = TileLayout.parse("(8,4):(4@laneid,1@laneid)")

    def body(b):
        c = b.alloc(FRAGMENT, f32, (8, 8), TileLayout.parse("(8,8):(4@laneid,1@m)"))
        b.tile("gemm", c, b.alloc(FRAGMENT, f32, (8, 4), spread), b.alloc(SHARED, f32, (4, 8)),
               team=TeamKind.WARP)
    with pytest.raises(DispatchError, match="A distributed over threads: a thread needs whole "
                                            "rows of A"):
        lowered(make_kernel([], body), SIMT)
