"""Masked copies and iota through dispatch + lower-tiles + the IR executor, for both
distributions (team_once and per_thread), against tilejit.passes.reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ir_exec import numpy_dtype, run_kernel
from support.tile_kernels import (FILE, GENERIC, SIMT, TILE_LINE, global_matrix, lowered,
                                  make_kernel)

from tilejit.errors import CompilationError
from tilejit.ir.types import MemScope, TeamKind, f32, i1, i32
from tilejit.layout import TileLayout
from tilejit.passes import reference as ref

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT


def masked_round_trip(rows, cols, dtype, other, padded, team):
    """mask <- keep[r0:, c0:]; smem <- x[r0:, c0:] where mask else other;
    loaded[r0:, c0:] <- smem; out[r0:, c0:] <- smem where mask (not written elsewhere)."""
    layout = TileLayout.parse(f"({rows},{cols}):({cols + 3},1)") if padded else None

    def body(b, x, keep, loaded, out, r0, c0):
        mask = b.alloc(FRAGMENT, i1, (rows, cols))
        b.tile("copy", mask, b.region(keep, [r0, c0], (rows, cols)), team=team)
        smem = b.alloc(SHARED, dtype, (rows, cols), layout)
        b.tile("copy", smem, b.region(x, [r0, c0], (rows, cols)), mask, other=other, team=team)
        b.tile("copy", b.region(loaded, [r0, c0], (rows, cols)), smem, team=team)
        b.tile("copy", b.region(out, [r0, c0], (rows, cols)), smem, mask, team=team)
    return make_kernel([("x", global_matrix(dtype)), ("keep", global_matrix(i1)),
                        ("loaded", global_matrix(dtype)), ("out", global_matrix(dtype)),
                        ("r0", i32), ("c0", i32)], body, num_warps=2)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 37), r0=st.integers(0, 5),
       c0=st.integers(0, 20), dtype=st.sampled_from([f32, i32]), other=st.sampled_from([0, -7]),
       padded=st.booleans(), team=st.sampled_from([None, TeamKind.WARP]),
       context=st.sampled_from([GENERIC, SIMT]), seed=st.integers(0, 2**16), data=st.data())
def test_masked_load_and_store_match_numpy(rows, cols, r0, c0, dtype, other, padded, team,
                                            context, seed, data):
    shape = (data.draw(st.integers(1, r0 + rows + 2)), data.draw(st.integers(1, c0 + cols + 2)))
    k, _ = lowered(masked_round_trip(rows, cols, dtype, other, padded, team), context)
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, shape).astype(numpy_dtype(dtype))
    keep = rng.integers(0, 2, shape).astype(bool)
    loaded = np.full(shape, 99, numpy_dtype(dtype))
    out = rng.integers(-50, 50, shape).astype(numpy_dtype(dtype))
    # mask and tile read past the tensor's end as False and other
    mask = ref.read_region(keep, (r0, c0), (rows, cols), fill=False)
    tile = ref.copy(np.zeros((rows, cols), x.dtype), ref.read_region(x, (r0, c0), (rows, cols)),
                    mask=mask, other=other)
    expected_loaded, expected_out = loaded.copy(), out.copy()
    ref.write_region(expected_loaded, (r0, c0), tile)
    region = ref.read_region(out, (r0, c0), (rows, cols))
    ref.write_region(expected_out, (r0, c0), ref.copy(region, tile, mask=mask, store=True))
    run_kernel(k, {"x": x, "keep": keep, "loaded": loaded, "out": out, "r0": r0, "c0": c0})
    np.testing.assert_array_equal(loaded, expected_loaded)
    np.testing.assert_array_equal(out, expected_out)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(size=st.integers(1, 70), start=st.integers(-40, 40), at=st.integers(0, 9),
       context=st.sampled_from([GENERIC, SIMT]))
def test_iota_writes_start_plus_the_index(size, start, at, context):
    def body(b, out, base):
        frag = b.alloc(FRAGMENT, i32, (size,))
        b.tile("pointwise", frag, b.const(start, i32), op="iota")
        b.tile("copy", b.region(out, [base], (size,)), frag)
    k, _ = lowered(make_kernel([("out", global_matrix(i32, rank=1)), ("base", i32)], body,
                                 num_warps=2), context)
    out = np.zeros(at + size - 1, np.int32)    # the tile's last element is past the end
    run_kernel(k, {"out": out, "base": at})
    expected = np.zeros_like(out)
    ref.write_region(expected, (at,), ref.pointwise("iota", np.zeros(size, np.int32), start))
    np.testing.assert_array_equal(out, expected)


BAD_OPS = [
    (lambda b, x: b.tile("copy", b.alloc(FRAGMENT, f32, (8,)), x, b.alloc(FRAGMENT, i32, (8,))),
     r"a copy's mask must be bool \(i1\), got i32"),
    (lambda b, x: b.tile("copy", b.alloc(FRAGMENT, f32, (8,)), x, b.alloc(FRAGMENT, i1, (5,))),
     r"mask shape \[5\] does not broadcast to \[8\]"),
    (lambda b, x: b.tile("copy", b.alloc(FRAGMENT, f32, (8,)), x, b.const(True, i1),
                         b.const(True, i1)), "at most one mask"),
    (lambda b, x: b.tile("copy", b.alloc(FRAGMENT, i32, (8,)), x, other=float("-inf")),
     "other=-inf does not fit the i32 of dst and src"),
    (lambda b, x: b.tile("pointwise", b.alloc(FRAGMENT, i32, (2, 4)), b.const(0, i32),
                         op="iota"), r"iota writes a 1-D tile from an integer scalar start"),
]


@pytest.mark.parametrize("build, message", BAD_OPS, ids=[m for _, m in BAD_OPS])
def test_the_verifier_checks_masks_other_and_iota(build, message):
    def body(b, x, n):
        build(b, b.region(x, [n], (8,)))
    with pytest.raises(CompilationError, match=message) as err:
        make_kernel([("x", global_matrix(f32, rank=1)), ("n", i32)], body)
    assert (err.value.line, err.value.file) == (TILE_LINE, FILE)   # at the op's line
