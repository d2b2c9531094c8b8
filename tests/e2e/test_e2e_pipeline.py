"""The warp-specialized mbarrier pipeline GEMM (a Hopper-style kernel: a producer warp
streams A and B tiles into a shared ring with copy_async, a consumer warpgroup waits
full[s], multiplies, arrives on empty[s]) run unchanged on the CPU; and deadlocks, which
must end as a LaunchError naming the barrier, quickly, never as a hang."""
import time

import pytest
import torch

import tilejit as tj
from tilejit.layout import SwizzleMode, smem_layout


@tj.kernel
def ws_gemm(A, B, C, K, STAGES: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr,
            BK: tj.constexpr, COPY: tj.constexpr, MMA: tj.constexpr, ASYNC_MMA: tj.constexpr,
            LA: tj.constexpr = None, LB: tj.constexpr = None):
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    a_smem = tj.alloc_shared((STAGES, BM, BK), A.dtype, layout=LA)
    b_smem = tj.alloc_shared((STAGES, BK, BN), B.dtype, layout=LB)
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], 128)          # every consumer thread arrives
    tj.sync()
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    num_k = tj.cdiv(K, BK)
    if tj.warpgroup_id() == 0:                       # producer: one elected thread
        if tj.warp_id() == 0 and tj.elect_sync():
            for k in range(num_k):
                s = k % STAGES
                phase = (k // STAGES) % 2
                tj.mbarrier_wait(empty[s], phase ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], (BM * BK + BK * BN) * A.dtype.itemsize)
                tj.copy_async(a_smem[s], A[m0:m0 + BM, k * BK:(k + 1) * BK],
                              barrier=full[s], dispatch=COPY)
                tj.copy_async(b_smem[s], B[k * BK:(k + 1) * BK, n0:n0 + BN],
                              barrier=full[s], dispatch=COPY)
    else:                                            # consumer warpgroup
        with tj.warpgroup():                         # its accumulator: the warpgroup's
            acc = tj.fragment((BM, BN), tj.float32)
            tj.fill(acc, 0.0)
            for k in range(num_k):
                s = k % STAGES
                tj.mbarrier_wait(full[s], (k // STAGES) % 2)
                if ASYNC_MMA:
                    tj.gemm_async(acc, a_smem[s, :, :], b_smem[s, :, :], dispatch=MMA)
                else:
                    tj.gemm(acc, a_smem[s, :, :], b_smem[s, :, :])
                tj.mbarrier_arrive(empty[s])
            tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


# wgmma reads its operands through descriptors: M a multiple of 64, K steps of 16, and the
# rings in the swizzled layouts it describes (TMA writes them swizzled alike).
WGMMA_TILES = dict(BM=64, BK=16, LA=smem_layout((3, 64, 16), "float16", SwizzleMode.B32),
                   LB=smem_layout((3, 16, 32), "float16", SwizzleMode.B64))


@pytest.mark.parametrize("stages,copy,mma,async_mma,tiles", [
    (2, None, None, False, dict(BM=32, BK=24)),
    (3, "tma", "wgmma", True, WGMMA_TILES),
    (2, "cp.async", None, True, dict(BM=32, BK=24)),
])
def test_warp_specialized_gemm(stages, copy, mma, async_mma, tiles):
    M, N, K = 80, 72, 104   # K % BK != 0; M and N tiles masked; rows of 16-byte multiples (TMA)
    gen = torch.Generator().manual_seed(stages)
    A = torch.randn(M, K, generator=gen).half()
    B = torch.randn(K, N, generator=gen).half()
    C = torch.full((M, N), -1.0)
    grid = (tj.cdiv(M, tiles["BM"]), tj.cdiv(N, 32))
    ws_gemm[grid](A, B, C, K, STAGES=stages, BN=32, COPY=copy, MMA=mma,
                  ASYNC_MMA=async_mma, num_warps=8, **tiles)
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-4, atol=1e-4)


@tj.kernel
def never_arrives(out, WAIT_ALL: tj.constexpr):
    bar = tj.alloc_barriers(2)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
        tj.mbarrier_init(bar[1], 1)
    tj.sync()
    if WAIT_ALL:
        tj.mbarrier_wait(bar[1], 0)                  # nobody arrives on bar[1]
    elif tj.warp_id() == 1:
        tj.mbarrier_wait(bar[1], 0)
    out[tj.thread_id()] = 1.0


@pytest.mark.parametrize("wait_all", [True, False])
def test_unsatisfied_wait_is_a_launch_error_not_a_hang(wait_all):
    out = torch.zeros(128)
    start = time.monotonic()
    with pytest.raises(tj.LaunchError, match=r"deadlock.*mbarrier_wait on bar index 1") as info:
        never_arrives[(3,)](out, WAIT_ALL=wait_all)
    assert time.monotonic() - start < 30
    assert "never_arrives" in str(info.value)
    assert info.value.line is not None


def test_consumer_waiting_for_a_stage_never_produced_deadlocks():
    """The consumer expects one K step more than the producer issues."""
    @tj.kernel
    def short_producer(x, out, CHUNK: tj.constexpr):
        full = tj.alloc_barriers(1)
        ring = tj.alloc_shared((CHUNK,), x.dtype)
        if tj.thread_id() == 0:
            tj.mbarrier_init(full[0], 1)
        tj.sync()
        if tj.warp_id() == 0:
            if tj.elect_sync():
                tj.mbarrier_arrive_expect_tx(full[0], CHUNK * 4)
                tj.copy_async(ring, x[0:CHUNK], barrier=full[0])
        else:
            for k in range(2):
                tj.mbarrier_wait(full[0], k % 2)     # phase 1 never completes
                with tj.warp():
                    tj.copy(out[k * CHUNK:(k + 1) * CHUNK], ring)

    start = time.monotonic()
    with pytest.raises(tj.LaunchError, match=r"deadlock.*mbarrier_wait on full"):
        short_producer[(1,)](torch.ones(64), torch.zeros(64), CHUNK=32, num_warps=2)
    assert time.monotonic() - start < 30


@tj.kernel
def elected_producer(x, out, CHUNK: tj.constexpr, MODE: tj.constexpr):
    """The Hopper idiom ``if warp == 1 and elect_sync():`` issues the async copy once."""
    bar = tj.alloc_barriers(1)
    ring = tj.alloc_shared((CHUNK,), x.dtype)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    if MODE == "and":
        if tj.warp_id() == 1 and tj.elect_sync():
            tj.mbarrier_arrive_expect_tx(bar[0], CHUNK * x.dtype.itemsize)
            tj.copy_async(ring, x[0:CHUNK], barrier=bar[0])
    else:  # the same with a run-time condition in the conjunction
        if tj.warp_id() == 1 and x.shape[0] > 0 and tj.elect_sync():
            tj.mbarrier_arrive_expect_tx(bar[0], CHUNK * x.dtype.itemsize)
            tj.copy_async(ring, x[0:CHUNK], barrier=bar[0])
    tj.mbarrier_wait(bar[0], 0)
    tj.copy(out[0:CHUNK], ring)


@pytest.mark.parametrize("mode", ["and", "and-runtime"])
def test_conjunction_of_filters_on_different_axes(mode):
    x = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(48)
    elected_producer[(2,)](x, out, CHUNK=48, MODE=mode)
    torch.testing.assert_close(out[:40], x)
    assert torch.all(out[40:] == 0)                 # the masked part of the tile is zero
