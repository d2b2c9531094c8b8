"""Row reductions of fragments laid out over threads (``layout.fragments``: a blocked
source, its reduced layout for the result), against torch, in both lowerings: per thread
the ``shuffle`` family takes them (xor shuffles over the row's lanes, shared slots across
warps); ``team_once`` runs them with its own families.
"""
import pytest
import torch

import tilejit as tj
from support.gpu import needs_nvrtc
from tilejit.ir import parse_kernel
from tilejit.layout import TileLayout
from tilejit.layout.fragments import blocked_layout, reduced_layout
from tilejit.passes.pipeline import PIPELINE, run_pipeline
from tilejit.targets.backend import get_backend
from tilejit.targets.cpu import jit
from tilejit.targets.cpu.backend import SIMT_OPT_LEVEL

TORCH = {"sum": lambda x: x.sum(1), "max": lambda x: x.max(1).values,
         "min": lambda x: x.min(1).values}


def layouts(rows: int, cols: int, warps: int):
    src = blocked_layout((rows, cols), lanes=32, warps=warps, vector=4)
    assert src is not None, (rows, cols, warps)
    return src, reduced_layout(src, (rows, cols), 1)


def reduce_record(compiled, lowering: str):
    """The reduce's dispatch record in ``compiled`` (a CompiledKernel, or the kernel whose
    newest launched binary to read); per thread it names the shuffle family."""
    if isinstance(compiled, tj.Kernel):
        compiled = compiled.compiled_kernels()[-1]
    (record,) = [r for r in compiled.dispatch_log if r.primitive == "reduce"]
    if lowering == "per_thread":
        assert record.rule == "shuffle", str(record)
        assert record.distribution.startswith("owned"), str(record)
    return record


@tj.kernel
def row_reduce(x, out, R: tj.constexpr, N: tj.constexpr, OP: tj.constexpr,
               SRC: tj.constexpr, DST: tj.constexpr):
    t = tj.fragment((R, N), tj.float32, layout=SRC)
    tj.copy(t, x[0:R, 0:N])
    s = tj.fragment((R,), tj.float32, layout=DST)
    tj.reduce(s, t, OP, 1)
    tj.copy(out[0:R], s)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("rows, cols, warps", [
    (8, 16, 1),     # rows over 8 lanes, each row over 4 lanes
    (16, 64, 4),    # rows over warps and lanes, each row over 16 lanes
    (6, 128, 4),    # rows over 2 warps, each row over 32 lanes x 2 warps
    (2, 512, 4),    # each row over 32 lanes x 2 warps, 4 registers of 4
    (3, 64, 1),     # each row over the whole warp: results held as lane copies only
    (6, 128, 1),
])
def test_row_reductions_against_torch(op, rows, cols, warps, lowering):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * cols + warps))
    src, dst = layouts(rows, cols, warps)
    out = torch.zeros(rows)
    row_reduce[(1,)](x, out, R=rows, N=cols, OP=op, SRC=src, DST=dst, num_warps=warps)
    torch.testing.assert_close(out, TORCH[op](x), rtol=1e-5, atol=1e-5)
    record = reduce_record(row_reduce, lowering)
    if lowering == "per_thread":
        lanes_and_warps = src.size("laneid") * src.size("warpid") // dst.size("laneid") \
            // dst.size("warpid")
        assert record.shape == (lanes_and_warps,)   # the threads sharing a row


def test_max_propagates_nan_from_any_lane_or_warp(lowering):
    x = torch.randn(6, 128, generator=torch.Generator().manual_seed(7))
    x[1, 3] = float("nan")     # warp digit 0 of its row
    x[4, 100] = float("nan")   # warp digit 1
    x[5, 0] = float("inf")
    src, dst = layouts(6, 128, 4)
    out = torch.zeros(6)
    row_reduce[(1,)](x, out, R=6, N=128, OP="max", SRC=src, DST=dst, num_warps=4)
    torch.testing.assert_close(out, x.max(1).values, equal_nan=True)
    assert out[1].isnan() and out[4].isnan() and out[5] == float("inf")
    reduce_record(row_reduce, lowering)


@tj.kernel
def sum_of_squares(x, out, R: tj.constexpr, N: tj.constexpr, SRC: tj.constexpr,
                   DST: tj.constexpr):
    t = tj.fragment((R, N), tj.float32, layout=SRC)
    tj.copy(t, x[0:R, 0:N])
    s = tj.fragment((R,), tj.float32, layout=DST)
    tj.reduce(s, t * t, "sum", 1)
    tj.copy(out[0:R], s)


@tj.kernel
def half_rows_summed(x, out, R: tj.constexpr, N: tj.constexpr, SRC: tj.constexpr,
                     DST: tj.constexpr):
    t = tj.fragment((R, N), tj.float16, layout=SRC)
    tj.copy(t, x[0:R, 0:N])
    s = tj.fragment((R, 1), tj.float32, layout=DST)   # the axis kept, a wider dtype
    tj.reduce(s, t, "sum", 1)
    tj.copy(out[0:R, 0:1], s)


@pytest.mark.parametrize("rows, cols, warps", [(4, 8, 1), (6, 128, 4)])
def test_f16_rows_summed_in_f32_keeping_the_axis(rows, cols, warps, lowering):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(11)).half()
    src, dst = layouts(rows, cols, warps)   # (4, 8): one element per thread
    out = torch.zeros(rows, 1)
    half_rows_summed[(1,)](x, out, R=rows, N=cols, SRC=src, DST=dst, num_warps=warps)
    torch.testing.assert_close(out, x.float().sum(1, keepdim=True), rtol=1e-4, atol=1e-4)
    reduce_record(half_rows_summed, lowering)


@pytest.mark.parametrize("rows, cols, warps", [(8, 16, 1), (6, 128, 4)])
def test_a_fused_chain_is_reduced_where_its_source_lives(rows, cols, warps, lowering):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(8))
    src, dst = layouts(rows, cols, warps)
    out = torch.zeros(rows)
    sum_of_squares[(1,)](x, out, R=rows, N=cols, SRC=src, DST=dst, num_warps=warps)
    torch.testing.assert_close(out, (x * x).sum(1), rtol=1e-5, atol=1e-5)
    compiled = sum_of_squares.compiled_kernels()[-1]
    assert all(r.primitive != "pointwise" for r in compiled.dispatch_log)  # folded in
    reduce_record(sum_of_squares, lowering)


@pytest.mark.team_once_only("builds the per-thread kernel itself")
@pytest.mark.parametrize("rows, cols, warps", [(8, 16, 1), (6, 128, 4)])
def test_per_thread_the_shuffle_family_computes_the_fused_chain(rows, cols, warps):
    """What the test above will check per thread once the temporary has a layout: here the
    pipeline runs without sync-hazards (whose barrier on the temporary stops fusion; the
    laid-out fragments need none), so the reduce carries the chain."""
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(10))
    src, dst = layouts(rows, cols, warps)
    out = torch.zeros(rows)
    text = sum_of_squares.compile(x, out, R=rows, N=cols, SRC=src, DST=dst, simt=True,
                                  num_warps=warps).asm["ir"]
    backend = get_backend("cpu")
    backend.register()
    lowered, stages = run_pipeline(parse_kernel(text), target_passes=backend.passes,
                                   passes=[n for n, _ in PIPELINE if n != "sync-hazards"])
    (reduce,) = [line for line in stages["dispatch"].splitlines() if "tile.reduce" in line]
    assert "steps = [[mul, f32, 0, 0]]" in reduce and 'rule = "shuffle"' in reduce, reduce
    module = jit.load(jit.compile(lowered, granularity="thread", opt_level=SIMT_OPT_LEVEL))
    module.launch((1,), [x, out])
    torch.testing.assert_close(out, (x * x).sum(1), rtol=1e-5, atol=1e-5)


@tj.kernel
def per_warp_row_sums(x, out, R: tj.constexpr, N: tj.constexpr, SRC: tj.constexpr,
                      DST: tj.constexpr):
    """Each warp sums its own R rows: the layouts place elements on lanes only."""
    first = tj.warp_id() * R
    with tj.warp():
        t = tj.fragment((R, N), tj.float32, layout=SRC)
        tj.copy(t, x[first:first + R, 0:N])
        s = tj.fragment((R,), tj.float32, layout=DST)
        tj.reduce(s, t, "sum", 1)
        tj.copy(out[first:first + R], s)


def test_a_warp_team_reduces_its_own_rows(lowering):
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(9))
    src, dst = layouts(8, 32, 1)
    out = torch.zeros(16)
    per_warp_row_sums[(1,)](x, out, R=8, N=32, SRC=src, DST=dst, num_warps=2)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    assert reduce_record(per_warp_row_sums, lowering).scope.startswith("warp")


@tj.kernel
def forced_shuffle(x, out, R: tj.constexpr, N: tj.constexpr, SRC: tj.constexpr,
                   DST: tj.constexpr):
    t = tj.fragment((R, N), tj.float32, layout=SRC)
    tj.copy(t, x[0:R, 0:N])
    s = tj.fragment((R,), tj.float32, layout=DST)
    tj.reduce(s, t, "sum", 1, dispatch="shuffle")
    tj.copy(out[0:R], s)


BLOCKED_8_16 = layouts(8, 16, 1)[0]
THREE_LANES = TileLayout.parse("(2,3,16):(16@m,1@laneid,1@m)")   # lanes 3..31 hold nothing


@pytest.mark.team_once_only("the declines of the per-thread family, run per thread here")
@pytest.mark.parametrize("shape, src, dst, reason", [
    # every lane holds every result, also the lanes that hold none of a row
    ((8, 16), BLOCKED_8_16, TileLayout.parse("8:1@m + R[32:1@laneid]"),
     "does not hold each row's result on the threads that hold the row, as src's reduced "
     r"layout does: use 8:4@laneid \+ R\[4:1@laneid\]"),
    ((8, 16), BLOCKED_8_16, TileLayout.parse("8:1@m"),
     "dst is not a fragment laid out over threads"),
    ((2, 48), THREE_LANES, reduced_layout(THREE_LANES, (2, 48), 1),
     "src's lane iter 3:1@laneid on the reduced axis has an extent or stride that is no "
     "power of two"),
    ((2, 48), THREE_LANES, reduced_layout(THREE_LANES, (2, 48), 1),
     "src's threads on laneid do not all hold elements"),
])
def test_what_the_family_declines_says_why(shape, src, dst, reason):
    rows, cols = shape
    x, out = torch.ones(rows, cols), torch.zeros(rows)
    with pytest.raises(tj.DispatchError, match=reason) as info:
        forced_shuffle[(1,)](x, out, R=rows, N=cols, SRC=src, DST=dst, num_warps=1, simt=True)
    assert 'tj.reduce(s, t, "sum", 1, dispatch="shuffle")' in str(info.value)
    with pytest.raises(tj.DispatchError, match=r"shuffle +\| it runs only per_thread; this "
                                               "lowering is team_once"):
        forced_shuffle[(1,)](x, out, R=rows, N=cols, SRC=src, DST=dst, num_warps=1,
                             simt=False)


# --------------------------------------------------------------------------- cuda
@needs_nvrtc
@pytest.mark.team_once_only("compiles for cuda, whose lowering is per_thread")
@pytest.mark.parametrize("rows, cols, warps", [(8, 16, 1), (6, 128, 4)])
def test_shuffle_reductions_compile_for_cuda_without_a_gpu(rows, cols, warps):
    src, dst = layouts(rows, cols, warps)
    spec = tj.TensorSpec((rows, cols), tj.float32, device="cuda")
    out = tj.TensorSpec((rows,), tj.float32, device="cuda")
    compiled = row_reduce.compile(spec, out, R=rows, N=cols, OP="max", SRC=src, DST=dst,
                                  num_warps=warps, target="cuda", arch="sm_90a")
    reduce_record(compiled, "per_thread")
    ptx = compiled.asm["ptx"]
    assert "shfl.sync.bfly" in ptx
    assert ("bar.sync" in ptx) == (warps > 1)   # only warps that split rows meet
    assert compiled.metadata["spill_bytes"] == 0
