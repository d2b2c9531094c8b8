"""Vector add, row softmax and a tiled GEMM, written the way the SPEC's examples are."""
from __future__ import annotations

import tilejit as tj


@tj.kernel
def vector_add(x, y, out, BLOCK: tj.constexpr = 1024):
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)
    b = tj.fragment((BLOCK,), y.dtype)
    tj.copy(a, x[base:base + BLOCK])          # the last tile is masked at the tensor's end
    tj.copy(b, y[base:base + BLOCK])
    tj.copy(out[base:base + BLOCK], a + b)


@tj.kernel
def row_softmax(x, out, BM: tj.constexpr, BN: tj.constexpr):
    """Softmax over each row of ``x`` (BN = the row length; BM rows per CTA)."""
    row0 = tj.cta_id(0) * BM
    tile = tj.fragment((BM, BN), tj.float32)
    tj.copy(tile, x[row0:row0 + BM, 0:BN])
    row_max = tj.fragment((BM, 1), tj.float32)
    tj.reduce(row_max, tile, "max", axis=1)
    shifted = tj.exp(tile - row_max)          # (BM, BN) - (BM, 1) broadcasts
    denom = tj.fragment((BM, 1), tj.float32)
    tj.reduce(denom, shifted, "sum", axis=1)
    tj.copy(out[row0:row0 + BM, 0:BN], shifted / denom)


@tj.kernel
def matmul(A, B, C, BM: tj.constexpr = 64, BN: tj.constexpr = 64, BK: tj.constexpr = 64):
    """C = A @ B with shared-memory staging of each K step."""
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    a_tile = tj.alloc_shared((BM, BK), A.dtype)
    b_tile = tj.alloc_shared((BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    for k0 in tj.range(0, A.shape[1], BK):
        tj.copy(a_tile, A[m0:m0 + BM, k0:k0 + BK])    # zero-filled past K, M and N
        tj.copy(b_tile, B[k0:k0 + BK, n0:n0 + BN])
        tj.sync()
        tj.gemm(acc, a_tile, b_tile)
        tj.sync()
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


def run_vector_add(x, y, out, block: int = 1024):
    vector_add[(tj.cdiv(x.numel(), block),)](x, y, out, BLOCK=block)
    return out


def run_softmax(x, out, rows_per_cta: int = 1):
    vector_rows, cols = x.shape
    row_softmax[(tj.cdiv(vector_rows, rows_per_cta),)](x, out, BM=rows_per_cta, BN=cols)
    return out


def run_matmul(a, b, c, bm: int = 64, bn: int = 64, bk: int = 64):
    m, n = c.shape
    matmul[(tj.cdiv(m, bm), tj.cdiv(n, bn))](a, b, c, BM=bm, BN=bn, BK=bk)
    return c
