"""kernels.hopper_gemm: the warp-specialized TMA + wgmma GEMM against torch on the CPU at
ragged shapes (M, N, K tiles masked by TMA's out-of-bounds fill, C's edge tiles clipped by
its TMA store; both CPU lowerings, the
per-thread one executing the IR the cuda target prints), one and two consumer warpgroups;
its sm_90a build through NVRTC (the PTX instructions that matter, no spills, the register
count); and the errors of its Python entry point."""
import pytest
import torch
from e2e_helpers import assert_guard_intact, guarded, wgmma_groups_in_flight
from support.gpu import needs_nvdisasm, needs_nvrtc, sass

import tilejit as tj
from tilejit.kernels import hopper_gemm
from tilejit.kernels.hopper_gemm import (TILE_CONFIGS, hopper_gemm_config, hopper_gemm_kernel,
                                        persistent_ctas, register_split, tuned_grid,
                                        tuned_hopper_gemm)

# small tiles keep the CPU runs short; K = 200 leaves a partial last K step
SMALL = dict(block_m=64, block_n=32, block_k=32, stages=3)


def _operands(m, n, k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ragged_gemm_matches_torch(dtype):
    a, b = _operands(130, 72, 200, dtype)
    name = str(dtype).removeprefix("torch.")
    out, whole = guarded((130, 72), name, pad=8)    # rows of 80 elements: 16-byte multiples
    assert hopper_gemm(a, b, out, config=SMALL) is out
    torch.testing.assert_close(out, (a.float() @ b.float()).to(dtype))
    assert_guard_intact(whole, (130, 72), name)     # the clipped TMA stores stay inside


def test_out_defaults_to_the_operands_dtype_or_takes_float32():
    a, b = _operands(64, 32, 48, torch.bfloat16, seed=2)
    out = hopper_gemm(a, b, config=SMALL)
    assert out.dtype == torch.bfloat16 and out.shape == (64, 32)
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    wide = hopper_gemm(a, b, torch.zeros(64, 32), config=SMALL)   # f32 C: the accumulator as is
    torch.testing.assert_close(wide, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


def test_two_consumer_warpgroups_split_the_rows():
    """block_m=128: warpgroups 1 and 2 each own 64 rows; out= is written in place, the
    stage count (2) is below the K steps (4), so the ring wraps and the phases alternate."""
    a, b = _operands(150, 40, 256, torch.float16, seed=1)
    out = torch.full((150, 40), -1.0, dtype=torch.float16)
    result = hopper_gemm(a, b, out, config=dict(block_m=128, block_n=32, block_k=64, stages=2))
    assert result is out
    torch.testing.assert_close(out, (a.float() @ b.float()).half())


@pytest.mark.parametrize("sm_count", [2, 3])
def test_persistent_ctas_walk_more_tiles_than_ctas(sm_count):
    """4 x 3 tiles (M, N ragged) over 2 or 3 CTAs: each CTA's rings and their phases run on
    across its tiles (7 K steps a tile over 3 stages: a tile starts mid-ring), and a tile's
    C staging waits for the previous tile's TMA store to have read it."""
    a, b = _operands(200, 80, 200, torch.bfloat16, seed=3)
    out, whole = guarded((200, 80), "bfloat16", pad=8)
    hopper_gemm(a, b, out, config=SMALL, sm_count=sm_count)
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    assert_guard_intact(whole, (200, 80), "bfloat16")
    grid, _ = hopper_gemm_config(a, b, ctas=sm_count, **SMALL)
    assert grid == (sm_count,)


def test_a_persistent_launch_keeps_one_cta_an_sm_or_one_a_tile():
    assert persistent_ctas("cpu") is None           # the CPU has no SMs to fill
    assert persistent_ctas("cpu", sm_count=132) == 132
    assert persistent_ctas("cuda", persistent=False) is None
    a, b = _operands(64, 32, 64, torch.float16)
    assert hopper_gemm_config(a, b, ctas=132, **SMALL)[0] == (1,)   # never more than tiles
    with pytest.raises(ValueError, match="sm_count=0: a persistent launch needs at least one"):
        hopper_gemm(a, b, config=SMALL, sm_count=0)


@pytest.mark.parametrize("sm_count", [None, 4])
def test_a_2x1_cluster_shares_b_by_multicast(sm_count):
    """3 M tiles (odd: the last pair's second CTA computes a tile wholly past M, which TMA
    reads as zeros and its store clips away) by 3 N tiles; each CTA of a pair loads its
    half of B's tile for both; one CTA a tile, or 2 clusters walking the pairs."""
    a, b = _operands(130, 72, 200, torch.float16, seed=4)
    out, whole = guarded((130, 72), "float16", pad=8)
    hopper_gemm(a, b, out, config=dict(SMALL, cluster_m=2), sm_count=sm_count)
    torch.testing.assert_close(out, (a.float() @ b.float()).half())
    assert_guard_intact(whole, (130, 72), "float16")
    grid, options = hopper_gemm_config(a, b, ctas=sm_count, cluster_m=2, **SMALL)
    assert grid == ((4,) if sm_count else (12,)) and options["cluster"] == (2, 1, 1)


def test_the_tile_configs_fit_a_ctas_shared_memory_and_registers():
    a, b = (torch.empty(8192, 8192, dtype=torch.bfloat16, device="meta") for _ in range(2))
    for tile in TILE_CONFIGS:
        hopper_gemm_config(a, b, **tile)
    with pytest.raises(ValueError, match=r"4 stages of 256 x 64 and 64 x 256 tiles plus C's "
                                         r"256 x 256 staging need 524384 bytes of shared "
                                         r"memory: a CTA has 232448"):
        hopper_gemm_config(a, b, block_m=256, block_n=256, out_dtype=torch.float32)


def test_the_autotuner_times_the_configs_once_per_shape_bucket():
    """A do_bench that runs each config once and reports the second as the faster: it
    wins; M = 50 shares M = 64's bucket (no timing), M = 80 is timed again."""
    configs = (SMALL, dict(block_m=64, block_n=64, block_k=32, stages=2))
    timings = iter([2.0, 1.0] * 2)

    def bench(launch):
        launch()
        return next(timings)

    tuned = tuned_hopper_gemm(configs, do_bench=bench, cache_results=False)
    for m in (64, 50, 80):
        a, b = _operands(m, 64, 96, torch.bfloat16, seed=m)
        out = torch.empty(m, 64, dtype=torch.bfloat16)
        tuned[tuned_grid(m, 64, None)](a, b, out, 96)
        torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
        assert tuned.best_config.kwargs["BN"] == 64
    with pytest.raises(StopIteration):      # both timings of each bucket were used
        next(timings)


def test_the_dispatch_picks_tma_and_wgmma():
    a, b = _operands(64, 32, 64, torch.bfloat16)
    grid, options = hopper_gemm_config(a, b, **SMALL)
    compiled = hopper_gemm_kernel.compile(a, b, torch.empty(64, 32, dtype=torch.bfloat16), 64,
                                          simt=True, **options)
    rules = [(r.primitive, r.rule) for r in compiled.dispatch_log]
    assert rules.count(("copy_async", "tma")) == 3      # A, B loads; C's store
    assert rules.count(("gemm_async", "wgmma")) == 2    # a tile's first K step, the others
    assert rules.count(("copy", "vec")) == 1    # the accumulator staged in column pairs
    assert grid == (1,) and options["num_warps"] == 8


@pytest.mark.parametrize("args, options, error, message", [
    ((torch.zeros(8, 8), torch.zeros(8, 8)), {}, TypeError, r"float16 or two bfloat16"),
    ((torch.zeros(8, 16, dtype=torch.half), torch.zeros(8, 16, dtype=torch.half)), {},
     ValueError, r"\[M, K\] by \[K, N\], got \(8, 16\) and \(8, 16\)"),
    ((torch.zeros(64, 64, dtype=torch.half), torch.zeros(64, 64, dtype=torch.half)),
     dict(block_m=96, consumers=2), ValueError, r"multiple of 64 rows"),
    ((torch.zeros(64, 64, dtype=torch.half), torch.zeros(64, 64, dtype=torch.half)),
     dict(block_k=8), ValueError, r"16 bytes: the shared ring needs a multiple of 32"),
    ((torch.zeros(64, 64, dtype=torch.half), torch.zeros(64, 64, dtype=torch.half)),
     dict(block_m=192, consumers=3), ValueError,
     r"3 consumer warpgroups at 232 registers a thread and a producer at 40 need 94208 "
     r"registers: the CTA's pool holds 65536"),
    ((torch.zeros(64, 0, dtype=torch.half), torch.zeros(0, 64, dtype=torch.half)), {},
     ValueError, r"K = 0: the kernel multiplies at least one K step"),
    ((torch.zeros(64, 64, dtype=torch.half), torch.zeros(64, 64, dtype=torch.half)),
     dict(cluster_m=4), ValueError, r"cluster_m=4: hopper_gemm runs clusters of 1 or 2 CTAs"),
    ((torch.zeros(64, 64, dtype=torch.half), torch.zeros(64, 64, dtype=torch.half)),
     dict(cluster_m=2, block_k=24), ValueError, r"block_k rows between the pair: it must be "
                                                r"a multiple of 16"),
])
def test_bad_arguments_are_explained(args, options, error, message):
    with pytest.raises(error, match=message):
        hopper_gemm(*args, config=options or None)


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_sm90a_build_holds_tma_wgmma_and_mbarrier_waits_without_spills(dtype):
    compiled = _sm90a_build(dtype)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    kind = "bf16" if dtype == torch.bfloat16 else "f16"
    wgmma = [line for line in ptx if line.startswith("wgmma.mma_async")]
    # 64 / 16 K steps for each of the two consumers, m64n128k16 with f32 accumulators, at
    # two sites: a tile's first K step (accum=False) and the others
    assert len(wgmma) == 16 and all(f".m64n128k16.f32.{kind}.{kind}" in w for w in wgmma)
    assert any(line.startswith("cp.async.bulk.tensor.2d.shared::cluster.global") and
               "mbarrier::complete_tx::bytes" in line for line in ptx)
    # the epilogue: fenced shared tiles stored by TMA, each consumer waiting for its group
    assert sum(line.startswith("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group")
               for line in ptx) == 4       # 2 consumers x two 64-column slabs
    assert ptx.count("cp.async.bulk.wait_group 0;") == 2
    assert ptx.count("fence.proxy.async.shared::cta;") == 2
    assert any(line.startswith("mbarrier.try_wait") for line in ptx)
    # the staging tile is handed back by the `stored` mbarrier alone: no CTA barrier
    assert not [line for line in ptx if line.startswith(("bar.sync", "barrier.sync"))]
    assert any(line.startswith("wgmma.fence") for line in ptx)
    # each consumer keeps its K step's group in flight while it waits for the next stage
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 2
    assert wgmma_groups_in_flight(compiled) == []
    # the accumulator staged for the TMA store two columns at a time: 2 consumers x 32
    # pairs of a thread's 64 values, no element stores
    staging = [line.split()[0] for line in ptx if line.startswith("st.shared")]
    assert staging == ["st.shared.v2.u16"] * 64
    # the producer gives registers back, each consumer claims them
    assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 232;") == 2
    meta = compiled.metadata
    assert meta["spill_bytes"] == 0 and meta["stack_frame_bytes"] == 0
    # launched with the SM's registers shared out over 384 threads (ptxas gives a kernel
    # using setmaxnreg all its launch bounds allow): the CTA's pool, in which setmaxnreg
    # moves registers, holds the limits (else the consumers' inc would wait forever)
    producer, consumer = register_split(2)
    assert meta["registers"] == 168
    assert 128 * (producer + 2 * consumer) <= 384 * meta["registers"]
    assert [(t["param"], t["box"], t["swizzle"]) for t in meta["tensor_maps"]] == [
        ("A", [128, 64], 128), ("B", [64, 64], 128), ("C", [64, 64], 128)]


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
@pytest.mark.parametrize("tile", TILE_CONFIGS[1:], ids=str)
def test_every_tuned_config_builds_without_spills_with_groups_in_flight(tile):
    compiled = _sm90a_build(torch.bfloat16, tile=tile)
    assert compiled.metadata["spill_bytes"] == 0 and compiled.metadata["registers"] == 168
    assert wgmma_groups_in_flight(compiled) == []


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
def test_an_f32_c_is_staged_by_st_shared_v2_f32():
    compiled = _sm90a_build(torch.bfloat16, out=torch.float32)
    staging = [line.strip().split()[0] for line in compiled.asm["ptx"].splitlines()
               if line.strip().startswith("st.shared")]
    assert staging == ["st.shared.v2.f32"] * 64
    assert compiled.metadata["spill_bytes"] == 0


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
def test_the_sm90a_cluster_build_multicasts_b_and_releases_stages_remotely():
    compiled = _sm90a_build(torch.bfloat16, cluster_m=2)
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    loads = [line for line in ptx if line.startswith("cp.async.bulk.tensor.2d.shared::cluster")]
    # A's tile; B's half [32, 128] for each rank (constant rows of the swizzled ring), in
    # two boxes of 64 columns (a 128-byte swizzle span)
    assert len(loads) == 5 and sum(".multicast::cluster [" in line for line in loads) == 4
    # the barrier after init and the one before leaving
    assert ptx.count("barrier.cluster.arrive;") == 2 and ptx.count("barrier.cluster.wait;") == 2
    assert any(line.startswith("mapa.") for line in ptx)
    # each consumer releases a stage in the other CTA at its two release sites
    assert sum(line.startswith("mbarrier.arrive.release.cluster.shared::cluster.b64")
               for line in ptx) == 2 * 2
    assert wgmma_groups_in_flight(compiled) == []
    meta = compiled.metadata
    assert meta["spill_bytes"] == 0 and meta["stack_frame_bytes"] == 0
    # each CTA's B box is half the tile's rows: 32 of BK = 64
    assert [(t["param"], t["box"]) for t in meta["tensor_maps"]] == [
        ("A", [128, 64]), ("B", [32, 64]), ("C", [64, 64])]


@needs_nvrtc
@needs_nvdisasm
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
def test_the_sm90a_sass_holds_hgmma_utmaldg_and_utmastg(tmp_path):
    text = sass(_sm90a_build(torch.bfloat16).asm["cubin"], tmp_path)
    assert "HGMMA.64x128x16.F32" in text and "UTMALDG" in text and "UTMASTG" in text


def _sm90a_build(dtype, out=None, cluster_m=1, tile=None):
    m, n, k = 8192, 4096, 4096      # meta tensors and specs: nothing is allocated
    _, options = hopper_gemm_config(torch.empty(m, k, dtype=dtype, device="meta"),
                                    torch.empty(k, n, dtype=dtype, device="meta"), out_dtype=out,
                                    **(tile or dict(cluster_m=cluster_m)))
    dt = tj.bfloat16 if dtype == torch.bfloat16 else tj.float16
    specs = [tj.TensorSpec(shape, dt, device="cuda") for shape in ((m, k), (k, n))]
    specs.append(tj.TensorSpec((m, n), tj.float32 if out == torch.float32 else dt, device="cuda"))
    return hopper_gemm_kernel.compile(*specs, k, target="cuda", arch="sm_90a", **options)
