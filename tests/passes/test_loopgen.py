"""Loop nests after lower-tiles: the lines that matter, for representative calls."""
from __future__ import annotations

import re
import textwrap

from support.tile_kernels import (
    SIMT,
    global_matrix,
    lowered,
    make_kernel,
    skeleton,
)

from tilejit.ir.types import MemScope, TeamKind, f32, i32
from tilejit.layout import TileLayout

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT


def nest(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def load_tile(shape=(96, 80), fill=None):
    """shared[shape] <- x[row:, col:] (x of run-time shape)."""
    def body(b, x, row, col):
        smem = b.alloc(SHARED, f32, shape)
        b.tile("copy", smem, b.region(x, [row, col], shape), config={} if fill is None else {"fill": fill})
    return make_kernel([("x", global_matrix(f32)), ("row", i32), ("col", i32)], body)


# --------------------------------------------------------------------------- masking
def test_masked_load_runs_full_rows_then_tail_then_fill():
    k, (rec,) = lowered(load_tile())
    assert (rec.rule, rec.shape) == ("vector", (4,))
    assert skeleton(k) == nest("""
        single cta
          buffer_dim
          buffer_dim
          for
            for
              for unroll=4
                load
                store
            for
              load
              store
            for
              store
          for
            for
              store
        """)
    text = str(k)
    # valid extent = clamp(dim - start, 0, size), computed once before the loops
    assert re.search(r"%(\w+) = binary\(%\w+, %\w+\) \{op = max\} : i64 .*\n.*"
                     r"= binary\(%\1, %\w+\) \{op = min\} : i64", text)
    assert "const {value = 0.0} : f32" in text
    # No predicate in the loops: the only comparisons are the prologue's "does the tile
    # start before the buffer" per masked dim (then it is wholly out of bounds).
    assert " if(" not in text and text.count("cmp(") == text.count("select(") == 2
    assert re.search(r"= cmp\(%\w+, %\w+\) \{pred = lt\} : i1 .*\n.*= select\(", text)


def test_the_fill_value_comes_from_config():
    assert "const {value = -1.0} : f32" in str(lowered(load_tile(fill=-1))[0])


def test_masked_store_skips_the_missing_part():
    def body(b, out, row):
        smem = b.alloc(SHARED, f32, (1000,))
        b.tile("copy", b.region(out, [row], (1000,)), smem)
    k, (rec,) = lowered(make_kernel([("out", global_matrix(f32, 1)), ("row", i32)], body))
    assert (rec.rule, rec.shape) == ("vector", (4,))
    assert skeleton(k) == nest("""
        single cta
          buffer_dim
          for
            for unroll=4
              load
              store
          for
            load
            store
        """)


def test_two_sources_that_may_run_out_of_bounds_are_checked_in_the_remainder_only():
    def body(b, x, y, row):
        frag = b.alloc(FRAGMENT, f32, (16,))
        b.tile("pointwise", frag, b.region(x, [row], (16,)), b.region(y, [row], (16,)), op="add")
    k, _ = lowered(make_kernel([("x", global_matrix(f32, 1)), ("y", global_matrix(f32, 1)),
                                ("row", i32)], body))
    assert skeleton(k, ("for", "if", "load", "store")) == nest("""
        for
          for unroll=4
            load
            load
            store
        for
          load
          load
          store
        for
          if
            load
          if
            load
          store
        """)


# --------------------------------------------------------------------------- shaping
def test_whole_buffers_fuse_into_one_loop():
    def body(b):
        acc = b.alloc(FRAGMENT, f32, (96, 80))
        b.tile("pointwise", acc, acc, b.alloc(FRAGMENT, f32, (96, 80)), op="mul")
    k, (rec,) = lowered(make_kernel([], body))
    assert rec.shape == (4,)
    assert skeleton(k) == nest("""
        single cta
          view
          view
          view
          for
            for unroll=4
              load
              load
              store
        """)
    assert "view(%0) {shape = [7680]}" in str(k)


def test_one_trip_loops_vanish():
    def body(b):
        b.tile("copy", b.alloc(SHARED, f32, (4,)), b.alloc(FRAGMENT, f32, (4,)))
    k, _ = lowered(make_kernel([], body))
    assert skeleton(k) == nest("""
        single cta
          for unroll=4
            load
            store
        """)


def test_broadcast_sources_read_index_zero():
    def body(b):
        frag = b.alloc(FRAGMENT, f32, (8, 16))
        b.tile("pointwise", frag, frag, b.alloc(FRAGMENT, f32, (8, 1)), op="sub")
    text = str(lowered(make_kernel([], body))[0])
    zero = re.search(r"%(\w+) = const \{value = 0\} : i32", text).group(1)
    assert re.search(rf"= load\(%1, %\w+, %{zero}\)", text)


def test_team_once_wraps_the_nest_in_single_of_the_team_kind():
    def body(b):
        frag = b.alloc(FRAGMENT, f32, (32,))
        b.tile("pointwise", frag, b.const(0.0, f32), op="fill", team=TeamKind.WARP)
    assert skeleton(lowered(make_kernel([], body, num_warps=4))[0]).startswith("single warp")


# --------------------------------------------------------------------------- per thread
def test_per_thread_cyclic_split_over_a_warp():
    def body(b):
        b.tile("copy", b.alloc(SHARED, f32, (16, 24)), b.alloc(SHARED, f32, (16, 24)),
               team=TeamKind.WARP)
    k, _ = lowered(make_kernel([], body, num_warps=2), SIMT)
    assert skeleton(k) == nest("""
        view
        view
        thread_index lane_id
        for
          for unroll=4
            load
            store
        """)
    assert re.search(r"%(\w+) = const \{value = 32\} : i32(.*\n)*\s*for\(%\w+, %\w+, %\1\)", str(k))


def test_per_thread_masked_load_is_one_static_box_of_checked_elements():
    """A cyclic copy from a tensor that may end inside the tile: one loop over the tile's
    chunks with a constant bound, each element loaded under its check (else the fill),
    instead of full, tail and remainder boxes with run-time trip counts and divisions."""
    k, (rec,) = lowered(load_tile((64, 32)), SIMT)
    assert (rec.rule, rec.shape, rec.distribution) == ("vector", (4,), "cyclic over 32 threads")
    assert skeleton(k) == nest("""
        thread_index lane_id
        buffer_dim
        buffer_dim
        for unroll=1
          for unroll=4
            if
              load
            store
        """)
    text = str(k)
    # 64 x 32 elements in chunks of 4: 512 chunks, a thread's every 32nd
    assert re.search(r"%(\w+) = const \{value = 512\} : i32(.*\n)*\s*for\(%\w+, %\1, %\w+\)",
                     text)
    divisors = re.findall(r"binary\(%\w+, %(\w+)\) \{op = (?:floordiv|mod)\}", text)
    constants = set(re.findall(r"%(\w+) = const \{value = \d+\} : i32", text))
    assert divisors and set(divisors) <= constants     # row and chunk of the tile: constants
    assert "const {value = 0.0} : f32" in text          # what a missing element reads as


def test_per_thread_owned_rows_follow_the_fragment_layout():
    rows = TileLayout.parse("(32,8):(1@laneid,1@m)")

    def body(b):
        b.tile("pointwise", b.alloc(FRAGMENT, f32, (32, 8), rows), b.const(1.0, f32), op="fill",
               team=TeamKind.WARP)
    k, (rec,) = lowered(make_kernel([], body), SIMT)
    assert (rec.rule, rec.rejected[0][0]) == ("scalar", "vector")
    assert skeleton(k) == nest("""
        thread_index lane_id
        for
          store
        """)
    assert re.search(r"%(\w+) = thread_index \{kind = lane_id\}(.*\n)*.*store\(%0, %\w+, %\1, %\w+\)",
                     str(k))


def test_per_thread_owned_guards_threads_outside_the_layout():
    sparse = TileLayout.parse("(8,4):(4@laneid,1@m)")  # lanes 0, 4, ..., 28 hold the rows

    def body(b):
        b.tile("pointwise", b.alloc(FRAGMENT, f32, (8, 4), sparse), b.const(1.0, f32), op="fill")
    k, _ = lowered(make_kernel([], body), SIMT)
    assert skeleton(k, ("if", "for", "store")) == nest("""
        if
          for
            store
        """)


# --------------------------------------------------------------------------- reduce, gemm
def reduce_kernel(team=None, num_warps=1):
    def body(b):
        src = b.alloc(SHARED, f32, (4, 64))
        b.tile("reduce", b.alloc(SHARED, f32, (4,)), src, op="max", axis=1, team=team)
    return make_kernel([], body, num_warps=num_warps)


def test_sequential_reduce_starts_from_the_first_element():
    k, (rec,) = lowered(reduce_kernel())
    assert (rec.rule, rec.shape) == ("tree", (1,))
    assert skeleton(k) == nest("""
        single cta
          for
            load
            for carry=1
              load
            store
        """)


def test_warp_tree_reduce_uses_five_shuffles():
    k, (rec,) = lowered(reduce_kernel(TeamKind.WARP), SIMT)
    assert rec.shape == (32,)
    assert skeleton(k, ("for", "load", "warp_shuffle", "if", "store")) == nest("""
        for
          for carry=1
            load
          warp_shuffle
          warp_shuffle
          warp_shuffle
          warp_shuffle
          warp_shuffle
          if
            store
        """)


def test_cta_tree_reduce_goes_through_shared_memory():
    k, (rec,) = lowered(reduce_kernel(num_warps=4), SIMT)
    assert rec.shape == (128,)
    text = skeleton(k, ("alloc", "sync", "warp_shuffle", "store"))
    assert text.count("warp_shuffle") == 5 and text.count("sync") == 2
    assert "alloc {scope = shared, dtype = f32, shape = [4]}" in str(k)


def test_gemm_keeps_a_register_block_in_loop_carried_accumulators():
    def body(b):
        c = b.alloc(FRAGMENT, f32, (96, 80))
        b.tile("gemm", c, b.alloc(SHARED, f32, (96, 16)), b.alloc(SHARED, f32, (16, 80)))
    k, (rec,) = lowered(make_kernel([], body))
    assert (rec.rule, rec.shape) == ("fma", (4, 8, 1))
    text = skeleton(k, ("for",))
    assert text == nest("""
        for
          for
            for carry=32
        """)
    assert str(k).count(" = load(") == 32 + 4 + 8  # C block, a column of A, a row of B
