"""Triton's side of the benchmarks that compare tilejit with Triton: one matmul kernel written
for this project (not taken from Triton's tutorials or repository), compiled cold by
bench_cuda_compile.py and launched by bench_hopper_gemm.py.

Triton is not a tilejit dependency: each function imports it when called, and the
benchmarks check ``triton_importable()`` first.
"""
from __future__ import annotations

import importlib


def triton_importable() -> bool:
    """Whether ``import triton`` works (an installed but broken triton does not count)."""
    try:
        importlib.import_module("triton")
    except ImportError:
        return False
    return True


def triton_matmul():
    """C = A @ B with f32 accumulation, masked edges, C stored in C's dtype. One program per
    TM x TN tile of C on a 1-D grid; programs are numbered down columns of GROUP row tiles,
    so the programs resident together share A's GROUP row strips and B's column strips in
    L2 (GROUP = 1 walks C row by row)."""
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
           TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr, GROUP: tl.constexpr):
        tiles_m, tiles_n = tl.cdiv(M, TM), tl.cdiv(N, TN)
        program = tl.program_id(0)
        band = program // (GROUP * tiles_n)          # the band of GROUP row tiles it is in
        band_rows = tl.minimum(tiles_m - band * GROUP, GROUP)   # the last band may be short
        within = program % (GROUP * tiles_n)
        tile_m = band * GROUP + within % band_rows
        tile_n = within // band_rows
        rows = tile_m * TM + tl.arange(0, TM)
        cols = tile_n * TN + tl.arange(0, TN)
        ks = tl.arange(0, TK)
        acc = tl.zeros((TM, TN), dtype=tl.float32)
        for k in range(0, K, TK):
            a_tile = tl.load(a + rows[:, None] * sam + (k + ks)[None, :] * sak,
                             mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
            b_tile = tl.load(b + (k + ks)[:, None] * sbk + cols[None, :] * sbn,
                             mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a_tile, b_tile)
        tl.store(c + rows[:, None] * scm + cols[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))
    return mm


# Tile configs for bf16 on H100/H200 (228 KB of shared memory per SM): 128 x 256 x 64 in
# 3 stages takes 3 * (128 + 256) * 64 * 2 B = 144 KB, 4 stages of 128 x 128 x 64 take 128 KB.
# (TM, TN, TK, warps, stages); GROUP 8 for all.
HOPPER_BF16_CONFIGS = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4),
                       (128, 128, 64, 4, 4)]


def triton_matmul_launcher():
    """A function ``launch(a, b, c)`` computing c = a @ b (2-D CUDA tensors) with
    triton_matmul(), its tile config autotuned per (M, N, K) on the first launch of each."""
    import triton

    configs = [triton.Config(dict(TM=tm, TN=tn, TK=tk, GROUP=8), num_warps=warps,
                             num_stages=stages)
               for tm, tn, tk, warps, stages in HOPPER_BF16_CONFIGS]
    kernel = triton.autotune(configs=configs, key=["M", "N", "K"])(triton_matmul())

    def launch(a, b, c):
        (m, k), n = a.shape, b.shape[1]

        def grid(meta):
            return (triton.cdiv(m, meta["TM"]) * triton.cdiv(n, meta["TN"]),)
        kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     c.stride(0), c.stride(1))
    launch.kernel = kernel      # its .best_config after a launch: the winner for that shape
    return launch
