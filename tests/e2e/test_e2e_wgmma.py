"""gemm_async family ``wgmma`` end to end: A (64 x K) and B staged in shared memory by
``smem_layout`` -- every swizzle, B K-major ([N, K], transpose_b) and MN-major ([K, N]) --
an f32 accumulator whose wgmma layout layout inference gives it, f16 and bf16, against
torch. Per thread (the CPU's SIMT mode) the gemm runs as wgmma_mma_async from descriptors
the rule derived from the layouts; in the CPU's own lowering (team_once) the family is the
CPU gemm under wgmma's contract."""
import pytest
import torch

import tilejit as tj
from tilejit.ir.parser import parse_kernel
from tilejit.layout import S, SwizzleMode, TileLayout, smem_layout
from tilejit.layout.hw_nvidia import wgmma_acc_layout
from tilejit.passes.pipeline import PIPELINE, run_pipeline

MODES = {0: SwizzleMode.NONE, 32: SwizzleMode.B32, 64: SwizzleMode.B64, 128: SwizzleMode.B128}


@tj.kernel
def wgmma_gemm(A, B, C, N: tj.constexpr, K: tj.constexpr, LA: tj.constexpr,
               LB: tj.constexpr, TB: tj.constexpr, ACCUM: tj.constexpr = False,
               M: tj.constexpr = 64):
    """C (+)= A @ B for one M x N tile; B given as [N, K] when TB."""
    a = tj.alloc_shared((M, K), A.dtype, layout=LA)
    b = tj.alloc_shared((N, K) if TB else (K, N), B.dtype, layout=LB)
    tj.copy(a, A[0:M, 0:K])
    if TB:
        tj.copy(b, B[0:N, 0:K])
    else:
        tj.copy(b, B[0:K, 0:N])
    acc = tj.fragment((M, N), tj.float32)
    if ACCUM:
        tj.copy(acc, C[0:M, 0:N])
    else:
        tj.fill(acc, 0.0)
    tj.sync()
    tj.gemm_async(acc, a, b, transpose_b=TB, dispatch="wgmma")
    tj.copy(C[0:M, 0:N], acc)


def run(n, k, a_swizzle, b_swizzle, tb, dtype=torch.float16, accum=False, a_mn_major=False,
        m=64):
    gen = torch.Generator().manual_seed(n * k + a_swizzle)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    c = torch.randn(m, n, generator=gen)
    expected = (c.double() if accum else 0) + a.double() @ b.double()
    layouts = dict(LA=smem_layout((m, k), "float16", MODES[a_swizzle],
                                  contiguous_dim=-2 if a_mn_major else -1),
                   LB=smem_layout((n, k) if tb else (k, n), "float16", MODES[b_swizzle]))
    args = (a, b.T.contiguous() if tb else b, c)
    options = dict(N=n, K=k, TB=tb, ACCUM=accum, M=m, **layouts)
    wgmma_gemm[(1,)](*args, **options)
    torch.testing.assert_close(c.double(), expected, rtol=1e-5, atol=1e-5)
    (record,) = [r for r in wgmma_gemm.compile(*args, **options).dispatch_log
                 if r.primitive == "gemm_async"]
    return record


@pytest.mark.parametrize("n, k, a_swizzle, b_swizzle, tb", [
    (64, 64, 128, 128, True), (64, 64, 128, 128, False), (32, 32, 64, 64, True),
    (64, 32, 64, 64, False), (16, 32, 32, 32, True), (32, 16, 32, 32, False),
    (24, 32, 0, 0, True), (16, 32, 0, 0, False)])
def test_wgmma_gemm_matches_torch(lowering, n, k, a_swizzle, b_swizzle, tb):
    record = run(n, k, a_swizzle, b_swizzle, tb)
    assert record.rule == "wgmma"
    if lowering == "per_thread":
        assert record.shape == (64, n, 16)
        a_note, b_note = record.note.split("; ")
        swizzle = f"{b_swizzle}B swizzle" if b_swizzle else "no swizzle"
        assert a_note.startswith("A K-major, " + (f"{a_swizzle}B swizzle" if a_swizzle
                                                   else "no swizzle"))
        assert b_note.startswith(f"B {'K' if tb else 'MN'}-major, {swizzle}")


def test_bf16_accumulating_into_c(lowering):
    run(64, 32, 64, 128, False, torch.bfloat16, accum=True)


@pytest.mark.parametrize("m, n, k, a_swizzle, b_swizzle, tb", [
    (128, 64, 64, 128, 128, True), (192, 32, 32, 0, 64, False), (128, 128, 16, 32, 32, True)])
def test_m_beyond_64_issues_one_wgmma_per_row_block(lowering, m, n, k, a_swizzle, b_swizzle,
                                                    tb):
    record = run(n, k, a_swizzle, b_swizzle, tb, m=m, accum=True)
    assert record.rule == "wgmma"


@pytest.mark.parametrize("a_swizzle", [128, 0])
def test_a_stored_mn_major_is_read_transposed(lowering, a_swizzle):
    record = run(32, 32, a_swizzle, 64, True, a_mn_major=True)
    if lowering == "per_thread":
        assert record.note.startswith("A MN-major")


def test_the_accumulator_gets_the_wgmma_layout():
    """Layout inference gives a gemm_async's accumulator wgmma's layout when dispatch= asks
    for the family (the CTA's 4 warps are its warpgroup: the warp axis is warpid)."""
    layouts = dict(LA=smem_layout((64, 16), "float16", SwizzleMode.B32),
                   LB=smem_layout((16, 16), "float16", SwizzleMode.B32))
    compiled = wgmma_gemm.compile(torch.zeros(64, 16, dtype=torch.float16),
                                  torch.zeros(16, 16, dtype=torch.float16), torch.zeros(64, 16),
                                  N=16, K=16, TB=True, simt=True, **layouts)
    passes = [name for name, _ in PIPELINE]
    passes = passes[:passes.index("infer-fragment-layouts") + 1]
    text = run_pipeline(parse_kernel(compiled.asm["ir"]), dump=(),
                        passes=passes)[1]["infer-fragment-layouts"]
    (acc,) = [line for line in text.splitlines() if line.strip().startswith("%acc = alloc")]
    assert f'layout = "{wgmma_acc_layout(16, warp_axis="warpid")}"' in acc
    assert 'layout_note = "inferred: the tensor-core accumulator of the wgmma at line' in acc


def _compile(n=64, k=64, la=SwizzleMode.B128, lb=SwizzleMode.B128, m=64, **options):
    device = "cuda" if options.get("target") == "cuda" else "cpu"

    def tensor(*shape, dtype=tj.float16):
        return tj.TensorSpec(shape, dtype, device=device)
    layouts = dict(LA=la if not isinstance(la, SwizzleMode) else
                   smem_layout((m, k), "float16", la),
                   LB=lb if not isinstance(lb, SwizzleMode) else
                   smem_layout((n, k), "float16", lb))
    return wgmma_gemm.compile(tensor(m, k), tensor(n, k), tensor(m, n, dtype=tj.float32),
                              N=n, K=k, TB=True, M=m, **layouts, **options)


@pytest.mark.parametrize("options, reason", [
    (dict(la=None), r"A's layout is no wgmma core-matrix layout at \(0, k = 0\)"),
    (dict(la=TileLayout(S[(64, 64):(72, 1)])),   # padded rows: no core matrices
     r"A's layout is no wgmma core-matrix layout at \(0, k = 0\)"),
    (dict(n=264, k=16, lb=None, la=SwizzleMode.B32),
     r"M, N, K = 64, 264, 16: wgmma m64nNk16 takes M a multiple of 64, N a multiple of 8 "
     r"up to 256"),
    (dict(m=192, n=256, k=16, la=SwizzleMode.B32, lb=SwizzleMode.B32),
     r"C \[192, 256\] is 384 f32 accumulators per thread of the warpgroup, more than 128"),
    (dict(simt=False, target="cuda", arch="sm_80"), r"wgmma needs sm_90a; compiling for sm_80"),
    (dict(num_warps=8), r"the team is a cta of 8 warp\(s\): wgmma needs one warpgroup"),
])
def test_the_family_explains_its_refusals(options, reason):
    options.setdefault("simt", True)
    with pytest.raises(tj.DispatchError, match=reason) as info:
        _compile(**options)
    assert info.value.line is not None


@tj.kernel
def wgmma_ring(A, B, C, N: tj.constexpr, KT: tj.constexpr, S: tj.constexpr,
               LA: tj.constexpr, LB: tj.constexpr, WIDE: tj.constexpr = False):
    """C = A @ B with K = S * KT: stage s of two shared rings holds A's and B's k-slab s
    (B given as [N, K]); the gemm reads stage s, known at run time (WIDE: an i64 value,
    computed from A's shape, as a persistent kernel's ring step is)."""
    a = tj.alloc_shared((S, 64, KT), A.dtype, layout=LA)
    b = tj.alloc_shared((S, N, KT), B.dtype, layout=LB)
    for s in tj.range(S):
        tj.copy(a[s], A[0:64, s * KT:(s + 1) * KT])
        tj.copy(b[s], B[0:N, s * KT:(s + 1) * KT])
    acc = tj.fragment((64, N), tj.float32)
    tj.fill(acc, 0.0)
    tj.sync()
    for s in tj.range(S):
        if WIDE:
            t = s % (A.shape[1] // KT)
            tj.gemm_async(acc, a[t], b[t], transpose_b=True, dispatch="wgmma")
        else:
            tj.gemm_async(acc, a[s], b[s], transpose_b=True, dispatch="wgmma")
    tj.copy(C[0:64, 0:N], acc)


@pytest.mark.parametrize("swizzle, kt, wide", [(128, 64, False), (0, 32, False),
                                               (128, 64, True)])
def test_a_ring_stage_chosen_at_run_time(lowering, swizzle, kt, wide):
    """The descriptors start at the stage's offset: its run-time index (an i64 one
    included) times the stage's size (a multiple of the swizzle's 1024-byte pattern)."""
    stages, n = 3, 32
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(64, stages * kt, generator=gen).half()
    b = torch.randn(n, stages * kt, generator=gen).half()
    c = torch.zeros(64, n)
    options = dict(N=n, KT=kt, S=stages,
                   LA=smem_layout((stages, 64, kt), "float16", MODES[swizzle]),
                   LB=smem_layout((stages, n, kt), "float16", MODES[swizzle]), WIDE=wide)
    wgmma_ring[(1,)](a, b, c, **options)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-5, atol=1e-5)
    (record,) = [r for r in wgmma_ring.compile(a, b, c, **options).dispatch_log
                 if r.primitive == "gemm_async"]
    assert record.rule == "wgmma"
    if lowering == "per_thread":
        assert record.note.count("a run-time stage offset") == 2


@tj.kernel
def wgmma_without_sync(A, B, C, LA: tj.constexpr, LB: tj.constexpr):
    a = tj.alloc_shared((64, 64), A.dtype, layout=LA)
    b = tj.alloc_shared((64, 64), B.dtype, layout=LB)
    tj.copy(a, A[0:64, 0:64])
    tj.copy(b, B[0:64, 0:64])
    acc = tj.fragment((64, 64), tj.float32)
    tj.fill(acc, 0.0)
    tj.gemm_async(acc, a, b, transpose_b=True, dispatch="wgmma")
    tj.copy(C[0:64, 0:64], acc)


def test_the_copies_are_ordered_before_the_wgmma_without_a_written_sync(lowering):
    """The descriptors name shared memory other threads wrote: sync-hazards sees the gemm
    read a and b and puts the barrier in."""
    gen = torch.Generator().manual_seed(9)
    a, b = torch.randn(64, 64, generator=gen).half(), torch.randn(64, 64, generator=gen).half()
    c = torch.zeros(64, 64)
    layout = smem_layout((64, 64), "float16", SwizzleMode.B128)
    wgmma_without_sync[(1,)](a, b, c, LA=layout, LB=layout)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-5, atol=1e-5)
    if lowering == "per_thread":
        lowered = wgmma_without_sync.compile(a, b, c, LA=layout, LB=layout).asm["lowered"]
        assert 'sync {reason = "auto_sync: shared buffer a written at line' in lowered
