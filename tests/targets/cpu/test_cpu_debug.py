"""Debug mode: bounds checks on every global, shared, local and barrier access (reported
as LaunchError with kernel, buffer, index and source line), NaN-filled fresh memory."""
import numpy as np
import pytest
from cpu_kernels import LOCAL, SHARED, KernelBuilder, matrix, vector

from tilejit.errors import LaunchError
from tilejit.ir.types import f32, i32, i64
from tilejit.knobs import knobs


def copy_one_too_far() -> KernelBuilder:
    with KernelBuilder("copy", x=vector(), out=vector()) as kb:
        x, out = kb.p["x"], kb.p["out"]
        end = kb.op("add", kb.buffer_dim(x, 0), kb.c(1, i64))
        with kb.loop(kb.c(0, i64), end) as (i,):
            kb.line(21)
            value = kb.load(x, [i])
            kb.line(22)
            kb.store(out, value, [i])
    return kb


def test_global_out_of_bounds_load():
    x, out = np.ones(37, np.float32), np.zeros(40, np.float32)
    with pytest.raises(LaunchError) as info:
        copy_one_too_far().run(1, [x, out], debug=True)
    message = str(info.value)
    assert "kernel 'copy'" in message and "load of global buffer 'x'" in message
    assert "index [37] outside shape [37]" in message and info.value.line == 21
    np.testing.assert_array_equal(out[:37], 1)  # everything before the fault ran


def test_debug_from_knob_and_no_checks_without_it():
    with knobs.scoped(debug=True):
        artifact = copy_one_too_far().compile()
    assert artifact.meta["debug"] and artifact.meta["sites"]
    assert not copy_one_too_far().compile(debug=False, bounds_check=False).meta["sites"]


def test_native_accesses_are_checked_by_default_and_the_knob_turns_that_off():
    x, out = np.ones(37, np.float32), np.zeros(40, np.float32)
    with pytest.raises(LaunchError, match=r"index \[37\] outside shape \[37\]"):
        copy_one_too_far().run(1, [x, out], debug=False)
    with knobs.scoped(bounds_check=False):
        assert not copy_one_too_far().compile(debug=False).meta["sites"]


def test_two_dimensional_index_is_reported():
    with KernelBuilder("rows", a=matrix(), out=vector()) as kb:
        row = kb.cast(kb.tid("cta_id"), i64)
        kb.line(8)
        kb.store(kb.p["out"], kb.load(kb.p["a"], [row, kb.buffer_dim(kb.p["a"], 1)]), [row])
    with pytest.raises(LaunchError, match=r"index \[0, 6\] outside shape \[4, 6\]") as info:
        kb.run(4, [np.zeros((4, 6), np.float32), np.zeros(4, np.float32)], debug=True)
    assert info.value.line == 8


def test_shared_out_of_bounds_store_names_buffer_and_thread():
    with KernelBuilder("smem", num_warps=2, out=vector()) as kb:
        tile = kb.alloc(SHARED, f32, (10,))
        tile.name_hint = "tile"
        kb.line(30)
        kb.store(tile, kb.c(1.0, f32), [kb.tid("thread_id")])
    with pytest.raises(LaunchError, match=r"store of shared buffer 'tile': index \[10\] outside "
                                          r"shape \[10\] in CTA 0 \(thread unit 10\)") as info:
        kb.run(3, [np.zeros(1, np.float32)], debug=True)
    assert info.value.line == 30


def test_local_out_of_bounds():
    with KernelBuilder("locals", out=vector()) as kb:
        scratch = kb.alloc(LOCAL, i32, (5,))
        scratch.name_hint = "scratch"
        with kb.loop(kb.c(0), kb.c(6)) as (j,):
            kb.line(44)
            kb.store(scratch, j, [j])
    expected = r"local buffer 'scratch': index \[5\] outside shape \[5\]"
    with pytest.raises(LaunchError, match=expected):
        kb.run(2, [np.zeros(1, np.float32)], debug=True)


def test_barrier_index_out_of_bounds():
    with KernelBuilder("bars", out=vector()) as kb:
        bar = kb.alloc_barrier(2)
        bar.name_hint = "bars"
        kb.mbarrier_init(bar, kb.c(2), kb.c(1))
    expected = r"barrier buffer 'bars': index \[2\] outside shape \[2\]"
    with pytest.raises(LaunchError, match=expected):
        kb.run(1, [np.zeros(1, np.float32)], debug=True)


@pytest.mark.parametrize("granularity", [None, "thread"])
def test_fresh_shared_and_local_memory_is_nan(granularity):
    with KernelBuilder("fresh", num_warps=1, out=vector()) as kb:
        tile, scratch = kb.alloc(SHARED, f32, (4,)), kb.alloc(LOCAL, f32, (3,))
        with kb.loop(kb.c(0), kb.c(3)) as (j,):
            kb.store(kb.p["out"], kb.load(tile, [j]), [j])
            kb.store(kb.p["out"], kb.load(scratch, [j]), [kb.op("add", j, kb.c(3))])
    out = np.zeros(6, np.float32)
    kb.run(1, [out], debug=True, granularity=granularity)
    assert np.isnan(out).all()
