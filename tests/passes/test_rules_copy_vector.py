"""The ``vec`` family: per thread, a copy between a tile laid out over threads and a tensor
region (or a pointwise op writing the tensor, or a copy of registers into shared memory)
moves each thread's runs of the last dim in one vector access; legal only where no run
can be misaddressed, each decline saying why."""
from __future__ import annotations

import pytest
from support.tile_kernels import GENERIC, SIMT, dispatched, global_matrix, lowered, make_kernel

from tilejit.ir.types import MemScope, f16, f32, i1, i32
from tilejit.layout import S, SwizzleMode, TileLayout, smem_layout
from tilejit.layout.fragments import blocked_layout, mma_accumulator_layout

FRAGMENT = MemScope.FRAGMENT
ROWS, COLS = 4, 128
FLAGS = ("aligned16", "unit_stride")


def round_trip(dtype=f32, layout="blocked", col0=0, flags=FLAGS, out_flags=FLAGS, mask=False,
               cols=COLS):
    """tile <- x[r0:r0+ROWS, col0:col0+cols]; out[...] <- tile (2 warps)."""
    if layout == "blocked":
        layout = blocked_layout((ROWS, cols), lanes=32, warps=2, vector=16 // dtype.itemsize)

    def body(b, x, out, r0):
        starts = [r0, b.const(col0, i32)]
        tile = b.alloc(FRAGMENT, dtype, (ROWS, cols), layout)
        extra = [b.alloc(FRAGMENT, i1, (ROWS, cols), layout)] if mask else []
        b.tile("copy", tile, b.region(x, starts, (ROWS, cols)), *extra)
        b.tile("copy", b.region(out, starts, (ROWS, cols)), tile)
    kernel = make_kernel([("x", global_matrix(dtype)), ("out", global_matrix(dtype)),
                          ("r0", i32)], body, num_warps=2)
    return kernel.replace(attrs={"specialization": {"x": flags, "out": out_flags}})


def records(kernel, context=SIMT):
    _, log = dispatched(kernel, context)
    return [r for r in log if r.primitive == "copy"]


def vec_reason(record) -> str:
    return dict(record.rejected)["vec"]


@pytest.mark.parametrize("dtype, count", [(f32, 4), (f16, 8)])
def test_a_blocked_tile_moves_runs_of_16_bytes_both_ways(dtype, count):
    load, store = records(round_trip(dtype))
    assert (load.rule, load.shape) == ("vec", (count,))
    assert (store.rule, store.shape) == ("vec", (count,))
    k, _ = lowered(round_trip(dtype), SIMT)
    text = str(k)
    assert "= load_vec(" in text and f"{{count = {count}}}" in text
    assert "store_vec(" in text


def test_the_run_is_as_long_as_the_layout_gives():
    narrow = blocked_layout((ROWS, 32), lanes=32, warps=2, vector=4)   # 2 per thread
    (load, _) = records(round_trip(layout=narrow, cols=32))
    assert (load.rule, load.shape) == ("vec", (2,))


def test_team_once_never_tries_it():
    assert all("vec" not in dict(r.rejected) and r.rule != "vec"
               for r in records(round_trip(), GENERIC))


@pytest.mark.parametrize("kwargs, reason", [
    (dict(col0=2), "starts at index 2 of its tensor's last dim, not a multiple of 4"),
    (dict(flags=("unit_stride",)), "not known to start 16-byte aligned (its specialization: "
                                   "unit_stride)"),
    (dict(layout=blocked_layout((ROWS, COLS), lanes=32, warps=2, vector=1)),
     "single elements of the last dim, no runs"),
    (dict(mask=True), "a masked copy (mask=/other=) moves element by element"),
])
def test_declines_say_why(kwargs, reason):
    load = records(round_trip(**kwargs))[0]
    assert load.rule == "scalar"
    assert reason in vec_reason(load)


def test_a_run_time_start_and_stride_are_checked_per_run():
    """Neither the row stride nor a run-time column start is known: each run's offset is
    tested (the low bits of its sum), and so is its last element against the tensor's end;
    the else branch moves the run element by element."""
    k, _ = lowered(round_trip(), SIMT)
    text = str(k)
    assert "buffer_stride(%x) {dim = 0}" in text
    assert "binary(" in text and "{op = and}" in text
    loads = [op for op in k.walk() if op.name == "load_vec"]
    assert loads and all(op.attrs["count"] == 4 for op in loads)


def test_lower_addresses_gives_a_run_its_offset_and_checks_its_first_and_last_elements():
    from tilejit.passes.addresses import lower_addresses, place_fragments
    kernel = round_trip().replace(attrs={"target": "simt-test"})
    k, _ = lowered(kernel, SIMT)
    k = lower_addresses(place_fragments(k))
    ops = list(k.walk())
    assert not [op for op in ops if op.name in ("load_vec", "store_vec")]
    flat = [op for op in ops if op.name in ("load_vec_at", "store_vec_at")]
    assert {op.name for op in flat} == {"load_vec_at", "store_vec_at"}
    for op in flat:
        check = ops[ops.index(op) - 1]
        assert check.name == "bounds_check" and check.attrs["access"] == op.name[:-3]
        # [row, col] and [row, col + 3], then the two dims' extents twice
        assert len(check.operands) == 8
        first, last = check.operands[1], check.operands[3]
        assert last.owner.name == "binary" and last.owner.attrs["op"] == "add"
        assert first in last.owner.operands


# ------------------------------------------------------------- into shared memory
def staged(shared_layout, dtype=f32):
    """An mma accumulator fragment (a lane's two adjacent columns) copied into a shared
    tile laid out by ``shared_layout`` (4 warps), then out to y."""

    def body(b, x, y):
        zero = b.const(0, i32)
        frag = b.alloc(FRAGMENT, dtype, (32, 32), mma_accumulator_layout((32, 32), 4))
        b.tile("copy", frag, b.region(x, [zero, zero], (32, 32)))
        tile = b.alloc(MemScope.SHARED, dtype, (32, 32), shared_layout)
        b.tile("copy", tile, frag)
        b.sync()
        b.tile("copy", b.region(y, [zero, zero], (32, 32)), tile)
    kernel = make_kernel([("x", global_matrix(dtype)), ("y", global_matrix(dtype))], body,
                         num_warps=4)
    return records(kernel)[1]


@pytest.mark.parametrize("dtype", [f32, f16])
@pytest.mark.parametrize("shared_layout", ["row-major", "swizzled"])
def test_a_register_tile_goes_into_shared_memory_in_pairs(dtype, shared_layout):
    layout = None if shared_layout == "row-major" else \
        smem_layout((32, 32), str(dtype).replace("f", "float"), SwizzleMode.B64)
    store = staged(layout, dtype)
    assert (store.rule, store.shape) == ("vec", (2,))


def test_shared_layouts_that_split_or_misalign_the_pairs_are_declined():
    by_columns = staged(TileLayout(S[(32, 32):(1, 32)]))
    assert by_columns.rule == "scalar"
    assert vec_reason(by_columns) == ("dst's layout does not keep 2 consecutive elements of "
                                      "a row together")
    odd_rows = staged(TileLayout(S[(32, 32):(33, 1)]))   # rows start at odd elements
    assert vec_reason(odd_rows) == "dst's rows do not start 8-byte aligned"
