"""The mma accumulator, cast to f16 or bf16, stored into a shared tile by ``stmatrix``
(family ``stmatrix`` of ``copy``), then copied out, against torch. Per thread (the CPU's
SIMT mode) each warp's lanes meet in stmatrix as on a GPU; in the CPU's own lowering
(team_once) the family is never tried and the same kernel runs on its own rules. Plain,
padded and swizzled shared tiles take stmatrix; what it cannot take (an f32 fragment, rows
off 16-byte alignment, an arch before sm_90) is copied element by element, the reason in
the dispatch log."""
import inspect

import pytest
import torch
from support.gpu import needs_nvrtc

import tilejit as tj
from tilejit.layout import S, SwizzleMode, TileLayout, smem_layout
from tilejit.layout.fragments import mma_accumulator_layout


@tj.kernel
def gemm_stored(A, B, C, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                L: tj.constexpr, LC: tj.constexpr = None, CAST: tj.constexpr = True):
    """C = A @ B for one BM x BN tile: the accumulator (cast to A's type when CAST) goes
    through a shared tile laid out by LC."""
    a_tile = tj.alloc_shared((BM, BK), A.dtype)
    b_tile = tj.alloc_shared((BK, BN), B.dtype)
    c_tile = tj.alloc_shared((BM, BN), C.dtype, layout=LC)
    acc = tj.fragment((BM, BN), tj.float32, layout=L)
    tj.fill(acc, 0.0)
    for k0 in tj.range(0, A.shape[1], BK):
        tj.copy(a_tile, A[0:BM, k0:k0 + BK])
        tj.copy(b_tile, B[k0:k0 + BK, 0:BN])
        tj.sync()
        tj.gemm(acc, a_tile, b_tile)
        tj.sync()
    if CAST:
        narrow = tj.fragment((BM, BN), C.dtype, layout=L)
        tj.copy(narrow, acc)
        tj.copy(c_tile, narrow)                  # f16 store
    else:
        tj.copy(c_tile, acc)                     # f32 store
    tj.sync()
    tj.copy(C[0:BM, 0:BN], c_tile)


def line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(gemm_stored.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def run(m, n, k, dtype, warps=4, c_layout=None, cast=True, arch=None, seed=0):
    """Launch on the CPU against torch; the dispatch record of the store into c_tile."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    c = torch.zeros(m, n, dtype=dtype if cast else torch.float32)
    options = dict(BM=m, BN=n, BK=16, L=mma_accumulator_layout((m, n), warps), LC=c_layout,
                   CAST=cast, num_warps=warps)
    gemm_stored[(1,)](a, b, c, **options)
    expected = (a.float() @ b.float()).to(c.dtype)
    tolerance = 1e-2 if cast else 1e-4   # f16 rounding of an f32 sum, or none
    torch.testing.assert_close(c, expected, rtol=tolerance, atol=tolerance)
    line = line_of("# f16 store" if cast else "# f32 store")
    (store,) = [r for r in gemm_stored.compile(a, b, c, **options).dispatch_log
                if r.primitive == "copy" and r.line == line]
    return store


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m, n, warps, note", [(32, 32, 4, "stmatrix.x4 (1 per thread)"),
                                               (64, 32, 4, "stmatrix.x4 (2 per thread)"),
                                               (16, 16, 2, "stmatrix.x2 (1 per thread)")])
def test_the_cast_accumulator_is_stored_by_stmatrix(lowering, dtype, m, n, warps, note):
    store = run(m, n, 32, dtype, warps)
    if lowering == "per_thread":
        assert (store.rule, store.note) == ("stmatrix", note)
        assert store.distribution.startswith("owned by the threads of src's layout")
    else:
        assert store.rule != "stmatrix" and "stmatrix" not in dict(store.rejected)


@pytest.mark.parametrize("c_layout", [
    TileLayout(S[(32, 32):(40, 1)]),
    smem_layout((32, 32), "float16", SwizzleMode.B64),
    TileLayout(S[(32, 4, 8):(8, 256, 1)]),
], ids=["padded-by-16-bytes", "swizzled", "row-chunks-apart"])
def test_stmatrix_takes_any_shared_layout_that_keeps_16_byte_rows(lowering, c_layout):
    store = run(32, 32, 32, torch.float16, c_layout=c_layout)
    assert (store.rule == "stmatrix") == (lowering == "per_thread")


def test_rows_off_16_byte_alignment_are_stored_in_pairs(lowering):
    """Rows 72 bytes apart: no stmatrix, but a lane's two columns are 4-byte aligned."""
    store = run(32, 32, 32, torch.float16, c_layout=TileLayout(S[(32, 32):(36, 1)]))
    if lowering == "per_thread":
        assert (store.rule, store.shape) == ("vec", (2,))
        assert dict(store.rejected)["stmatrix"] == "dst's rows do not start 16-byte aligned"


def test_an_f32_fragment_is_stored_in_pairs(lowering):
    store = run(32, 32, 32, torch.float16, cast=False)
    if lowering == "per_thread":
        assert (store.rule, store.shape) == ("vec", (2,))
        assert "src and dst are f32 and f32: stmatrix stores f16 or bf16 values without " \
            "conversion" in dict(store.rejected)["stmatrix"]


def compiled_for(arch, cast=True):
    a = tj.TensorSpec((32, 32), tj.float16, device="cuda")
    c = tj.TensorSpec((32, 32), tj.float16 if cast else tj.float32, device="cuda")
    return gemm_stored.compile(a, a, c, BM=32, BN=32, BK=16, L=mma_accumulator_layout(
        (32, 32), 4), CAST=cast, num_warps=4, target="cuda", arch=arch)


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
def test_the_kernel_compiles_for_sm_90a_with_stmatrix(fresh_cache):
    compiled = compiled_for("sm_90a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert [line.split(" ")[0] for line in ptx if "stmatrix" in line] == \
        ["stmatrix.sync.aligned.m8n8.x4.shared.b16"]   # the dispatch log's one per thread
    assert compiled.metadata["spill_bytes"] == 0
    (store,) = [r for r in compiled.dispatch_log if r.line == line_of("# f16 store")]
    assert (store.rule, store.note) == ("stmatrix", "stmatrix.x4 (1 per thread)")


@pytest.mark.team_once_only("compiles for the cuda target, per thread in either CPU mode")
@needs_nvrtc
def test_sm_80_falls_back_to_stores_of_pairs(fresh_cache):
    compiled = compiled_for("sm_80")
    assert "stmatrix.sync" not in compiled.asm["ptx"] + compiled.asm["cuda"]
    (store,) = [r for r in compiled.dispatch_log if r.line == line_of("# f16 store")]
    assert (store.rule, store.shape) == ("vec", (2,))
    assert dict(store.rejected)["stmatrix"] == "stmatrix needs sm_90 or later; compiling for sm_80"
