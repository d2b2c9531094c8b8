"""Vector add, row softmax, layer norm and a tiled GEMM, written the way the SPEC's examples
are."""
from __future__ import annotations

import tilejit as tj


@tj.kernel
def vector_add(x, y, out, BLOCK: tj.constexpr = 1024, CACHE: tj.constexpr = None):
    """``out = x + y``, BLOCK elements per CTA, straight from the inputs to the output.

    ``CACHE="stream"`` writes ``out`` past the caches (non-temporal stores on the CPU): for
    outputs larger than the last-level cache that are not read again soon."""
    base = tj.cta_id(0) * BLOCK
    # The last tile is masked at the tensors' end: no loads or stores past it.
    tj.add(out[base:base + BLOCK], x[base:base + BLOCK], y[base:base + BLOCK],
           config={"cache": CACHE})


@tj.kernel
def row_softmax(x, out, BM: tj.constexpr, BN: tj.constexpr, CACHE: tj.constexpr = None):
    """Softmax over each row of ``x`` (BN = the row length; BM rows per CTA).

    Written as Triton's tutorial writes it; the fuse-pointwise pass makes ``exp(t - max)``
    one pass into ``num`` and the scaled store another, so the tile is read four times in
    L1 after it is loaded; the division is one reciprocal per row. ``CACHE="stream"``
    writes ``out`` past the caches (see ``vector_add``)."""
    row0 = tj.cta_id(0) * BM
    tile = tj.fragment((BM, BN), tj.float32)
    tj.copy(tile, x[row0:row0 + BM, 0:BN])
    num = tj.exp(tile - tj.max(tile, axis=1, keep_dims=True))
    scale = 1.0 / tj.sum(num, axis=1, keep_dims=True)
    tj.copy(out[row0:row0 + BM, 0:BN], num * scale, config={"cache": CACHE})


@tj.kernel
def layer_norm(x, weight, bias, out, eps, N: tj.constexpr, BM: tj.constexpr,
               BLOCK: tj.constexpr, CACHE: tj.constexpr = None):
    """``torch.nn.functional.layer_norm`` over rows of ``N`` elements with weight and bias,
    BM rows per CTA in a tile of BLOCK >= N columns (Triton's tutorial kernel). Past ``N``
    the centred rows are set to 0, so that the variance counts only the row; with
    BLOCK == N that step is left out. The fuse-pointwise pass turns the expressions into
    three passes over the tile: the sum, the sum of squares of the centred rows (``centred``
    is recomputed, never stored) and the output, computed in f32 from the tile, weight and
    bias and rounded once into ``out``. ``CACHE="stream"``: see ``vector_add``."""
    row0 = tj.program_id(0) * BM
    t = tj.fragment((BM, BLOCK), tj.float32)
    tj.copy(t, x[row0:row0 + BM, 0:BLOCK])                  # 0 past the tensor's end
    mean = tj.sum(t, axis=1, keep_dims=True) / N
    centred = t - mean
    if BLOCK > N:
        centred = tj.where(tj.arange(0, BLOCK)[None, :] < N, centred, 0.0)
    rstd = tj.rsqrt(tj.sum(centred * centred, axis=1, keep_dims=True) / N + eps)
    tj.copy(out[row0:row0 + BM, 0:BLOCK],
            tj.fma(centred * rstd, weight[0:BLOCK], bias[0:BLOCK]), config={"cache": CACHE})


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


def run_vector_add(x, y, out, block: int = 1024, cache: str | None = None):
    vector_add[(tj.cdiv(x.numel(), block),)](x, y, out, BLOCK=block, CACHE=cache)
    return out


def run_softmax(x, out, rows_per_cta: int = 1, cache: str | None = None):
    vector_rows, cols = x.shape
    row_softmax[(tj.cdiv(vector_rows, rows_per_cta),)](x, out, BM=rows_per_cta, BN=cols,
                                                       CACHE=cache)
    return out


def run_layer_norm(x, weight, bias, out, eps: float = 1e-5, block: int | None = None,
                   cache: str | None = None):
    """Layer norm over the last dim of the 2-D ``x``; ``block``: the tile width (default:
    the row length). Rows per CTA: as many as fill a 4 KiB tile, at least one (the tile
    stays in L1 through its three passes; 16 KiB tiles measured slower at 4096 x 1000,
    BENCHMARKS.md)."""
    rows, cols = x.shape
    block = block or cols
    rows_per_cta = max(1, 1024 // block)
    layer_norm[(tj.cdiv(rows, rows_per_cta),)](x, weight, bias, out, eps, N=cols,
                                               BM=rows_per_cta, BLOCK=block, CACHE=cache)
    return out


def run_matmul(a, b, c, bm: int | None = None, bn: int | None = None, bk: int | None = None):
    """``c = a @ b``. Default tiles: 128 x 128 x 128 on the CPU (an A and a B tile, 64 KiB
    each, stay in L2 while a 32-column panel of B stays in L1), 64 x 64 x 64 elsewhere."""
    on_cpu = getattr(getattr(c, "device", None), "type", "cpu") == "cpu"
    default = 128 if on_cpu else 64
    bm, bn, bk = bm or default, bn or default, bk or default
    m, n = c.shape
    matmul[(tj.cdiv(m, bm), tj.cdiv(n, bn))](a, b, c, BM=bm, BN=bn, BK=bk)
    return c
