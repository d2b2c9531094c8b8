"""The ``mma`` gemm family at the pass level: what it accepts and declines (with reasons),
and its lowering run by the IR executor against numpy, for CTA, warpgroup and warp teams."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.ir_exec import run_kernel
from support.tile_kernels import SIMT, global_matrix, lowered, make_kernel

from tilejit.ir import FilterSpec
from tilejit.ir.core import walk
from tilejit.ir.types import MemScope, TeamKind, f8e4m3, f8e5m2, f16, f32, i32
from tilejit.layout.fragments import blocked_layout, mma_accumulator_layout
from tilejit.passes import scope_analysis
from tilejit.passes.dispatch import PER_THREAD, Decline, DispatchContext, register_target
from tilejit.passes.dispatch.call import PrimitiveCall
from tilejit.passes.rules.gemm_mma import MMA_GEMM

SHARED, FRAGMENT = MemScope.SHARED, MemScope.FRAGMENT
# A GPU-like test target with mma.sync m16n8k16 (SIMT has no tensor cores).
TENSOR_CORES = register_target(DispatchContext("mma-test", distribution=PER_THREAD,
                                               tensor_core_shapes={"mma": ((16, 8, 16),
                                                                           (16, 8, 32))}))
WARP_AXIS = {TeamKind.WARP: "warpid", TeamKind.WARPGROUP: "wid_in_wg", None: "warpid"}


def gemm_kernel(m, n, k, warps, num_warps=None, team=None, layout="mma", in_dtype=f16,
                ta=False, tb=False, accum=True, filtered=False, b_dtype=None):
    """A, B staged in shared memory, C in an f32 fragment; C (+)= op(A) @ op(B), written back.
    ``warps``: the warps sharing C (the team's); B is ``in_dtype`` unless ``b_dtype``."""
    b_dtype = b_dtype or in_dtype
    layout = mma_accumulator_layout((m, n), warps, WARP_AXIS[team]) if layout == "mma" \
        else layout

    def body(b, a, bm, c):
        zero = b.const(0, i32)

        def stage(src, shape, scope, lay, dt):
            tile = b.alloc(scope, dt, shape, lay)
            b.tile("copy", tile, b.region(src, [zero, zero], shape), team=team)
            return tile

        def gemm():
            sa = stage(a, (k, m) if ta else (m, k), SHARED, None, in_dtype)
            sb = stage(bm, (n, k) if tb else (k, n), SHARED, None, b_dtype)
            sc = stage(c, (m, n), FRAGMENT, layout, f32)
            b.sync()
            b.tile("gemm", sc, sa, sb, transpose_a=ta, transpose_b=tb, accum=accum, team=team)
            b.tile("copy", b.region(c, [zero, zero], (m, n)), sc, team=team)

        if filtered:
            warp = b.thread_index("warp_id")
            _, then, orelse = b.if_(b.cmp("lt", warp, b.const(2, i32)),
                                    filter=FilterSpec("warp", 0, 2))
            with b.insert_into(then):
                gemm()
                b.yield_()
            with b.insert_into(orelse):
                b.yield_()
        else:
            gemm()
    return make_kernel([("A", global_matrix(in_dtype)), ("B", global_matrix(b_dtype)),
                        ("C", global_matrix(f32))], body, num_warps=num_warps or warps)


def gemm_record(log):
    (record,) = [r for r in log if r.primitive == "gemm"]
    return record


@pytest.mark.parametrize("m, n, k, warps, num_warps, team", [
    (32, 16, 32, 4, 4, None), (64, 32, 16, 4, 4, None), (16, 32, 32, 2, 2, None),
    (64, 16, 32, 4, 8, TeamKind.WARPGROUP), (16, 16, 32, 1, 2, TeamKind.WARP)])
@pytest.mark.parametrize("ta, tb, accum", [(False, False, True), (True, True, False)])
def test_mma_gemm_matches_numpy(m, n, k, warps, num_warps, team, ta, tb, accum):
    kernel = gemm_kernel(m, n, k, warps, num_warps, team, ta=ta, tb=tb, accum=accum)
    lk, log = lowered(kernel, TENSOR_CORES)
    record = gemm_record(log)
    assert (record.rule, record.shape) == ("mma", (16, 8, 16))
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float16)
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    product = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    expected = product + c if accum else product
    run_kernel(lk, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    # one mma_sync per atom of the warp and k-step (the k loop runs k / 16 times)
    mmas = [op for op in walk(lk.body) if op.name == "mma_sync"]
    assert len(mmas) == (m // 16) * (n // 8) // warps


def declined(kernel, context=TENSOR_CORES) -> str:
    return dict(gemm_record(lowered(kernel, context)[1]).rejected)["mma"]


def test_a_target_without_tensor_cores_declines():
    assert "target 'simt-test' has no mma.sync m16n8k16" in declined(
        gemm_kernel(32, 16, 32, 4), SIMT)


def test_inputs_shapes_and_layouts_it_cannot_take_are_declined_with_their_reasons():
    reason = declined(gemm_kernel(32, 16, 32, 4, in_dtype=f32))
    assert "A and B are f32 and f32: mma.sync multiplies f16 or bf16 tiles of one type" in reason
    reason = declined(gemm_kernel(32, 16, 24, 4))
    assert "M, N, K = 32, 16, 24: mma.sync m16n8k16 needs multiples of 16, 8 and 16" in reason
    reason = declined(gemm_kernel(16, 8, 16, 4, layout=blocked_layout((16, 8), lanes=32,
                                                                      warps=4)))
    assert "C [16, 8] holds 1 atoms of 16x8, which the cta's 4 warps cannot share evenly" \
        in reason
    blocked = blocked_layout((32, 16), lanes=32, warps=4)
    reason = declined(gemm_kernel(32, 16, 32, 4, layout=blocked))
    assert f"C is laid out by {blocked}; mma.sync needs an f32 fragment laid out by the " \
        f"accumulator layout {mma_accumulator_layout((32, 16), 4)}" in reason


def test_a_team_with_inactive_warps_is_declined():
    kernel = scope_analysis.run(gemm_kernel(32, 16, 32, 4, filtered=True))
    (gemm,) = [op for op in walk(kernel.body) if op.name == "tile.gemm"]
    verdict = MMA_GEMM.check(PrimitiveCall.of(gemm, TENSOR_CORES))
    assert verdict.reasons == ("only warps 0..1, lanes 0..31 are active: every lane of the "
                               "cta's warps takes part in mma.sync",)


def test_an_arch_before_sm_80_is_declined_so_fma_takes_the_gemm():
    kernel = scope_analysis.run(gemm_kernel(32, 16, 32, 4))
    (gemm,) = [op for op in walk(kernel.body) if op.name == "tile.gemm"]
    for arch, legal in (("sm_75", False), ("sm_80", True), ("sm_90a", True)):
        context = dataclasses.replace(TENSOR_CORES, arch=arch)
        verdict = MMA_GEMM.check(PrimitiveCall.of(gemm, context))
        if legal:
            assert not isinstance(verdict, Decline), verdict
        else:
            assert verdict.reasons == ("mma.sync m16n8k16 (f16 x f16) needs sm_80 or later; "
                                       "compiling for sm_75",)


FP8_TORCH = {f8e4m3: "float8_e4m3fn", f8e5m2: "float8_e5m2"}


def fp8_values(rng, shape, dtype):
    """Random values of an 8-bit float type, as the f32 arrays the IR executor holds."""
    import torch
    values = torch.from_numpy(rng.uniform(-4, 4, shape).astype(np.float32))
    return values.to(getattr(torch, FP8_TORCH[dtype])).float().numpy()


@pytest.mark.parametrize("a_dtype, b_dtype", [(f8e4m3, f8e4m3), (f8e4m3, f8e5m2),
                                              (f8e5m2, f8e5m2)], ids=str)
@pytest.mark.parametrize("m, n, k, warps, team, tb", [(32, 24, 64, 2, None, False),
                                                      (48, 16, 96, 1, TeamKind.WARP, True)])
def test_fp8_mma_takes_k_steps_of_32_and_matches_numpy(a_dtype, b_dtype, m, n, k,
                                                                warps, team, tb):
    """Products of 8-bit floats are exact in f32; only the f32 sums round. The executor
    reads the ldmatrix fragments by its own restatement of PTX's ldmatrix."""
    kernel = gemm_kernel(m, n, k, warps, warps, team, in_dtype=a_dtype, b_dtype=b_dtype,
                         tb=tb)
    lk, log = lowered(kernel, TENSOR_CORES)
    record = gemm_record(log)
    assert (record.rule, record.shape) == ("mma", (16, 8, 32))
    a_load, *b_loads = record.note.split("; ")   # 8-bit ldmatrix only where K is contiguous
    assert a_load == "A by ldmatrix.x4" and b_loads
    assert all(("by ldmatrix" in load) == tb for load in b_loads)
    rng = np.random.default_rng(m + n + k)
    a = fp8_values(rng, (m, k), a_dtype)
    b = fp8_values(rng, (n, k) if tb else (k, n), b_dtype)
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    expected = a.astype(np.float64) @ (b.T if tb else b).astype(np.float64) + c
    run_kernel(lk, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    mmas = [op for op in walk(lk.body) if op.name == "mma_sync"]
    assert {op.attrs["shape"] for op in mmas} == {"m16n8k32"}
    assert len(mmas) == (m // 16) * (n // 8) // warps


def test_fp8_mma_needs_sm_89_and_k_in_steps_of_32():
    kernel = scope_analysis.run(gemm_kernel(32, 16, 64, 4, in_dtype=f8e4m3, b_dtype=f8e5m2))
    (gemm,) = [op for op in walk(kernel.body) if op.name == "tile.gemm"]
    for arch, legal in (("sm_80", False), ("sm_89", True), ("sm_90a", True)):
        context = dataclasses.replace(TENSOR_CORES, arch=arch)
        verdict = MMA_GEMM.check(PrimitiveCall.of(gemm, context))
        if legal:
            assert not isinstance(verdict, Decline), verdict
        else:
            assert verdict.reasons == ("mma.sync m16n8k32 (f8e4m3 x f8e5m2) needs sm_89 or "
                                       "later; compiling for sm_80",)
    reason = declined(gemm_kernel(32, 16, 48, 4, in_dtype=f8e4m3))
    assert "M, N, K = 32, 16, 48: mma.sync m16n8k32 needs multiples of 16, 8 and 32" in reason
    reason = declined(gemm_kernel(32, 16, 64, 4, in_dtype=f8e4m3, b_dtype=f16))
    assert "A and B are f8e4m3 and f16: mma.sync multiplies f16 or bf16 tiles of one type " \
        "(m16n8k16), or e4m3/e5m2 tiles (m16n8k32)" in reason
