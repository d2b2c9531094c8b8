"""``tj.range(..., pipeline=S)`` (passes/software_pipeline.py): a plain loop of
``copy_async`` + reader becomes an S-stage cp.async ring, against torch, in both CPU
lowerings. Per thread the CPU lands a cp.async chunk only when a wait retires its group,
so a wrong wait count or a missing barrier reads a stale slot and fails here; the race
detector checks the barriers the pass places."""
import pytest
import torch
from e2e_helpers import make

import tilejit as tj


@tj.kernel
def pipelined_gemm(A, B, C, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                   S: tj.constexpr):
    a_s = tj.alloc_shared((BM, BK), A.dtype)
    b_s = tj.alloc_shared((BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    for k in tj.range(tj.cdiv(A.shape[1], BK), pipeline=S):
        tj.copy_async(a_s, A[m0:m0 + BM, k * BK:(k + 1) * BK], dispatch="cp.async")
        tj.copy_async(b_s, B[k * BK:(k + 1) * BK, n0:n0 + BN], dispatch="cp.async")
        tj.gemm(acc, a_s, b_s)
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("k", [70, 48, 16, 5])   # ragged, a multiple of S*BK or not, < S*BK
def test_pipelined_gemm_against_torch(stages, k):
    gen = torch.Generator().manual_seed(stages * 100 + k)
    m, n = 45, 37
    A, B = make((m, k), "float16", gen, -3, 3), make((k, n), "float16", gen, -3, 3)
    C = torch.zeros(m, n)
    pipelined_gemm[(tj.cdiv(m, 32), tj.cdiv(n, 16))](A, B, C, BM=32, BN=16, BK=16, S=stages)
    torch.testing.assert_close(C.double(), A.double() @ B.double())


def test_the_trip_count_is_read_at_run_time():
    """One compiled kernel (K is not specialized) runs for 1, S - 1, S and 5 S iterations."""
    gen = torch.Generator().manual_seed(9)
    for k in (16, 32, 48, 240):
        A, B = make((32, k), "float32", gen, -3, 3), make((k, 16), "float32", gen, -3, 3)
        C = torch.zeros(32, 16)
        pipelined_gemm[(1, 1)](A, B, C, BM=32, BN=16, BK=16, S=3)
        torch.testing.assert_close(C.double(), A.double() @ B.double())


@tj.kernel
def pipelined_row_sums(x, out, CHUNK: tj.constexpr, S: tj.constexpr, START: tj.constexpr,
                       STEP: tj.constexpr):
    """out[r] = the sum of x[r, c] over the chunks START, START + STEP, ... of each row:
    a streaming reduction through an S-slot ring, from a reader other than gemm."""
    tile = tj.alloc_shared((4, CHUNK), x.dtype)
    total = tj.fragment((4,), tj.float32)
    tj.fill(total, 0.0)
    r0 = tj.cta_id(0) * 4
    for c in tj.range(START, tj.cdiv(x.shape[1], CHUNK), STEP, pipeline=S):
        c0 = c * CHUNK
        tj.copy_async(tile, x[r0:r0 + 4, c0:c0 + CHUNK], dispatch="cp.async")
        tj.copy(total, total + tj.sum(tile, axis=1))
    tj.copy(out[r0:r0 + 4], total)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("start,step", [(0, 1), (1, 2)])
def test_pipelined_streaming_reduction(stages, start, step):
    x = make((10, 300), "float32", torch.Generator().manual_seed(stages), -4, 4)
    out = torch.zeros(10)
    pipelined_row_sums[(tj.cdiv(10, 4),)](x, out, CHUNK=32, S=stages, START=start, STEP=step)
    chunks = torch.arange(x.shape[1]) // 32
    keep = (chunks >= start) & ((chunks - start) % step == 0)
    torch.testing.assert_close(out.double(), (x.double() * keep).sum(1))


@tj.kernel
def pipelined_tma_gemm(A, B, C, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                       S: tj.constexpr):
    """The same loop with tma copies: the ring completes on S full mbarriers."""
    a_s = tj.alloc_shared((BM, BK), A.dtype)
    b_s = tj.alloc_shared((BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    for k in tj.range(tj.cdiv(A.shape[1], BK), pipeline=S):
        tj.copy_async(a_s, A[m0:m0 + BM, k * BK:(k + 1) * BK], dispatch="tma")
        tj.copy_async(b_s, B[k * BK:(k + 1) * BK, n0:n0 + BN], dispatch="tma")
        tj.gemm(acc, a_s, b_s)
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("k", [72, 48, 8])   # rows of a multiple of 16 bytes (tensor maps)
def test_pipelined_tma_gemm_against_torch(stages, k):
    gen = torch.Generator().manual_seed(stages * 10 + k)
    m, n = 45, 40
    A, B = make((m, k), "float16", gen, -3, 3), make((k, n), "float16", gen, -3, 3)
    C = torch.zeros(m, n)
    pipelined_tma_gemm[(tj.cdiv(m, 32), tj.cdiv(n, 16))](A, B, C, BM=32, BN=16, BK=16,
                                                         S=stages)
    torch.testing.assert_close(C.double(), A.double() @ B.double())
    log = pipelined_tma_gemm.compile(A, B, C, BM=32, BN=16, BK=16, S=stages).dispatch_log
    assert {r.rule for r in log if r.primitive == "copy_async"} == {"tma"}


@tj.kernel
def carried_sum(x, out, S: tj.constexpr):
    """A scalar the loop carries, a start and a step: the ring keeps both."""
    tile = tj.alloc_shared((8,), x.dtype)
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    total = 0
    for c in tj.range(1, x.shape[0] // 8, 2, pipeline=S):
        tj.copy_async(tile, x[c * 8:c * 8 + 8], dispatch="cp.async")
        tj.copy(acc, acc + tile)
        total += c
    tj.copy(out[0:8], acc)
    if tj.thread_id() == 0:
        out[8] = total


@pytest.mark.parametrize("stages", [2, 3])
def test_loop_carried_values_survive_the_rewrite(stages):
    x = make((80,), "float32", torch.Generator().manual_seed(stages))
    out = torch.zeros(9)
    carried_sum[(1,)](x, out, S=stages)
    torch.testing.assert_close(out[:8], x.view(10, 8)[1::2].sum(0))
    assert out[8] == 1 + 3 + 5 + 7 + 9


@tj.kernel
def gemm_on_halves(A, B, C, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                   S: tj.constexpr):
    """Readers of views of the stage buffers: each view becomes a view of the slot."""
    a_s = tj.alloc_shared((BM, BK), A.dtype)
    b_s = tj.alloc_shared((BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    for k in tj.range(tj.cdiv(A.shape[1], BK), pipeline=S):
        tj.copy_async(a_s, A[m0:m0 + BM, k * BK:(k + 1) * BK], dispatch="cp.async")
        tj.copy_async(b_s, B[k * BK:(k + 1) * BK, n0:n0 + BN], dispatch="cp.async")
        tj.gemm(acc, a_s[:, 0:BK // 2], b_s[0:BK // 2, :])
        tj.gemm(acc, a_s[:, BK // 2:BK], b_s[BK // 2:BK, :])
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


def test_views_of_stage_buffers_read_the_slot():
    gen = torch.Generator().manual_seed(3)
    A, B = make((45, 70), "float16", gen, -3, 3), make((70, 37), "float16", gen, -3, 3)
    C = torch.zeros(45, 37)
    gemm_on_halves[(2, 3)](A, B, C, BM=32, BN=16, BK=16, S=3)
    torch.testing.assert_close(C.double(), A.double() @ B.double())


@pytest.mark.parametrize("kernel", [pipelined_gemm, pipelined_tma_gemm])
def test_the_ring_needs_no_inserted_barrier(kernel):
    """With auto_sync=False sync-hazards refuses any race it finds instead of fixing it:
    the ring's own barriers order every access (the race detector checks them per thread)."""
    strict = tj.kernel(kernel.fn, auto_sync=False)
    gen = torch.Generator().manual_seed(8)
    A, B = make((45, 72), "float16", gen, -3, 3), make((72, 40), "float16", gen, -3, 3)
    C = torch.zeros(45, 40)
    strict[(2, 3)](A, B, C, BM=32, BN=16, BK=16, S=3)
    torch.testing.assert_close(C.double(), A.double() @ B.double())
