"""wgmma-groups (tilejit/passes/wgmma_groups.py): which accumulators may be pending where,
through loops and branches; each tj.wgmma_wait gets the ones it may retire as operands
(its text round-trips); a read of one before the wait that retires it is a
CompilationError at the read's line naming the gemm; the frontend's refusals. The whole
mainloop against torch, the race and the PTX: tests/e2e/test_e2e_wgmma_in_flight.py."""
import inspect
import re

import pytest
import torch

import tilejit as tj
from tilejit.ir.parser import parse_kernel
from tilejit.layout import SwizzleMode, smem_layout
from tilejit.passes.pipeline import run_pipeline

LAYOUTS = dict(LA=smem_layout((64, 16), "float16", SwizzleMode.B32),
               LB=smem_layout((16, 32), "float16", SwizzleMode.B64))


@tj.kernel
def groups(A, B, C, D, CASE: tj.constexpr, LA: tj.constexpr, LB: tj.constexpr):
    a = tj.alloc_shared((64, 16), A.dtype, layout=LA)
    b = tj.alloc_shared((16, 32), B.dtype, layout=LB)
    tj.copy(a, A[0:64, 0:16])
    tj.copy(b, B[0:16, 0:32])
    acc = tj.fragment((64, 32), tj.float32)
    other = tj.fragment((64, 32), tj.float32)
    tj.fill(acc, 0.0)
    tj.fill(other, 0.0)
    tj.sync()
    if CASE == "loop" or CASE == "loop without the last wait":
        for k in range(3):
            tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)   # gemm acc
            tj.wgmma_wait(1)
        if CASE == "loop":
            tj.wgmma_wait(0)
    if CASE == "two groups" or CASE == "two groups, the newer read":
        tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)
        tj.gemm_async(other, a, b, dispatch="wgmma", wait=False)   # gemm other
        tj.wgmma_wait(1)
        if CASE == "two groups, the newer read":
            tj.copy(D[0:64, 0:32], other)                          # read other
        tj.copy(C[0:64, 0:32], acc)
        tj.wgmma_wait(0)
    if CASE == "no wait in the loop":   # a group more each iteration: the list is capped
        for k in range(5):
            tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)
        tj.wgmma_wait(0)
    if CASE == "out of scope":
        with tj.warpgroup():
            inner = tj.fragment((64, 32), tj.float32)
            tj.fill(inner, 0.0)
            tj.gemm_async(inner, a, b, dispatch="wgmma", wait=False)
        tj.wgmma_wait(0)
    if CASE == "another family":
        tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)      # gemm before mma
        tj.gemm(acc, a, b)                                          # mma gemm
        tj.wgmma_wait(0)
    if CASE == "one branch":
        if C[0, 0] > 0.0:
            tj.gemm_async(acc, a, b, dispatch="wgmma", wait=False)   # gemm in a branch
    tj.copy(C[0:64, 0:32], acc)                                    # read acc
    tj.copy(D[0:64, 0:32], other)


def line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(groups.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _args():
    return (torch.zeros(64, 16).half(), torch.zeros(16, 32).half(), torch.zeros(64, 32),
            torch.zeros(64, 32))


def _waits(case: str) -> tuple[list[str], str]:
    """The wgmma_wait lines after the pass (without locations), and the whole text."""
    frontend = groups.compile(*_args(), CASE=case, **LAYOUTS).asm["ir"]
    text = run_pipeline(parse_kernel(frontend), dump=(), passes=["wgmma-groups"])[1][
        "wgmma-groups"]
    waits = [re.sub(r" loc\(.*\)", "", line).strip() for line in text.splitlines()
             if "wgmma_wait" in line]
    return waits, text


def test_a_group_carried_around_the_loop_reaches_both_waits():
    waits, text = _waits("loop")
    assert waits == ["wgmma_wait(%acc) {pending = 1}", "wgmma_wait(%acc) {pending = 0}"]
    assert str(parse_kernel(text)) == text


def test_groups_piling_up_in_a_loop_reach_a_fixpoint():
    waits, _ = _waits("no wait in the loop")
    assert waits == ["wgmma_wait(%acc) {pending = 0}"]


def test_an_accumulator_a_block_yields_is_carried_by_the_name_it_has_after_it():
    waits, text = _waits("out of scope")
    assert waits == ["wgmma_wait(%inner) {pending = 0}"]
    assert "%inner = team {kind = warpgroup}" in text


def test_an_accumulator_out_of_scope_is_retired_but_not_carried():
    """IR whose warpgroup block keeps its fragment: the wait after the block still retires
    the group, and nothing can read the fragment later."""
    frontend = groups.compile(*_args(), CASE="out of scope", **LAYOUTS).asm["ir"]
    kept = re.sub(r"%inner = team \{kind = warpgroup\} : buffer<[^>]*>",
                  "team {kind = warpgroup}", frontend)
    kept = kept.replace("yield(%inner_1)", "yield")
    assert kept.count("team {kind = warpgroup} loc") == 1 and "yield(%inner_1)" not in kept
    text = run_pipeline(parse_kernel(kept), dump=(), passes=["wgmma-groups"])[1]["wgmma-groups"]
    assert "wgmma_wait {pending = 0}" in text


def test_a_wait_carries_every_accumulator_it_may_retire():
    waits, _ = _waits("two groups")
    assert waits == ["wgmma_wait(%acc, %other) {pending = 1}",
                     "wgmma_wait(%other) {pending = 0}"]


@pytest.mark.parametrize("case, gemm, read", [
    ("loop without the last wait", "# gemm acc", "# read acc"),
    ("two groups, the newer read", "# gemm other", "# read other"),
    ("one branch", "# gemm in a branch", "# read acc"),
    ("another family", "# gemm before mma", "# mma gemm"),   # only wgmma chains
])
def test_a_read_before_the_retiring_wait_is_refused_at_its_line(case, gemm, read):
    name = "other" if "other" in read else "acc"
    what = "gemm" if "mma" in read else "copy"
    with pytest.raises(tj.CompilationError, match=(
            rf"{what} touches '{name}' while the wgmma group of the gemm_async at line "
            rf"{line_of(gemm)} \(wait=False\) may still be in flight: a tj.wgmma_wait\(n\) "
            "that retires it is missing before this line")) as info:
        groups.compile(*_args(), CASE=case, **LAYOUTS)
    assert info.value.line == line_of(read)


def test_per_thread_each_wait_carries_its_accumulators_registers():
    """carry-wgmma-accumulators: a thread's 16 values of acc [64, 32] (wgmma's layout),
    loaded from its registers, through wgmma_wait_group, stored back."""
    lowered = groups.compile(*_args(), CASE="loop", simt=True, **LAYOUTS).asm["lowered"]
    waits = [line.strip() for line in lowered.splitlines() if "= wgmma_wait_group(" in line]
    assert [re.search(r"\{pending = (\d)\}", line)[1] for line in waits] == ["1", "0"]
    for line in waits:
        values = re.search(r"wgmma_wait_group\(([^)]*)\)", line)[1].split(", ")
        assert len(values) == 16
    assert "wgmma_wait(" not in lowered


def test_the_cpus_own_lowering_drops_the_waits_and_runs():
    a, b = torch.randn(64, 16).half(), torch.randn(16, 32).half()
    c, d = torch.zeros(64, 32), torch.zeros(64, 32)
    lowered = groups.compile(a, b, c, d, CASE="loop", **LAYOUTS).asm["lowered"]
    assert "wgmma_wait" not in lowered
    groups[(1,)](a, b, c, d, CASE="loop", **LAYOUTS)
    torch.testing.assert_close(c, 3 * (a.float() @ b.float()), rtol=1e-4, atol=1e-4)


@tj.kernel
def misuse(A, B, C, WAIT: tj.constexpr, DISPATCH: tj.constexpr):
    a = tj.alloc_shared((64, 16), A.dtype)
    b = tj.alloc_shared((16, 32), B.dtype)
    acc = tj.fragment((64, 32), tj.float32)
    tj.gemm_async(acc, a, b, dispatch=DISPATCH, wait=False)
    tj.wgmma_wait(WAIT)


@pytest.mark.parametrize("wait, dispatch, message", [
    (0, None, r"tj.gemm_async\(wait=False\) leaves its group in flight for a later "
              r"tj.wgmma_wait\(n\): it needs dispatch=\"wgmma\", got dispatch=None"),
    (-1, "wgmma", r"tj.wgmma_wait\(pending\) needs a compile-time int >= 0 \(the groups "
                  r"left in flight\), got -1"),
])
def test_the_frontend_explains_misuse(wait, dispatch, message):
    with pytest.raises(tj.CompilationError, match=message) as info:
        misuse.compile(*_args()[:3], WAIT=wait, DISPATCH=dispatch)
    assert info.value.line is not None
