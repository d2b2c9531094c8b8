"""The ``tma`` family of copy_async (passes/rules/copy_tma.py), per thread: the largest box
whose storage the shared allocation keeps exactly as TMA writes it (row-major, its chunks
swizzled as the allocation's ComposeLayout says), at most 256 per dim; each refusal says
which condition fails."""
import pytest
import torch

import tilejit as tj
from tilejit.layout import ComposeLayout, S, SwizzleMode, TileLayout, smem_layout


@tj.kernel
def load(x, SHAPE: tj.constexpr, LAYOUT: tj.constexpr = None, ELECT: tj.constexpr = True):
    bar = tj.alloc_barriers(1)
    tile = tj.alloc_shared(SHAPE, x.dtype, layout=LAYOUT)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    if ELECT:
        if tj.thread_id() == 0:
            tj.copy_async(tile, x[0:SHAPE[0], 0:SHAPE[1]], barrier=bar[0], dispatch="tma")
    else:
        tj.copy_async(tile, x[0:SHAPE[0], 0:SHAPE[1]], barrier=bar[0], dispatch="tma")


@tj.kernel
def staged(x, STAGES: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr):
    bar = tj.alloc_barriers(1)
    ring = tj.alloc_shared((STAGES, BM, BN), x.dtype)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
        for k in range(3):
            tj.copy_async(ring[k % STAGES], x[0:BM, 0:BN], barrier=bar[0], dispatch="tma")


def _boxes(kernel, *args, **kw):
    compiled = kernel.compile(*args, simt=True, **kw)
    return [tuple(r.shape) for r in compiled.dispatch_log if r.primitive == "copy_async"]


@pytest.mark.parametrize("dtype, shape, swizzle, box", [
    (torch.float32, (16, 32), None, (16, 32)),
    (torch.float16, (64, 128), SwizzleMode.B128, (64, 64)),   # 128-byte rows: two slabs
    (torch.float16, (16, 64), SwizzleMode.B64, (16, 32)),
    (torch.bfloat16, (8, 32), SwizzleMode.B32, (8, 16)),
    (torch.float32, (512, 4), None, (256, 4)),                # box dims are at most 256
    (torch.int8, (8, 64), SwizzleMode.B64, (8, 64)),
])
def test_the_largest_box_the_layout_stores(dtype, shape, swizzle, box):
    x = torch.zeros(shape, dtype=dtype)
    layout = None if swizzle is None else smem_layout(shape, x.dtype, swizzle)
    assert _boxes(load, x, SHAPE=shape, LAYOUT=layout) == [box]


def _decline(kernel, *args, **kw) -> str:
    with pytest.raises(tj.DispatchError) as info:
        kernel.compile(*args, simt=True, **kw)
    assert info.value.line is not None
    return str(info.value)


def test_a_column_major_tile_is_no_box():
    x = torch.zeros(16, 32)
    why = _decline(load, x, SHAPE=(16, 32), LAYOUT=TileLayout(S[(16, 32):(1, 16)]))
    assert "box [16, 32]: the tile does not store boxes of [16, 32] row-major" in why
    assert "smaller boxes)" in why


def test_a_swizzle_of_other_chunks_is_no_tma_mode():
    x = torch.zeros(8, 64, dtype=torch.float16)
    layout = ComposeLayout(2, 3, 3, TileLayout(S[(8, 64):(64, 1)]))   # 8-byte chunks
    why = _decline(load, x, SHAPE=(8, 64), LAYOUT=layout)
    assert "dst's swizzle (2,3,3) is no TMA swizzle mode for f16 elements" in why


def test_every_thread_issuing_is_refused():
    why = _decline(load, torch.zeros(16, 32), SHAPE=(16, 32), ELECT=False)
    assert "a tma copy is issued by one thread of its team (here 128)" in why


def test_a_ring_slot_off_128_bytes_is_refused():
    x = torch.zeros(8, 8)
    assert _boxes(staged, x, STAGES=2, BM=4, BN=8) == [(4, 8)]        # 128-byte slots
    why = _decline(staged, x, STAGES=2, BM=3, BN=8)                     # 96-byte slots
    assert "run-time start in dim 0 does not move the tile by whole 128-byte periods" in why


def test_inner_rows_of_other_than_16_bytes_have_no_box():
    x = torch.zeros(8, 6)   # 24-byte rows: no box of a 16-byte multiple divides them
    why = _decline(load, x, SHAPE=(8, 6))
    assert "no TMA box divides [8, 6] with an inner dim of a multiple of 16 bytes" in why
