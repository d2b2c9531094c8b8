"""The ``stmatrix`` copy family at the pass level: a 16-bit warp fragment stored into shared
memory by stmatrix, what it accepts and declines (with reasons), and its lowering run by
the IR executor (its stmatrix from the PTX formula) against numpy, for CTA, warpgroup and
warp teams and plain, padded and swizzled shared layouts."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.ir_exec import run_kernel
from support.tile_kernels import global_matrix, lowered, make_kernel

from tilejit.ir import FilterSpec
from tilejit.ir.core import walk
from tilejit.ir.types import MemScope, TeamKind, f16, f32, i1, i32
from tilejit.layout import S, SwizzleMode, TileLayout, mma_m16n8k16_b_layout, smem_layout
from tilejit.layout.fragments import blocked_layout, mma_accumulator_layout
from tilejit.passes import scope_analysis
from tilejit.passes.dispatch import PER_THREAD, Decline, DispatchContext, register_target
from tilejit.passes.dispatch.call import PrimitiveCall
from tilejit.passes.rules.copy_stmatrix import STMATRIX_COPY

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT
# A GPU-like test target with mma fragments (its capabilities list an mma shape).
TENSOR_CORES = register_target(DispatchContext("stmatrix-test", distribution=PER_THREAD,
                                               tensor_core_shapes={"mma": ((16, 8, 16),)}))
WARP_AXIS = {TeamKind.WARP: "warpid", TeamKind.WARPGROUP: "wid_in_wg", None: "warpid"}


def store_kernel(m, n, warps, num_warps=None, team=None, layout="mma", dtype=f16,
                 shared_dtype=None, shared_layout=None, dst_scope=SHARED, filtered=False):
    """X -> a fragment laid out by ``layout`` -> a shared tile (the copy under test) ->
    sync -> Y."""
    layout = mma_accumulator_layout((m, n), warps, WARP_AXIS[team]) if layout == "mma" \
        else layout

    def body(b, x, y):
        zero = b.const(0, i32)

        def copies():
            frag = b.alloc(FRAGMENT, dtype, (m, n), layout)
            b.tile("copy", frag, b.region(x, [zero, zero], (m, n)), team=team)
            tile = b.alloc(dst_scope, shared_dtype or dtype, (m, n),
                           shared_layout if dst_scope is SHARED else layout)
            b.tile("copy", tile, frag, team=team)
            b.sync()
            b.tile("copy", b.region(y, [zero, zero], (m, n)), tile, team=team)

        if filtered:
            warp = b.thread_index("warp_id")
            _, then, orelse = b.if_(b.cmp("lt", warp, b.const(2, i32)),
                                    filter=FilterSpec("warp", 0, 2))
            with b.insert_into(then):
                copies()
                b.yield_()
            with b.insert_into(orelse):
                b.yield_()
        else:
            copies()
    return make_kernel([("X", global_matrix(dtype)), ("Y", global_matrix(shared_dtype or dtype))],
                       body, num_warps=num_warps or warps)


def store_record(log):
    """The record of the copy into the tile (the second of three)."""
    return [r for r in log if r.primitive == "copy"][1]


def run(kernel, dtype=np.float16):
    lk, log = lowered(kernel, TENSOR_CORES)
    m, n = 0, 0
    for op in walk(kernel.body):
        if op.name == "alloc":
            m, n = op.attrs["shape"]
    x = np.random.default_rng(m + n).uniform(-4, 4, (m, n)).astype(dtype)
    y = np.zeros_like(x)
    run_kernel(lk, {"X": x, "Y": y})
    np.testing.assert_array_equal(y, x)
    return lk, store_record(log)


@pytest.mark.parametrize("m, n, warps, num_warps, team, note", [
    (32, 32, 4, 4, None, "stmatrix.x4 (1 per thread)"),
    (64, 32, 4, 4, None, "stmatrix.x4 (2 per thread)"),
    (16, 8, 1, 1, None, "stmatrix.x2 (1 per thread)"),
    (64, 16, 4, 8, TeamKind.WARPGROUP, "stmatrix.x4 (1 per thread)"),
    (16, 32, 1, 2, TeamKind.WARP, "stmatrix.x4 (2 per thread)")])
def test_an_mma_fragment_is_stored_by_stmatrix(m, n, warps, num_warps, team, note):
    lk, record = run(store_kernel(m, n, warps, num_warps, team))
    assert (record.rule, record.note) == ("stmatrix", note)
    stores = [op for op in walk(lk.body) if op.name == "stmatrix"]
    assert len(stores) == int(note.split("(")[1][0])
    assert not any(op.name == "store" and op.operands[0].type.scope is SHARED
                   for op in walk(lk.body))


def test_a_fragment_laid_out_by_columns_takes_stmatrix_trans():
    """mma's B fragment on a [16, 8] tile: a lane holds two rows of one column, as
    stmatrix.trans takes 8x8 matrices."""
    lk, record = run(store_kernel(16, 8, 1, layout=mma_m16n8k16_b_layout()))
    assert (record.rule, record.note) == ("stmatrix", "stmatrix.x2.trans (1 per thread)")
    (store,) = [op for op in walk(lk.body) if op.name == "stmatrix"]
    assert store.attrs["trans"]


@pytest.mark.parametrize("shared_layout", [
    TileLayout(S[(32, 32):(40, 1)]),                       # rows padded by 16 bytes
    smem_layout((32, 32), "float16", SwizzleMode.B64),      # 64-byte swizzle
    TileLayout(S[(32, 4, 8):(8, 256, 1)]),                 # 8-element chunks far apart
], ids=["padded-16-bytes", "swizzled", "row-chunks-apart"])
def test_any_layout_that_keeps_16_byte_rows_takes_stmatrix(shared_layout):
    _, record = run(store_kernel(32, 32, 4, shared_layout=shared_layout))
    assert record.rule == "stmatrix"


def declined(kernel, context=TENSOR_CORES) -> str:
    record = store_record(lowered(kernel, context)[1])
    assert record.rule in ("vec", "scalar")   # pairs of a row in one store, or one by one
    return dict(record.rejected)["stmatrix"]


def test_what_it_cannot_take_is_declined_with_its_reasons():
    assert "src and dst are f32 and f32: stmatrix stores f16 or bf16 values without " \
        "conversion" in declined(store_kernel(32, 32, 4, dtype=f32))
    assert "src and dst are f16 and f32" in declined(store_kernel(32, 32, 4, shared_dtype=f32))
    assert "dst is fragment memory: stmatrix writes shared memory" in declined(
        store_kernel(32, 32, 4, dst_scope=FRAGMENT))
    padded = TileLayout(S[(32, 32):(36, 1)])
    assert "dst's rows do not start 16-byte aligned" in declined(
        store_kernel(32, 32, 4, shared_layout=padded))
    half_warps = blocked_layout((32, 32), lanes=16, warps=8)
    assert f"src's layout {half_warps} is not one of 32 lanes, registers and the team's " \
        "warps (warpid) without replicas" in declined(store_kernel(32, 32, 8, layout=half_warps))
    blocked = blocked_layout((32, 32), lanes=32, warps=4)
    assert f"no stmatrix stores src's fragment: its layout {blocked} does not give a lane " \
        "its values at stmatrix's places" in declined(store_kernel(32, 32, 4, layout=blocked))


def test_a_load_from_a_tensor_and_a_masked_store_are_declined():
    def body(b, x, y):
        zero = b.const(0, i32)
        frag = b.alloc(FRAGMENT, f16, (32, 32), mma_accumulator_layout((32, 32), 4))
        b.tile("copy", frag, b.region(x, [zero, zero], (32, 32)))
        keep = b.alloc(FRAGMENT, i1, (32, 32), mma_accumulator_layout((32, 32), 4))
        b.tile("pointwise", keep, b.const(True, i1), op="fill")
        tile = b.alloc(SHARED, f16, (32, 32))
        b.tile("copy", tile, frag, keep)
        b.sync()
        b.tile("copy", b.region(y, [zero, zero], (32, 32)), tile)
    kernel = make_kernel([("X", global_matrix(f16)), ("Y", global_matrix(f16))], body,
                         num_warps=4)
    load, store, _ = [r for r in lowered(kernel, TENSOR_CORES)[1] if r.primitive == "copy"]
    assert dict(load.rejected)["stmatrix"] == (
        "dst is fragment memory: stmatrix writes shared memory; src is not a fragment laid out "
        "over threads: stmatrix stores the values each lane holds")
    assert dict(store.rejected)["stmatrix"] == ("a masked copy (mask=/other=) moves element "
                                                "by element")


def test_a_target_without_mma_fragments_declines():
    plain = register_target(DispatchContext("no-mma-test", distribution=PER_THREAD))
    assert "target 'no-mma-test' has no warp matrix fragments" in declined(
        store_kernel(32, 32, 4), plain)


def the_store(kernel):
    kernel = scope_analysis.run(kernel)
    return [op for op in walk(kernel.body) if op.name == "tile.copy"][1]


def test_a_team_with_inactive_warps_is_declined():
    verdict = STMATRIX_COPY.check(PrimitiveCall.of(
        the_store(store_kernel(32, 32, 4, filtered=True)), TENSOR_CORES))
    assert verdict.reasons == ("only warps 0..1, lanes 0..31 are active: every lane of the "
                               "cta's warps takes part in stmatrix",)


def test_an_arch_before_sm_90_is_declined():
    store = the_store(store_kernel(32, 32, 4))
    for arch, legal in (("sm_80", False), ("sm_89", False), ("sm_90a", True), ("sm_100a", True)):
        verdict = STMATRIX_COPY.check(PrimitiveCall.of(
            store, dataclasses.replace(TENSOR_CORES, arch=arch)))
        if legal:
            assert not isinstance(verdict, Decline), verdict
        else:
            assert verdict.reasons == (f"stmatrix needs sm_90 or later; compiling for {arch}",)
