"""A coroutine unit's private tiles are its own across suspends (targets/cpu/frames.py
``CoroFrame.take_stack``): LLVM's coroutine split kept a tile written one element per
loop iteration, between warp shuffles, on the stack every unit shares (seen at the O0 of
the per-thread mode; O2 kept it apart)."""
import pytest
import torch

import tilejit as tj


@tj.kernel
def written_between_shuffles(x, out, N: tj.constexpr):
    lane = tj.lane_id()
    mine = tj.alloc_local((N,), tj.float32)
    for i in tj.range(0, x.shape[1]):
        value = x[lane, i]
        mine[i] = value + tj.shuffle(value, 1, mode="xor")
    for i in tj.range(0, N):
        out[lane, i] = mine[i]


@pytest.mark.parametrize("simt", [False, True])
def test_a_private_tile_written_across_suspends_stays_the_units_own(simt):
    x = torch.randn(32, 4)
    out = torch.zeros(32, 4)
    written_between_shuffles[(1,)](x, out, N=4, num_warps=1, simt=simt)
    partner = torch.arange(32) ^ 1
    torch.testing.assert_close(out, x + x[partner])
