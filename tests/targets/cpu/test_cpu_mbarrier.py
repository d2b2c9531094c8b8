"""mbarriers: a warp-specialized producer/consumer pipeline through a shared ring buffer,
transaction counts of (immediately completing) async copies, and deadlock reports."""
import numpy as np
import pytest
from cpu_kernels import SHARED, KernelBuilder, vector

from tilejit.errors import LaunchError
from tilejit.ir.types import f32

STAGES, CHUNK, ITERS = 3, 10, 7  # each CTA streams ITERS chunks through STAGES slots
PER_CTA = CHUNK * ITERS


def pipeline(use_tx: bool, consumer_iters: int = ITERS) -> KernelBuilder:
    """Warp 0 produces (copies x chunks into ring[s], arrives on full[s]); warp 1 consumes
    (waits full[s], writes 2*ring[s] + 1, arrives on empty[s] with all 32 lanes).

    With ``use_tx`` the producer announces the chunk's bytes with expect_tx(arrive) and
    the "async copy" reports them with mbarrier_complete_tx."""
    with KernelBuilder("pipeline", num_warps=2, x=vector(), out=vector()) as kb:
        x, out = kb.p["x"], kb.p["out"]
        ring = kb.alloc(SHARED, f32, (STAGES, CHUNK))
        full, empty = kb.alloc_barrier(STAGES), kb.alloc_barrier(STAGES)
        full.name_hint, empty.name_hint = "full", "empty"
        is_producer = kb.filter("warp_id", 0, 1)
        base = kb.op("mul", kb.tid("cta_id"), kb.c(PER_CTA))
        with kb.when(is_producer, "warp", 0, 1):
            with kb.when(kb.elect_sync(), "elect"):
                with kb.loop(kb.c(0), kb.c(STAGES)) as (s,):
                    kb.mbarrier_init(full, s, kb.c(1))
                    kb.mbarrier_init(empty, s, kb.c(32))
        kb.sync()

        def stage_and_phase(it):
            phase = kb.op("and", kb.op("floordiv", it, kb.c(STAGES)), kb.c(1))
            return kb.op("mod", it, kb.c(STAGES)), phase

        _, producer, consumer = kb.if_filter(is_producer, "warp", 0, 1)
        with kb.insert_into(producer):
            with kb.loop(kb.c(0), kb.c(ITERS)) as (it,):
                s, phase = stage_and_phase(it)
                kb.line(40)
                kb.mbarrier_wait(empty, s, kb.op("xor", phase, kb.c(1)))
                if use_tx:
                    with kb.when(kb.elect_sync(), "elect"):
                        kb.mbarrier_expect_tx(full, s, kb.c(CHUNK * 4), arrive=True)
                with kb.loop(kb.c(0), kb.c(CHUNK)) as (j,):
                    g = kb.op("add", kb.op("add", base, kb.op("mul", it, kb.c(CHUNK))), j)
                    kb.store(ring, kb.load(x, [g]), [s, j])
                with kb.when(kb.elect_sync(), "elect"):  # the copy was issued once
                    if use_tx:
                        kb.mbarrier_complete_tx(full, s, kb.c(CHUNK * 4))
                    else:
                        kb.mbarrier_arrive(full, s)
            kb.yield_()
        with kb.insert_into(consumer):
            with kb.loop(kb.c(0), kb.c(consumer_iters)) as (it,):
                s, phase = stage_and_phase(it)
                kb.line(50)
                kb.mbarrier_wait(full, s, phase)
                with kb.loop(kb.c(0), kb.c(CHUNK)) as (j,):
                    g = kb.op("add", kb.op("add", base, kb.op("mul", it, kb.c(CHUNK))), j)
                    value = kb.op("add", kb.op("mul", kb.load(ring, [s, j]), kb.c(2.0, f32)),
                                  kb.c(1.0, f32))
                    kb.store(out, value, [g])
                kb.mbarrier_arrive(empty, s)
            kb.yield_()
    return kb


@pytest.mark.parametrize("use_tx", [False, True])
@pytest.mark.parametrize("granularity", [None, "thread"])
def test_producer_consumer_pipeline(use_tx, granularity):
    ctas = 5
    x = np.random.rand(ctas * PER_CTA).astype(np.float32)
    out = np.zeros_like(x)
    module = pipeline(use_tx).run(ctas, [x, out], granularity=granularity)
    assert module.meta["granularity"] == (granularity or "warp")
    np.testing.assert_array_equal(out, 2 * x + 1)


def test_wait_nobody_satisfies_is_a_deadlock_naming_the_barrier():
    with KernelBuilder("stuck", num_warps=2, out=vector()) as kb:
        bar = kb.alloc_barrier(2)
        bar.name_hint = "ready"
        with kb.when(kb.filter("warp_id", 0, 1), "warp", 0, 1):
            kb.mbarrier_init(bar, kb.c(1), kb.c(1))
        kb.sync()
        with kb.when(kb.filter("warp_id", 1, 2), "warp", 1, 2):
            kb.line(77)
            kb.mbarrier_wait(bar, kb.c(1), kb.c(0))
    with pytest.raises(LaunchError) as info:
        kb.run(3, [np.zeros(1, np.float32)])
    message = str(info.value)
    assert "deadlock" in message and "mbarrier_wait on ready index 1" in message
    assert info.value.line == 77


def test_deadlock_with_a_single_unit_per_cta():
    """Cta units run as plain functions: an unsatisfied wait fails at once."""
    with KernelBuilder("stuck_cta", num_warps=4, out=vector()) as kb:
        bar = kb.alloc_barrier(1)
        bar.name_hint = "never"
        kb.mbarrier_init(bar, kb.c(0), kb.c(128))
        kb.line(12)
        kb.mbarrier_wait(bar, kb.c(0), kb.c(0))
    with pytest.raises(LaunchError, match="deadlock.*never") as info:
        kb.run(2, [np.zeros(1, np.float32)])
    assert info.value.line == 12


def test_deadlock_inside_the_pipeline_is_reported_not_hung():
    """A consumer that waits for one chunk more than the producer makes."""
    kb = pipeline(use_tx=False, consumer_iters=ITERS + 1)
    with pytest.raises(LaunchError, match="mbarrier_wait on full") as info:
        kb.run(1, [np.zeros(PER_CTA, np.float32), np.zeros(PER_CTA, np.float32)])
    assert info.value.line == 50
