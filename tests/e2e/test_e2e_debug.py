"""Debug mode (``@tj.kernel(debug=True)`` or ``TILEJIT_DEBUG=1``): out-of-bounds element
accesses of global, shared and local buffers are a LaunchError naming the kernel, the
buffer, the index and the source line; fresh shared and local memory reads NaN.

Native element accesses (``buf[i]``) are checked without debug mode too, unless
``TILEJIT_BOUNDS_CHECK=0`` (issue 12); tile primitives are masked instead."""
import inspect
import math

import pytest
import torch

import tilejit as tj
from tilejit.knobs import knobs


def _line_of(fn, text: str) -> int:
    """The file line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def reads_past_global(x, out, n):
    i = tj.thread_id()
    out[i] = x[i % (n + 1)]                 # threads n and 2n+1 read x[n]


def writes_past_shared(out):
    t = tj.thread_id()
    s = tj.alloc_shared((64,), tj.float32)
    if t < 64:
        s[t] = 1.0
    tj.sync()
    s[t + 1] = 2.0                          # thread 63 writes s[64]
    out[t] = 0.0


def indexes_past_local(out, K: tj.constexpr):
    t = tj.thread_id()
    vals = tj.alloc_local((K, 3), tj.int32)
    for j in range(K):
        vals[j, 0] = j
    out[t] = vals[t % (K + 1), 0]           # thread K reads row K


def test_global_out_of_bounds_read():
    kernel = tj.kernel(debug=True)(reads_past_global)
    x, out = torch.zeros(37), torch.zeros(128)
    with pytest.raises(tj.LaunchError) as info:
        kernel[(1,)](x, out, 37, num_warps=4)
    message = str(info.value)
    assert "reads_past_global" in message
    assert "global buffer 'x'" in message
    assert "index [37] outside shape [37]" in message
    assert info.value.line == _line_of(reads_past_global, "x[i % (n + 1)]")


def test_shared_out_of_bounds_write():
    kernel = tj.kernel(debug=True)(writes_past_shared)
    with pytest.raises(tj.LaunchError) as info:
        kernel[(2,)](torch.zeros(128), num_warps=2)
    message = str(info.value)
    assert "writes_past_shared" in message and "shared buffer 's'" in message
    assert "index [64] outside shape [64]" in message
    assert info.value.line == _line_of(writes_past_shared, "s[t + 1] = 2.0")


def test_local_out_of_bounds_read():
    kernel = tj.kernel(debug=True)(indexes_past_local)
    with pytest.raises(tj.LaunchError) as info:
        kernel[(1,)](torch.zeros(32, dtype=torch.int32), K=5, num_warps=1)
    message = str(info.value)
    assert "indexes_past_local" in message and "local buffer 'vals'" in message
    assert "index [5, 0] outside shape [5, 3]" in message
    assert info.value.line == _line_of(indexes_past_local, "vals[t % (K + 1), 0]")


def test_debug_from_environment(monkeypatch):
    kernel = tj.kernel(reads_past_global)
    x, out = torch.zeros(37), torch.zeros(128)
    kernel[(1,)](torch.zeros(200), out, 200)                # in bounds: fine either way
    monkeypatch.setenv("TILEJIT_DEBUG", "1")
    with pytest.raises(tj.LaunchError, match=r"index \[37\] outside shape \[37\]"):
        kernel[(1,)](x, out, 37)


def test_in_bounds_kernel_runs_the_same_in_debug_mode():
    kernel = tj.kernel(debug=True)(indexes_past_local)
    out = torch.zeros(32, dtype=torch.int32)
    kernel[(1,)](out, K=32, num_warps=1)
    assert out.tolist() == list(range(32))


@tj.kernel(debug=True)
def fresh_memory(out):
    t = tj.thread_id()
    s = tj.alloc_shared((128,), tj.float32)
    loc = tj.alloc_local((2,), tj.float64)
    frag = tj.fragment((4,), tj.float16)
    out[0, t] = s[t]
    out[1, t] = loc[1]
    out[2, t] = frag[t % 4]


def test_fresh_shared_local_and_fragment_memory_reads_nan_in_debug_mode():
    out = torch.zeros(3, 128)
    fresh_memory[(1,)](out)
    assert all(math.isnan(v) for v in out[0].tolist())
    assert all(math.isnan(v) for v in out[1].tolist())
    assert all(math.isnan(v) for v in out[2].tolist())


def test_masked_tile_copies_are_not_debug_errors():
    """Tile copies past the end are masked by design: no bounds error in debug mode."""
    @tj.kernel(debug=True)
    def tiles(x, out, BLOCK: tj.constexpr):
        base = tj.cta_id(0) * BLOCK
        a = tj.fragment((BLOCK,), x.dtype)
        tj.copy(a, x[base:base + BLOCK])
        tj.copy(out[base:base + BLOCK], a + 1)

    x = torch.randn(1000)
    out = torch.zeros(1000)
    tiles[(8,)](x, out, BLOCK=128)
    torch.testing.assert_close(out, x + 1)


def reads_far(x, out, far):
    out[0] = x[far]


def writes_far(out, far):
    out[far] = 1.0


def writes_past_the_last_cta(out):
    out[tj.cta_id(0) + 1] = 1.0             # the last CTA writes out[grid]


def copies_past_a_shared_window(x, out, stage):
    s = tj.alloc_shared((2, 16), tj.float32)
    tj.copy(s[stage, 0:16], x[0:16])        # stage 2 of 2 would write another buffer
    tj.copy(out[0:16], s[0, 0:16])


RELEASE_CASES = {   # kernel, launch, message, line
    "global read": (reads_past_global, lambda k: k[(1,)](torch.zeros(37), torch.zeros(128), 37),
                    "global buffer 'x': index [37] outside shape [37]", "x[i % (n + 1)]"),
    "far read": (reads_far, lambda k: k[(1,)](torch.zeros(8), torch.zeros(1), 10**12),
                 "index [1000000000000] outside shape [8]", "x[far]"),
    "negative write": (writes_far, lambda k: k[(1,)](torch.zeros(8), -(2**40)),
                       "global buffer 'out': index [-1099511627776] outside shape [8]",
                       "out[far] = 1.0"),
    "shared write": (writes_past_shared, lambda k: k[(2,)](torch.zeros(128), num_warps=2),
                     "shared buffer 's': index [64] outside shape [64]", "s[t + 1] = 2.0"),
    "local read": (indexes_past_local,
                   lambda k: k[(1,)](torch.zeros(32, dtype=torch.int32), K=5, num_warps=1),
                   "local buffer 'vals': index [5, 0] outside shape [5, 3]",
                   "vals[t % (K + 1), 0]"),
    "shared tile window": (copies_past_a_shared_window,
                           lambda k: k[(1,)](torch.zeros(16), torch.zeros(16), 2),
                           "shared buffer 's': index [2, 15] outside shape [2, 16]",
                           "tj.copy(s[stage, 0:16], x[0:16])"),
    "last CTA of a parallel launch": (
        writes_past_the_last_cta, lambda k: k[(1000,)](torch.zeros(1000), num_warps=1),
        "index [1000] outside shape [1000] in CTA 999", "out[tj.cta_id(0) + 1]"),
}


@pytest.mark.parametrize("case", list(RELEASE_CASES))
def test_native_out_of_bounds_accesses_are_errors_without_debug_mode(case):
    fn, launch, message, line = RELEASE_CASES[case]
    with pytest.raises(tj.LaunchError) as info:
        launch(tj.kernel(fn))
    assert message in str(info.value) and fn.__name__ in str(info.value)
    assert info.value.line == _line_of(fn, line)


def _bounds_sites(compiled) -> int:
    return sum(site["kind"] == "bounds" for site in compiled.metadata["backend"]["sites"])


def test_bounds_checks_can_be_turned_off_and_are_part_of_the_cache_key():
    kernel = tj.kernel(reads_past_global)
    args = (torch.zeros(37), torch.zeros(128), 37)
    assert _bounds_sites(kernel.compile(*args)) == 2
    with knobs.scoped(bounds_check=False):
        assert _bounds_sites(kernel.compile(*args)) == 0
        kernel[(1,)](torch.zeros(200), torch.zeros(128), 200)   # in bounds: runs unchecked
    with pytest.raises(tj.LaunchError, match="outside shape"):   # the checked binary again
        kernel[(1,)](*args)


@pytest.mark.team_once_only("per thread, every flat access carries its bounds_check")
def test_tile_primitives_carry_no_bounds_checks_outside_debug_mode():
    @tj.kernel
    def tiles(x, out, BLOCK: tj.constexpr):
        base = tj.cta_id(0) * BLOCK
        a = tj.fragment((BLOCK,), x.dtype)
        tj.copy(a, x[base:base + BLOCK])
        tj.copy(out[base:base + BLOCK], a + 1)

    assert _bounds_sites(tiles.compile(torch.zeros(1000), torch.zeros(1000), BLOCK=128)) == 0
