"""The infer-fragment-layouts pass: per-thread kernels' fragments get thread layouts chosen
from their uses (docs/lowering.md "Fragment layout inference")."""
from __future__ import annotations

import re

import pytest
import torch

import tilejit as tj
from tilejit.examples import kernels
from tilejit.ir.parser import parse_kernel
from tilejit.layout import TileLayout
from tilejit.layout.fragments import blocked_layout, mma_accumulator_layout, reduced_layout
from tilejit.passes.pipeline import PIPELINE, run_pipeline


def _stage(compiled, stage: str = "infer-fragment-layouts") -> str:
    """The IR of a compiled kernel after ``stage`` (the pipeline rerun from its ``ir``)."""
    names = [name for name, _ in PIPELINE]
    passes = names[:names.index(stage) + 1]
    return run_pipeline(parse_kernel(compiled.asm["ir"]), dump=(), passes=passes)[1][stage]


def test_the_pass_runs_before_sync_hazards_and_fusion():
    names = [name for name, _ in PIPELINE]
    assert names.index("scope-analysis") < names.index("infer-fragment-layouts") \
        < names.index("sync-hazards") < names.index("fuse-pointwise") < names.index("dispatch")


def test_a_gemm_accumulator_gets_a_blocked_layout_and_is_owned_by_its_threads():
    a, b = torch.randn(96, 80), torch.randn(80, 72)
    c = torch.zeros(96, 72)
    compiled = kernels.matmul.compile(a, b, c, BM=32, BN=32, BK=16, simt=True)
    text = _stage(compiled, "infer-fragment-layouts")
    acc = next(line for line in text.splitlines() if line.strip().startswith("%acc = alloc"))
    expected = blocked_layout((32, 32), lanes=32, warps=4, vector=16)
    assert f'layout = "{expected}"' in acc
    assert 'layout_note = "inferred: blocked over the cta\'s 128 threads"' in acc
    gemm = next(r for r in compiled.dispatch_log if r.primitive == "gemm")
    assert gemm.distribution == f"owned by the threads of C's layout {expected}"
    kernels.matmul[(3, 3)](a, b, c, BM=32, BN=32, BK=16, simt=True)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_team_once_kernels_are_left_alone():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    compiled = kernels.matmul.compile(a, b, torch.zeros(64, 64), BM=32, BN=32, BK=16)
    assert "layout_note" not in _stage(compiled, "infer-fragment-layouts")
    assert _stage(compiled, "infer-fragment-layouts") == _stage(compiled, "scope-analysis")


@tj.kernel
def read_natively(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    out[0] = t[3]


@tj.kernel
def odd_rows(x, out):
    t = tj.fragment((3, 100), tj.float32)
    tj.copy(t, x[0:3, 0:100])
    tj.mul(t, t, 2.0)
    tj.copy(out[0:3, 0:100], t)


def test_what_cannot_go_to_registers_stays_shared_and_says_why():
    x, out = torch.randn(128), torch.zeros(4)
    compiled = read_natively.compile(x, out, N=128, simt=True)
    text = _stage(compiled, "infer-fragment-layouts")
    assert re.search(r'%t = alloc \{scope = fragment, [^}]*layout_note = "not inferred \(stays '
                     r'in shared memory\): load at line \d+ reaches it outside a tile '
                     r'primitive"', text), text
    read_natively[(1,)](x, out, N=128, simt=True)
    assert out[0] == x[3]
    x, out = torch.randn(3, 100), torch.zeros(3, 100)
    compiled = odd_rows.compile(x, out, simt=True)
    assert "no blocked layout gives each of the cta's 128 threads the same whole number of " \
           "the [3, 100] elements" in _stage(compiled, "infer-fragment-layouts")
    odd_rows[(1,)](x, out, simt=True)
    torch.testing.assert_close(out, x * 2)


@tj.kernel
def warp_rows(x, out):
    with tj.warp():
        row = tj.warp_id() * 4
        t = tj.fragment((4, 32), tj.float32)
        tj.copy(t, x[row:row + 4, 0:32])
        tj.add(t, t, 1.0)
        tj.copy(out[row:row + 4, 0:32], t)


def test_a_warp_teams_fragment_is_laid_out_over_its_lanes():
    x, out = torch.randn(8, 32), torch.zeros(8, 32)
    compiled = warp_rows.compile(x, out, simt=True, num_warps=2)
    text = _stage(compiled, "infer-fragment-layouts")
    layout = blocked_layout((4, 32), lanes=32, warps=1, vector=16)
    assert "warpid" not in str(layout)
    assert f'layout = "{layout}"' in text and "blocked over the warp's 32 threads" in text
    warp_rows[(1,)](x, out, simt=True, num_warps=2)
    torch.testing.assert_close(out, x + 1)


def test_the_ir_with_inferred_layouts_round_trips():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    compiled = kernels.matmul.compile(a, b, torch.zeros(64, 64), BM=32, BN=32, BK=16,
                                      simt=True)
    text = _stage(compiled, "infer-fragment-layouts")
    assert str(parse_kernel(text)) == text


def test_reduced_layout_is_the_layout_of_a_reduction():
    layout = blocked_layout((4, 256), lanes=32, warps=4, vector=4)
    assert str(layout) == "(4,2,32,4):(1@warpid,4@m,1@laneid,1@m)"
    assert reduced_layout(layout, (4, 256), 1) == TileLayout.parse("4:1@warpid + R[32:1@laneid]")


def _gemm_of_a_computed_tile(a, b, c, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr):
    scaled = tj.fragment((M, K), tj.float32)
    tj.copy(scaled, a[0:M, 0:K])
    tj.mul(scaled, scaled, 2.0)
    b_tile = tj.alloc_shared((K, N), tj.float32)
    tj.copy(b_tile, b[0:K, 0:N])
    acc = tj.fragment((M, N), tj.float32)
    tj.fill(acc, 0.0)
    tj.gemm(acc, scaled, b_tile)
    tj.copy(c[0:M, 0:N], acc)


gemm_of_a_computed_tile = tj.kernel(_gemm_of_a_computed_tile)


def test_an_operand_no_rule_reads_from_registers_is_converted_through_shared_memory():
    """The fma gemm needs whole rows of A in every thread: the laid-out A tile is copied to
    shared memory for it (a logged conversion, with the barrier sync-hazards adds), while
    both tiles stay in registers."""
    a, b = torch.randn(32, 24), torch.randn(24, 16)
    c = torch.zeros(32, 16)
    compiled = gemm_of_a_computed_tile.compile(a, b, c, M=32, N=16, K=24, simt=True)
    text = _stage(compiled, "sync-hazards")
    lines = text.splitlines()
    staging = next(i for i, line in enumerate(lines) if "converts scaled's layout" in line)
    assert "scope = shared" in lines[staging]
    assert 'layout_note = "converts scaled\'s layout for tile.gemm at line' in lines[staging]
    assert lines[staging + 1].strip().startswith("tile.copy(")
    assert lines[staging + 2].strip().startswith("sync {reason = \"auto_sync: shared buffer")
    for name in ("scaled", "acc"):
        alloc = next(line for line in lines if line.strip().startswith(f"%{name} = alloc"))
        assert 'layout_note = "inferred: blocked' in alloc
    gemm_of_a_computed_tile[(1,)](a, b, c, M=32, N=16, K=24, simt=True)
    torch.testing.assert_close(c, (a * 2) @ b, rtol=1e-4, atol=1e-4)
    # Without auto_sync nothing may add the barrier a conversion needs: the tiles stay
    # shared (and sync-hazards then reports the barriers that are missing).
    unsynced = parse_kernel(compiled.asm["ir"].replace('{target = "cpu", ',
                                                      '{target = "cpu", auto_sync = false, ', 1))
    text = run_pipeline(unsynced, dump=(),
                        passes=["scope-analysis", "infer-fragment-layouts"])[1]["infer-fragment-layouts"]
    assert "converts" not in text and "not inferred (stays in shared memory): tile.gemm" in text


@pytest.mark.parametrize("rows, cols, warps", [(1, 256, 4), (4, 128, 4), (3, 64, 1)])
def test_softmax_keeps_its_tiles_in_registers_with_no_barrier(rows, cols, warps):
    """The example softmax per thread: the row tile, the exponentials and the row
    statistics all get layouts, the reductions shuffle, and no barrier is inserted (only
    a row split over warps meets in shared memory, inside its reduction)."""
    x = torch.randn(rows * 2 + 1, cols)
    out = torch.zeros_like(x)
    compiled = kernels.row_softmax.compile(x, out, BM=rows, BN=cols, simt=True,
                                           num_warps=warps)
    text = _stage(compiled, "infer-fragment-layouts")
    notes = re.findall(r'layout_note = "([^"]*)"', text)
    assert notes and all(note.startswith("inferred") for note in notes), notes
    assert [r.rule for r in compiled.dispatch_log if r.primitive == "reduce"] == ["shuffle"] * 2
    assert all(r.distribution.startswith("owned") for r in compiled.dispatch_log)
    lowered = compiled.asm["lowered"]
    assert "auto_sync" not in lowered
    warps_split_rows = rows < warps
    assert bool(re.search(r"^\s*sync\b", lowered, re.M)) == warps_split_rows
    kernels.row_softmax[(3,)](x, out, BM=rows, BN=cols, simt=True, num_warps=warps)
    torch.testing.assert_close(out, torch.softmax(x, 1))


def test_an_f16_gemms_accumulator_gets_the_tensor_core_layout():
    a, b = torch.randn(64, 96).half(), torch.randn(96, 32).half()
    c = torch.zeros(64, 32)
    compiled = kernels.matmul.compile(a, b, c, BM=32, BN=32, BK=32, simt=True)
    layout = mma_accumulator_layout((32, 32), 4)
    acc = next(line for line in _stage(compiled).splitlines()
               if line.strip().startswith("%acc = alloc"))
    assert f'layout = "{layout}"' in acc
    assert 'layout_note = "inferred: the tensor-core accumulator of the gemm at line' in acc
    assert [r.rule for r in compiled.dispatch_log if r.primitive == "gemm"] == ["mma"]
    kernels.matmul[(2, 1)](a, b, c, BM=32, BN=32, BK=32, simt=True)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    # A shape the tensor cores do not tile falls back to the blocked layout and fma.
    compiled = kernels.matmul.compile(a, b, torch.zeros(64, 32), BM=8, BN=32, BK=32,
                                      simt=True)
    assert [r.rule for r in compiled.dispatch_log if r.primitive == "gemm"] == ["fma"]
    assert "inferred: blocked" in _stage(compiled)


def test_layer_norm_keeps_every_tile_in_registers():
    """Row statistics computed from a reduction's result (``sum / N``, ``rsqrt(...)``)
    keep its layout, so nothing of the example layer norm stays in shared memory."""
    x, w, b = torch.randn(9, 256), torch.randn(256), torch.randn(256)
    out = torch.zeros_like(x)
    compiled = kernels.layer_norm.compile(x, w, b, out, 1e-5, N=256, BM=4, BLOCK=256,
                                          simt=True)
    text = _stage(compiled)
    notes = re.findall(r'layout_note = "([^"]*)"', text)
    assert notes and all(note.startswith("inferred") for note in notes), notes
    assert "computes it from" in text
    assert "scope = shared" not in compiled.asm["lowered"]
    kernels.layer_norm[(3,)](x, w, b, out, 1e-5, N=256, BM=4, BLOCK=256, simt=True)
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (256,), w, b),
                               rtol=1e-4, atol=1e-4)


def test_a_group_stays_in_shared_memory_together_when_one_tile_has_no_layout():
    """781 columns over 128 threads: no blocked layout fits the row tile, so the row
    statistics and temporaries that share its primitives stay in shared memory with it (half
    in registers, a primitive writing a shared tile from replicated registers would store
    each element from every warp)."""
    x = torch.randn(3, 781)
    out = torch.zeros_like(x)
    compiled = kernels.row_softmax.compile(x, out, BM=1, BN=781, simt=True)
    notes = re.findall(r'layout_note = "([^"]*)"', _stage(compiled))
    assert any("no blocked layout" in note and "[1, 781]" in note for note in notes), notes
    assert all(note.startswith("not inferred") for note in notes), notes
    kernels.row_softmax[(3,)](x, out, BM=1, BN=781, simt=True)
    torch.testing.assert_close(out, torch.softmax(x, 1))


@tj.kernel
def masked_running_max(A, B, out, STEPS: tj.constexpr, LA: tj.constexpr, LB: tj.constexpr):
    """Per row r, the max over key steps of (A B^T)[r, c] for keys step * 16 + c <= r: a
    causal mask from two aranges, a running max that starts at -inf (the online softmax's
    row statistic, carried by the loop)."""
    a = tj.alloc_shared((64, 16), A.dtype, layout=LA)
    b = tj.alloc_shared((16, 16), B.dtype, layout=LB)
    tj.copy(a, A[0:64, 0:16])
    tj.copy(b, B[0:16, 0:16])
    tj.sync()
    best = tj.full((64, 1), float("-inf"), tj.float32)
    rows = tj.arange(0, 64)
    for step in range(STEPS):
        cols = step * 16 + tj.arange(0, 16)
        keep = rows[:, None] >= cols[None, :]
        s = tj.fragment((64, 16), tj.float32)
        tj.fill(s, 0.0)
        tj.gemm_async(s, a, b, transpose_b=True, dispatch="wgmma")
        best = tj.maximum(best, tj.max(tj.where(keep, s, float("-inf")), axis=1,
                                       keep_dims=True))
    tj.copy(out[0:64, 0:1], best)


def test_a_mask_and_a_carried_statistic_follow_the_wgmma_accumulator():
    """The mask, built from indices alone (before the gemm in program order), takes the
    layout of the tile selected from the accumulator rather than the blocked fallback; the
    running max's initial -inf takes the layout of the tile the loop computes from it. So
    every [64, 16] tile is in wgmma's layout and every [64, 1] one in its reduction's."""
    from tilejit.layout import SwizzleMode, smem_layout
    from tilejit.layout.hw_nvidia import wgmma_accumulator_layout
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(64, 16, generator=gen).half(), torch.randn(16, 16, generator=gen).half()
    out = torch.zeros(64, 1)
    options = dict(STEPS=3, LA=smem_layout((64, 16), "float16", SwizzleMode.B32),
                   LB=smem_layout((16, 16), "float16", SwizzleMode.B32), simt=True)
    compiled = masked_running_max.compile(a, b, out, **options)
    tile = wgmma_accumulator_layout((64, 16), warp_axis="warpid")
    row = reduced_layout(tile, (64, 16), 1)
    allocs = {m[0]: m for m in re.findall(
        r'%(\w+) = alloc \{scope = fragment, dtype = (\w+), shape = \[([\d, ]+)\], '
        r'layout = "([^"]*)", layout_note = "([^"]*)"', _stage(compiled))}
    assert allocs["keep"][3] == str(tile), allocs["keep"]
    assert allocs["keep"][4].startswith("inferred: the layout of the tile that line")
    assert allocs["best"][3] == str(row), allocs["best"]
    assert all(layout == str(tile) for _, _, shape, layout, _ in allocs.values()
               if shape == "64, 16")
    assert all(layout == str(row) for _, _, shape, layout, _ in allocs.values()
               if shape == "64, 1")
    masked_running_max[(1,)](a, b, out, **options)
    s = a.float() @ b.float().T
    keys = torch.arange(48)
    expected = torch.where(torch.arange(64)[:, None] >= keys, s.repeat(1, 3),
                           float("-inf")).max(1, keepdim=True).values
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
