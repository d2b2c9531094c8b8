"""copy_async / gemm_async on the CPU (tilejit/targets/cpu/rules/async_copy.py): the
families ``immediate`` (default), ``tma``, ``cp.async``, ``wgmma``, ``tcgen05``; the
bytes an async copy reports on its mbarrier (the whole tile, masked part included), and
the DispatchErrors of CUDA families whose contract a call breaks."""
import pytest
import torch
from e2e_helpers import assert_guard_intact, guarded, make

import tilejit as tj


@tj.kernel
def staged_copy(x, out, EXTRA: tj.constexpr, FAMILY: tj.constexpr, BM: tj.constexpr,
                BN: tj.constexpr):
    """Thread 0 announces the tile's bytes (+ EXTRA) and issues the async copy; every
    thread waits for the barrier, then the CTA copies the shared tile out."""
    bar = tj.alloc_barriers(1)
    tile = tj.alloc_shared((BM, BN), x.dtype)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    if tj.thread_id() == 0:
        tj.mbarrier_arrive_expect_tx(bar[0], BM * BN * x.dtype.itemsize + EXTRA)
        tj.copy_async(tile, x[r:r + BM, c:c + BN], barrier=bar[0], dispatch=FAMILY)
    tj.mbarrier_wait(bar[0], 0)
    tj.copy(out[r:r + BM, c:c + BN], tile)


@pytest.mark.parametrize("family", [None, "immediate", "tma", "cp.async"])
@pytest.mark.parametrize("name", ["float32", "float16", "int8", "float64"])
def test_copy_async_masked_tile_reports_whole_box(family, name):
    shape = (45, 80)   # rows of a multiple of 16 bytes, as a TMA tensor map's must be
    x = make(shape, name, torch.Generator().manual_seed(1))
    out, whole = guarded(shape, name)
    grid = (tj.cdiv(45, 16), tj.cdiv(80, 32))
    staged_copy[grid](x, out, EXTRA=0, FAMILY=family, BM=16, BN=32)
    assert torch.equal(out, x)
    assert_guard_intact(whole, shape, name)
    log = staged_copy.compile(x, out, EXTRA=0, FAMILY=family, BM=16, BN=32).dispatch_log
    rules = {r.primitive: r.rule for r in log}
    assert rules["copy_async"] == (family or "immediate")


def test_copy_async_byte_count_is_exact():
    """One byte more than the tile is announced: the phase never completes -> LaunchError
    naming the barrier wait, quickly."""
    x = torch.ones(16, 32)
    out = torch.zeros(16, 32)
    with pytest.raises(tj.LaunchError, match=r"deadlock.*mbarrier_wait on bar"):
        staged_copy[(1, 1)](x, out, EXTRA=1, FAMILY=None, BM=16, BN=32)


@tj.kernel
def ring_copy(x, out, STAGES: tj.constexpr, CHUNK: tj.constexpr, FAMILY: tj.constexpr):
    """Warp 0 streams x through a ring of shared slots with copy_async; warp 1 consumes
    (out = 2 * x + 1) and frees the slot; the last chunk runs past the end of x."""
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    ring = tj.alloc_shared((STAGES, CHUNK), x.dtype)
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], 32)
    tj.sync()
    n = x.shape[0]
    chunks = tj.cdiv(n, CHUNK)
    if tj.warp_id() == 0:
        if tj.elect_sync():
            for k in range(chunks):
                s = k % STAGES
                tj.mbarrier_wait(empty[s], ((k // STAGES) % 2) ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], CHUNK * x.dtype.itemsize)
                tj.copy_async(ring[s, :], x[k * CHUNK:(k + 1) * CHUNK], barrier=full[s],
                              dispatch=FAMILY)
    else:
        v = tj.fragment((CHUNK,), x.dtype)
        for k in range(chunks):
            s = k % STAGES
            tj.mbarrier_wait(full[s], (k // STAGES) % 2)
            with tj.warp():
                tj.copy(v, ring[s, :])
                tj.copy(out[k * CHUNK:(k + 1) * CHUNK], v * 2 + 1)
            tj.mbarrier_arrive(empty[s])


@pytest.mark.parametrize("family", [None, "tma"])
def test_copy_async_ring_between_warps(family):
    x = torch.arange(1000, dtype=torch.float32)
    out, whole = guarded((1000,), "float32")
    ring_copy[(1,)](x, out, STAGES=3, CHUNK=96, FAMILY=family, num_warps=2)
    torch.testing.assert_close(out, 2 * x + 1)
    assert_guard_intact(whole, (1000,), "float32")


@tj.kernel
def tma_store(x, out, BM: tj.constexpr, BN: tj.constexpr, FAMILY: tj.constexpr):
    tile = tj.alloc_shared((BM, BN), x.dtype)
    r = tj.cta_id(0) * BM
    tj.copy(tile, x[r:r + BM, 0:BN])
    tj.fence_proxy_async()   # the threads' writes, before the async proxy reads the tile
    tj.sync()
    if tj.thread_id() == 0:
        tj.copy_async(out[r:r + BM, 0:BN], tile, dispatch=FAMILY)
        tj.bulk_wait(0)      # a tma store lands by then (the immediate copy already has)


@pytest.mark.parametrize("family", ["tma", "immediate"])
def test_copy_async_store_without_barrier(family):
    x = torch.randn(50, 24, dtype=torch.float64)
    out, whole = guarded((50, 24), "float64", pad=2)   # rows of 208 bytes: a multiple of 16
    tma_store[(tj.cdiv(50, 16),)](x, out, BM=16, BN=24, FAMILY=family)
    assert torch.equal(out, x)
    assert_guard_intact(whole, (50, 24), "float64")


@tj.kernel
def converting_copy(x, out, FAMILY: tj.constexpr, BARRIER: tj.constexpr, TO_REGS: tj.constexpr):
    bar = tj.alloc_barriers(1)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    if TO_REGS:
        tile = tj.fragment((8, 8), out.dtype)
    else:
        tile = tj.alloc_shared((8, 8), out.dtype)
    if BARRIER:
        tj.copy_async(tile, x[0:8, 0:8], barrier=bar[0], dispatch=FAMILY)
    else:
        tj.copy_async(tile, x[0:8, 0:8], dispatch=FAMILY)
    tj.copy(out[0:8, 0:8], tile)


def test_immediate_copy_async_converts_and_needs_no_barrier():
    x = torch.randn(8, 8)
    out = torch.zeros(8, 8, dtype=torch.float16)
    converting_copy[(1,)](x, out, FAMILY=None, BARRIER=False, TO_REGS=True)
    assert torch.equal(out, x.half())


@pytest.mark.parametrize("family,out_dtype,barrier,to_regs,reason", [
    ("tma", torch.float16, True, False, r"tma copies bytes: src is f32 but dst is f16"),
    ("tma", torch.float32, False, False, r"a tma load completes on an mbarrier"),
    ("tma", torch.float32, True, True,
     r"tma copies global -> shared or shared -> global, not global -> fragment"),
    ("cp.async", torch.float16, True, False, r"cp.async copies bytes"),
    ("cp.async", torch.float32, True, True, r"cp.async copies global -> shared, not global -> fragment"),
])
def test_cuda_copy_families_state_why_they_decline(family, out_dtype, barrier, to_regs, reason):
    x = torch.randn(8, 8)
    out = torch.zeros(8, 8, dtype=out_dtype)
    with pytest.raises(tj.DispatchError, match=reason) as info:
        converting_copy[(1,)](x, out, FAMILY=family, BARRIER=barrier, TO_REGS=to_regs)
    assert "copy_async" in str(info.value) and info.value.line is not None


def test_cuda_only_copy_family_is_a_dispatch_error_listing_cpu_families():
    @tj.kernel
    def ldmatrix_copy(x, out):
        s = tj.alloc_shared((16, 16), x.dtype)
        tj.copy(s, x[0:16, 0:16])
        f = tj.fragment((16, 16), x.dtype)
        tj.copy(f, s, dispatch="ldmatrix")
        tj.copy(out[0:16, 0:16], f)

    with pytest.raises(tj.DispatchError, match=r"dispatch='ldmatrix'.*registered: .*vector") as info:
        ldmatrix_copy[(1,)](torch.zeros(16, 16), torch.zeros(16, 16))
    assert info.value.line is not None


# ----------------------------------------------------------------------------- gemm_async
@tj.kernel
def async_gemm(A, B, C, FAMILY: tj.constexpr, A_REGS: tj.constexpr, C_SHARED: tj.constexpr,
               M: tj.constexpr, N: tj.constexpr, K: tj.constexpr, SHAPE: tj.constexpr):
    a = tj.alloc_shared((M, K), A.dtype)
    b = tj.alloc_shared((K, N), B.dtype)
    tj.copy(a, A[0:M, 0:K])
    tj.copy(b, B[0:K, 0:N])
    tj.sync()
    if C_SHARED:
        acc = tj.alloc_shared((M, N), C.dtype)
    else:
        acc = tj.fragment((M, N), C.dtype)
    tj.copy(acc, C[0:M, 0:N])
    if A_REGS:
        a_regs = tj.fragment((M, K), A.dtype)
        tj.copy(a_regs, a)
        tj.gemm_async(acc, a_regs, b, dispatch=FAMILY, config={"shape": SHAPE})
    else:
        tj.gemm_async(acc, a, b, dispatch=FAMILY, config={"shape": SHAPE})
    tj.copy(C[0:M, 0:N], acc)


@pytest.mark.parametrize("family", [None, "immediate", "wgmma"])
@pytest.mark.parametrize("ab,c,a_regs", [("float16", "float32", False),
                                         ("bfloat16", "float32", True),
                                         ("int8", "int32", False),
                                         ("float8_e4m3", "float16", False)])
def test_gemm_async_is_gemm(lowering, family, ab, c, a_regs):
    gen = torch.Generator().manual_seed(2)
    A, B, C = make((24, 40), ab, gen, -3, 3), make((40, 12), ab, gen, -3, 3), make((24, 12), c, gen)
    expected = C.double() + A.double() @ B.double()
    if family == "wgmma" and lowering == "per_thread":   # wgmma itself (test_e2e_wgmma.py)
        k = 32 if ab == "float8_e4m3" else 16   # fp8's k-step: 32 (still 32 bytes of K)
        with pytest.raises(tj.DispatchError, match=rf"M, N, K = 24, 12, 40: wgmma m64nNk{k}"):
            async_gemm.compile(A, B, C, FAMILY=family, A_REGS=a_regs, C_SHARED=False,
                               M=24, N=12, K=40, SHAPE=None)
        return
    compiled = async_gemm.compile(A, B, C, FAMILY=family, A_REGS=a_regs, C_SHARED=False,
                                  M=24, N=12, K=40, SHAPE=None)
    async_gemm[(1,)](A, B, C, FAMILY=family, A_REGS=a_regs, C_SHARED=False, M=24, N=12,
                     K=40, SHAPE=None)
    torch.testing.assert_close(C.double(), expected)
    record = next(r for r in compiled.dispatch_log if r.primitive == "gemm_async")
    assert record.rule == (family or "immediate")


def test_gemm_async_takes_a_config_shape_of_the_cpu_gemm():
    A, B, C = torch.randn(8, 6), torch.randn(6, 8), torch.zeros(8, 8)
    compiled = async_gemm.compile(A, B, C, FAMILY=None, A_REGS=False, C_SHARED=False,
                                  M=8, N=8, K=6, SHAPE=(2, 4, 1))
    record = next(r for r in compiled.dispatch_log if r.primitive == "gemm_async")
    assert tuple(record.shape) == (2, 4, 1)
    async_gemm[(1,)](A, B, C, FAMILY=None, A_REGS=False, C_SHARED=False, M=8, N=8, K=6,
                     SHAPE=(2, 4, 1))
    torch.testing.assert_close(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family,ab,c,c_shared,reason", [
    ("wgmma", "float64", "float64", False, r"wgmma has no f64 inputs"),
    ("wgmma", "float16", "float32", True, r"wgmma accumulates C in registers"),
    ("wgmma", "bfloat16", "bfloat16", False, r"wgmma with bf16 inputs accumulates in f32"),
    ("tcgen05", "float16", "float32", False, r"tcgen05.mma accumulates C in tensor memory"),
])
def test_cuda_gemm_families_state_why_they_decline(family, ab, c, c_shared, reason):
    gen = torch.Generator().manual_seed(3)
    A, B, C = make((16, 16), ab, gen), make((16, 16), ab, gen), make((16, 16), c, gen)
    with pytest.raises(tj.DispatchError, match=reason) as info:
        async_gemm[(1,)](A, B, C, FAMILY=family, A_REGS=False, C_SHARED=c_shared, M=16, N=16,
                         K=16, SHAPE=None)
    assert "gemm_async" in str(info.value) and info.value.line is not None


def test_gemm_async_unknown_family_lists_the_cpu_families():
    A, B, C = torch.zeros(8, 8), torch.zeros(8, 8), torch.zeros(8, 8)
    with pytest.raises(tj.DispatchError, match=r"dispatch='mma.sync'.*immediate, wgmma, tcgen05"):
        async_gemm[(1,)](A, B, C, FAMILY="mma.sync", A_REGS=False, C_SHARED=False, M=8, N=8,
                         K=8, SHAPE=None)


def test_tcgen05_without_a_barrier_declines():
    """Blackwell's family completes on an mbarrier (tcgen05.commit's arrive): a gemm_async
    into tensor memory without barrier= says so (test_e2e_tcgen05 runs it with one)."""
    @tj.kernel
    def blackwell_mma(A, B, FAMILY: tj.constexpr):
        a = tj.alloc_shared((16, 16), A.dtype)
        b = tj.alloc_shared((16, 16), B.dtype)
        tj.copy(a, A[0:16, 0:16])
        tj.copy(b, B[0:16, 0:16])
        acc = tj.alloc_tmem((16, 16), tj.float32)
        tj.gemm_async(acc, a, b, dispatch=FAMILY)

    A = B = torch.zeros(16, 16, dtype=torch.float16)
    with pytest.raises(tj.DispatchError, match=r"(?s)tcgen05 .*completes on an mbarrier "
                                                r"\(tcgen05.commit\): pass barrier=bars\[i\]"):
        blackwell_mma[(1,)](A, B, FAMILY="tcgen05")
