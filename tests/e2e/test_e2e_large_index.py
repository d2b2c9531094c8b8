"""Tensors of 2^31 elements and more: CTA ids and the index math built on them are 64-bit
when a tensor argument is large (``ArgSpec.index64``), 32-bit otherwise (issue 8).

The launches use int8 outputs made with ``torch.empty`` (address space only: the pages a
kernel never writes are never touched) and kernels that write only the last tile, and
inputs expanded from one element (no memory at all)."""
import pytest
import torch

import tilejit as tj
from tilejit.examples.kernels import run_vector_add, vector_add
from tilejit.knobs import knobs
from tilejit.runtime import arguments

N = 2**31 + 4096
BLOCK = 4096


@tj.kernel
def mark_tail(out, BLOCK: tj.constexpr):
    base = tj.cta_id(0) * BLOCK
    if base + BLOCK >= out.shape[0]:   # the last tile only: cheap on a huge tensor
        tile = tj.fragment((BLOCK,), out.dtype)
        tj.fill(tile, 7)
        tj.copy(out[base:base + BLOCK], tile)
        last = base + BLOCK - 1
        if last < out.shape[0]:
            out[last] = 9


def test_the_tail_of_a_tensor_past_2_31_elements_is_written():
    out = torch.empty(N, dtype=torch.int8)
    mark_tail[(tj.cdiv(N, BLOCK),)](out, BLOCK=BLOCK)
    tail = out[-BLOCK:]
    assert torch.all(tail[:-1] == 7) and tail[-1] == 9


def _int_types_of_grid_math(ir_text: str) -> list[str]:
    """The result types of the ops between ``cta_id`` and the first region start."""
    lines = ir_text.splitlines()
    start = next(i for i, line in enumerate(lines) if "thread_index {kind = cta_id}" in line)
    return [line.rsplit(": ", 1)[1].split()[0] for line in lines[start:start + 4]]


def test_a_large_tensor_makes_grid_index_math_64_bit_and_a_small_one_keeps_32_bit():
    large, small = tj.TensorSpec((N,), tj.int8), tj.TensorSpec((N // 4,), tj.int8)
    wide = vector_add.compile(large, small, small, BLOCK=1024)
    narrow = vector_add.compile(small, small, small, BLOCK=1024)
    assert _int_types_of_grid_math(wide.asm["ir"]) == ["i32", "i64", "i64", "i64"]
    assert "index64" in wide.asm["ir"]
    assert _int_types_of_grid_math(narrow.asm["ir"]) == ["i32", "i32", "i32", "i32"]


@pytest.mark.parametrize("make", [
    lambda n: torch.zeros(1, dtype=torch.int8).expand(n),   # large in elements, not in memory
    lambda n: torch.zeros(1, dtype=torch.int8).expand(n).numpy(),
    lambda n: tj.TensorSpec((n,), tj.int8),
])
def test_the_launch_signature_says_whether_a_tensor_is_large(make):
    def spec(n):
        return arguments.arg_spec_of(make(n), "x", "kernel")

    def signature(n):
        value = make(n)
        return arguments.facts(type(value), arguments.facts_of)(value)[0]
    threshold = arguments.INDEX64_ELEMENTS
    assert spec(threshold).index64 and not spec(threshold - 1).index64
    assert signature(threshold) != signature(threshold - 1)
    assert arguments.spec_key(spec(threshold)) != arguments.spec_key(spec(threshold - 1))


def test_do_not_specialize_keeps_64_bit_index_math():
    value = torch.zeros(1, dtype=torch.int8).expand(N)
    assert arguments.arg_spec_of(value, "x", "kernel", specialize=False).index64


def test_a_small_launch_after_a_large_one_compiles_its_own_32_bit_binary():
    big = torch.empty(N, dtype=torch.int8)
    mark_tail[(tj.cdiv(N, BLOCK),)](big, BLOCK=BLOCK)
    little = torch.empty(3 * BLOCK, dtype=torch.int8)
    mark_tail[(3,)](little, BLOCK=BLOCK)
    assert torch.all(little[-BLOCK:-1] == 7) and little[-1] == 9
    # the binaries of this lowering (other tests, and the other lowering, add their own)
    mode = [c for c in mark_tail.compiled_kernels()
            if ('"per_thread"' in c.asm["ir"]) == knobs.simt]
    assert sorted({"index64" in c.asm["ir"] for c in mode}) == [False, True]
    assert len(mode) == 2


@pytest.mark.slow
@pytest.mark.team_once_only("2^31 elements take 20 s per thread on CI's machine; the "
                            "per-thread 64-bit index math is checked by the mark_tail tests")
def test_shipped_vector_add_writes_the_whole_of_2_31_plus_4096_int8_elements():
    ones = torch.ones(1, dtype=torch.int8).expand(N)
    out = torch.empty(N, dtype=torch.int8)
    run_vector_add(ones, ones, out)
    assert torch.all(out[-2 * BLOCK:] == 2) and torch.all(out[:BLOCK] == 2)
