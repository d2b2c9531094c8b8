"""gemm_async family ``tcgen05`` end to end: A and B copied (plain copies, or TMA) into
swizzled (or core-matrix) shared memory, one thread issues the multiply into a ``tj.alloc_tmem`` accumulator and
commits it to an mbarrier, every thread waits, the accumulator is copied into registers
and C is written -- against torch on ragged shapes, f16 and bf16. Per thread (the IR the
cuda target prints for sm_100a) tensor memory is allocated by warp 0 (``lower-tmem``), the
multiply is ``tcgen05_mma`` per k-step from descriptors and the copy out ``tcgen05_ld``;
in the CPU's own lowering (team_once) the family is the CPU gemm under tcgen05's
contract, tensor memory plain memory. No B200 is available: on the GPU side this is
compiled only (tests/targets/test_cuda_tcgen05.py)."""
import re

import pytest
import torch

import tilejit as tj
from tilejit.layout import SwizzleMode, smem_layout
from tilejit.layout.hw_nvidia import wg_local_layout

MODES = {0: SwizzleMode.NONE, 32: SwizzleMode.B32, 64: SwizzleMode.B64, 128: SwizzleMode.B128}


@tj.kernel
def tcgen05_gemm(A, B, C, BN: tj.constexpr, K: tj.constexpr, LA: tj.constexpr,
                 LB: tj.constexpr, WAIT: tj.constexpr = True, ISSUERS: tj.constexpr = 1,
                 ACCUM: tj.constexpr = False, TMA: tj.constexpr = False):
    """C (+)= A @ B.T, one 128 x BN tile per CTA (B given as [N, K]); with ACCUM the
    accumulator starts as C's tile, stored into tensor memory (tcgen05.st per thread); with
    TMA thread 0 loads A and B by TMA (completing on ``loaded``) and waits before it
    issues the multiply."""
    a = tj.alloc_shared((128, K), A.dtype, layout=LA)
    b = tj.alloc_shared((BN, K), B.dtype, layout=LB)
    bar = tj.alloc_barriers(1)
    loaded = tj.alloc_barriers(1)
    acc = tj.alloc_tmem((128, BN), tj.float32)
    r = tj.cta_id(0) * 128
    c = tj.cta_id(1) * BN
    if not TMA:
        tj.copy(a, A[r:r + 128, 0:K])
        tj.copy(b, B[c:c + BN, 0:K])
    if ACCUM:
        start = tj.fragment((128, BN), tj.float32, layout=wg_local_layout(BN))
        tj.copy(start, C[r:r + 128, c:c + BN])
        tj.copy(acc, start)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
        tj.mbarrier_init(loaded[0], 1)
    tj.sync()
    if TMA:
        if tj.thread_id() == 0:
            tj.mbarrier_arrive_expect_tx(loaded[0], (128 + BN) * K * A.dtype.itemsize)
            tj.copy_async(a, A[r:r + 128, 0:K], barrier=loaded[0], dispatch="tma")
            tj.copy_async(b, B[c:c + BN, 0:K], barrier=loaded[0], dispatch="tma")
            tj.mbarrier_wait(loaded[0], 0)
    if tj.thread_id() < ISSUERS:
        tj.gemm_async(acc, a, b, transpose_b=True, accum=ACCUM, barrier=bar[0],
                      dispatch="tcgen05")
    if WAIT:
        tj.mbarrier_wait(bar[0], 0)
    out = tj.fragment((128, BN), tj.float32, layout=wg_local_layout(BN))
    tj.copy(out, acc)
    tj.copy(C[r:r + 128, c:c + BN], out)


GEMM_LINE = next(number for number, line in enumerate(open(__file__), 1)
                 if "tj.gemm_async(acc" in line)


def options(bn, k, swizzle, dtype="float16", **extra):
    return dict(BN=bn, K=k, LA=smem_layout((128, k), dtype, MODES[swizzle]),
                LB=smem_layout((bn, k), dtype, MODES[swizzle]), **extra)


def tensors(m, n, k, dtype, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=gen).to(dtype), torch.randn(n, k, generator=gen).to(dtype),
            torch.full((m, n), float("nan")))


@pytest.mark.parametrize("m, n, k, bn, swizzle, dtype", [
    (200, 100, 64, 64, 128, torch.float16),     # ragged M and N: 2 x 2 CTAs
    (150, 72, 96, 32, 64, torch.bfloat16),
    (130, 90, 32, 48, 0, torch.float16),        # core matrices, N = 48 (a multiple of 16)
    (128, 256, 32, 256, 32, torch.bfloat16),    # the widest N
])
def test_tcgen05_gemm_matches_torch(lowering, m, n, k, bn, swizzle, dtype):
    a, b, c = tensors(m, n, k, dtype)
    name = "bfloat16" if dtype is torch.bfloat16 else "float16"
    opts = options(bn, k, swizzle, name)
    tcgen05_gemm[(tj.cdiv(m, 128), tj.cdiv(n, bn))](a, b, c, **opts)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-5, atol=1e-5)
    log = tcgen05_gemm.compile(a, b, c, **opts).dispatch_log
    (gemm,) = [r for r in log if r.primitive == "gemm_async"]
    assert gemm.rule == "tcgen05"
    if lowering == "per_thread":
        assert gemm.shape == (128, bn, 16)
        assert gemm.note.startswith("A K-major, " + (f"{swizzle}B swizzle" if swizzle
                                                     else "no swizzle"))
        (load,) = [r for r in log if r.primitive == "copy" and r.rule == "tcgen05"]
        assert load.note.startswith("tcgen05.ld 32x32b x")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tma_loads_then_tcgen05(lowering, dtype):
    """A and B land in 128B-swizzled shared memory by TMA (the ragged edge zero-filled)
    before thread 0 issues the multiply."""
    a, b, c = tensors(190, 70, 64, dtype, seed=5)
    name = "bfloat16" if dtype is torch.bfloat16 else "float16"
    opts = options(32, 64, 128, name, TMA=True)
    tcgen05_gemm[(2, 3)](a, b, c, **opts)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-5, atol=1e-5)
    log = tcgen05_gemm.compile(a, b, c, **opts).dispatch_log
    assert {r.rule for r in log if r.primitive == "copy_async"} == {"tma"}


def test_accumulating_onto_c_stored_into_tensor_memory(lowering):
    """The accumulator starts as C's tile: a fragment stored into tensor memory (per
    thread tcgen05.st, then its wait and fence; the CTA barrier orders it before the
    multiply), on a ragged shape."""
    a, b, _ = tensors(170, 80, 48, torch.bfloat16)
    c = torch.randn(170, 80, generator=torch.Generator().manual_seed(8))
    expected = c.double() + a.double() @ b.double().T
    opts = options(16, 48, 32, "bfloat16", ACCUM=True)
    tcgen05_gemm[(2, 5)](a, b, c, **opts)
    torch.testing.assert_close(c.double(), expected, rtol=1e-5, atol=1e-5)
    if lowering == "per_thread":
        log = tcgen05_gemm.compile(a, b, c, **opts).dispatch_log
        assert [r.note for r in log if r.rule == "tcgen05" and r.primitive == "copy"] == [
            "tcgen05.st 32x32b x16 per thread", "tcgen05.ld 32x32b x16 per thread"]


@pytest.mark.team_once_only("the per-thread lowering's IR, asked for with simt=True")
def test_the_lowered_ir_allocates_multiplies_commits_loads_and_frees():
    a, b, c = tensors(128, 64, 64, torch.float16)
    lowered = tcgen05_gemm.compile(a, b, c, **options(64, 64, 128), simt=True).asm["lowered"]
    # the tcgen05 ops, in order: each line's op name, after its results
    order = re.findall(r"^\s*(?:%[^=]*= )?(tcgen05_\w+)", lowered, re.MULTILINE)
    assert order[:4] == ["tcgen05_alloc", "tcgen05_relinquish_alloc_permit",
                         "tcgen05_fence", "tcgen05_fence"]
    assert order.count("tcgen05_mma") == 4 and order.count("tcgen05_commit") == 1
    assert order[-1] == "tcgen05_dealloc" and "tcgen05_alloc(%acc_slot) {cols = 64}" in lowered
    assert "tcgen05_ld(" in lowered and order.count("tcgen05_wait_ld") == 1
    (first,) = [line for line in lowered.splitlines() if "tcgen05_mma" in line][:1]
    assert "accumulate = false" in first


@pytest.mark.team_once_only("the race detector watches the per-thread lowering")
def test_reading_the_accumulator_without_waiting_is_a_race(monkeypatch):
    monkeypatch.setenv("TILEJIT_SIMT", "1")
    a, b, c = tensors(128, 32, 32, torch.float16)
    with pytest.raises(tj.LaunchError, match=r"data race on shared buffer 'tensor memory'"):
        tcgen05_gemm[(1, 1)](a, b, c, **options(32, 32, 64, WAIT=False))


def _compile(bn=64, k=64, swizzle=128, **extra):
    spec = {"A": (128, k), "B": (bn, k)}
    device = "cuda" if extra.get("target") == "cuda" else "cpu"
    a, b = (tj.TensorSpec(spec[x], tj.float16, device=device) for x in "AB")
    c = tj.TensorSpec((128, bn), tj.float32, device=device)
    compile_options = {key: extra.pop(key) for key in ("target", "arch", "simt") if key in extra}
    return tcgen05_gemm.compile(a, b, c, **options(bn, k, swizzle, **extra), **compile_options)


@pytest.mark.parametrize("extra, reason", [
    (dict(target="cuda", arch="sm_90a"), r"tcgen05 needs sm_100a; compiling for sm_90a"),
    (dict(target="cuda", arch="sm_80"), r"tcgen05 needs sm_100a; compiling for sm_80"),
    (dict(bn=24, k=32, swizzle=64, simt=True),
     r"M, N, K = 128, 24, 32: tcgen05.mma with M = 128 has N a multiple of 16 in \[16, 256\]"),
    (dict(ISSUERS=32, simt=True), r"32 threads issue it: tcgen05.mma is one thread's"),
])
def test_the_family_explains_its_refusals(extra, reason):
    with pytest.raises(tj.DispatchError, match=reason) as info:
        _compile(**extra)
    assert info.value.line == GEMM_LINE


@tj.kernel
def two_accumulators(A, B, C, D, LA: tj.constexpr, LB: tj.constexpr):
    """C = A @ B.T and D = A @ B.T + C, each in its own tensor-memory buffer (two
    allocations, one permit relinquished after the second), both multiplies on one
    barrier's two phases."""
    a = tj.alloc_shared((128, 32), A.dtype, layout=LA)
    b = tj.alloc_shared((32, 32), B.dtype, layout=LB)
    bar = tj.alloc_barriers(1)
    first = tj.alloc_tmem((128, 32), tj.float32)
    second = tj.alloc_tmem((128, 32), tj.float32)
    tj.copy(a, A[0:128, 0:32])
    tj.copy(b, B[0:32, 0:32])
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    if tj.thread_id() == 0:
        tj.gemm_async(first, a, b, transpose_b=True, accum=False, barrier=bar[0],
                      dispatch="tcgen05")
    tj.mbarrier_wait(bar[0], 0)
    out = tj.fragment((128, 32), tj.float32, layout=wg_local_layout(32))
    tj.copy(out, first)
    tj.copy(C[0:128, 0:32], out)
    tj.copy(second, out)
    tj.sync()
    if tj.thread_id() == 0:
        tj.gemm_async(second, a, b, transpose_b=True, barrier=bar[0], dispatch="tcgen05")
    tj.mbarrier_wait(bar[0], 1)
    tj.copy(out, second)
    tj.copy(D[0:128, 0:32], out)


def test_two_tensor_memory_buffers(lowering):
    a, b, c = tensors(128, 32, 32, torch.float16, seed=11)
    d = torch.zeros(128, 32)
    layouts = dict(LA=smem_layout((128, 32), "float16", MODES[64]),
                   LB=smem_layout((32, 32), "float16", MODES[64]))
    two_accumulators[(1,)](a, b, c, d, **layouts)
    product = a.double() @ b.double().T
    torch.testing.assert_close(c.double(), product, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d.double(), 2 * product, rtol=1e-5, atol=1e-5)
    if lowering == "per_thread":
        lowered = two_accumulators.compile(a, b, c, d, **layouts).asm["lowered"]
        assert lowered.count("tcgen05_alloc(") == 2 and lowered.count("tcgen05_dealloc(") == 2
        assert lowered.count("tcgen05_relinquish_alloc_permit") == 1
        assert lowered.index("tcgen05_relinquish") > lowered.rindex("tcgen05_alloc(")


def test_tensor_memory_beyond_a_cta_is_refused_at_the_alloc():
    @tj.kernel
    def too_wide(C):
        acc = tj.alloc_tmem((128, 1024), tj.float32)
        tj.copy(C[0:128, 0:1024], acc)
    with pytest.raises(tj.CompilationError, match=r"tensor memory is 128 lanes x 512 32-bit "
                                                   r"columns") as info:
        too_wide.compile(torch.zeros(128, 1024))
    assert "tj.alloc_tmem((128, 1024)" in str(info.value)


@tj.kernel
def unlaid_copy_out(C):
    acc = tj.alloc_tmem((128, 32), tj.float32)
    out = tj.fragment((128, 32), tj.float32)   # no layout: inference chooses one
    tj.copy(out, acc)
    tj.copy(C[0:128, 0:32], out)


@pytest.mark.team_once_only("the per-thread copy family, asked for with simt=True")
def test_the_copy_out_names_the_layout_it_needs():
    """A fragment the 32x32b load does not fill (here one whose layout inference chose) is
    refused, naming wg_local_layout."""
    with pytest.raises(tj.DispatchError, match=r"32x32b moves an f32 fragment of the tensor "
                                               r"memory's shape laid out by .*"
                                               r"wg_local_layout\(32\)") as info:
        unlaid_copy_out.compile(torch.zeros(128, 32), simt=True)
    assert info.value.line is not None


@tj.kernel
def immediate_on_a_barrier(A, B, C):
    a = tj.alloc_shared((16, 16), A.dtype)
    b = tj.alloc_shared((16, 16), B.dtype)
    bar = tj.alloc_barriers(1)
    tj.copy(a, A[0:16, 0:16])
    tj.copy(b, B[0:16, 0:16])
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    acc = tj.fragment((16, 16), tj.float32)
    tj.fill(acc, 0.0)
    tj.gemm_async(acc, a, b, barrier=bar[0])
    tj.mbarrier_wait(bar[0], 0)
    tj.copy(C[0:16, 0:16], acc)


def test_a_synchronous_gemm_async_arrives_once_on_its_barrier(lowering):
    """The default family runs the gemm at once, then arrives on the barrier: once in the
    CPU's own lowering (the team runs it once); per thread every thread would arrive, which
    it refuses."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(16, 16, generator=gen).half(), torch.randn(16, 16, generator=gen).half()
    c = torch.zeros(16, 16)
    if lowering == "per_thread":
        with pytest.raises(tj.DispatchError, match=r"would arrive on it once per thread of "
                                                    r"its team \(128\)"):
            immediate_on_a_barrier[(1,)](a, b, c)
        return
    immediate_on_a_barrier[(1,)](a, b, c)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
