"""Thread-block clusters: ``tj.cluster_sync()``, ``tj.cta_rank_in_cluster()`` and
distributed shared memory (``tj.remote``) on the CPU in both lowerings, where the CTAs of a
cluster run together; the race detector sees accesses of another CTA's shared memory; a
cluster whose CTAs wait on each other forever is a LaunchError, not a hang. The cuda
target prints them as ``barrier.cluster``, ``%cluster_ctarank``, ``mapa`` and
``mbarrier.arrive...shared::cluster`` (NVRTC, sm_90a) and refuses them before sm_90 at the
kernel's line."""
import inspect

import pytest
import torch

import tilejit as tj
from support.gpu import needs_gpu, needs_nvrtc
from tilejit.errors import CompilationError, LaunchError

N = 64


def line_of(kernel, text: str) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@tj.kernel
def exchange(x, out, N: tj.constexpr):
    """Each CTA of a 2-CTA cluster writes twice its row of x into the other's shared
    buffer; after the cluster barrier each stores what it received."""
    s = tj.alloc_shared((N,), tj.float32)
    other = tj.remote(s, 1 - tj.cta_rank_in_cluster())
    with tj.thread():
        t = tj.thread_id()
        if t < N:
            other[t] = x[tj.cta_id(0), t] * 2.0
    tj.cluster_sync()
    with tj.thread():
        t = tj.thread_id()
        if t < N:
            out[tj.cta_id(0), t] = s[t]
    tj.cluster_sync()   # no CTA leaves while the other may still write its memory


@tj.kernel
def handoff(x, out, N: tj.constexpr):
    """CTA rank 1 copies its row of x into CTA 0's shared tile and arrives on CTA 0's
    mbarrier; CTA 0 waits on it and stores the tile."""
    s = tj.alloc_shared((N,), tj.float32)
    bars = tj.alloc_barriers(1)
    with tj.thread():
        if tj.thread_id() == 0:
            tj.mbarrier_init(bars[0], 1)
    tj.cluster_sync()   # CTA 0's barrier is initialized before CTA 1 arrives on it
    if tj.cta_rank_in_cluster() == 1:
        tj.copy(tj.remote(s, 0), x[tj.cta_id(0), 0:N])
        tj.sync()
        with tj.thread():
            if tj.thread_id() == 0:
                tj.mbarrier_arrive(tj.remote(bars, 0)[0])
    else:
        tj.mbarrier_wait(bars[0], 0)
        tj.copy(out[tj.cta_id(0) // 2, 0:N], s)
    tj.cluster_sync()


@tj.kernel
def racy(x, out, N: tj.constexpr):
    """exchange without its first cluster barrier."""
    s = tj.alloc_shared((N,), tj.float32)
    other = tj.remote(s, 1 - tj.cta_rank_in_cluster())
    with tj.thread():
        t = tj.thread_id()
        if t < N:
            other[t] = x[tj.cta_id(0), t] * 2.0
    with tj.thread():
        t = tj.thread_id()
        if t < N:
            out[tj.cta_id(0), t] = s[t]
    tj.cluster_sync()


@tj.kernel
def stuck(out):
    """CTA rank 1 waits on an mbarrier nobody arrives on, before the cluster barrier that
    CTA 0 waits at."""
    bars = tj.alloc_barriers(1)
    with tj.thread():
        if tj.thread_id() == 0:
            tj.mbarrier_init(bars[0], 1)
    if tj.cta_rank_in_cluster() == 1:
        tj.mbarrier_wait(bars[0], 0)
    tj.cluster_sync()
    with tj.thread():
        if tj.thread_id() == 0:
            out[tj.cta_id(0)] = 1


@tj.kernel
def ranks(out):
    """out[cta] = rank in the cluster + 10 * the x coordinate in it."""
    with tj.thread():
        if tj.thread_id() == 0:
            out[tj.cta_id(1), tj.cta_id(0)] = \
                tj.cta_rank_in_cluster() + 10 * tj.cta_id_in_cluster(0)


@tj.kernel
def halves(x, out, BM: tj.constexpr, BN: tj.constexpr, MASK: tj.constexpr = 0b11):
    """The CTAs of a 2-CTA cluster each TMA-load one half of the cluster's BM x BN tile of x,
    multicast to the CTAs of MASK; each then sums the rows of the whole tile."""
    bar = tj.alloc_barriers(1)
    tile = tj.alloc_shared((BM, BN), x.dtype)
    rank = tj.cta_rank_in_cluster()
    H: tj.constexpr = BM // 2
    if tj.thread_id() == 0:
        tj.mbarrier_init(bar[0], 1)
    tj.cluster_sync()   # every CTA's barrier is initialized before a half lands in it
    if tj.thread_id() == 0:
        tj.mbarrier_arrive_expect_tx(bar[0], BM * BN * x.dtype.itemsize)   # both halves
        row = (tj.cta_id(0) // 2) * BM + rank * H
        tj.copy_async(tile[rank * H:rank * H + H, 0:BN], x[row:row + H, 0:BN], barrier=bar[0],
                      dispatch="tma", multicast=MASK)
    tj.mbarrier_wait(bar[0], 0)
    v = tj.fragment((BM, BN), x.dtype)
    tj.copy(v, tile)
    sums = tj.fragment((BM,), x.dtype)
    tj.reduce(sums, v, "sum", axis=1)
    tj.copy(out[tj.cta_id(0), 0:BM], sums)
    tj.cluster_sync()


@tj.kernel
def cluster_gemm(A, B, C, K, STAGES: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr,
                 BK: tj.constexpr, REMOTE: tj.constexpr = True):
    """C = A @ B in 2 x 1 clusters, as a warp-specialized pipeline: the two CTAs of a
    cluster share B's tiles, each loading half of each (TMA multicast to both); a stage is
    refilled once the consumers of both CTAs released it (REMOTE: each consumer thread
    also arrives on the other CTA's ``empty`` barrier)."""
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    a_ring = tj.alloc_shared((STAGES, BM, BK), A.dtype)
    b_ring = tj.alloc_shared((STAGES, BK, BN), B.dtype)
    rank = tj.cta_rank_in_cluster()
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], (2 if REMOTE else 1) * 128)
    tj.cluster_sync()
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    HK: tj.constexpr = BK // 2
    if tj.warpgroup_id() == 0:
        if tj.warp_id() == 0 and tj.elect_sync():
            for k in range(tj.cdiv(K, BK)):
                s = k % STAGES
                tj.mbarrier_wait(empty[s], ((k // STAGES) % 2) ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], (BM * BK + BK * BN) * A.dtype.itemsize)
                tj.copy_async(a_ring[s], A[m0:m0 + BM, k * BK:(k + 1) * BK],
                              barrier=full[s], dispatch="tma")
                kb = k * BK + rank * HK
                tj.copy_async(b_ring[s, rank * HK:rank * HK + HK, :],
                              B[kb:kb + HK, n0:n0 + BN], barrier=full[s], dispatch="tma",
                              multicast=0b11)
    else:
        with tj.warpgroup():
            acc = tj.fragment((BM, BN), tj.float32)
            tj.fill(acc, 0.0)
            for k in range(tj.cdiv(K, BK)):
                s = k % STAGES
                tj.mbarrier_wait(full[s], (k // STAGES) % 2)
                tj.gemm(acc, a_ring[s, :, :], b_ring[s, :, :])
                tj.mbarrier_arrive(empty[s])
                if REMOTE:
                    tj.mbarrier_arrive(tj.remote(empty, 1 - rank)[s])
            tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)
    tj.cluster_sync()


GEMM = {"STAGES": 2, "BM": 16, "BN": 32, "BK": 16, "num_warps": 8, "cluster": (2, 1)}


def swapped_pairs(x: torch.Tensor) -> torch.Tensor:
    """Rows 2i and 2i + 1 swapped: what each CTA of a 2-CTA cluster receives."""
    return x.view(-1, 2, x.shape[1]).flip(1).reshape(x.shape)


def test_two_ctas_exchange_rows_through_distributed_shared_memory():
    x = torch.randn(6, N)
    out = torch.zeros(6, N)
    exchange[(6,)](x, out, N=N, cluster=(2,), target="cpu")
    torch.testing.assert_close(out, swapped_pairs(x * 2.0), rtol=0, atol=0)


def test_a_copy_and_an_mbarrier_arrival_reach_another_cta():
    x = torch.randn(4, N)
    out = torch.zeros(2, N)
    handoff[(4,)](x, out, N=N, cluster=(2,), target="cpu")
    torch.testing.assert_close(out, x[1::2], rtol=0, atol=0)


def test_ranks_count_x_fastest_within_the_cluster():
    out = torch.full((4, 6), -1, dtype=torch.int32)
    ranks[(6, 4)](out, cluster=(3, 2), target="cpu")
    x, y = torch.meshgrid(torch.arange(6), torch.arange(4), indexing="xy")
    expected = (x % 3) + 3 * (y % 2) + 10 * (x % 3)
    assert torch.equal(out, expected.to(torch.int32))


@tj.kernel
def ring(out):
    """In 2 x 2 clusters each CTA sends its rank and coordinates to the CTA of the next
    rank."""
    s = tj.alloc_shared((1,), tj.int32)
    me = tj.cta_rank_in_cluster()
    following = tj.remote(s, (me + 1) % 4)
    with tj.thread():
        if tj.thread_id() == 0:
            following[0] = me + 100 * (tj.cta_id(0) + 10 * tj.cta_id(1))
    tj.cluster_sync()
    with tj.thread():
        if tj.thread_id() == 0:
            out[tj.cta_id(1), tj.cta_id(0)] = s[0]
    tj.cluster_sync()


def test_ranks_name_the_ctas_of_a_two_dimensional_cluster():
    out = torch.zeros(4, 6, dtype=torch.int32)
    ring[(6, 4)](out, cluster=(2, 2), target="cpu")
    expected = torch.zeros(4, 6, dtype=torch.int32)
    for y in range(4):
        for x in range(6):
            rank = (x % 2) + 2 * (y % 2)
            sender = (rank - 1) % 4                       # x fastest within the cluster
            sx, sy = x - x % 2 + sender % 2, y - y % 2 + sender // 2
            expected[y, x] = sender + 100 * (sx + 10 * sy)
    assert torch.equal(out, expected)


def test_a_multicast_tma_load_fills_the_tile_of_every_cta_in_the_mask():
    x = torch.randn(48, 32)
    out = torch.zeros(6, 16)
    halves[(6,)](x, out, BM=16, BN=32, cluster=(2,), target="cpu")
    expected = x.view(3, 16, 32).sum(2).repeat_interleave(2, 0)
    torch.testing.assert_close(out, expected)
    compiled = halves.compile(x, out, BM=16, BN=32, cluster=(2,), target="cpu")
    assert {r.rule for r in compiled.dispatch_log if r.primitive == "copy_async"} == {"tma"}


def test_a_pipelined_2x1_cluster_gemm_shares_b_through_multicast():
    A, B = torch.randn(64, 64), torch.randn(64, 32)
    C = torch.zeros(64, 32)
    cluster_gemm[(4, 1)](A, B, C, 64, target="cpu", **GEMM)
    torch.testing.assert_close(C, A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.team_once_only("the race detector runs per thread (simt=True)")
def test_a_stage_refilled_before_the_other_ctas_consumers_released_it_is_a_race():
    A, B = torch.randn(64, 128), torch.randn(128, 32)
    with pytest.raises(LaunchError, match=r"data race on shared buffer 'b_ring of another "
                                          r"CTA' .* of the cluster's CTA of rank 0 read it .* "
                                          r"of the cluster's CTA of rank 1 wrote it") as info:
        cluster_gemm[(4, 1)](A, B, torch.zeros(64, 32), 128, REMOTE=False, target="cpu",
                             simt=True, **GEMM)
    assert info.value.loc.line == line_of(cluster_gemm, "tj.copy_async(b_ring")


def test_without_multicast_to_it_a_ctas_barrier_never_completes():
    """Both halves land in CTA 0 alone: CTA 1 waits for bytes nobody sends, and CTA 0 for
    CTA 1 at the last cluster barrier (the first waiting unit is reported)."""
    with pytest.raises(LaunchError, match=r"deadlock in CTA 0 .*every unit is waiting .*the "
                                          r"first waits at cluster_sync\(\)") as info:
        halves[(2,)](torch.randn(16, 32), torch.zeros(2, 16), BM=16, BN=32, MASK=0b01,
                     cluster=(2,), target="cpu")
    assert info.value.loc.line > line_of(halves, "tj.mbarrier_wait")


def test_multicast_is_a_tma_loads():
    @tj.kernel
    def plain(x, out):
        bar = tj.alloc_barriers(1)
        tile = tj.alloc_shared((16, 32), x.dtype)
        if tj.thread_id() == 0:
            tj.copy_async(tile, x[0:16, 0:32], barrier=bar[0], multicast=3)

    with pytest.raises(CompilationError, match="multicast= is a TMA load's: pass "
                                               "dispatch=\"tma\" and barrier=") as info:
        plain[(2,)](torch.zeros(16, 32), torch.zeros(1), cluster=(2,), target="cpu")
    assert info.value.loc.line == line_of(plain, "tj.copy_async")

    @tj.kernel
    def masked(x, out, MASK: tj.constexpr):
        bar = tj.alloc_barriers(1)
        tile = tj.alloc_shared((16, 32), x.dtype)
        if tj.thread_id() == 0:
            tj.copy_async(tile, x[0:16, 0:32], barrier=bar[0], dispatch="tma", multicast=MASK)

    with pytest.raises(CompilationError, match="multicast= is a compile-time mask of CTA ranks"):
        masked[(2,)](torch.zeros(16, 32), torch.zeros(1), MASK=1 << 16, cluster=(2,),
                     target="cpu")


def test_a_cluster_waiting_on_itself_is_a_deadlock_error_not_a_hang():
    out = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(LaunchError, match=r"kernel 'stuck': deadlock in CTA 0 .*every unit is "
                                          r"waiting.*cluster_sync\(\) \(cluster barrier\)") as info:
        stuck[(4,)](out, cluster=(2,), target="cpu")
    assert info.value.loc.line == line_of(stuck, "tj.cluster_sync()")


def test_a_rank_outside_the_cluster_is_an_error():
    @tj.kernel
    def far(x, out, N: tj.constexpr):
        s = tj.alloc_shared((N,), tj.float32)
        other = tj.remote(s, 2)
        with tj.thread():
            if tj.thread_id() == 0:
                other[0] = 1.0
        tj.cluster_sync()

    with pytest.raises(LaunchError, match=r"out-of-bounds tj.remote .*index \[2\] outside "
                                          r"shape \[2\]"):
        far[(2,)](torch.zeros(2, N), torch.zeros(2, N), N=N, cluster=(2,), target="cpu")


def test_only_an_arrival_reaches_another_ctas_mbarrier():
    @tj.kernel
    def waits_remotely(out):
        bars = tj.alloc_barriers(1)
        tj.mbarrier_wait(tj.remote(bars, 0)[0], 0)

    with pytest.raises(CompilationError, match="mbarrier_wait on another CTA's mbarriers "
                                               r"\(cluster_map, tj.remote\): only "
                                               "mbarrier_arrive reaches them") as info:
        waits_remotely[(2,)](torch.zeros(2), cluster=(2,), target="cpu")
    assert info.value.loc.line == line_of(waits_remotely, "tj.mbarrier_wait")


def test_remote_maps_only_shared_buffers():
    @tj.kernel
    def maps_global(x):
        y = tj.remote(x, 0)
        with tj.thread():
            y[0] = 1.0

    with pytest.raises(CompilationError, match="cluster_map maps a shared buffer this CTA "
                                               "allocates") as info:
        maps_global[(2,)](torch.zeros(2), cluster=(2,), target="cpu")
    assert info.value.loc.line == line_of(maps_global, "tj.remote")


@pytest.mark.team_once_only("the race detector runs per thread (simt=True)")
def test_the_race_detector_sees_another_ctas_accesses():
    x = torch.randn(4, N)
    with pytest.raises(LaunchError, match=r"data race on shared buffer 'other' element 0 in "
                                          r"CTA 1: thread 0 of the cluster's CTA of rank 0 read "
                                          r"it at line \d+ and thread 0 of the cluster's CTA of "
                                          r"rank 1 wrote it .* \(add tj.cluster_sync\(\)") as info:
        racy[(4,)](x, torch.zeros(4, N), N=N, cluster=(2,), target="cpu", simt=True)
    assert info.value.loc.line == line_of(racy, "other[t] =")
    out = torch.zeros(4, N)   # with the barrier: no race, the detector on
    exchange[(4,)](x, out, N=N, cluster=(2,), target="cpu", simt=True)
    torch.testing.assert_close(out, swapped_pairs(x * 2.0), rtol=0, atol=0)
    meta = exchange.compiled_kernels()[-1].metadata["backend"]
    assert meta["race_check"] and meta["cluster_ctas"] == 2


# ------------------------------------------------------------------------------ cuda
def _ptx(kernel, *specs, arch="sm_90a", **kwargs):
    compiled = kernel.compile(*specs, target="cuda", arch=arch, **kwargs)
    return [line.strip() for line in compiled.asm["ptx"].splitlines()]


def _spec(*shape):
    return tj.TensorSpec(shape, tj.float32, device="cuda")


@pytest.mark.team_once_only("compiles for the cuda target")
@needs_nvrtc
def test_cuda_prints_cluster_barrier_ranks_and_distributed_shared_memory(fresh_cache):
    ptx = _ptx(exchange, _spec(4, N), _spec(4, N), N=N, cluster=(2,))
    assert any(line.startswith("mov.u32") and line.endswith(", %cluster_ctarank;")
               for line in ptx)
    assert ptx.count("barrier.cluster.arrive;") == 2 and ptx.count("barrier.cluster.wait;") == 2
    assert any(line.startswith("mapa.u64") for line in ptx)
    ids = _ptx(ranks, tj.TensorSpec((4, 6), tj.int32, device="cuda"), cluster=(3, 2))
    assert any(line.endswith(", %cluster_ctaid.x;") for line in ids)   # not blockIdx % 3
    gemm = _ptx(cluster_gemm, _spec(64, 64), _spec(64, 32), _spec(64, 32), 64,
                **{k: v for k, v in GEMM.items()})
    assert sum(".multicast::cluster [" in line for line in gemm) == 1
    assert sum(line.startswith("mbarrier.arrive.release.cluster.shared::cluster.b64")
               for line in gemm) == 1
    remote = _ptx(handoff, _spec(4, N), _spec(2, N), N=N, cluster=(2,))
    assert any(line.startswith("mapa.shared::cluster.u32") for line in remote)
    assert any(line.startswith("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [")
               for line in remote)


@pytest.mark.team_once_only("compiles for the cuda target")
@needs_nvrtc
def test_cuda_prints_a_multicast_tma_load(fresh_cache):
    ptx = _ptx(halves, _spec(48, 32), _spec(6, 16), BM=16, BN=32, cluster=(2,))
    (load,) = [line for line in ptx if line.startswith("cp.async.bulk.tensor")]
    assert load.startswith("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
                           "complete_tx::bytes.multicast::cluster [")
    assert load.endswith("], %rs1;") or load.split(", ")[-1].startswith("%rs")   # ctaMask
    assert any(line.startswith("mov.u16") and line.endswith(", 3;") for line in ptx)


@pytest.mark.team_once_only("compiles for the cuda target")
@needs_nvrtc
def test_cuda_refuses_cluster_ops_before_sm_90_at_their_line(fresh_cache):
    with pytest.raises(CompilationError, match=r"tj.cluster_sync\(\) needs thread-block "
                                               r"clusters \(sm_90 or later\); compiling for "
                                               "sm_80") as info:
        stuck.compile(tj.TensorSpec((4,), tj.int32, device="cuda"), target="cuda",
                      arch="sm_80")
    assert info.value.loc.line == line_of(stuck, "tj.cluster_sync()")
    with pytest.raises(CompilationError, match=r"tj.remote\(...\) needs thread-block "
                                               "clusters") as info:
        exchange.compile(_spec(4, N), _spec(4, N), N=N, target="cuda", arch="sm_80")
    assert info.value.loc.line == line_of(exchange, "tj.remote")


@pytest.mark.team_once_only("compiles for the cuda target")
@needs_nvrtc
def test_cuda_refuses_ranks_outside_the_cluster(fresh_cache):
    """A GPU faults or hangs on them; the CPU reports them at run time."""
    with pytest.raises(CompilationError, match=r"multicast=0x3 names CTA rank 1, outside the "
                                               r"kernel's cluster of 1 CTA \(cluster=\(1, 1, "
                                               r"1\)\)") as info:
        halves.compile(_spec(48, 32), _spec(6, 16), BM=16, BN=32, target="cuda")
    assert info.value.loc.line == line_of(halves, "tj.copy_async")


# ------------------------------------------------------------------------------ on a GPU
@pytest.mark.gpu
@pytest.mark.team_once_only("runs on the GPU")
@needs_gpu
def test_the_cluster_kernels_on_the_gpu_match_torch():
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need sm_90")
    x = torch.randn(6, N, device="cuda")
    out = torch.zeros(6, N, device="cuda")
    exchange[(6,)](x, out, N=N, cluster=(2,))
    torch.testing.assert_close(out, swapped_pairs(x * 2.0), rtol=0, atol=0)
    out = torch.zeros(3, N, device="cuda")
    handoff[(6,)](x, out, N=N, cluster=(2,))
    torch.testing.assert_close(out, x[1::2], rtol=0, atol=0)
    x = torch.randn(48, 32, device="cuda")
    sums = torch.zeros(6, 16, device="cuda")
    halves[(6,)](x, sums, BM=16, BN=32, cluster=(2,))
    torch.testing.assert_close(sums, x.view(3, 16, 32).sum(2).repeat_interleave(2, 0))
    A, B = torch.randn(64, 64, device="cuda"), torch.randn(64, 32, device="cuda")
    C = torch.zeros(64, 32, device="cuda")
    cluster_gemm[(4, 1)](A, B, C, 64, **GEMM)
    torch.testing.assert_close(C, A @ B, rtol=1e-3, atol=1e-3)
