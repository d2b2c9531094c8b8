"""Fragments laid out over threads, per thread: each thread holds only the elements its
layout gives it (private storage over the layout's memory axis, a GPU's registers), and
tile primitives reach them through the ``Owned`` distribution. Both lowerings against torch
(the conftest runs every test ``[team_once]`` and ``[per_thread]``); a native element access
that may reach another thread's element is a located error per thread."""
import pytest
import torch

import tilejit as tj
from tilejit.errors import ScopeError
from tilejit.examples import kernels
from tilejit.layout import Axis, Iter, TileLayout

# 8x16 over 2 warps: rows on lanes (stride 4), columns on a warp, 4 lanes and 2 registers.
ROWS_ON_LANES = TileLayout.parse("(8,2,4,2):(4@laneid,1@warpid,1@laneid,1@m)")
# 6 rows (no power of two): lanes 0..23 hold 2 elements each, lanes 24..31 none.
SIX_ROWS = TileLayout.parse("(6,4,2):(4@laneid,1@laneid,1@m)")
# 4x8 with every element on two lanes (l and l + 16): replicas are copies.
REPLICATED = TileLayout.from_iters([Iter(4, 1, Axis("laneid")), Iter(8, 1, Axis("m"))],
                                   [Iter(2, 16, Axis("laneid"))], {})
# A 16x16 accumulator over 4 warps: a warp per 4 rows, lanes over rows and columns, 2
# registers per thread.
ACCUMULATOR = TileLayout.parse("(4,4,8,2):(1@warpid,8@laneid,1@laneid,1@m)")


@tj.kernel
def scale_add_rows(x, y, out, BM: tj.constexpr, BN: tj.constexpr):
    r = tj.cta_id(0) * BM
    t = tj.fragment((BM, BN), tj.float32, layout=ROWS_ON_LANES)
    u = tj.fragment((BM, BN), tj.float32, layout=ROWS_ON_LANES)
    tj.copy(t, x[r:r + BM, 0:BN])
    tj.copy(u, y[r:r + BM, 0:BN])
    tj.mul(t, t, 2.0)
    tj.add(t, t, u)
    tj.copy(out[r:r + BM, 0:BN], t)


def test_pointwise_on_a_fragment_over_lanes_and_warps():
    x, y = torch.randn(24, 16), torch.randn(24, 16)
    out = torch.zeros_like(x)
    scale_add_rows[(3,)](x, y, out, BM=8, BN=16, num_warps=2)
    torch.testing.assert_close(out, x * 2 + y)


@tj.kernel
def copy_six_rows(x, out):
    r = tj.cta_id(0) * 6
    t = tj.fragment((6, 8), tj.float32, layout=SIX_ROWS)
    tj.copy(t, x[r:r + 6, 0:8])
    tj.exp(t, t)
    tj.copy(out[r:r + 6, 0:8], t)


def test_six_rows_with_idle_lanes():
    x = torch.randn(15, 8)                       # the last tile ends inside the tensor
    out = torch.zeros_like(x)
    copy_six_rows[(3,)](x, out)
    torch.testing.assert_close(out, torch.exp(x))


@tj.kernel
def copy_replicated(x, out):
    t = tj.fragment((4, 8), tj.float32, layout=REPLICATED)
    tj.copy(t, x[0:4, 0:8])
    tj.add(t, t, 1.0)
    tj.copy(out[0:4, 0:8], t)


def test_a_layout_with_replicas_over_lanes():
    x = torch.randn(4, 8)
    out = torch.zeros_like(x)
    copy_replicated[(1,)](x, out)
    torch.testing.assert_close(out, x + 1)


@tj.kernel
def gemm_into_registers(a, b, c, K: tj.constexpr):
    sa = tj.alloc_shared((16, K), tj.float32)
    sb = tj.alloc_shared((K, 16), tj.float32)
    acc = tj.fragment((16, 16), tj.float32, layout=ACCUMULATOR)
    tj.copy(sa, a[0:16, 0:K])
    tj.copy(sb, b[0:K, 0:16])
    tj.fill(acc, 0.5)
    tj.gemm(acc, sa, sb)
    tj.copy(c[0:16, 0:16], acc)


def test_gemm_into_a_laid_out_accumulator_reading_shared_operands():
    a = torch.randint(-4, 4, (16, 12)).float()
    b = torch.randint(-4, 4, (12, 16)).float()
    c = torch.zeros(16, 16)
    gemm_into_registers[(1,)](a, b, c, K=12, num_warps=4)
    torch.testing.assert_close(c, a @ b + 0.5)


def _gemm_record(kernel, *args, **options):
    """The dispatch record of ``kernel``'s gemm, compiled for ``args`` in the test's mode."""
    (gemm,) = [r for r in kernel.compile(*args, **options).dispatch_log
               if r.primitive == "gemm"]
    return gemm


def _example_matmul(m, n, k, bm, bn, bk, warps):
    gen = torch.Generator().manual_seed(m * n + k)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    c = torch.zeros(m, n)
    options = dict(BM=bm, BN=bn, BK=bk, num_warps=warps)
    kernels.matmul[(tj.cdiv(m, bm), tj.cdiv(n, bn))](a, b, c, **options)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    return _gemm_record(kernels.matmul, a, b, c, **options)


@pytest.mark.parametrize("m, n, k, bm, bn, bk, warps", [
    (128, 128, 64, 64, 64, 32, 4), (100, 70, 45, 32, 32, 16, 4), (90, 50, 37, 64, 32, 16, 4),
    (150, 40, 20, 96, 24, 8, 4)])
def test_the_example_matmul_carries_each_threads_accumulators(lowering, m, n, k, bm, bn,
                                                              bk, warps):
    """The inferred blocked layout of ``acc``: one block of a thread's rows by its columns,
    all of its elements (the edge tiles run past M, N and K)."""
    gemm = _example_matmul(m, n, k, bm, bn, bk, warps)
    if lowering == "per_thread":
        rows, cols, _ = gemm.shape
        assert gemm.rule == "fma" and gemm.distribution.startswith("owned by the threads")
        assert rows * cols == bm * bn // (32 * warps)


def test_a_thread_holding_more_than_64_elements_computes_them_one_at_a_time(lowering):
    gemm = _example_matmul(70, 60, 33, 64, 64, 16, 1)   # 128 per thread
    if lowering == "per_thread":
        assert (gemm.rule, gemm.shape) == ("fma", (1, 1, 1))


@tj.kernel
def gemm_onto(A, B, C, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr, L: tj.constexpr,
              TA: tj.constexpr, TB: tj.constexpr, ACCUM: tj.constexpr):
    """C (+)= op(A) @ op(B) in one CTA, C held as ``L`` places it."""
    a = tj.alloc_shared((K, M) if TA else (M, K), tj.float32)
    b = tj.alloc_shared((N, K) if TB else (K, N), tj.float32)
    if TA:
        tj.copy(a, A[0:K, 0:M])
    else:
        tj.copy(a, A[0:M, 0:K])
    if TB:
        tj.copy(b, B[0:N, 0:K])
    else:
        tj.copy(b, B[0:K, 0:N])
    acc = tj.fragment((M, N), tj.float32, layout=L)
    tj.copy(acc, C[0:M, 0:N])
    tj.gemm(acc, a, b, transpose_a=TA, transpose_b=TB, accum=ACCUM)
    tj.copy(C[0:M, 0:N], acc)


# 48x40 over 4 warps: 3 rows (16 apart) by 5 columns (8 apart) per thread.
BLOCKED_48x40 = TileLayout.parse("(3,4,4,5,8):(5@m,1@warpid,8@laneid,1@m,1@laneid)")
# 96x24 over 4 warps: 3 rows by 6 columns in pairs (0, 1, 8, 9, 16, 17 past its base).
PAIRED_COLUMNS = TileLayout.parse("(3,4,8,3,4,2):(6@m,1@warpid,4@laneid,2@m,1@laneid,1@m)")


@pytest.mark.parametrize("layout, m, n, warps, block", [
    (BLOCKED_48x40, 48, 40, 4, (3, 5, 1)), (PAIRED_COLUMNS, 96, 24, 4, (3, 6, 1)),
    (ACCUMULATOR, 16, 16, 4, (1, 2, 1)),
    (REPLICATED, 4, 8, 1, (1, 8, 1)),       # lanes l and l + 16 both compute row l
    (SIX_ROWS, 6, 8, 1, (1, 2, 1))],        # lanes 24..31 hold nothing
    ids=["blocked", "paired_columns", "accumulator", "replicated", "idle_lanes"])
@pytest.mark.parametrize("ta, tb, accum", [(False, False, True), (True, False, True),
                                           (False, True, True), (True, True, False)])
def test_gemm_onto_laid_out_accumulators(lowering, layout, m, n, warps, block, ta, tb, accum):
    k = 13
    gen = torch.Generator().manual_seed(m + n)
    a = torch.randn((k, m) if ta else (m, k), generator=gen)
    b = torch.randn((n, k) if tb else (k, n), generator=gen)
    c = torch.randn(m, n, generator=gen)
    expected = (c if accum else 0) + (a.T if ta else a) @ (b.T if tb else b)
    options = dict(M=m, N=n, K=k, L=layout, TA=ta, TB=tb, ACCUM=accum, num_warps=warps)
    gemm_onto[(1,)](a, b, c, **options)
    torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)
    if lowering == "per_thread":
        assert _gemm_record(gemm_onto, a, b, c, **options).shape == block


@tj.kernel
def read_one_element(x, out):
    t = tj.fragment((8, 16), tj.float32, layout=ROWS_ON_LANES)
    tj.copy(t, x[0:8, 0:16])
    out[0] = t[1, 3]


def test_a_native_access_of_another_threads_element_is_a_located_error(lowering):
    x = torch.randn(8, 16)
    out = torch.zeros(1)
    if lowering == "team_once":   # one storage of the whole tile: any element is there
        read_one_element[(1,)](x, out, num_warps=2)
        assert out[0] == x[1, 3]
        return
    with pytest.raises(ScopeError, match=r"(?s)element access \(load\) of the fragment 't' "
                       r"laid out over threads.*unlaid-out fragment.*shared buffer.*"
                       r"test_e2e_registers\.py:\d+.*out\[0\] = t\[1, 3\]"):
        read_one_element[(1,)](x, out, num_warps=2)


# Every element on lane 5 (with no thread axis iters): that lane holds the whole tile.
ON_LANE_5 = TileLayout.from_iters([Iter(8, 1, Axis("m"))], [], {"laneid": 5})


@tj.kernel
def read_on_the_holding_lane(x, out):
    t = tj.fragment((8,), tj.float32, layout=ON_LANE_5)
    tj.copy(t, x[0:8])
    if tj.lane_id() == 5:
        out[0] = t[3]


def test_a_native_access_by_the_thread_holding_every_element_stays():
    x = torch.randn(8)
    out = torch.zeros(1)
    read_on_the_holding_lane[(1,)](x, out, num_warps=1)
    assert out[0] == x[3]


REPLICATED_ON_TWO_LANES = TileLayout.parse(
    "(1,1,1,1):(-1@m,-1@m,-1@m,-1@laneid) + R[2:7@laneid] + 0@laneid")


@tj.kernel
def add_replicated_into_shared(x, y, out, L: tj.constexpr):
    total = tj.alloc_shared((1, 1), tj.float32)
    tj.copy(total, x[0:1, 0:1])
    held = tj.fragment((1, 1), tj.float32, layout=L)
    tj.copy(held, y[0:1, 0:1])
    tj.add(total, total, held)
    tj.copy(out[0:1, 0:1], total)


def test_a_replicated_source_updates_a_shared_tile_once():
    """Lanes 0 and 7 hold the element; only copy 0's owner adds it into the shared tile
    (both did, racing: the layouts fuzzer found it)."""
    out = torch.zeros(1, 1)
    add_replicated_into_shared[(1,)](torch.ones(1, 1), torch.full((1, 1), 2.0), out,
                                     L=REPLICATED_ON_TWO_LANES, num_warps=1)
    assert out.item() == 3.0


@tj.kernel
def gemm_into_replicated_shared(a, b, c, L: tj.constexpr):
    a_tile = tj.alloc_shared((1, 1), tj.float32)
    tj.copy(a_tile, a[0:1, 0:1])
    b_tile = tj.alloc_shared((1, 1), tj.float32)
    tj.copy(b_tile, b[0:1, 0:1])
    acc = tj.alloc_shared((1, 1), tj.float32, layout=L)
    tj.copy(acc, c[0:1, 0:1])
    tj.gemm(acc, a_tile, b_tile)
    tj.copy(c[0:1, 0:1], acc)


def test_a_shared_destination_with_copies_on_two_lanes_is_updated_once():
    """Shared memory stores only the base of a replicated layout: one thread accumulates
    into it (every copy's owner did, racing: the layouts fuzzer found it)."""
    c = torch.ones(1, 1)
    gemm_into_replicated_shared[(1,)](torch.full((1, 1), 2.0), torch.full((1, 1), 3.0), c,
                                      L=REPLICATED_ON_TWO_LANES, num_warps=1)
    assert c.item() == 7.0
