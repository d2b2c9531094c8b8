"""A coroutine unit's private tiles are its own across suspends (targets/cpu/frames.py
``CoroFrame.take_stack``): LLVM's coroutine split kept a tile written one element per
loop iteration, between warp shuffles, on the stack every unit shares (seen at the O0 of
the per-thread mode; O2 kept it apart); and its frame is aligned for the vectors LLVM keeps
there across a suspend (a 64-byte AVX-512 splat stored by an aligned move crashed the
unit when the frame came from malloc)."""
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


@tj.kernel
def scaled_row_max_between_waits(x, out, steps, scale):
    """A fused ``max(t * scale)``: the scale, a kernel argument splat to a vector, is loop
    invariant, so LLVM keeps the splat in the coroutine frame across each barrier wait."""
    ready = tj.alloc_barriers(1)
    if tj.thread_id() == 0:
        tj.mbarrier_init(ready[0], 1)
    tj.sync()
    best = tj.full((64, 1), float("-inf"), tj.float32)
    for j in range(steps):
        if tj.thread_id() == 0:
            tj.mbarrier_arrive(ready[0])
        tj.mbarrier_wait(ready[0], j % 2)
        t = tj.fragment((64, 64), tj.float32)
        tj.copy(t, x[0:64, 0:64])
        best = tj.maximum(best, tj.max(t * scale, axis=1, keep_dims=True))
    tj.copy(out[0:64, 0:1], best)


@pytest.mark.parametrize("simt", [False, True])
def test_vectors_kept_across_suspends_get_an_aligned_frame(simt):
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
    out = torch.zeros(64, 1)
    scaled_row_max_between_waits[(1,)](x, out, 3, 0.5, simt=simt)
    torch.testing.assert_close(out, (x * 0.5).max(1, keepdim=True).values)
    llir = scaled_row_max_between_waits.compile(x, out, 3, 0.5, simt=simt).asm["llir"]
    assert "@malloc(" not in llir and "@aligned_alloc(" in llir   # frames: coro.align
