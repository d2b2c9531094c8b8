"""Fragments laid out over threads, per thread: each thread holds only the elements its
layout gives it (private storage over the layout's memory axis, a GPU's registers), and
tile primitives reach them through the ``Owned`` distribution. Both lowerings against torch
(the conftest runs every test ``[team_once]`` and ``[per_thread]``); a native element access
that may reach another thread's element is a located error per thread."""
import pytest
import torch

import tilejit as tj
from tilejit.errors import ScopeError
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
