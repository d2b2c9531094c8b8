"""SIMT mode's race detector (``tilejit/targets/cpu/race.py``): vector clocks per thread and
shadow records per shared element turn an unsynchronized cross-thread access into a
LaunchError naming the buffer, the element, both threads and both lines; correct kernels
(barriers, mbarrier pipelines, flags) run without a false race.

The sync-hazards pass refuses (or, with ``auto_sync``, repairs) the missing-barrier kernels
at compile time, so the detector is exercised on the IR a GPU would run if that barrier were
missing: the frontend's IR of the kernel (``compiled.asm["ir"]``, before any pass) run
through every pass but ``sync-hazards`` and compiled as SIMT mode compiles it. A wrong
mbarrier phase is a race the pass cannot see (it does not compare phases): that kernel
goes through the normal path.
"""
import inspect

import pytest
import torch

import test_e2e_native as native
import test_e2e_pipeline as pipeline
import tilejit as tj
from tilejit.ir import parse_kernel
from tilejit.layout.fragments import mma_accumulator_layout
from tilejit.knobs import knobs
from tilejit.passes.pipeline import PIPELINE, run_pipeline
from tilejit.targets.backend import get_backend
from tilejit.targets.cpu import jit
from tilejit.targets.cpu.backend import SIMT_OPT_LEVEL

# Each test compiles its kernels per thread itself (the detector's mode), or checks both.
pytestmark = pytest.mark.team_once_only("chooses the per-thread lowering itself")


def line_of(fn, text: str) -> int:
    """The source line of ``fn`` (a kernel or function) holding ``text``."""
    fn = getattr(fn, "fn", fn)
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def without_sync_hazards(kernel, *args, **kwargs):
    """The CPU module of ``kernel`` as SIMT mode builds it, minus the barriers the
    sync-hazards pass inserts."""
    text = kernel.compile(*args, simt=True, **kwargs).asm["ir"]
    backend = get_backend("cpu")
    backend.register()
    passes = [name for name, _ in PIPELINE if name != "sync-hazards"]
    lowered, _ = run_pipeline(parse_kernel(text), passes=passes,
                              target_passes=backend.passes)
    return jit.load(jit.compile(lowered, granularity="thread", opt_level=SIMT_OPT_LEVEL))


def checked(kernel) -> dict:
    """The backend metadata of ``kernel``'s last binary, which ran the detector."""
    meta = kernel.compiled_kernels()[-1].metadata["backend"]
    assert meta["granularity"] == "thread" and meta["race_check"]
    return meta


@tj.kernel(simt=True)
def neighbours(x, out, N: tj.constexpr, SHIFT: tj.constexpr, SYNC: tj.constexpr):
    s = tj.alloc_shared((N,), tj.float32)
    t = tj.thread_id()
    s[t] = x[t]                                   # write
    if SYNC:
        tj.sync()
    out[t] = s[(t + SHIFT) % N]                   # read


WRITE, READ = line_of(neighbours, "# write"), line_of(neighbours, "# read")


def test_a_missing_barrier_is_a_race_naming_both_threads_and_lines():
    """Thread 0 reads s[1] before thread 1 writes it (write after read)."""
    x, out = torch.arange(32.0), torch.zeros(32)
    module = without_sync_hazards(neighbours, x, out, N=32, SHIFT=1, SYNC=False, num_warps=1)
    assert module.meta["race_check"]
    with pytest.raises(tj.LaunchError) as info:
        module.launch((1,), [x, out])
    message = str(info.value)
    assert (f"kernel 'neighbours': data race on shared buffer 's' element 1 in CTA 0: "
            f"thread 0 read it at line {READ} and thread 1 wrote it at line {WRITE} with no "
            f"barrier between (add tj.sync(), or a barrier that orders these threads, "
            f"between lines {WRITE} and {READ})") in message
    assert info.value.line == WRITE


def test_a_read_after_another_threads_write_is_a_race():
    """Thread 1 reads s[0], which thread 0 wrote with no barrier since."""
    x, out = torch.arange(32.0), torch.zeros(32)
    module = without_sync_hazards(neighbours, x, out, N=32, SHIFT=31, SYNC=False, num_warps=1)
    with pytest.raises(tj.LaunchError, match=rf"data race on shared buffer 's' element 0 in "
                       rf"CTA 0: thread 0 wrote it at line {WRITE} and thread 1 read it at "
                       rf"line {READ} ") as info:
        module.launch((1,), [x, out])
    assert info.value.line == READ


def test_every_cta_and_multi_dimensional_elements():
    """The race is found in each CTA's own shadow; a 2-d buffer names its indices."""
    @tj.kernel(simt=True)
    def rows(x, out):
        s = tj.alloc_shared((4, 32), tj.float32)
        t = tj.thread_id()
        s[t // 32, t % 32] = x[tj.cta_id(0) * 128 + t]
        out[tj.cta_id(0) * 128 + t] = s[(t // 32 + 1) % 4, t % 32]

    x, out = torch.arange(256.0), torch.zeros(256)
    module = without_sync_hazards(rows, x, out)
    with pytest.raises(tj.LaunchError, match=r"element \[1, 0\] in CTA 0: thread 0 read it "
                       r".* and thread 32 wrote it"):
        module.launch((2,), [x, out], workers=1)


def test_with_the_barrier_there_is_no_race():
    x, out = torch.arange(64.0), torch.zeros(64)
    for shift in (1, 63):
        neighbours[(1,)](x, out, N=64, SHIFT=shift, SYNC=True, num_warps=2)
        checked(neighbours)
        torch.testing.assert_close(out, torch.roll(x, -shift))
    neighbours[(1,)](x, out, N=64, SHIFT=1, SYNC=False, num_warps=2)   # auto_sync's barrier
    checked(neighbours)
    torch.testing.assert_close(out, torch.roll(x, -1))


def test_the_detector_is_off_without_bounds_checks_and_outside_simt_mode():
    x, out = torch.arange(32.0), torch.zeros(32)
    compiled = neighbours.compile(x, out, N=32, SHIFT=1, SYNC=True, num_warps=1, simt=False)
    assert not compiled.metadata["backend"]["race_check"]
    with knobs.scoped(bounds_check=False):
        meta = neighbours.compile(x, out, N=32, SHIFT=1, SYNC=True, num_warps=1).metadata
    assert not meta["backend"]["race_check"]


def test_one_warp_storing_an_element_from_several_lanes_is_no_race_two_warps_are():
    @tj.kernel(simt=True)
    def broadcast(out, WARPS: tj.constexpr):
        s = tj.alloc_shared((1,), tj.float32)
        if tj.warp_id() < WARPS:
            s[0] = tj.warp_id() * 1.0                             # store
        tj.sync()
        if tj.thread_id() == 0:
            out[0] = s[0]

    out = torch.full((1,), -1.0)
    broadcast[(1,)](out, WARPS=1, num_warps=2)
    checked(broadcast)
    assert out.item() == 0.0
    line = line_of(broadcast, "# store")
    with pytest.raises(tj.LaunchError, match=rf"element 0 in CTA 0: thread 31 wrote it at line "
                       rf"{line} and thread 32 wrote it at line {line} .*between two runs of "
                       rf"line {line}\)"):
        broadcast[(1,)](out, WARPS=2, num_warps=2)


def test_a_thread_that_returned_counts_as_arrived_at_later_barriers():
    @tj.kernel(simt=True)
    def leave_early(x, out):
        s = tj.alloc_shared((64,), tj.float32)
        t = tj.thread_id()
        s[t] = x[t]
        if t >= 32:
            return
        tj.sync()
        out[t] = s[t + 32]

    x, out = torch.arange(64.0), torch.zeros(32)
    leave_early[(1,)](x, out, num_warps=2)
    checked(leave_early)
    torch.testing.assert_close(out, x[32:])


@tj.kernel(simt=True)
def handoff(x, out, PARITY: tj.constexpr):
    full = tj.alloc_barriers(1)
    ring = tj.alloc_shared((32,), tj.float32)
    if tj.thread_id() == 0:
        tj.mbarrier_init(full[0], 1)
    tj.sync()
    if tj.warp_id() == 0:
        if tj.elect_sync():
            tj.mbarrier_arrive_expect_tx(full[0], 32 * 4)
            tj.copy_async(ring, x[0:32], barrier=full[0])        # produce
    else:
        tj.mbarrier_wait(full[0], PARITY)   # 0 waits for the copy; 1 passes at once
        out[tj.lane_id()] = ring[tj.lane_id()]                    # consume


def test_an_mbarrier_orders_an_async_copy_before_its_consumers():
    x, out = torch.arange(32.0), torch.zeros(32)
    handoff[(2,)](x, out, PARITY=0, num_warps=2)
    checked(handoff)
    torch.testing.assert_close(out, x)


def test_a_wait_on_the_wrong_phase_is_a_race_the_static_pass_cannot_see():
    x, out = torch.arange(32.0), torch.zeros(32)
    with pytest.raises(tj.LaunchError, match=rf"data race on shared buffer 'ring' element 31 "
                       rf"in CTA 0: thread 63 read it at line {line_of(handoff, '# consume')} "
                       rf"and thread 0 wrote it at line {line_of(handoff, '# produce')} "):
        handoff[(1,)](x, out, PARITY=1, num_warps=2)


@pytest.mark.parametrize("stages,copy,mma,async_mma,tiles", [
    (2, None, None, False, dict(BM=32, BK=24)),
    (3, "tma", "wgmma", True, pipeline.WGMMA_TILES),
])
def test_warp_specialized_pipelines_raise_no_false_race(stages, copy, mma, async_mma, tiles):
    M, N, K = 40, 40, 64    # rows of a multiple of 16 bytes, as TMA's tensor maps need
    gen = torch.Generator().manual_seed(stages)
    A = torch.randn(M, K, generator=gen).half()
    B = torch.randn(K, N, generator=gen).half()
    C = torch.full((M, N), -1.0)
    grid = (tj.cdiv(M, tiles["BM"]), 2)
    pipeline.ws_gemm[grid](A, B, C, K, STAGES=stages, BN=32, COPY=copy, MMA=mma,
                           ASYNC_MMA=async_mma, num_warps=8, simt=True, **tiles)
    checked(pipeline.ws_gemm)
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-4, atol=1e-4)


def test_a_flag_threads_spin_on_orders_what_was_written_before_it():
    x, out = torch.tensor([3.0]), torch.zeros(2)
    native.flag_handoff[(2,)](x, out, simt=True)
    checked(native.flag_handoff)
    assert out.tolist() == [7.0, 1.0]


def test_atomics_never_race_with_each_other_but_do_with_plain_accesses():
    @tj.kernel(simt=True)
    def histogram(x, out, PLAIN: tj.constexpr):
        bins = tj.alloc_shared((4,), tj.int32)
        t = tj.thread_id()
        if t < 4:
            bins[t] = 0
        tj.sync()
        tj.atomic_add(bins[x[t] % 4], 1)                          # atomic
        if PLAIN:
            bins[t % 4] = 7                                       # plain write
        tj.sync()
        if t < 4:
            out[t] = bins[t]

    x = torch.arange(64, dtype=torch.int32)
    out = torch.zeros(4, dtype=torch.int32)
    histogram[(1,)](x, out, PLAIN=False, num_warps=2)
    checked(histogram)
    assert out.tolist() == [16] * 4
    module = without_sync_hazards(histogram, x, out, PLAIN=True, num_warps=2)
    with pytest.raises(tj.LaunchError, match="data race on shared buffer 'bins'") as info:
        module.launch((1,), [x, out])
    assert f"updated (atomically) it at line {line_of(histogram, '# atomic')}" in str(info.value)
    assert f"wrote it at line {line_of(histogram, '# plain write')}" in str(info.value)


@tj.kernel(simt=True)
def staged_mma(A, B, C, L: tj.constexpr):
    a_tile = tj.alloc_shared((32, 16), A.dtype)
    b_tile = tj.alloc_shared((16, 8), B.dtype)
    acc = tj.fragment((32, 8), tj.float32, layout=L)
    tj.fill(acc, 0.0)
    tj.copy(a_tile, A[0:32, 0:16])            # stage A
    tj.copy(b_tile, B[0:16, 8:16])
    tj.gemm(acc, a_tile, b_tile)              # mma
    tj.copy(C[0:32, 0:8], acc)


def test_ldmatrix_rows_are_read_by_the_lanes_that_name_them():
    """The mma family's ldmatrix reads each matrix row as the lane that supplies its
    address; without the barrier after staging A, lane 16 reads A[0, 8:16], which thread 0
    wrote (the copy is cyclic over the CTA's 64 threads)."""
    a, b, c = torch.randn(32, 16).half(), torch.randn(16, 16).half(), torch.zeros(32, 8)
    layout = mma_accumulator_layout((32, 8), 2)
    staged_mma[(1,)](a, b, c, L=layout, num_warps=2)
    checked(staged_mma)
    torch.testing.assert_close(c, a.float() @ b[:, 8:].float(), rtol=1e-4, atol=1e-4)
    (gemm,) = [r for r in staged_mma.compile(a, b, c, L=layout, num_warps=2).dispatch_log
               if r.primitive == "gemm"]
    assert gemm.note.startswith("A by ldmatrix.x4")
    module = without_sync_hazards(staged_mma, a, b, c, L=layout, num_warps=2)
    with pytest.raises(tj.LaunchError, match=rf"data race on shared buffer 'a_tile' element "
                       rf"\[0, 8\] in CTA 0: thread 0 wrote it at line "
                       rf"{line_of(staged_mma, '# stage A')} and thread 16 read it at line "
                       rf"{line_of(staged_mma, '# mma')} "):
        module.launch((1,), [a, b, c])


@tj.kernel(simt=True)
def restaged(X, Y, L: tj.constexpr):
    frag = tj.fragment((32, 16), X.dtype, layout=L)
    tile = tj.alloc_shared((32, 16), X.dtype)
    tj.copy(frag, X[0:32, 0:16])
    tj.copy(tile, frag)                       # stmatrix
    tj.copy(Y[0:32, 0:16], tile)              # read back


def test_stmatrix_rows_are_written_by_the_lanes_that_name_them():
    """The stmatrix family's rows are written by the lanes that supply their addresses;
    without the barrier before the cyclic read-back, thread 31 (warp 0) reads tile[31, 8],
    which lane 31 of warp 1 (thread 63: row 7 of its fourth matrix) writes."""
    x, y = torch.randn(32, 16).half(), torch.zeros(32, 16).half()
    layout = mma_accumulator_layout((32, 16), 2)
    restaged[(1,)](x, y, L=layout, num_warps=2)
    checked(restaged)
    assert torch.equal(y, x)
    (store,) = [r for r in restaged.compile(x, y, L=layout, num_warps=2).dispatch_log
                if r.line == line_of(restaged, "# stmatrix")]
    assert (store.rule, store.note) == ("stmatrix", "stmatrix.x4 (1 per thread)")
    module = without_sync_hazards(restaged, x, y, L=layout, num_warps=2)
    with pytest.raises(tj.LaunchError, match=rf"data race on shared buffer 'tile' element "
                       rf"\[31, 8\] in CTA 0: thread 31 read it at line "
                       rf"{line_of(restaged, '# read back')} and thread 63 wrote it at line "
                       rf"{line_of(restaged, '# stmatrix')} "):
        module.launch((1,), [x, y])
