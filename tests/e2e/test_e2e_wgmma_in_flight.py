"""wgmma groups kept in flight across K steps: ``tj.gemm_async(..., dispatch="wgmma",
wait=False)`` then ``tj.wgmma_wait(1)``, the consumer releasing the previous stage once
its group retired -- a warp-specialized TMA + wgmma GEMM written here, against torch at a
ragged shape in both CPU lowerings; releasing the stage before the wait is a race the
per-thread lowering reports (the multiply's shared reads complete at the wait that
retires its group), and so is writing an operand between the issue and that wait,
whatever barriers lie between; reading the accumulator before the wait is a
CompilationError at the read's line; the sm_90a build keeps one group in flight in the
loop."""
import inspect
import re

import pytest
import torch
from e2e_helpers import in_a_loop
from support.gpu import needs_nvrtc

import tilejit as tj
from tilejit.layout import SwizzleMode, smem_layout
from tilejit.targets.cuda.nvrtc import compile_cuda

STAGES, BM, BN, BK = 3, 64, 32, 16


def tiles(stages=STAGES, bm=BM, bn=BN, bk=BK) -> dict:
    """The constexprs of a tile config: rings swizzled as wide as a row allows."""
    modes = {32: SwizzleMode.B32, 64: SwizzleMode.B64, 128: SwizzleMode.B128}
    return dict(STAGES=stages, BM=bm, BN=bn, BK=bk,
                LA=smem_layout((stages, bm, bk), "float16", modes[min(128, 2 * bk)]),
                LB=smem_layout((stages, bk, bn), "float16", modes[min(128, 2 * bn)]))


@tj.kernel
def in_flight_gemm(A, B, C, K, STAGES: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr,
                   BK: tj.constexpr, LA: tj.constexpr, LB: tj.constexpr,
                   EARLY: tj.constexpr = False, READ: tj.constexpr = False):
    """C = A @ B: warpgroup 0 loads K steps into a ring by TMA, warpgroup 1 multiplies;
    EARLY releases a stage before its group retired, READ copies the accumulator out
    before the last wait."""
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    a_ring = tj.alloc_shared((STAGES, BM, BK), A.dtype, layout=LA)
    b_ring = tj.alloc_shared((STAGES, BK, BN), B.dtype, layout=LB)
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], 128)
    tj.sync()
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    num_k = tj.cdiv(K, BK)
    if tj.warpgroup_id() == 0:
        if tj.warp_id() == 0 and tj.elect_sync():
            for k in range(num_k):
                s = k % STAGES
                tj.mbarrier_wait(empty[s], ((k // STAGES) % 2) ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], (BM * BK + BK * BN) * A.dtype.itemsize)
                tj.copy_async(a_ring[s], A[m0:m0 + BM, k * BK:(k + 1) * BK],   # load
                              barrier=full[s], dispatch="tma")
                tj.copy_async(b_ring[s], B[k * BK:(k + 1) * BK, n0:n0 + BN],
                              barrier=full[s], dispatch="tma")
    else:
        with tj.warpgroup():
            acc = tj.fragment((BM, BN), tj.float32)
            tj.fill(acc, 0.0)
            for k in range(num_k):
                s = k % STAGES
                tj.mbarrier_wait(full[s], (k // STAGES) % 2)
                tj.gemm_async(acc, a_ring[s, :, :], b_ring[s, :, :], dispatch="wgmma",
                              wait=False)
                if EARLY:
                    tj.mbarrier_arrive(empty[s])                # early release
                tj.wgmma_wait(1)
                if not EARLY and k > 0:
                    tj.mbarrier_arrive(empty[(k - 1) % STAGES])
            if READ:
                tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)         # read in flight
            tj.wgmma_wait(0)
            if not EARLY:
                tj.mbarrier_arrive(empty[(num_k - 1) % STAGES])
            tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


def line_of(text: str, kernel=in_flight_gemm) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _run(m, n, k, config=None, **options):
    config = config or tiles()
    gen = torch.Generator().manual_seed(m + n + k)
    a = torch.randn(m, k, generator=gen).half()
    b = torch.randn(k, n, generator=gen).half()
    c = torch.full((m, n), -1.0)
    grid = (tj.cdiv(m, config["BM"]), tj.cdiv(n, config["BN"]))
    in_flight_gemm[grid](a, b, c, k, num_warps=8, **config, **options)
    return a, b, c


@pytest.mark.parametrize("shape, config", [
    ((80, 40, 104), tiles()),      # M, N, K tiles masked: 7 K steps over 3 stages
    ((136, 72, 80), tiles(stages=2, bm=128, bn=64, bk=32)),   # 2 x 2 multiplies a group
])
def test_a_group_kept_in_flight_across_k_steps_matches_torch(shape, config):
    """Edges filled with zeros by TMA (out of bounds) and clipped on C's copy."""
    a, b, c = _run(*shape, config)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.team_once_only("the race detector runs in the per-thread lowering")
def test_releasing_a_stage_before_its_group_retires_is_a_race(lowering):
    _run(64, 32, 112, simt=True)   # the right order: no race
    with pytest.raises(tj.LaunchError, match=r"data race on shared buffer 'a_ring'") as info:
        _run(64, 32, 112, simt=True, EARLY=True)
    message = str(info.value)
    assert f"at line {line_of('# load')}" in message          # the producer's next copy
    assert f"at line {line_of('tj.gemm_async(')}" in message     # the wgmma's read


def test_reading_the_accumulator_before_its_group_retires_is_refused():
    with pytest.raises(tj.CompilationError, match=(
            rf"copy touches 'acc' while the wgmma group of the gemm_async at line "
            rf"{line_of('tj.gemm_async(')} \(wait=False\) may still be in flight: a "
            rf"tj.wgmma_wait\(n\) that retires it is missing before this line")) as info:
        _run(64, 32, 32, READ=True)
    assert info.value.line == line_of("# read in flight")


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
def test_the_sm90a_loop_waits_for_all_but_the_newest_group():
    specs = [tj.TensorSpec((4096, 4096), dtype, device="cuda")
             for dtype in (tj.float16, tj.float16, tj.float32)]
    compiled = in_flight_gemm.compile(*specs, 4096, num_warps=8, target="cuda", arch="sm_90a",
                                      **tiles())
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 1
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == 1
    assert in_a_loop(ptx, ptx.index("wgmma.wait_group.sync.aligned 1;"))
    assert not in_a_loop(ptx, ptx.index("wgmma.wait_group.sync.aligned 0;"))
    assert ptx.count("wgmma.commit_group.sync.aligned;") == 1
    assert [line.split()[0] for line in ptx if line.startswith("wgmma.mma_async")] == \
        ["wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16"]
    meta = compiled.metadata
    assert meta["spill_bytes"] == 0 and meta["stack_frame_bytes"] == 0
    # ptxas keeps the group in flight: it reports a wait it had to inject (C7517) or
    # multiplies it serialized (C7515) when registers of a pending wgmma are touched, as
    # they are once the source reads an accumulator before the loop's wait
    source = compiled.asm["cuda"]
    assert "wgmma" not in compile_cuda(source, "sm_90a").log
    wait = re.search(r'asm volatile\("wgmma.wait_group.sync.aligned 1;" : "\+f"\((\w+)\)',
                     source)
    early = source.replace(wait[0], f"{wait[1]} *= 2.0f; {wait[0]}", 1)
    assert "C7517" in compile_cuda(early, "sm_90a").log


@tj.kernel
def overwritten_operand(A, B, C, LA: tj.constexpr, LB: tj.constexpr,
                        WAIT_FIRST: tj.constexpr = False):
    """C = A @ B by one wgmma left in flight, A's tile then zeroed by the warpgroup between
    barriers (auto_sync's before, tj.sync() after): before the wait that retires the
    multiply, or after it."""
    a_s = tj.alloc_shared((64, 16), A.dtype, layout=LA)
    b_s = tj.alloc_shared((16, 32), B.dtype, layout=LB)
    tj.copy(a_s, A[0:64, 0:16])
    tj.copy(b_s, B[0:16, 0:32])
    with tj.warpgroup():
        acc = tj.fragment((64, 32), tj.float32)
        tj.gemm_async(acc, a_s, b_s, accum=False, dispatch="wgmma", wait=False)   # issue
        if WAIT_FIRST:
            tj.wgmma_wait(0)
        tj.fill(a_s, 0.0)                                   # overwrite
        tj.sync()
        if not WAIT_FIRST:
            tj.wgmma_wait(0)
        tj.copy(C[0:64, 0:32], acc)


def _overwrite(wait_first: bool, **options):
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 16, generator=gen).half(), torch.randn(16, 32, generator=gen).half()
    c = torch.full((64, 32), -1.0)
    overwritten_operand[(1,)](a, b, c, LA=smem_layout((64, 16), "float16", SwizzleMode.B32),
                              LB=smem_layout((16, 32), "float16", SwizzleMode.B64),
                              WAIT_FIRST=wait_first, num_warps=4, **options)
    return a, b, c


def test_an_operand_overwritten_after_the_wait_keeps_the_product(lowering):
    a, b, c = _overwrite(wait_first=True)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.team_once_only("the race detector runs in the per-thread lowering")
def test_an_operand_overwritten_before_the_wait_is_a_race_despite_barriers(lowering):
    """The CPU multiplies at the issue, so without the detector C would come out right;
    the barriers order the fill after the issue, and the wait after the fill."""
    with pytest.raises(tj.LaunchError, match=(
            rf"data race on shared buffer 'a_s' element \d+ \(storage offset\) in CTA 0: thread \d+ "
            rf"wrote it at line {line_of('# overwrite', overwritten_operand)} while the wgmma "
            rf"that thread \d+ issued at line {line_of('# issue', overwritten_operand)} could "
            r"still read it \(.* before the tj.wgmma_wait that retires its group")):
        _overwrite(wait_first=False, simt=True)
