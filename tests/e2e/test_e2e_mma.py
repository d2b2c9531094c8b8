"""Tensor-core gemm (family ``mma``, mma.sync m16n8k16; m16n8k32 for fp8) end to end: tiles
of A and B staged in shared memory, an f32 accumulator laid out by ``mma_accumulator_layout``
over the CTA's warps, f16, bf16 and e4m3/e5m2 inputs, against torch. Per thread (the CPU's
SIMT mode) the gemm runs on ``mma`` -- each warp's lanes meet in mma_sync as on a GPU; in
the CPU's own lowering (team_once) its ``blocked`` family runs the same kernel. What
``mma`` cannot take falls back to ``fma`` with the reason in the dispatch log."""
import pytest
import torch
from support.gpu import needs_nvrtc

import tilejit as tj
from tilejit.layout import S, SwizzleMode, TileLayout, smem_layout
from tilejit.layout.fragments import blocked_layout, mma_accumulator_layout


@tj.kernel
def staged_gemm(A, B, C, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                L: tj.constexpr, TB: tj.constexpr = False, LA: tj.constexpr = None):
    """C = A @ B (B given transposed, [N, K], when TB), K in steps of BK; LA: the shared
    layout of A's tile."""
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    a_tile = tj.alloc_shared((BM, BK), A.dtype, layout=LA)
    b_tile = tj.alloc_shared((BN, BK) if TB else (BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32, layout=L)
    tj.fill(acc, 0.0)
    for k0 in tj.range(0, A.shape[1], BK):
        tj.copy(a_tile, A[m0:m0 + BM, k0:k0 + BK])
        if TB:
            tj.copy(b_tile, B[n0:n0 + BN, k0:k0 + BK])
        else:
            tj.copy(b_tile, B[k0:k0 + BK, n0:n0 + BN])
        tj.sync()
        tj.gemm(acc, a_tile, b_tile, transpose_b=TB)
        tj.sync()
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


def run(m, n, k, bm, bn, bk, dtype, warps=4, layout=None, tb=False, seed=0, a_layout=None,
        b_dtype=None):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(b_dtype or dtype)
    c = torch.zeros(m, n)
    layout = layout or mma_accumulator_layout((bm, bn), warps)
    args = (a, b.T.contiguous() if tb else b, c)
    options = dict(BM=bm, BN=bn, BK=bk, L=layout, TB=tb, LA=a_layout, num_warps=warps)
    staged_gemm[(m // bm, n // bn)](*args, **options)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)
    # this launch's specialization (compiled_kernels()[-1] is the last one compiled)
    (gemm,) = [r for r in staged_gemm.compile(*args, **options).dispatch_log
               if r.primitive == "gemm"]
    return gemm


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m, n, k, bm, bn, bk", [(32, 16, 32, 32, 16, 16),
                                                 (64, 64, 32, 64, 64, 16),
                                                 (64, 64, 64, 64, 64, 32),
                                                 (64, 32, 48, 32, 16, 16)])
def test_mma_gemm_matches_torch(lowering, dtype, m, n, k, bm, bn, bk):
    gemm = run(m, n, k, bm, bn, bk, dtype)
    if lowering == "per_thread":
        assert gemm.rule == "mma" and gemm.shape == (16, 8, 16)
        assert gemm.distribution.startswith("owned by the threads of C's layout")
        a_load, *b_loads = gemm.note.split("; ")   # B, [K, N], by ldmatrix.trans
        assert a_load == "A by ldmatrix.x4" and b_loads
        assert all(load.startswith("B") and load.endswith(".trans") for load in b_loads)
    else:
        assert gemm.rule != "mma" and "mma" not in dict(gemm.rejected)   # never tried


def test_a_transposed_b_and_warps_sharing_columns(lowering):
    """Two warps on a 16-row tile split its atom columns; B is read as [N, K]."""
    gemm = run(16, 32, 32, 16, 32, 16, torch.float16, warps=2, tb=True)
    assert (gemm.rule == "mma") == (lowering == "per_thread")
    if lowering == "per_thread":
        # B's rows run along K; each warp holds two adjacent atom columns
        assert gemm.note == "A by ldmatrix.x4; B pairs by ldmatrix.x4"


def test_an_accumulator_whose_lane_iter_straddles_rows_and_columns(lowering):
    """Two warps on a 32x8 tile: the accumulator layout's 32 lanes run over 8 rows and 4
    column pairs as one iter, which the per-thread distribution splits by the dims (it
    decoded the unsplit iter's digits and failed with an internal KeyError before)."""
    layout = mma_accumulator_layout((32, 8), 2)
    assert any(it.axis.name == "laneid" and it.extent == 32 for it in layout.shard)
    gemm = run(64, 16, 32, 32, 8, 16, torch.float16, warps=2, layout=layout)
    assert (gemm.rule == "mma") == (lowering == "per_thread")


def test_b_columns_load_in_pairs_and_the_odd_one_alone(lowering):
    """One warp holds three atom columns of a 16x24 tile: the first two take one
    ldmatrix.x4 together, the third an x2."""
    gemm = run(32, 48, 32, 16, 24, 16, torch.bfloat16, warps=1)
    if lowering == "per_thread":
        assert gemm.note == ("A by ldmatrix.x4; B pairs by ldmatrix.x4.trans; "
                             "B by ldmatrix.x2.trans")


@pytest.mark.parametrize("a_layout, loads", [
    (smem_layout((32, 32), "float16", SwizzleMode.B64), "A by ldmatrix.x4"),
    (TileLayout(S[(32, 32):(36, 1)]), "A by elements (A's rows do not start 16-byte aligned)"),
    (TileLayout(S[(32, 4, 8):(8, 256, 1)]), "A by ldmatrix.x4"),
], ids=["swizzled", "padded-by-8-bytes", "row-chunks-apart"])
def test_ldmatrix_takes_any_layout_that_keeps_16_byte_rows(lowering, a_layout, loads):
    """The rows of an 8x8 matrix may lie anywhere, each 16 contiguous, aligned bytes; a tile
    padded off that alignment is read element by element, with the same result."""
    gemm = run(64, 32, 64, 32, 32, 32, torch.float16, a_layout=a_layout)
    if lowering == "per_thread":
        assert gemm.rule == "mma" and gemm.note.startswith(loads + ";")


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


@pytest.mark.parametrize("a_dtype, b_dtype", [(FP8[0], FP8[0]), (FP8[0], FP8[1]),
                                              (FP8[1], FP8[0]), (FP8[1], FP8[1])], ids=str)
@pytest.mark.parametrize("m, n, k, bm, bn, bk, warps", [(48, 40, 96, 16, 8, 32, 1),
                                                        (96, 48, 64, 32, 24, 32, 2)])
@pytest.mark.parametrize("tb", [False, True], ids=["B_KxN", "B_NxK"])
def test_fp8_mma_gemm_matches_torch(lowering, a_dtype, b_dtype, m, n, k, bm, bn, bk, warps,
                                    tb):
    """e4m3 and e5m2 tiles in any mix: per thread each warp issues mma.sync m16n8k32. A
    ([M, K]) loads by ldmatrix, four bytes of a row to a register; so does B given as
    [N, K]; B as [K, N] loads by elements (an 8-bit .trans does not exist)."""
    gemm = run(m, n, k, bm, bn, bk, a_dtype, warps=warps, b_dtype=b_dtype, tb=tb)
    if lowering == "per_thread":
        assert gemm.rule == "mma" and gemm.shape == (16, 8, 32)
        a_load, *b_loads = gemm.note.split("; ")
        assert a_load == "A by ldmatrix.x4" and b_loads
        for b_load in b_loads:   # one B column per warp (bn 8) or three (bn 24): x2 and x4
            if tb:
                assert b_load in ("B pairs by ldmatrix.x4", "B by ldmatrix.x2")
            else:
                assert "by elements (no ldmatrix delivers B" in b_load
                assert b_load.endswith(f"({gemm_dtype(b_dtype)}: an 8-bit operand needs K as "
                                       "its contiguous dim, since .trans moves 16-bit units))")


def gemm_dtype(dtype) -> str:
    return {torch.float8_e4m3fn: "f8e4m3", torch.float8_e5m2: "f8e5m2"}[dtype]


def declined(gemm) -> str:
    return dict(gemm.rejected)["mma"]


def test_f32_inputs_fall_back_to_fma_with_the_reason(lowering):
    gemm = run(32, 16, 32, 32, 16, 16, torch.float32)
    if lowering == "per_thread":
        assert gemm.rule == "fma"
        assert "A and B are f32 and f32: mma.sync multiplies f16 or bf16" in declined(gemm)


def test_a_k_step_that_is_no_multiple_of_16_falls_back(lowering):
    gemm = run(32, 16, 32, 32, 16, 8, torch.float16)
    if lowering == "per_thread":
        assert gemm.rule == "fma"
        assert "M, N, K = 32, 16, 8: mma.sync m16n8k16 needs multiples of 16, 8 and 16" \
            in declined(gemm)


def test_an_accumulator_in_another_layout_falls_back_naming_the_one_it_needs(lowering):
    blocked = blocked_layout((32, 16), lanes=32, warps=4)
    gemm = run(32, 16, 32, 32, 16, 16, torch.float16, layout=blocked)
    if lowering == "per_thread":
        assert gemm.rule == "fma"
        assert f"C is laid out by {blocked}" in declined(gemm)
        assert str(mma_accumulator_layout((32, 16), 4)) in declined(gemm)


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_kernel_compiles_for_cuda_with_mma_sync(arch, fresh_cache):
    a = tj.TensorSpec((64, 64), tj.float16, device="cuda")
    c = tj.TensorSpec((64, 64), tj.float32, device="cuda")
    compiled = staged_gemm.compile(a, a, c, BM=64, BN=64, BK=32,
                                   L=mma_accumulator_layout((64, 64), 4), num_warps=4,
                                   target="cuda", arch=arch)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert any("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in line for line in ptx)
    for form in ("x4", "x4.trans"):   # the dispatch log's "A by ldmatrix.x4; B pairs by ..."
        assert any(line.startswith(f"ldmatrix.sync.aligned.m8n8.{form}.shared.b16")
                   for line in ptx)
    assert compiled.metadata["spill_bytes"] == 0


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
def test_fp8_operands_load_by_ldmatrix_x4_on_sm_90a(fresh_cache):
    a = tj.TensorSpec((64, 64), tj.float8_e4m3, device="cuda")
    b = tj.TensorSpec((64, 64), tj.float8_e5m2, device="cuda")   # given as [N, K]
    c = tj.TensorSpec((64, 64), tj.float32, device="cuda")
    compiled = staged_gemm.compile(a, b, c, BM=64, BN=64, BK=64, TB=True,
                                   L=mma_accumulator_layout((64, 64), 4), num_warps=4,
                                   target="cuda", arch="sm_90a")
    (gemm,) = [r for r in compiled.dispatch_log if r.primitive == "gemm"]
    assert gemm.note == "A by ldmatrix.x4; B pairs by ldmatrix.x4"
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    ldmatrix = [line for line in ptx if line.startswith("ldmatrix")]
    assert ldmatrix and all(line.startswith("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
                            for line in ldmatrix)
    assert any(line.startswith("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32")
               for line in ptx)
    assert not any(line.startswith("ld.shared.u8") or line.startswith("ld.shared.b8")
                   for line in ptx)   # no operand byte loaded alone
    assert compiled.metadata["spill_bytes"] == 0


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_fp8_compiles_to_mma_m16n8k32_from_sm_89_and_to_fma_before(arch, fresh_cache):
    a = tj.TensorSpec((48, 64), tj.float8_e4m3, device="cuda")
    b = tj.TensorSpec((64, 40), tj.float8_e5m2, device="cuda")
    c = tj.TensorSpec((48, 40), tj.float32, device="cuda")
    compiled = staged_gemm.compile(a, b, c, BM=16, BN=8, BK=32,
                                   L=mma_accumulator_layout((16, 8), 1), num_warps=1,
                                   target="cuda", arch=arch)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    mma = [line for line in ptx if line.startswith("mma.sync")]
    (gemm,) = [r for r in compiled.dispatch_log if r.primitive == "gemm"]
    if arch == "sm_80":
        assert gemm.rule == "fma" and not mma
        assert dict(gemm.rejected)["mma"] == ("mma.sync m16n8k32 (f8e4m3 x f8e5m2) needs "
                                              "sm_89 or later; compiling for sm_80")
    else:
        assert gemm.rule == "mma" and mma
        assert all(line.startswith("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32")
                   for line in mma)
        assert compiled.metadata["spill_bytes"] == 0
