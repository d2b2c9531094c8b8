"""Whole kernels the frontend tests compile: plain functions, as ``@tj.kernel`` wraps them."""
from tilejit.frontend import language as tj

WS_STAGES = 2  # a module-level constant the warp-specialized kernel reads


def vector_add(x, y, out, BLOCK: tj.constexpr = 1024):
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)      # register tile spread over the CTA's threads
    b = tj.fragment((BLOCK,), y.dtype)
    tj.copy(a, x[base:base + BLOCK])        # tiles past the tensor's end are masked
    tj.copy(b, y[base:base + BLOCK])
    tj.copy(out[base:base + BLOCK], a + b)


def row_softmax(x, out, BM: tj.constexpr = 4, BN: tj.constexpr = 128):
    row0 = tj.cta_id(0) * BM
    tile = tj.fragment((BM, BN), tj.float32)
    tj.copy(tile, x[row0:row0 + BM, 0:BN])
    row_max = tj.fragment((BM, 1), tj.float32)
    tj.reduce(row_max, tile, "max", axis=1)
    shifted = tj.exp(tile - row_max)        # (BM, BN) - (BM, 1) broadcasts
    denom = tj.fragment((BM,), tj.float32)
    tj.reduce(denom, shifted, "sum", 1)
    tj.copy(out[row0:row0 + BM, 0:BN], shifted / denom.view((BM, 1)))


def tiled_gemm(A, B, C, K, BM: tj.constexpr = 64, BN: tj.constexpr = 64, BK: tj.constexpr = 32):
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    a_smem = tj.alloc_shared((BM, BK), A.dtype)
    b_smem = tj.alloc_shared((BK, BN), B.dtype)
    a_frag = tj.fragment((BM, BK), A.dtype)
    b_frag = tj.fragment((BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    for k0 in tj.range(0, K, BK, pipeline=2):
        tj.copy(a_smem, A[m0:m0 + BM, k0:k0 + BK])
        tj.copy(b_smem, B[k0:k0 + BK, n0:n0 + BN])
        tj.sync()
        tj.copy(a_frag, a_smem)
        tj.copy(b_frag, b_smem)
        tj.gemm(acc, a_frag, b_frag)
        tj.sync()
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], tj.cast(acc, C.dtype))


def warp_specialized_gemm(A, B, C, K, BM: tj.constexpr = 128, BN: tj.constexpr = 128,
                          BK: tj.constexpr = 64):
    full = tj.alloc_barriers(WS_STAGES)
    empty = tj.alloc_barriers(WS_STAGES)
    a_smem = tj.alloc_shared((WS_STAGES, BM, BK), A.dtype)
    b_smem = tj.alloc_shared((WS_STAGES, BK, BN), B.dtype)
    if tj.thread_id() == 0:
        for s in tj.static_range(WS_STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], 128)     # every consumer thread arrives
    tj.sync()
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    num_k = tj.cdiv(K, BK)
    if tj.warpgroup_id() == 0:              # producer warpgroup
        if tj.warp_id() == 0 and tj.elect_sync():   # one issuing thread
            for k in range(num_k):
                s = k % WS_STAGES
                phase = (k // WS_STAGES) % 2
                tj.mbarrier_wait(empty[s], phase ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], (BM * BK + BK * BN) * 2)
                tj.copy_async(a_smem[s], A[m0:m0 + BM, k * BK:(k + 1) * BK], barrier=full[s])
                tj.copy_async(b_smem[s], B[k * BK:(k + 1) * BK, n0:n0 + BN], barrier=full[s])
    else:                                   # consumer warpgroup
        acc = tj.fragment((BM, BN), tj.float32)
        tj.fill(acc, 0.0)
        for k in range(num_k):
            s = k % WS_STAGES
            tj.mbarrier_wait(full[s], (k // WS_STAGES) % 2)
            with tj.warpgroup():
                tj.gemm(acc, a_smem[s, :, :], b_smem[s, :, :])
            tj.mbarrier_arrive(empty[s])
        tj.wg.copy(C[m0:m0 + BM, n0:n0 + BN], acc)
