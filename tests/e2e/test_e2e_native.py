"""Per-thread native code: thread/warp/lane ids, divergent control flow, per-thread local
arrays, element reads and writes of global/shared/local buffers, CTA barriers between
phases and inside loops, scalar arguments, device functions, device_print."""
import numpy as np
import pytest
import torch

import tilejit as tj


@tj.kernel
def ids(out):
    t = tj.thread_id()
    g = tj.cta_id(0) * 256 + t
    out[g, 0] = t
    out[g, 1] = tj.lane_id()
    out[g, 2] = tj.warp_id()
    out[g, 3] = tj.warp_id_in_wg()
    out[g, 4] = tj.warpgroup_id()
    out[g, 5] = tj.cta_id(0)
    out[g, 6] = tj.num_ctas(0)


def test_thread_ids():
    out = torch.full((3 * 256, 7), -1, dtype=torch.int32)
    ids[(3,)](out, num_warps=8)
    t = torch.arange(3 * 256) % 256
    expected = torch.stack([t, t % 32, t // 32, (t // 32) % 4, t // 128,
                            torch.arange(3 * 256) // 256, torch.full((768,), 3)], 1)
    assert torch.equal(out, expected.int())


@tj.kernel
def grid3d(out):
    x = tj.cta_id(0)
    y = tj.cta_id(1)
    z = tj.cta_id(2)
    if tj.thread_id() == 0:
        out[z, y, x] = x + 10 * y + 100 * z + 1000 * (tj.num_ctas(0) + tj.num_ctas(1) * tj.num_ctas(2))


def test_three_dimensional_grid():
    out = np.zeros((2, 3, 5), np.int64)
    grid3d[(5, 3, 2)](out, num_warps=1)
    z, y, x = np.meshgrid(range(2), range(3), range(5), indexing="ij")
    np.testing.assert_array_equal(out, x + 10 * y + 100 * z + 1000 * (5 + 3 * 2))


@tj.kernel
def divergent(x, out, n, scale: float, flip: bool):
    i = tj.cta_id(0) * 128 + tj.thread_id()
    if i < n:
        v = x[i]
        if i % 3 == 0:
            v = v * scale
        elif i % 3 == 1:
            v = -v
        else:
            if flip:
                v = v + 100.0
        out[i] = v


@pytest.mark.parametrize("flip", [True, False])
def test_divergent_if_with_scalar_arguments(flip):
    n = 1000
    x = torch.randn(n)
    out = torch.zeros(n + 24)
    divergent[(tj.cdiv(n, 128),)](x, out, n, 2.5, flip)
    i = torch.arange(n)
    expected = torch.where(i % 3 == 0, x * 2.5, torch.where(i % 3 == 1, -x, x + 100 if flip else x))
    torch.testing.assert_close(out[:n], expected)
    assert torch.all(out[n:] == 0)


@tj.kernel
def locals_and_loops(out, K: tj.constexpr):
    t = tj.thread_id()
    buf = tj.alloc_local((K, 2), tj.int32)
    for j in range(K):
        buf[j, 0] = t * j
        buf[j, 1] = j
    acc = 0
    for j in tj.range(0, K, 2):
        acc += buf[j, 0] + buf[j, 1]
    for j in tj.static_range(1, K, 2):
        acc -= buf[j, 1]
    k = 0
    while k < t % 5:
        acc += 1000
        k += 1
    out[tj.cta_id(0) * 128 + t] = acc


def test_per_thread_local_arrays_and_loops():
    K = 7
    out = torch.zeros(256, dtype=torch.int64)
    locals_and_loops[(2,)](out, K=K)
    t = torch.arange(256) % 128
    even = [j for j in range(0, K, 2)]
    expected = sum(t * j + j for j in even) - sum(range(1, K, 2)) + 1000 * (t % 5)
    assert torch.equal(out, expected)


@tj.kernel
def shared_phases(x, out, ROUNDS: tj.constexpr):
    """Each round, every thread reads its right neighbour's slot, then (after a barrier)
    writes its own: a barrier inside a loop between the two phases."""
    n = tj.num_ctas(0) * 0 + 128
    t = tj.thread_id()
    smem = tj.alloc_shared((2, 128), tj.float32)
    smem[0, t] = x[tj.cta_id(0) * 128 + t]
    tj.sync()
    for r in range(ROUNDS):
        cur = r % 2
        smem[1 - cur, t] = smem[cur, (t + 1) % n] + 1.0
        tj.sync()
    out[tj.cta_id(0) * 128 + t] = smem[ROUNDS % 2, t]


def test_sync_between_phases_and_in_loops():
    x = torch.arange(256, dtype=torch.float32)
    out = torch.zeros(256)
    shared_phases[(2,)](x, out, ROUNDS=5)
    base = x.reshape(2, 128)
    expected = torch.roll(base, -5, dims=1) + 5
    torch.testing.assert_close(out, expected.reshape(-1))


@tj.func
def clamp01(v):
    return tj.minimum(tj.maximum(v, 0.0), 1.0)


@tj.kernel
def uses_device_function(x, out):
    i = tj.thread_id()
    out[i] = clamp01(x[i]) * 2.0


def test_device_function_inlined():
    x = torch.linspace(-1, 2, 128)
    out = torch.zeros(128)
    uses_device_function[(1,)](x, out)
    torch.testing.assert_close(out, x.clamp(0, 1) * 2)


@tj.kernel
def mixed_tile_and_native(x, out, BLOCK: tj.constexpr):
    """A fragment filled by a tile primitive, then read element-wise per thread, and a
    shared tile written element-wise then copied out as a tile."""
    base = tj.cta_id(0) * BLOCK
    frag = tj.fragment((BLOCK,), x.dtype)
    tj.copy(frag, x[base:base + BLOCK])
    s = tj.alloc_shared((BLOCK,), x.dtype)
    t = tj.thread_id()
    if t < BLOCK:
        s[BLOCK - 1 - t] = frag[t] * 3.0
    tj.sync()
    tj.copy(out[base:base + BLOCK], s)


def test_fragments_and_shared_from_native_code():
    x = torch.randn(300)
    out = torch.zeros(300)
    mixed_tile_and_native[(3,)](x, out, BLOCK=100)
    torch.testing.assert_close(out, (x.reshape(3, 100).flip(1) * 3).reshape(-1))


@tj.kernel
def printer(v):
    if tj.thread_id() == 0:
        tj.device_print("cta {} value {}", tj.cta_id(0), v)


def test_device_print(capfd):
    printer[(2,)](7)
    lines = sorted(capfd.readouterr().out.strip().splitlines())
    assert lines == ["cta 0 value 7", "cta 1 value 7"]


@tj.kernel
def per_warp_rows(x, out, N: tj.constexpr, SCOPED: tj.constexpr):
    """Each warp reduces its own row: a team switch (or the scoped spelling) makes the
    fragments and the primitives per warp."""
    w = tj.cta_id(0) * 4 + tj.warp_id()
    if SCOPED:
        row = tj.fragment((N,), x.dtype)
        total = tj.fragment((1,), tj.float32)
        with tj.warp():
            row2 = tj.fragment((N,), x.dtype)
            tile = tj.fragment((1,), tj.float32)
            tj.warp.copy(row2, x[w, 0:N])
            tj.warp.reduce(tile, row2, "max", 0)
            tj.warp.copy(out[w:w + 1], tile)
    else:
        with tj.warp():
            row = tj.fragment((N,), x.dtype)
            total = tj.fragment((1,), tj.float32)
            tj.copy(row, x[w, 0:N])
            tj.reduce(total, row, "max", 0)
            tj.copy(out[w:w + 1], total)


@pytest.mark.parametrize("scoped", [False, True])
def test_warp_teams_work_on_their_own_rows(scoped):
    x = torch.randn(8, 50)
    out = torch.zeros(8)
    per_warp_rows[(2,)](x, out, N=50, SCOPED=scoped)
    torch.testing.assert_close(out, x.max(1).values)


def test_callable_grid_and_program_id_alias():
    @tj.kernel
    def scale(x, out, BLOCK: tj.constexpr):
        base = tj.program_id(0) * BLOCK
        a = tj.fragment((BLOCK,), x.dtype)
        tj.copy(a, x[base:base + BLOCK])
        tj.cta.copy(out[base:base + BLOCK], a * 3)

    x = np.arange(1000, dtype=np.int64)
    out = np.zeros(1000, np.int64)
    scale[lambda meta: (tj.cdiv(x.shape[0], meta["BLOCK"]),)](x, out, BLOCK=96)
    np.testing.assert_array_equal(out, 3 * x)


@tj.kernel
def first_match(x, out, n, step):
    """Per thread t: the first i in range(start, stop, step) with x[i] == t (skipping odd
    i when t is odd), or -1; the step's sign is only known at run time."""
    t = tj.thread_id()
    start = t
    stop = n
    if step < 0:
        start = n - 1 - t
        stop = -1
    found = -1
    for i in range(start, stop, step):
        if t % 2 == 1 and i % 2 == 1:
            continue
        if x[i] == t:
            found = i
            break
    out[t] = found


@pytest.mark.parametrize("step", [1, 3, -1, -2])
def test_break_and_continue_in_a_run_time_loop(step):
    n = 97
    rng = np.random.default_rng(abs(step))
    x = torch.from_numpy(rng.integers(0, 160, n).astype(np.int32))
    out = torch.full((128,), -7, dtype=torch.int32)
    first_match[(1,)](x, out, n, step)

    def reference(t):
        start, stop = (t, n) if step > 0 else (n - 1 - t, -1)
        for i in range(start, stop, step):
            if t % 2 == 1 and i % 2 == 1:
                continue
            if x[i] == t:
                return i
        return -1
    assert out.tolist() == [reference(t) for t in range(128)]


@tj.kernel
def flag_handoff(x, out):
    """Warp 1 publishes a value and raises a shared flag; warp 0 spins on the flag (a
    plain loop reading shared memory, no barrier) and then reads the value."""
    flag = tj.alloc_shared((1,), tj.int32)
    data = tj.alloc_shared((1,), tj.float32)
    if tj.thread_id() == 0:
        flag[0] = 0
    tj.sync()
    if tj.warp_id() == 1:
        if tj.lane_id() == 0:
            for i in range(1000):   # work first, so that warp 0 reaches its loop
                data[0] = x[0] * 2.0 + i * 0.0
            flag[0] = 1
    if tj.warp_id() == 0:
        if tj.lane_id() == 0:
            spins = 0
            while flag[0] == 0:
                spins += 1
            out[0] = data[0] + 1.0
            out[1] = spins > 0


def test_spinning_on_a_flag_set_by_another_warp():
    x, out = torch.tensor([3.0]), torch.zeros(2)
    flag_handoff[(2,)](x, out)
    assert out.tolist() == [7.0, 1.0]   # warp 0 did wait, and saw warp 1's write


@tj.kernel
def consumers_only(x, out, PRODUCERS: tj.constexpr):
    """With PRODUCERS = 0 the producer branch keeps no thread: dead code, as in Python."""
    tile = tj.fragment((8,), x.dtype)
    if tj.thread_id() < PRODUCERS:
        tj.fill(tile, -1.0)
        tj.copy(out[0:8], tile)
    else:
        out[tj.thread_id()] = x[tj.thread_id()]


def test_a_branch_no_thread_takes_is_dead_code():
    x, out = torch.arange(128.0), torch.zeros(128)
    consumers_only[(1,)](x, out, PRODUCERS=0)
    assert torch.equal(out, x)


@tj.kernel
def huge_shared(out, N: tj.constexpr):
    s = tj.alloc_shared((N,), tj.float32)
    if tj.warp_id() == 1:
        s[N - 1] = 2.0
    tj.sync()
    if tj.thread_id() == 0:
        out[0] = s[N - 1]


@tj.kernel
def huge_private(out, N: tj.constexpr):
    with tj.thread():
        buf = tj.alloc_local((N,), tj.float32)   # large: one copy per unit in the arena
        buf[tj.thread_id() % N] = 1.0 * tj.thread_id()
        tj.sync()
        if tj.thread_id() == 3:
            out[0] = buf[3]


@tj.kernel
def huge_fragment(x, out, B: tj.constexpr):
    t = tj.fragment((B, B), tj.float32)        # on the stack, it would overflow it
    tj.copy(t, x[0:B, 0:B])
    tj.copy(out[0:2, 0:2], t[0:2, 0:2])


@tj.kernel
def row_sums_of_exp(x, out, B: tj.constexpr):
    t = tj.fragment((B, B), tj.float32)        # B = 300: 352 KiB, past the stack budget
    tj.copy(t, x[0:B, 0:B])
    e = tj.exp(t * 0.5)
    s = tj.fragment((B,), tj.float32)
    tj.reduce(s, e, "sum", 1)
    tj.copy(out[0:B], s)


def test_a_fragment_larger_than_a_stack_lives_in_the_arena():
    x, out = torch.randn(4, 4), torch.zeros(4, 4)
    huge_fragment[(1,)](x, out, B=2048)         # 16 MiB
    assert torch.equal(out[0:2, 0:2], x[0:2, 0:2])
    x, sums = torch.randn(290, 310), torch.zeros(290)   # the tile's edges are masked
    row_sums_of_exp[(1,)](x, sums, B=300)
    torch.testing.assert_close(sums, torch.exp(x[:, :300] * 0.5).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kernel", [huge_shared, huge_private])
def test_memory_beyond_the_cpu_limit_is_a_compile_error_at_its_line(kernel):
    out = torch.zeros(1)
    kernel[(1,)](out, N=1024)
    assert out.item() in (2.0, 3.0)
    with pytest.raises(tj.CompilationError, match=r"the CPU target gives a CTA at most") as info:
        kernel[(1,)](out, N=2**46)   # 256 TiB: more than any address space
    assert "tj.alloc_" in str(info.value)          # the excerpt of the allocation's line


_OUT_OF_MEMORY = """
import resource, sys
import torch
sys.path.insert(0, {tests!r})
from test_e2e_native import {kernel}
out = torch.zeros(1)
{kernel}.compile(out, N={n})   # 1 GiB for the CTA: under the limit, over the rlimit
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + (512 << 20), hard))
try:
    {kernel}[(1,)](out, N={n})
except Exception as err:
    print(type(err).__name__, err)
"""


@pytest.mark.parametrize("kernel, n", [("huge_shared", 1 << 28), ("huge_private", 1 << 21)])
def test_memory_a_cta_cannot_get_is_a_launch_error(kernel, n):
    import pathlib
    import subprocess
    import sys
    script = _OUT_OF_MEMORY.format(tests=str(pathlib.Path(__file__).parent), kernel=kernel,
                                   n=n)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("LaunchError") and "cannot allocate" in done.stdout, \
        done.stdout + done.stderr


