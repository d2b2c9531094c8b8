"""Vector add and launching: numpy and torch arguments, big grids, 2-D grids, object-code
reload, argument checks, and the vectorized machine code of a simple loop."""
import ctypes
import json
import multiprocessing
import os
import queue
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest
import torch
from cpu_kernels import FRAGMENT, SHARED, KernelBuilder, matrix, vector

from tilejit.errors import CompilationError, LaunchError
from tilejit.ir.types import f32, i32, i64
from tilejit.targets import cpu
from tilejit.targets.cpu import launch

BLOCK = 1024


def vector_add() -> KernelBuilder:
    """Each CTA adds one 1024-block; the loop bound is clamped to the tensor's end."""
    with KernelBuilder("vadd", x=vector(), y=vector(), out=vector()) as kb:
        x, y, out = kb.p["x"], kb.p["y"], kb.p["out"]
        base = kb.op("mul", kb.cast(kb.tid("cta_id"), i64), kb.c(BLOCK, i64))
        end = kb.op("min", kb.op("add", base, kb.c(BLOCK, i64)), kb.buffer_dim(x, 0))
        with kb.loop(base, end) as (i,):
            kb.store(out, kb.op("add", kb.load(x, [i]), kb.load(y, [i])), [i])
    return kb


@pytest.fixture(scope="module")
def vadd_artifact():
    return vector_add().compile()


def test_vector_add_numpy(vadd_artifact):
    n = 1_000_003
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    cpu.load(vadd_artifact).launch((-(-n // BLOCK),), [x, y, out])
    np.testing.assert_array_equal(out, x + y)
    assert vadd_artifact.meta["granularity"] == "cta"


@pytest.mark.parametrize("grid", [(2**31,), (1, -1), (1, 1, 1, 1), 1.5])
def test_grids_the_kernel_cannot_take(vadd_artifact, grid):
    x = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match="grid must be 1 to 3 ints"):
        cpu.load(vadd_artifact).launch(grid, [x, x, x])


def test_vector_add_torch_and_grid_larger_than_cores(vadd_artifact):
    n = 977 * BLOCK - 13  # far more CTAs than cores, ragged tail
    x, y = torch.rand(n), torch.rand(n)
    out = torch.empty(n)
    module = cpu.load(vadd_artifact)
    module.launch(-(-n // BLOCK), [x, y, out])
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    # The same result on one worker: CTAs never depend on the thread that runs them.
    single = torch.empty(n)
    module.launch(-(-n // BLOCK), [x, y, single], workers=1)
    assert torch.equal(single, out)


def _claimed_ctas(module, first, last, claim, chunk, max_claims):
    """Which CTAs of a 20-CTA vector add one ``run_ctas`` call runs (each writes its
    block), and its status."""
    n = 20 * BLOCK
    x, y, out = np.ones(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    err, stop = ctypes.create_string_buffer(64 * 8), ctypes.c_int32(0)
    records = [module._params[0].record(a) for a in (x, y, out)]
    packed = module._pack_records(first, last, ctypes.addressof(err), ctypes.addressof(stop),
                                  claim, chunk, max_claims, (20, 1, 1), records)
    status = module._run_ctas(packed)
    return [cta for cta in range(20) if out[cta * BLOCK]], status


def test_run_ctas_claims_chunks_from_a_shared_counter(vadd_artifact):
    module = cpu.load(vadd_artifact)
    counter = ctypes.c_int64(10)
    # Two claims of three CTAs from 10, below last = 20: the counter moves past them.
    ran, status = _claimed_ctas(module, 0, 20, ctypes.addressof(counter), 3, 2)
    assert (ran, status, counter.value) == ([10, 11, 12, 13, 14, 15], 0, 16)
    # Claims until every CTA below ``last`` is taken: the last chunk is cut at ``last``.
    ran, status = _claimed_ctas(module, 0, 20, ctypes.addressof(counter), 3, 100)
    assert (ran, status) == ([16, 17, 18, 19], 0) and counter.value >= 20
    # Without a shared counter, one claim of ``chunk`` CTAs from ``first``.
    assert _claimed_ctas(module, 2, 5, 0, 3, 1) == ([2, 3, 4], 0)


def test_a_late_worker_leaves_its_share_to_the_others(vadd_artifact):
    """While the pool's worker is held up, the calling thread claims every chunk: the
    result is complete before that worker runs any CTA (a static split would leave it
    half of them)."""
    n = 64 * BLOCK
    x, y, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    module = cpu.load(vadd_artifact)
    module._seconds_per_cta = 0.0   # as if the last run showed enough work for the pool
    release, seen = threading.Event(), queue.SimpleQueue()

    def held_up(_):
        release.wait()
        return bool((out == 2).all())

    launch._pool().queues[0].put((held_up, None, seen, 0))
    timer = threading.Timer(0.5, release.set)
    timer.start()
    module.launch(64, [x, y, out], workers=2)
    timer.join()
    assert seen.get(timeout=5) == (0, True)
    np.testing.assert_array_equal(out, 2)


def test_object_code_alone_reloads(vadd_artifact):
    meta = json.loads(json.dumps(vadd_artifact.meta))  # what a disk cache would store
    cached = cpu.CpuArtifact("", vadd_artifact.obj, vadd_artifact.entry, meta)
    x = np.arange(3000, dtype=np.float32)
    out = np.zeros_like(x)
    cpu.load(cached).launch(3, [x, x, out])
    np.testing.assert_array_equal(out, 2 * x)
    elsewhere = cpu.CpuArtifact("", vadd_artifact.obj, meta=dict(meta, host_cpu="other-cpu"))
    with pytest.raises(CompilationError, match="compiled for CPU other-cpu"):
        cpu.load(elsewhere)


def test_noalias_option_gives_same_results():
    n = 5000
    x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    vector_add().run(-(-n // BLOCK), [x, y, out], noalias=True)
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("flags", [("div16",), ()])
def test_ints_divisible_by_16_become_llvm_assumptions(flags):
    with KernelBuilder("fill_n", out=vector(), n=i32) as kb:
        with kb.loop(kb.c(0), kb.p["n"], kb.c(1)) as (i,):
            kb.store(kb.p["out"], kb.c(1.0, f32), [i])
    kb.kernel.attrs["specialization"] = {"n": flags}
    artifact = kb.compile(opt_level=0)
    assert ("call void @llvm.assume" in artifact.llir) == bool(flags)
    out = np.zeros(32, np.float32)
    cpu.load(artifact).launch(1, [out, 32])
    np.testing.assert_array_equal(out, 1)


def test_two_dimensional_grid_and_strided_tensor():
    with KernelBuilder("transpose_add", a=matrix(), out=matrix()) as kb:
        a, out = kb.p["a"], kb.p["out"]
        row, col = kb.cast(kb.tid("cta_id", 1), i64), kb.cast(kb.tid("cta_id", 0), i64)
        kb.store(out, kb.op("add", kb.load(a, [col, row]), kb.c(1.0, f32)), [row, col])
    a = torch.rand(7, 5)
    out = torch.zeros(5, 7)
    kb.run((7, 5), [a, out])
    torch.testing.assert_close(out, a.T + 1)


def test_argument_checks(vadd_artifact):
    module = cpu.load(vadd_artifact)
    x = np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match="takes 3 arguments"):
        module.launch(1, [x, x])
    with pytest.raises(LaunchError, match="dtype float64"):
        module.launch(1, [x, x, np.zeros(10)])
    with pytest.raises(LaunchError, match=r"shape \[2, 5\].*compiled for shape \[\?\]"):
        module.launch(1, [x, x, np.zeros((2, 5), np.float32)])
    with pytest.raises(LaunchError, match=r"strides \[2\]"):  # compiled for unit stride
        module.launch(1, [x, x, np.zeros(20, np.float32)[::2]])
    with pytest.raises(LaunchError, match="numpy array or a CPU torch tensor"):
        module.launch(1, [x, x, [0.0] * 10])
    with pytest.raises(LaunchError, match="grid"):
        module.launch((1, 2, 3, 4), [x, x, x])


def test_scalar_arguments():
    with KernelBuilder("fill", out=vector(), value=f32, count=i32) as kb:
        i = kb.tid("cta_id")
        with kb.when(kb.cmp("lt", i, kb.p["count"])):
            kb.store(kb.p["out"], kb.p["value"], [i])
    out = np.zeros(6, np.float32)
    module = kb.run(6, [out, 2.5, 4])
    np.testing.assert_array_equal(out, [2.5] * 4 + [0, 0])
    with pytest.raises(LaunchError, match="does not fit in i32"):
        module.launch(1, [out, 1.0, 2**40])


def test_simple_loop_uses_wide_vectors_and_fma():
    with KernelBuilder("saxpy", x=vector(), y=vector(), a=f32) as kb:
        x, y = kb.p["x"], kb.p["y"]
        with kb.loop(kb.c(0, i64), kb.buffer_dim(x, 0)) as (i,):
            ax = kb.op("mul", kb.p["a"], kb.load(x, [i]))
            kb.store(y, kb.op("add", ax, kb.load(y, [i])), [i])
    features = llvm.get_host_cpu_features()
    if not (features.get("avx2") and features.get("fma")):
        pytest.skip("host CPU without AVX2 and FMA")
    artifact = kb.compile()
    # 256-bit (AVX2) or 512-bit (AVX-512 hosts) packed FMAs in the loop.
    assert re.search(r"vfmadd\w*ps\s.*%[yz]mm", artifact.asm), "no packed FMA in the saxpy loop"
    x, y = np.arange(1001, dtype=np.float32), np.ones(1001, np.float32)
    cpu.load(artifact).launch(1, [x, y, 3.0])
    np.testing.assert_allclose(y, 3 * np.arange(1001) + 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_launch_in_a_forked_child(vadd_artifact):
    """The worker pool does not survive fork; a child makes its own."""
    module = cpu.load(vadd_artifact)
    x = np.ones(50 * BLOCK, np.float32)
    module.launch(50, [x, x, np.zeros_like(x)], workers=2)  # the parent's pool is running
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child():
        out = np.zeros_like(x)
        module.launch(50, [x, x, out], workers=2)
        send.send(float(out.sum()))

    process = context.Process(target=child)
    process.start()
    try:
        assert receive.poll(30), "the child hung"
        assert receive.recv() == 2 * x.size
    finally:
        process.kill()
        process.join()


@pytest.mark.parametrize("through", ["global", "fragment", "shared"])
def test_instruction_loops_vectorize_without_gathers(through):
    """Loop generation's shape: an outer loop over 16-element steps around an inner
    `unroll = 16` loop (one vector instruction). The inner loop must become packed ops;
    vectorizing the outer loop would stride across them with gathers and scatters.
    Global-to-global needs the runtime's no-overlap promise; CTA-private memory does not,
    also inside coroutine units (here: shared memory with thread units)."""
    n = 16 * 37
    with KernelBuilder("blocked", num_warps=1, x=vector(), out=vector()) as kb:
        x, out = kb.p["x"], kb.p["out"]
        scope = {"fragment": FRAGMENT, "shared": SHARED}.get(through)
        tile = out if scope is None else kb.alloc(scope, f32, (n,))

        def blocked(body):
            with kb.loop(kb.c(0, i64), kb.c(n, i64), kb.c(16, i64)) as (i,):
                _, inner = kb.for_(kb.c(0, i64), kb.c(16, i64), kb.c(1, i64), unroll=16)
                with kb.insert_into(inner):
                    body(kb.op("add", i, inner.args[0]))
                    kb.yield_()
        blocked(lambda k: kb.store(tile, kb.op("add", kb.load(x, [k]), kb.c(1.0, f32)), [k]))
        if scope is not None:
            blocked(lambda k: kb.store(out, kb.load(tile, [k]), [k]))
    # The loops stand for a tile primitive's, which carry no bounds checks.
    artifact = kb.compile(noalias=through == "global", bounds_check=False,
                          granularity="thread" if through == "shared" else None)
    assert not re.search(r"gather|scatter", artifact.asm)
    assert re.search(r"vaddps\s.*%[yz]mm", artifact.asm)
    x = np.random.rand(n).astype(np.float32)
    out = np.zeros_like(x)
    cpu.load(artifact).launch(1, [x, out])
    np.testing.assert_array_equal(out, x + 1)
