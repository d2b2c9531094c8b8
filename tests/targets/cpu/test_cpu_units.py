"""Per-thread native code on simulated units: thread ids at each granularity, divergent
ifs, per-thread locals, CTA barriers, warp shuffles, elect, atomics and their scaling."""
import numpy as np
import pytest
from cpu_kernels import FRAGMENT, LOCAL, SHARED, KernelBuilder, vector

from tilejit.ir.types import TeamKind, f32, i32

NUM_WARPS = 3  # 96 threads: nothing is a power of two


def test_thread_granularity_ids_and_divergent_if():
    """out[t] = 1000*warp + lane in warp 1, lane elsewhere (an if with results)."""
    with KernelBuilder("ids", num_warps=NUM_WARPS, out=vector(i32)) as kb:
        tid, lane = kb.tid("thread_id"), kb.tid("lane_id")
        g = kb.op("add", kb.op("mul", kb.tid("cta_id"), kb.tid("num_threads")), tid)
        branch, then_block, else_block = kb.if_filter(kb.filter("warp_id", 1, 2), "warp", 1, 2,
                                                      result_types=[i32])
        with kb.insert_into(then_block):
            kb.yield_([kb.op("add", kb.op("mul", kb.tid("warp_id"), kb.c(1000)), lane)])
        with kb.insert_into(else_block):
            kb.yield_([lane])
        kb.store(kb.p["out"], branch.result, [g])
    out = np.zeros(5 * 96, np.int32)
    module = kb.run(5, [out])
    assert module.meta["granularity"] == "thread" and module.meta["units_per_cta"] == 96
    t = np.arange(96)
    expected = np.where(t // 32 == 1, 1000 + t % 32, t % 32)
    np.testing.assert_array_equal(out.reshape(5, 96), np.tile(expected, (5, 1)))


@pytest.mark.parametrize("forced", [None, "thread"])
def test_warp_granularity(forced):
    """Warp ids only: one unit per warp (or per thread when forced) gives the same result."""
    with KernelBuilder("warps", num_warps=5, out=vector(i32)) as kb:
        w = kb.tid("warp_id")
        g = kb.op("add", kb.op("mul", kb.tid("cta_id"), kb.c(5)), w)
        value = kb.op("add", kb.op("mul", w, kb.c(10)), kb.tid("warpgroup_id"))
        kb.store(kb.p["out"], value, [g])
        with kb.when(kb.filter("warp_id_in_wg", 0, 1), "warp_in_wg", 0, 1):
            kb.store(kb.p["out"], kb.op("add", value, kb.c(5000)), [g])
    out = np.zeros(3 * 5, np.int32)
    module = kb.run(3, [out], granularity=forced)
    assert module.meta["granularity"] == (forced or "warp")
    w = np.arange(5)
    np.testing.assert_array_equal(out, np.tile(w * 10 + w // 4 + 5000 * (w % 4 == 0), 3))


def test_warpgroup_granularity_counts_uneven_groups():
    """6 warps = warpgroups of 4 and 2 warps; an atomic add by every thread is scaled."""
    with KernelBuilder("wg", num_warps=6, counts=vector(i32)) as kb:
        kb.atomic("add", kb.p["counts"], kb.c(1), [kb.tid("warpgroup_id")])
    counts = np.zeros(2, np.int32)
    module = kb.run(4, [counts])
    assert module.meta["granularity"] == "warpgroup"
    np.testing.assert_array_equal(counts, [4 * 128, 4 * 64])


def test_cta_granularity_atomic_counts_every_thread():
    with KernelBuilder("count", num_warps=NUM_WARPS, counter=vector(i32)) as kb:
        kb.atomic("add", kb.p["counter"], kb.c(1), [kb.c(0)])
    counter = np.zeros(1, np.int32)
    kb.run(7, [counter])
    assert counter[0] == 7 * 96


@pytest.mark.parametrize("forced", [None, "thread"])
def test_elect_sync_arrives_once_per_warp(forced):
    with KernelBuilder("elect", num_warps=NUM_WARPS, counter=vector(i32)) as kb:
        kb.tid("warp_id")
        with kb.when(kb.elect_sync(), "elect"):
            kb.atomic("add", kb.p["counter"], kb.c(1), [kb.c(0)])
        with kb.when(kb.filter("warp_id", 0, 1), "warp", 0, 1):
            kb.atomic("add", kb.p["counter"], kb.c(1000), [kb.c(0)])
    counter = np.zeros(1, np.int32)
    module = kb.run(2, [counter], granularity=forced)
    assert module.meta["granularity"] == (forced or "warp")
    assert counter[0] == 2 * (NUM_WARPS + 32 * 1000)


def test_local_buffer_per_thread():
    """Each thread fills its own local buffer and sums it; units never share locals."""
    with KernelBuilder("locals", num_warps=2, out=vector(f32)) as kb:
        tid = kb.tid("thread_id")
        scratch = kb.alloc(LOCAL, f32, (5,))
        with kb.loop(kb.c(0), kb.c(5)) as (j,):
            kb.store(scratch, kb.cast(kb.op("add", tid, j), f32), [j])
        kb.sync()  # every unit suspends with its locals live
        with kb.loop(kb.c(0), kb.c(5), inits=[kb.c(0.0, f32)]) as (j, acc):
            kb.yield_([kb.op("add", acc, kb.load(scratch, [j]))])
        kb.store(kb.p["out"], kb.last_loop.result, [tid])
    out = np.zeros(64, np.float32)
    kb.run(1, [out])
    np.testing.assert_array_equal(out, 5 * np.arange(64) + 10)


def test_sync_between_shared_write_and_read_reverses_each_cta():
    with KernelBuilder("reverse", num_warps=NUM_WARPS, x=vector(), out=vector()) as kb:
        tid, threads = kb.tid("thread_id"), kb.tid("num_threads")
        g = kb.op("add", kb.op("mul", kb.tid("cta_id"), threads), tid)
        tile = kb.alloc(SHARED, f32, (96,))
        kb.store(tile, kb.load(kb.p["x"], [g]), [tid])
        kb.sync()
        kb.store(kb.p["out"], kb.load(tile, [kb.op("sub", kb.c(95), tid)]), [g])
    x = np.random.rand(11 * 96).astype(np.float32)
    out = np.zeros_like(x)
    kb.run(11, [x, out])
    np.testing.assert_array_equal(out.reshape(11, 96), x.reshape(11, 96)[:, ::-1])


def test_warp_reduction_with_xor_shuffles():
    """Butterfly sum over each warp: lane 0 of warp w writes the warp's total."""
    with KernelBuilder("warp_sum", num_warps=NUM_WARPS, x=vector(), out=vector()) as kb:
        g = kb.global_thread_id()
        with kb.loop(kb.c(0), kb.c(5), inits=[kb.load(kb.p["x"], [g])]) as (step, acc):
            offset = kb.op("shr", kb.c(16), step)
            kb.yield_([kb.op("add", acc, kb.warp_shuffle("xor", acc, offset))])
        total = kb.last_loop.result
        warp = kb.op("add", kb.op("mul", kb.tid("cta_id"), kb.c(NUM_WARPS)), kb.tid("warp_id"))
        with kb.when(kb.filter("lane_id", 0, 1), "lane", 0, 1):
            kb.store(kb.p["out"], total, [warp])
    x = np.random.randint(-50, 50, 4 * 96).astype(np.float32)
    out = np.zeros(4 * NUM_WARPS, np.float32)
    kb.run(4, [x, out])
    np.testing.assert_array_equal(out, x.reshape(-1, 32).sum(axis=1))


@pytest.mark.parametrize("mode", ["down", "up", "idx"])
def test_shuffle_modes(mode):
    with KernelBuilder("shfl", num_warps=1, out=vector(i32)) as kb:
        lane = kb.tid("lane_id")
        kb.store(kb.p["out"], kb.warp_shuffle(mode, kb.op("mul", lane, kb.c(3)), kb.c(5)), [lane])
    out = np.zeros(32, np.int32)
    kb.run(1, [out])
    lane = np.arange(32)
    source = {"down": np.where(lane + 5 < 32, lane + 5, lane),
              "up": np.where(lane - 5 >= 0, lane - 5, lane), "idx": np.full(32, 5)}[mode]
    np.testing.assert_array_equal(out, 3 * source)


def test_histogram_with_atomics():
    bins = 37
    with KernelBuilder("hist", num_warps=2, x=vector(i32), hist=vector(i32)) as kb:
        threads = kb.op("mul", kb.tid("num_ctas"), kb.tid("num_threads"))
        start = kb.global_thread_id()
        n = kb.cast(kb.buffer_dim(kb.p["x"], 0), i32)
        with kb.loop(start, n, threads) as (i,):
            kb.atomic("add", kb.p["hist"], kb.c(1), [kb.load(kb.p["x"], [i])])
    x = np.random.randint(0, bins, 100_003).astype(np.int32)
    hist = np.zeros(bins, np.int32)
    kb.run(13, [x, hist])
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=bins))


@pytest.mark.parametrize("op,expected", [("max", 945), ("min", -5), ("xchg", None)])
def test_atomic_max_min_xchg_on_shared_and_global(op, expected):
    with KernelBuilder("atomics", num_warps=NUM_WARPS, out=vector(i32)) as kb:
        tid = kb.tid("thread_id")
        cell = kb.alloc(SHARED, i32, (1,))
        with kb.when(kb.filter("thread_id", 0, 1), "thread", 0, 1):
            kb.store(cell, kb.c(7), [kb.c(0)])
        kb.sync()
        value = kb.op("sub", kb.op("mul", tid, kb.c(10)), kb.c(5))
        kb.atomic(op, cell, value, [kb.c(0)])
        kb.atomic(op, kb.p["out"], value, [kb.c(0)])
        kb.sync()
        with kb.when(kb.filter("thread_id", 0, 1), "thread", 0, 1):
            kb.store(kb.p["out"], kb.load(cell, [kb.c(0)]), [kb.c(1)])
    out = np.array([7, 0], np.int32)
    kb.run(1, [out])
    if expected is None:
        assert out[0] in 10 * np.arange(96) - 5 and out[1] in 10 * np.arange(96) - 5
    else:
        assert list(out) == [expected, expected]


def test_single_region_runs_once_per_team_and_others_wait():
    """Thread units: a warp-team single fills the warp's fragment; every lane reads it."""
    with KernelBuilder("single", num_warps=NUM_WARPS, out=vector(i32), count=vector(i32)) as kb:
        lane, warp = kb.tid("lane_id"), kb.tid("warp_id")
        _, body = kb.team(TeamKind.WARP)
        with kb.insert_into(body):
            frag = kb.alloc(FRAGMENT, i32, (32,))
            with kb.single(TeamKind.WARP):
                with kb.loop(kb.c(0), kb.c(32)) as (j,):
                    kb.store(frag, kb.op("add", kb.op("mul", warp, kb.c(100)), j), [j])
                kb.atomic("add", kb.p["count"], kb.c(1), [kb.c(0)])
            mirrored = kb.load(frag, [kb.op("sub", kb.c(31), lane)])
            kb.store(kb.p["out"], mirrored, [kb.tid("thread_id")])
            kb.yield_()
        with kb.single(TeamKind.CTA):
            kb.atomic("add", kb.p["count"], kb.c(1000), [kb.c(0)])
    out, count = np.zeros(96, np.int32), np.zeros(1, np.int32)
    kb.run(2, [out, count])
    t = np.arange(96)
    np.testing.assert_array_equal(out, (t // 32) * 100 + 31 - t % 32)
    assert count[0] == 2 * (NUM_WARPS + 1000)


def test_single_inline_when_units_cover_the_team():
    """Cta units: a warp-team single stands for every warp of the unit."""
    with KernelBuilder("single_cta", num_warps=NUM_WARPS, count=vector(i32)) as kb:
        with kb.single(TeamKind.WARP):
            kb.atomic("add", kb.p["count"], kb.c(1), [kb.c(0)])
        with kb.single(TeamKind.CTA):
            kb.atomic("add", kb.p["count"], kb.c(100), [kb.c(0)])
    count = np.zeros(1, np.int32)
    kb.run(3, [count])
    assert count[0] == 3 * (NUM_WARPS + 100)


def test_device_print(capfd):
    with KernelBuilder("hello", num_warps=1, x=vector()) as kb:
        kb.device_print("cta {} of {}: x = {}, 100%", [kb.tid("cta_id"), kb.tid("num_ctas"),
                                                        kb.load(kb.p["x"], [kb.c(0)])])
    kb.run(2, [np.array([1.5], np.float32)])
    lines = sorted(capfd.readouterr().out.splitlines())
    assert lines == ["cta 0 of 2: x = 1.5, 100%", "cta 1 of 2: x = 1.5, 100%"]
