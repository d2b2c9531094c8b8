"""copy_async family ``tma`` end to end on the CPU: a TMA load -> compute -> TMA store
kernel against torch (boxes in plain and swizzled shared layouts, ragged edges read as
zeros and never written), a warp-specialized ring; per thread (SIMT mode, the IR the
cuda target prints: ``tma_load_at`` / ``tma_store_at``) a store lands only when
``tj.bulk_wait`` retires its group, so a kernel that forgets to wait loses it, and a
tensor whose rows no tensor map describes is a LaunchError at the copy's line; the race
detector counts a store's reads of its shared tile as in flight until that bulk_wait
(a tile handed back or rewritten before it is a race)."""
import inspect

import pytest
import torch
from e2e_helpers import assert_guard_intact, guarded, make

import tilejit as tj
from tilejit.ir import parse_kernel, verify
from tilejit.layout import SwizzleMode, smem_layout


@tj.kernel
def affine(x, out, BM: tj.constexpr, BN: tj.constexpr, LAYOUT: tj.constexpr = None,
           WAIT: tj.constexpr = True):
    """out = 2 * x + 1, tile by tile: thread 0 loads with TMA, the CTA computes into a
    second shared tile, thread 0 stores it with TMA."""
    bar = tj.alloc_barriers(1)
    tile = tj.alloc_shared((BM, BN), x.dtype, layout=LAYOUT)
    res = tj.alloc_shared((BM, BN), x.dtype, layout=LAYOUT)
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.sync()
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    if tj.thread_id() == 0:
        tj.mbarrier_arrive_expect_tx(bar[0], BM * BN * x.dtype.itemsize)
        tj.copy_async(tile, x[r:r + BM, c:c + BN], barrier=bar[0], dispatch="tma")
    tj.mbarrier_wait(bar[0], 0)
    v = tj.fragment((BM, BN), x.dtype)
    tj.copy(v, tile)
    tj.copy(res, v * 2 + 1)
    tj.fence_proxy_async()
    tj.sync()
    if tj.thread_id() == 0:
        tj.copy_async(out[r:r + BM, c:c + BN], res, dispatch="tma")
        if WAIT:
            tj.bulk_wait(0)


def _copy_boxes(compiled) -> list:
    return [tuple(r.shape) for r in compiled.dispatch_log if r.primitive == "copy_async"]


@pytest.mark.parametrize("name, shape, bm, bn, swizzle, box", [
    ("float32", (45, 72), 16, 32, None, (16, 32)),
    ("float16", (50, 136), 16, 64, SwizzleMode.B128, (16, 64)),
    ("float16", (40, 256), 8, 128, SwizzleMode.B128, (8, 64)),     # two swizzled slabs
    ("bfloat16", (33, 64), 16, 32, SwizzleMode.B64, (16, 32)),
    ("float32", (24, 40), 8, 8, SwizzleMode.B32, (8, 8)),
    ("int8", (20, 48), 8, 32, None, (8, 32)),
])
def test_tma_load_compute_store_matches_torch(name, shape, bm, bn, swizzle, box):
    x = make(shape, name, torch.Generator().manual_seed(7), -4, 4)
    out, whole = guarded(shape, name, pad=16)   # rows of a multiple of 16 bytes
    layout = None if swizzle is None else smem_layout((bm, bn), x.dtype, swizzle)
    grid = (tj.cdiv(shape[0], bm), tj.cdiv(shape[1], bn))
    affine[grid](x, out, BM=bm, BN=bn, LAYOUT=layout)
    expected = (x.double() * 2 + 1).to(x.dtype)
    torch.testing.assert_close(out, expected)
    assert_guard_intact(whole, shape, name)
    compiled = affine.compile(x, out, BM=bm, BN=bn, LAYOUT=layout)
    assert {r.rule for r in compiled.dispatch_log if r.primitive == "copy_async"} == {"tma"}


@pytest.mark.team_once_only("compiles per thread itself (simt=True)")
def test_tma_boxes_in_the_lowered_ir():
    x = torch.zeros(40, 256, dtype=torch.float16)
    layout = smem_layout((8, 128), x.dtype, SwizzleMode.B128)
    compiled = affine.compile(x, x, BM=8, BN=128, LAYOUT=layout, simt=True)
    lowered = compiled.asm["lowered"]
    assert lowered.count("tma_load_at(%tile") == 2          # one per 64-element slab
    assert lowered.count("tma_store_at(%out, %res") == 2
    assert "{box = [8, 64], swizzle = 128}" in lowered
    assert "bulk_commit" in lowered and "bulk_wait {pending = 0}" in lowered
    assert _copy_boxes(compiled) == [(8, 64), (8, 64)]
    assert str(verify(parse_kernel(lowered))) == lowered      # the text round-trips


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_a_missing_bulk_wait_loses_the_store():
    x = torch.arange(16 * 32, dtype=torch.float32).reshape(16, 32)
    out = torch.full_like(x, -1.0)
    affine[(1, 1)](x, out, BM=16, BN=32, WAIT=False, simt=True)
    assert torch.equal(out, torch.full_like(x, -1.0))      # never written back
    affine[(1, 1)](x, out, BM=16, BN=32, WAIT=True, simt=True)
    assert torch.equal(out, 2 * x + 1)


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_rows_no_tensor_map_describes_fail_at_the_copy():
    x = torch.zeros(16, 70)          # rows of 280 bytes: not a multiple of 16
    out = torch.zeros(16, 70)
    with pytest.raises(tj.LaunchError, match=r"no tensor map describes 'x' for tma_load_at .*"
                       r"its stride in dim 0 is 280 bytes, not a multiple of 16") as info:
        affine[(1, 1)](x, out, BM=16, BN=32, simt=True)
    assert info.value.line is not None and "tma_load_at" in str(info.value)


@pytest.mark.team_once_only("compiles per thread itself (simt=True)")
def test_a_tensor_off_16_bytes_is_refused_at_compile_time():
    x = torch.zeros(16 * 32 + 1)[1:].view(16, 32)
    with pytest.raises(tj.DispatchError, match=r"tma +\| src's tensor is not known to start "
                       r"16-byte aligned, as a tensor map's address must") as info:
        affine[(1, 1)](x, torch.zeros(16, 32), BM=16, BN=32, simt=True)
    assert info.value.line is not None


@tj.kernel
def ring(x, out, STAGES: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr, LAYOUT: tj.constexpr):
    """Warp 0 streams row blocks of x through a ring of shared slots with TMA (a run-time
    slot index into a swizzled allocation); warp 1 writes 3 * block - 1 and frees the slot."""
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    slots = tj.alloc_shared((STAGES, BM, BN), x.dtype, layout=LAYOUT)
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], 32)
    tj.sync()
    blocks = tj.cdiv(x.shape[0], BM)
    if tj.warp_id() == 0:
        if tj.elect_sync():
            for k in range(blocks):
                s = k % STAGES
                tj.mbarrier_wait(empty[s], ((k // STAGES) % 2) ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], BM * BN * x.dtype.itemsize)
                tj.copy_async(slots[s], x[k * BM:(k + 1) * BM, 0:BN], barrier=full[s],
                              dispatch="tma")
    else:
        v = tj.fragment((BM, BN), x.dtype)
        for k in range(blocks):
            s = k % STAGES
            tj.mbarrier_wait(full[s], (k // STAGES) % 2)
            with tj.warp():
                tj.copy(v, slots[s])
                tj.copy(out[k * BM:(k + 1) * BM, 0:BN], v * 3 - 1)
            tj.mbarrier_arrive(empty[s])


def test_tma_ring_between_warps():
    x = make((70, 64), "float16", torch.Generator().manual_seed(3), -4, 4)
    out, whole = guarded((70, 64), "float16")
    layout = smem_layout((3, 8, 64), x.dtype, SwizzleMode.B128)
    ring[(1,)](x, out, STAGES=3, BM=8, BN=64, LAYOUT=layout, num_warps=2)
    torch.testing.assert_close(out, (x.double() * 3 - 1).half())
    assert_guard_intact(whole, (70, 64), "float16")


@tj.kernel
def handoff(x, out, PARITY: tj.constexpr):
    """Warp 0 fills the tile with a TMA load; warp 1 waits on the barrier's phase PARITY (0
    waits for the load, 1 passes at once) and reads it."""
    full = tj.alloc_barriers(1)
    tile = tj.alloc_shared((32,), x.dtype)
    if tj.thread_id() == 0:
        tj.mbarrier_init(full[0], 1)
    tj.sync()
    if tj.warp_id() == 0:
        if tj.elect_sync():
            tj.mbarrier_arrive_expect_tx(full[0], 32 * x.dtype.itemsize)
            tj.copy_async(tile, x[0:32], barrier=full[0], dispatch="tma")   # fill
    else:
        tj.mbarrier_wait(full[0], PARITY)
        out[tj.lane_id()] = tile[tj.lane_id()]                               # read


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_reading_a_tma_tile_on_the_wrong_phase_is_a_race():
    x, out = torch.arange(32.0), torch.zeros(32)
    handoff[(1,)](x, out, PARITY=0, num_warps=2, simt=True)
    assert torch.equal(out, x)
    with pytest.raises(tj.LaunchError, match=r"data race on shared buffer 'tile' element \d+ in "
                       r"CTA 0: thread \d+ read it .* and thread 0 wrote it"):
        handoff[(1,)](x, out, PARITY=1, num_warps=2, simt=True)


def test_bulk_wait_needs_compile_time_arguments():
    @tj.kernel
    def bad_wait(x):
        tj.bulk_wait(x.shape[0])

    @tj.kernel
    def bad_read(x):
        tj.bulk_wait(0, read=x.shape[0] > 1)

    for kernel, message in ((bad_wait, r"tj.bulk_wait\(pending\) needs a compile-time int"),
                            (bad_read, r"tj.bulk_wait\(read=\) needs a compile-time bool")):
        with pytest.raises(tj.CompilationError, match=message) as info:
            kernel.compile(torch.zeros(8))
        assert info.value.line is not None and "bulk_wait" in str(info.value)


@tj.kernel
def restaged(x, out, TILES: tj.constexpr, HAND_BACK: tj.constexpr = "after"):
    """out = x, 8 rows a tile: each tile staged by warp 1 into one shared tile and stored
    by warp 0 with TMA, then handed back on ``stored`` (armed once up front, so that every
    tile waits on it) -- hopper_gemm's epilogue, in which that wait sits under ``if j >
    0`` and sync-hazards adds a barrier of its own. HAND_BACK "after" the store's
    bulk_wait; "before" it: the store may still read the tile while the next one is
    staged; "never" waited for: the stager does not wait on ``stored``."""
    staged = tj.alloc_barriers(1)
    stored = tj.alloc_barriers(1)
    tile = tj.alloc_shared((8, 32), x.dtype)
    if tj.thread_id() == 0:
        tj.mbarrier_init(staged[0], 32)
        tj.mbarrier_init(stored[0], 1)
    tj.sync()
    if tj.warp_id() == 1:
        for j in range(TILES):
            if HAND_BACK != "never":
                tj.mbarrier_wait(stored[0], j % 2)
            tj.copy(tile, x[j * 8:(j + 1) * 8, 0:32])              # stage
            tj.fence_proxy_async()
            tj.mbarrier_arrive(staged[0])
    elif tj.elect_sync():
        tj.mbarrier_arrive(stored[0])
        for j in range(TILES):
            tj.mbarrier_wait(staged[0], j % 2)
            tj.copy_async(out[j * 8:(j + 1) * 8, 0:32], tile, dispatch="tma")   # store
            if HAND_BACK == "before":
                tj.mbarrier_arrive(stored[0])
            tj.bulk_wait(0)
            if HAND_BACK == "after":
                tj.mbarrier_arrive(stored[0])


def _restage(hand_back: str):
    x, out = torch.arange(24 * 32.0).reshape(24, 32), torch.zeros(24, 32)
    restaged[(1,)](x, out, TILES=3, HAND_BACK=hand_back, num_warps=2, simt=True)
    return x, out


def _line_of(text: str, kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_a_tma_store_reads_its_tile_until_its_bulk_wait():
    """A tile handed back before the store's bulk_wait is a race: the store's reads are
    recorded at the bulk_wait, after the hand-back, which the next staging waited for.
    (Recorded at the issue, before it, they were ordered: the race went unseen.)"""
    x, out = _restage("after")
    assert torch.equal(out, x)
    store, stage = _line_of("# store", restaged), _line_of("# stage", restaged)
    with pytest.raises(tj.LaunchError, match=(
            rf"data race on shared buffer 'tile' element \[\d+, \d+\] in CTA 0: thread 0 "
            rf"read it at line {store} and thread \d+ wrote it at line {stage} with no "
            r"barrier between")):
        _restage("before")


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_a_staging_tile_never_handed_back_is_refused_at_compile_time():
    """Without the wait on ``stored`` the hazard is sync-hazards': the two warps sit in
    divergent branches, where no barrier of its own fits."""
    with pytest.raises(tj.CompilationError, match=(
            rf"race on shared buffer tile is read at line {_line_of('# store', restaged)} by "
            rf"tj.copy_async .* then written at line {_line_of('# stage', restaged)}")):
        _restage("never")


@tj.kernel
def rewritten_in_flight(x, out):
    """Thread 0 stores a tile with TMA; the CTA rewrites it between barriers before thread 0's
    bulk_wait, while the store may still read it."""
    tile = tj.alloc_shared((8, 32), x.dtype)
    tj.copy(tile, x[0:8, 0:32])
    tj.fence_proxy_async()
    tj.sync()
    if tj.thread_id() == 0:
        tj.copy_async(out[0:8, 0:32], tile, dispatch="tma")   # store
    tj.sync()
    tj.fill(tile, 0.0)                                          # rewrite
    tj.sync()
    if tj.thread_id() == 0:
        tj.bulk_wait(0)


@pytest.mark.team_once_only("launches per thread itself (simt=True)")
def test_a_tile_rewritten_before_its_stores_bulk_wait_is_a_race_despite_barriers():
    x, out = torch.arange(8 * 32.0).reshape(8, 32), torch.zeros(8, 32)
    with pytest.raises(tj.LaunchError, match=(
            rf"data race on shared buffer 'tile' element \[\d+, \d+\] in CTA 0: thread \d+ "
            rf"wrote it at line {_line_of('# rewrite', rewritten_in_flight)} while the TMA "
            rf"store that thread 0 issued at line {_line_of('# store', rewritten_in_flight)} "
            r"could still read it \(.* before the tj.bulk_wait that retires its bulk group")):
        rewritten_in_flight[(1,)](x, out, num_warps=2, simt=True)
