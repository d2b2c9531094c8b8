"""software-pipeline (tilejit/passes/software_pipeline.py): the IR a ``pipeline=S`` loop
becomes (prologue, steady state, guarded tail), its text round-trip, and the loops it
refuses, each a CompilationError at the loop's line saying why. Results against torch:
tests/e2e/test_e2e_software_pipeline.py."""
import inspect
import re

import pytest
import torch

import tilejit as tj
from tilejit.ir.parser import parse_kernel
from tilejit.passes.pipeline import run_pipeline


@tj.kernel
def stream(x, out, S: tj.constexpr):
    tile = tj.alloc_shared((8,), x.dtype)
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    for c in tj.range(x.shape[0] // 8, pipeline=S):
        tj.copy_async(tile, x[c * 8:c * 8 + 8], dispatch="cp.async")
        tj.copy(acc, acc + tile)
    tj.copy(out[0:8], acc)


def _after_pass(kernel, *args, **constexprs) -> str:
    frontend = kernel.compile(*args, **constexprs).asm["ir"]
    return run_pipeline(parse_kernel(frontend), dump=(), passes=["software-pipeline"])[1][
        "software-pipeline"]


def _lines(text: str) -> list[str]:
    """The IR's op lines without locations and value numbers, for golden comparisons."""
    return [re.sub(r" loc\(.*\)", "", line).strip() for line in text.splitlines()]


def test_a_three_stage_ring_prologue_steady_state_and_guarded_tail():
    x = torch.zeros(64)
    lines = _lines(_after_pass(stream, x, x, S=3))
    text = "\n".join(lines)
    assert "%tile = alloc {scope = shared, dtype = f32, shape = [3, 8]} : " \
        "buffer<shared, f32, [3, 8]>" in lines
    # prologue: iterations 0 and 1, each guarded by the trip count, one group each
    ring = [n for n, line in enumerate(lines) if line.startswith("tile.copy_async")]
    commits = [n for n, line in enumerate(lines) if line == "cp_async_commit"]
    (loop,) = [n for n, line in enumerate(lines) if line.startswith("for(")]
    assert len(ring) == 3 and ring[0] < commits[0] < ring[1] < commits[1] < loop < ring[2]
    assert all(lines[n + 1] == "sync" for n in commits[:2])   # for sync-hazards (slots)
    # steady state: copies for iteration i + 2 into slot (i + 2) % 3, then wait for i
    steady = lines[loop:]
    assert steady[1] == "^(%c_iter: i64):"
    assert any(re.fullmatch(r"%\d+ = const \{value = 2\} : i64", line) for line in steady[:4])
    order = [steady.index(line) for line in
             ("cp_async_commit", "cp_async_wait {pending = 2}", "sync")]
    assert order == sorted(order) and order[1] == order[0] + 1 == order[2] - 1
    assert re.search(r"%slot_1 = binary\(%c_iter, %\d+\) \{op = mod\}", text)
    assert re.search(r"region\(%tile, %slot_1, %\d+\) \{sizes = \[1, 8\], keep = \[false, true\]\}",
                     text)
    # the body reads the slot, then a barrier frees it before the next copy into it
    body_end = steady.index("}", order[2])
    assert steady[body_end - 2] == "sync" and steady[body_end - 1] == "yield"


@tj.kernel
def tma_stream(x, out):
    tile = tj.alloc_shared((8,), x.dtype)
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy_async(tile, x[c * 8:c * 8 + 8], dispatch="tma")
        tj.copy(acc, acc + tile)
    tj.copy(out[0:8], acc)


def test_tma_copies_complete_on_a_full_barrier_per_slot():
    x = torch.zeros(64)
    lines = _lines(_after_pass(tma_stream, x, x))
    text = "\n".join(lines)
    assert "%full = alloc_barrier {count = 2} : barrier<2>" in lines
    assert len(re.findall(r"mbarrier_init\(%full, ", text)) == 2
    assert any(re.fullmatch(r"if\(%\d+\) \{filter = \{axis = thread, lo = 0, hi = 1\}\} \{", line)
               for line in lines)   # one thread inits, announces and issues
    expects = re.findall(r"mbarrier_expect_tx\(%full, %\w+, %(\d+)\) \{arrive = true\}", text)
    assert len(expects) == 2 and all(f"%{n} = const {{value = 32}} : i32" in lines
                                     for n in expects)   # 8 floats: 32 bytes a slot
    copies = re.findall(r"tile.copy_async\(%\d+, %\d+, %full, %\w+\) \{dispatch = \"tma\"\}", text)
    assert len(copies) == 2
    assert re.search(r"mbarrier_wait\(%full, %slot_1, %\d+\)", text)
    assert "cp_async" not in text


def test_the_pipelined_ir_round_trips_and_verifies():
    x = torch.zeros(64)
    text = _after_pass(stream, x, x, S=2)
    assert str(parse_kernel(text)) == text
    assert "cp_async_wait {pending = 1}" in text


@pytest.mark.parametrize("stages", [None, 1])
def test_without_stages_the_loop_is_left_alone(stages):
    x = torch.zeros(64)
    frontend = stream.compile(x, x, S=stages).asm["ir"]
    assert _after_pass(stream, x, x, S=stages) == frontend
    assert "cp_async_wait" not in frontend


def _line_of(fn, needle: str) -> int:
    source, first = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    return first + next(n for n, line in enumerate(source) if needle in line)


@tj.kernel
def no_copy(x, out):
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy(acc, acc + x[c * 8:c * 8 + 8])
    tj.copy(out[0:8], acc)


@tj.kernel
def with_barrier(x, out):
    bar = tj.alloc_barriers(1)
    tile = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy_async(tile, x[c * 8:c * 8 + 8], barrier=bar[0])
        tj.copy(out[c * 8:c * 8 + 8], tile)


@tj.kernel
def mixed(x, out):
    a = tj.alloc_shared((8,), x.dtype)
    b = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy_async(a, x[c * 8:c * 8 + 8], dispatch="tma")
        tj.copy_async(b, x[c * 8:c * 8 + 8], dispatch="cp.async")
        tj.copy(out[c * 8:c * 8 + 8], a)


@tj.kernel
def read_after(x, out):
    tile = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy_async(tile, x[c * 8:c * 8 + 8])
        tj.copy(out[c * 8:c * 8 + 8], tile)
    tj.copy(out[0:8], tile)


@tj.kernel
def written_twice(x, out):
    tile = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy_async(tile, x[c * 8:c * 8 + 8])
        tj.fill(tile[0:4], 0.0)
        tj.copy(out[c * 8:c * 8 + 8], tile)


@tj.kernel
def indirect(x, idx, out):
    tile = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(idx.shape[0], pipeline=2):
        row = idx[c]
        tj.copy_async(tile, x[row * 8:row * 8 + 8])
        tj.copy(out[c * 8:c * 8 + 8], tile)


@tj.kernel
def read_first(x, out):
    tile = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy(out[c * 8:c * 8 + 8], tile)
        tj.copy_async(tile, x[c * 8:c * 8 + 8])


@tj.kernel
def into_a_view(x, out):
    tile = tj.alloc_shared((2, 8), x.dtype)
    for c in tj.range(x.shape[0] // 8, pipeline=2):
        tj.copy_async(tile[0], x[c * 8:c * 8 + 8])
        tj.copy(out[c * 8:c * 8 + 8], tile[0])


@tj.kernel
def nested(x, out):
    tile = tj.alloc_shared((8,), x.dtype)
    for r in tj.range(2, pipeline=2):
        for c in tj.range(x.shape[0] // 8, pipeline=2):
            tj.copy_async(tile, x[c * 8:c * 8 + 8])
            tj.copy(out[c * 8:c * 8 + 8], tile)


@tj.kernel
def runtime_step(x, out):
    tile = tj.alloc_shared((8,), x.dtype)
    for c in tj.range(0, x.shape[0] // 8, out.shape[0] // 8, pipeline=2):
        tj.copy_async(tile, x[c * 8:c * 8 + 8])
        tj.copy(out[c * 8:c * 8 + 8], tile)


@pytest.mark.parametrize("kernel, reason", [
    (no_copy, r"its body starts no tj.copy_async into a shared tile"),
    (with_barrier, r"a copy_async with barrier= completes on the kernel's own mbarriers; "
                   r"pipeline= places the barriers itself: drop barrier="),
    (mixed, r"its copies mix dispatch=\"tma\" \(mbarrier completion\) with other families"),
    (read_after, r"stage buffer tile is used outside the loop \(line \d+\)"),
    (written_twice, r"stage buffer tile is written in the loop by more than its copy"),
    (indirect, r"the source of the copy at line \d+ depends on `load` at line \d+, "
               r"computed in the loop\n"),
    (read_first, r"stage buffer tile is read before its copy"),
    (into_a_view, r"a stage copy's dst must be a whole shared tile allocated before the loop"),
    (nested, r"it holds another pipelined loop"),
    (runtime_step, r"its step must be a compile-time positive int"),
])
def test_unpipelinable_loops_are_errors_at_the_loop(kernel, reason):
    x = torch.zeros(64)
    args = (x, torch.zeros(8, dtype=torch.int32), x) if kernel is indirect else (x, x)
    with pytest.raises(tj.CompilationError, match=r"tj.range\(pipeline=2\) cannot pipeline "
                       r"this loop: " + reason) as info:
        kernel.compile(*args)
    assert info.value.line == _line_of(kernel, "pipeline=2")
