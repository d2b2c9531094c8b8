"""sync-hazards (passes/sync_hazards.py): missing barriers inserted with auto_sync, errors
naming both lines without it or in divergent code, loops, warp barriers, mbarrier
pipelines and spin flags that must raise nothing."""
from __future__ import annotations

import re

import pytest
import torch

import tilejit as tj
from tilejit.ir.types import TeamKind
from tilejit.passes import sync_hazards
from tilejit.passes.pipeline import PIPELINE
from tilejit.passes.sync_hazards import SyncHazardError


def _matmul(A, B, C, BM: tj.constexpr = 32, BN: tj.constexpr = 32, BK: tj.constexpr = 16):
    """tilejit/examples/kernels.py's matmul without its two tj.sync()s."""
    m0 = tj.cta_id(0) * BM
    n0 = tj.cta_id(1) * BN
    a_tile = tj.alloc_shared((BM, BK), A.dtype)
    b_tile = tj.alloc_shared((BK, BN), B.dtype)
    acc = tj.fragment((BM, BN), tj.float32)
    tj.fill(acc, 0.0)
    for k0 in tj.range(0, A.shape[1], BK):
        tj.copy(a_tile, A[m0:m0 + BM, k0:k0 + BK])    # line L + 9
        tj.copy(b_tile, B[k0:k0 + BK, n0:n0 + BN])
        tj.gemm(acc, a_tile, b_tile)                  # line L + 11
    tj.copy(C[m0:m0 + BM, n0:n0 + BN], acc)


matmul = tj.kernel(_matmul)
matmul_strict = tj.kernel(auto_sync=False)(_matmul)
COPY_A = _matmul.__code__.co_firstlineno + 9
GEMM = COPY_A + 2


def _lines(text: str, word: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.match(rf"\s*{word}\b", line)]


def _mm_args():
    torch.manual_seed(0)
    return torch.randn(64, 48), torch.randn(48, 64), torch.zeros(64, 64)


def test_the_pass_runs_after_scope_analysis_and_layout_inference_and_before_fusion():
    """After layout inference: a fragment it puts in registers needs no barrier."""
    names = [name for name, _ in PIPELINE]
    assert names.index("scope-analysis") < names.index("sync-hazards")
    assert names.index("infer-fragment-layouts") + 1 == names.index("sync-hazards")
    assert names.index("sync-hazards") < names.index("fuse-pointwise")


def test_a_missing_sync_is_inserted_and_the_result_is_right():
    A, B, C = _mm_args()
    matmul[(2, 2)](A, B, C)
    torch.testing.assert_close(C, A @ B, atol=1e-4, rtol=1e-4)
    lowered = matmul.compiled_kernels()[0].asm["lowered"]
    syncs = _lines(lowered, "sync")
    assert len(syncs) == 2
    # before the gemm (read after the copies' writes) and before the next iteration's
    # copy (its write after the gemm's read): what the example writes by hand
    assert f"a_tile written at line {COPY_A}, read at line {GEMM}\"}} loc({GEMM}:" in syncs[1]
    assert f"a_tile read at line {GEMM}, written at line {COPY_A}\"}} loc({COPY_A}:" in syncs[0]


def test_the_example_matmul_needs_nothing_inserted():
    from tilejit.examples.kernels import matmul as example
    A, B, C = _mm_args()
    example[(1, 1)](A, B, C, BM=64, BN=64, BK=16)
    syncs = _lines(example.compiled_kernels()[-1].asm["lowered"], "sync")
    assert len(syncs) == 2 and not any("reason" in s for s in syncs)


def test_without_auto_sync_the_race_is_an_error_naming_both_lines():
    A, B, C = _mm_args()
    with pytest.raises(SyncHazardError) as info:
        matmul_strict[(2, 2)](A, B, C)
    err = info.value
    assert isinstance(err, tj.CompilationError) and err.line == GEMM
    assert (f"race on shared buffer a_tile is written at line {COPY_A} by tj.copy at team cta"
            in err.message)
    assert f"then read at line {GEMM} by tj.gemm at team cta" in err.message
    assert f"Add `tj.sync()` before line {GEMM}" in err.message
    assert "auto_sync=False" in err.message


def test_the_option_is_part_of_the_cache_key_and_checked():
    A, B, C = _mm_args()
    matmul[(1, 1)](A, B, C)                       # compiled with auto_sync: not reused
    with pytest.raises(SyncHazardError):
        matmul_strict[(1, 1)](A, B, C)
    with pytest.raises(tj.TilejitError, match="auto_sync must be True or False"):
        tj.kernel(auto_sync=1)(_matmul)


def test_the_dump_shows_the_inserted_barrier(monkeypatch, capfd):
    monkeypatch.setenv("TILEJIT_DUMP", "sync-hazards")
    monkeypatch.setenv("TILEJIT_ALWAYS_COMPILE", "1")
    A, B, C = _mm_args()
    matmul.compile(A, B, C)
    err = capfd.readouterr().err
    assert "// ----- IR after sync-hazards ----- //" in err
    assert f'sync {{reason = "auto_sync: shared buffer a_tile written at line {COPY_A}' in err


@tj.kernel
def across_iterations(x, out, n, BLOCK: tj.constexpr):
    s = tj.alloc_shared((BLOCK,), x.dtype)
    for i in range(n):
        tj.copy(s, x[i * BLOCK:(i + 1) * BLOCK])
        tj.sync()
        tj.copy(out[i * BLOCK:(i + 1) * BLOCK], s)
        # no barrier: the next iteration's write races with this read


def test_a_write_after_read_across_loop_iterations():
    first = across_iterations.fn.__code__.co_firstlineno
    x, out = torch.arange(256.0), torch.zeros(256)
    across_iterations[(1,)](x, out, 4, BLOCK=64)
    torch.testing.assert_close(out, x)
    syncs = _lines(across_iterations.compiled_kernels()[0].asm["lowered"], "sync")
    assert any(f"s read at line {first + 6}, written at line {first + 4}\"}} loc({first + 4}:"
               in s for s in syncs)
    strict = tj.kernel(auto_sync=False)(across_iterations.fn)
    with pytest.raises(SyncHazardError, match=rf"s is read at line {first + 6} .*then written "
                                              rf"at line {first + 4}"):
        strict[(1,)](x, out, 4, BLOCK=64)


@tj.kernel
def hoisted(x, out, n, BLOCK: tj.constexpr):
    s = tj.alloc_shared((BLOCK,), x.dtype)
    tj.copy(s, x[0:BLOCK])
    for i in range(n):
        tj.copy(out[i * BLOCK:(i + 1) * BLOCK], s)


def test_a_barrier_for_a_write_before_a_loop_goes_before_the_loop():
    x, out = torch.arange(64.0), torch.zeros(192)
    hoisted[(1,)](x, out, 3, BLOCK=64)
    torch.testing.assert_close(out, x.repeat(3))
    loop = hoisted.fn.__code__.co_firstlineno + 4
    syncs = _lines(hoisted.compiled_kernels()[0].asm["lowered"], "sync")
    assert len(syncs) == 1 and syncs[0].endswith(f"loc({loop}:4)")   # before the loop


@tj.kernel
def per_warp_stage(x, out, BLOCK: tj.constexpr):
    s = tj.alloc_shared((BLOCK,), x.dtype)
    if tj.warp_id() == 1:
        with tj.warp():
            tj.copy(s, x[0:BLOCK])
            tj.copy(out[0:BLOCK], s * 2.0)


def test_within_one_warp_a_warp_barrier_is_inserted_under_the_filter():
    x, out = torch.arange(32.0), torch.zeros(32)
    per_warp_stage[(1,)](x, out, BLOCK=32)
    torch.testing.assert_close(out, x * 2)
    text = per_warp_stage.compiled_kernels()[0].asm["lowered"]
    assert "sync {" not in text
    single = next(line for line in text.splitlines() if "single {team = warp, reason" in line)
    assert "auto_sync: shared buffer s written at line" in single


@tj.kernel
def two_warps_of_eight(x, out, BLOCK: tj.constexpr):
    s = tj.alloc_shared((BLOCK,), x.dtype)
    if tj.warp_id() < 2:
        if tj.warp_id() == 0:
            with tj.warp():
                tj.copy(s, x[0:BLOCK])
        with tj.warp():
            w = tj.warp_id() * BLOCK
            tj.copy(out[w:w + BLOCK], s)


def test_two_warps_of_one_warpgroup_get_a_warpgroup_barrier():
    x, out = torch.arange(32.0), torch.zeros(64)
    two_warps_of_eight[(1,)](x, out, BLOCK=32, num_warps=8)
    torch.testing.assert_close(out, x.repeat(2))
    text = two_warps_of_eight.compiled_kernels()[0].asm["lowered"]
    assert "single {team = warpgroup, reason" in text and "sync {" not in text


@tj.kernel
def divergent(x, out, BLOCK: tj.constexpr):
    s = tj.alloc_shared((BLOCK,), x.dtype)
    if tj.warp_id() == 0:
        tj.copy(s, x[0:BLOCK])
    else:
        tj.copy(out[0:BLOCK], s)


def test_a_race_between_divergent_branches_is_an_error_naming_both_lines():
    first = divergent.fn.__code__.co_firstlineno
    with pytest.raises(SyncHazardError) as info:
        divergent[(1,)](torch.arange(32.0), torch.zeros(32), BLOCK=32)
    message = info.value.message
    assert f"s is written at line {first + 4} by tj.copy at team cta (warp 0, lanes 0..31)" \
        in message
    assert f"then read at line {first + 6} by tj.copy at team cta (warps 1..3" in message
    assert "no barrier can be inserted, as the accesses sit under `if warp_id() == 0`" in message
    assert "would deadlock" in message and info.value.line == first + 6


@tj.kernel
def two_warps_in_a_filter(x, out, BLOCK: tj.constexpr):
    s = tj.alloc_shared((BLOCK,), x.dtype)
    if tj.warp_id() < 2:
        if tj.warp_id() == 0:
            with tj.warp():
                tj.copy(s, x[0:BLOCK])
        with tj.warp():
            w = tj.warp_id() * BLOCK
            tj.copy(out[w:w + BLOCK], s)


def test_a_cta_barrier_needed_under_a_filter_is_an_error():
    """Warps 0 and 1 of a 4-warp CTA: only a CTA barrier holds both, and not every warp
    reaches the filtered code."""
    with pytest.raises(SyncHazardError, match=r"under `if warp_id\(\) < 2`"):
        two_warps_in_a_filter[(1,)](torch.arange(32.0), torch.zeros(64), BLOCK=32)


@tj.kernel(auto_sync=False)
def ring(x, out, STAGES: tj.constexpr, CHUNK: tj.constexpr, EMPTY: tj.constexpr):
    """Warp 0 streams x through a ring with copy_async; warp 1 consumes it."""
    full = tj.alloc_barriers(STAGES)
    empty = tj.alloc_barriers(STAGES)
    buf = tj.alloc_shared((STAGES, CHUNK), x.dtype)
    if tj.thread_id() == 0:
        for s in tj.static_range(STAGES):
            tj.mbarrier_init(full[s], 1)
            tj.mbarrier_init(empty[s], 32)
    tj.sync()
    chunks = x.shape[0] // CHUNK
    if tj.warp_id() == 0:
        if tj.elect_sync():
            for k in range(chunks):
                s = k % STAGES
                if EMPTY:
                    tj.mbarrier_wait(empty[s], ((k // STAGES) % 2) ^ 1)
                tj.mbarrier_arrive_expect_tx(full[s], CHUNK * x.dtype.itemsize)
                tj.copy_async(buf[s, :], x[k * CHUNK:(k + 1) * CHUNK], barrier=full[s])
    elif tj.warp_id() == 1:
        for k in range(chunks):
            s = k % STAGES
            tj.mbarrier_wait(full[s], (k // STAGES) % 2)
            with tj.warp():
                tj.copy(out[k * CHUNK:(k + 1) * CHUNK], buf[s, :])
            tj.mbarrier_arrive(empty[s])


def test_a_warp_specialized_mbarrier_pipeline_raises_nothing():
    x, out = torch.arange(512.0), torch.zeros(512)
    ring[(1,)](x, out, STAGES=2, CHUNK=64, EMPTY=True)
    torch.testing.assert_close(out, x)


def test_a_pipeline_without_its_empty_barrier_races():
    """The producer refills a stage the consumer may still read."""
    first = ring.fn.__code__.co_firstlineno
    with pytest.raises(SyncHazardError) as info:
        ring[(1,)](torch.arange(512.0), torch.zeros(512), STAGES=2, CHUNK=64, EMPTY=False)
    message = info.value.message
    assert f"buf is read at line {first + 25} by tj.copy at team warp" in message
    assert f"then written at line {first + 19} by tj.copy_async" in message


@tj.kernel(auto_sync=False)
def flag_handoff(x, out):
    flag = tj.alloc_shared((1,), tj.int32)
    data = tj.alloc_shared((1,), tj.float32)
    if tj.thread_id() == 0:
        flag[0] = 0
    tj.sync()
    if tj.thread_id() == 32:
        data[0] = x[0] * 2.0
        flag[0] = 1
    if tj.thread_id() == 0:
        while flag[0] == 0:
            pass
        out[0] = data[0] + 1.0


def test_a_flag_spun_on_orders_like_an_mbarrier():
    x, out = torch.tensor([3.0]), torch.zeros(1)
    flag_handoff[(1,)](x, out)
    assert out.tolist() == [7.0]


@tj.kernel(auto_sync=False)
def native_neighbours(x, out, MISSING: tj.constexpr):
    t = tj.thread_id()
    s = tj.alloc_shared((128,), tj.float32)
    s[t] = x[t]
    if not MISSING:
        tj.sync()
    out[t] = s[(t + 1) % 128] + s[t]


def test_native_accesses_race_with_other_threads_not_with_their_own_index():
    x, out = torch.arange(128.0), torch.zeros(128)
    native_neighbours[(1,)](x, out, MISSING=False)
    torch.testing.assert_close(out, x + x.roll(-1))
    first = native_neighbours.fn.__code__.co_firstlineno
    with pytest.raises(SyncHazardError, match=rf"s is written at line {first + 4} by each "
                                              rf"thread .*then read at line {first + 7}"):
        native_neighbours[(1,)](x, out, MISSING=True)


def test_find_hazards_lists_them_in_program_order():
    from tilejit.frontend import compile_to_ir
    from tilejit.frontend.signature import LaunchOptions
    from tilejit.passes import scope_analysis
    from tilejit.runtime import arguments
    A, B, C = _mm_args()
    specs = {n: arguments.arg_spec_of(t, n, "matmul") for n, t in zip("ABC", (A, B, C))}
    kernel = scope_analysis.run(compile_to_ir(_matmul, specs, {}, LaunchOptions(target="cpu")))
    found = [(h.first.op.loc.line, h.second.op.loc.line, h.kind)
             for h in sync_hazards.find_hazards(kernel)]
    assert found[:2] == [(COPY_A, GEMM, TeamKind.CTA), (COPY_A + 1, GEMM, TeamKind.CTA)]
    assert (GEMM, COPY_A, TeamKind.CTA) in found


def test_inserted_barriers_round_trip_through_the_textual_ir():
    from tilejit.ir import parse_kernel
    A, B, C = _mm_args()
    matmul[(1, 1)](A, B, C)
    lowered = matmul.compiled_kernels()[0].asm["lowered"]
    assert 'sync {reason = "auto_sync:' in lowered
    assert str(parse_kernel(lowered)) == lowered


@tj.kernel(auto_sync=False)
def warps_own_slices(x, out, OFFSET: tj.constexpr):
    """Warps 0 and 1 each write a 32-element slice of one buffer at a constant offset."""
    s = tj.alloc_shared((64,), x.dtype)
    for w in tj.static_range(2):
        if tj.warp_id() == w:
            with tj.warp():
                tj.copy(s[w * OFFSET:w * OFFSET + 32], x[w * 32:(w + 1) * 32])
    tj.sync()
    tj.copy(out[0:64], s)


def test_slices_at_disjoint_constant_offsets_do_not_race():
    x, out = torch.arange(64.0), torch.zeros(64)
    warps_own_slices[(1,)](x, out, OFFSET=32)
    torch.testing.assert_close(out, x)


def test_slices_that_overlap_still_race_at_the_second_writes_line():
    """Offsets 0 and 16: elements 16..31 are written by both warps."""
    line = warps_own_slices.fn.__code__.co_firstlineno + 7    # the tj.copy into s
    with pytest.raises(SyncHazardError) as info:
        warps_own_slices[(1,)](torch.arange(64.0), torch.zeros(64), OFFSET=16)
    assert info.value.line == line
    assert f"s is written at line {line} by tj.copy at team warp (warp 0, " in info.value.message
    assert "then written at line" in info.value.message


@tj.kernel(auto_sync=False)
def warps_own_slices_from(x, out, base):
    """As warps_own_slices, each slice starting at ``base``, known only at run time."""
    s = tj.alloc_shared((96,), x.dtype)
    for w in tj.static_range(2):
        if tj.warp_id() == w:
            with tj.warp():
                tj.copy(s[base + w * 32:base + w * 32 + 32], x[w * 32:(w + 1) * 32])
    tj.sync()
    tj.copy(out[0:64], s[base:base + 64])


def test_a_slice_at_a_run_time_offset_may_reach_any_element():
    """Only compile-time starts are compared: these slices are disjoint on every run, yet
    the analysis cannot know it, and reports the race."""
    with pytest.raises(SyncHazardError, match="s is written at line"):
        warps_own_slices_from[(1,)](torch.arange(64.0), torch.zeros(64), 0)
