"""Per-thread (SIMT) mode on the CPU: the examples and a representative set of the e2e
kernels run the lowering a GPU target gets (every thread does its share of each tile
primitive, one simulated unit per thread), with small shapes, against torch.

Each launch checks that it really ran per thread: the dispatch log names a cyclic or owned
distribution for the team's primitives, and the binary simulates one unit per thread.
``pytest --simt`` runs any other test in this mode too (tests/conftest.py).
"""
import pytest
import torch

import test_e2e_masks as masks
import test_e2e_native as native
import test_e2e_reduce_expr as reduce_expr
import test_e2e_tile_flow as tile_flow
import tilejit as tj
from tilejit.examples import (layer_norm, matmul, row_softmax, run_layer_norm, run_matmul,
                              run_softmax, run_vector_add, vector_add)
from tilejit.ir.parser import parse_kernel
from tilejit.knobs import knobs
from tilejit.layout import TileLayout
from tilejit.passes.pipeline import PIPELINE, run_pipeline

# The kernels here choose their lowering themselves (simt=True, the knob, or both modes).
pytestmark = pytest.mark.team_once_only("sets each kernel's lowering itself")


def per_thread(kernel, *, shared: bool = False):
    """The binary ``kernel`` last launched with: one unit per thread, and every tile
    primitive of a CTA-wide team split over its threads."""
    compiled = kernel.compiled_kernels()[-1]
    assert compiled.metadata["backend"]["granularity"] == "thread"
    assert "distribution = \"per_thread\"" in compiled.asm["ir"].splitlines()[0]
    for record in compiled.dispatch_log:
        if record.scope.startswith("cta"):
            assert record.distribution.startswith(("cyclic", "owned")), record
    if shared:
        assert compiled.metadata["shared_bytes"] > 0
    return compiled


# --------------------------------------------------------------------------- the mode
@tj.kernel
def add_block(x, y, out, BLOCK: tj.constexpr):
    tj.copy(out[0:BLOCK], x[0:BLOCK] + y[0:BLOCK])


def test_the_knob_the_kernel_option_and_the_launch_option_choose_the_mode(fresh_cache):
    x, y = torch.randn(100), torch.randn(100)
    out = torch.empty(100)

    def mode() -> str:
        return add_block.compiled_kernels()[-1].dispatch_log[0].distribution

    add_block.clear_memory_cache()
    add_block[(1,)](x, y, out, BLOCK=100)
    assert mode() == "uniform"
    with knobs.scoped(simt=True):
        add_block[(1,)](x, y, out, BLOCK=100)
    per_thread(add_block)
    assert add_block.cache_info().compiles == 2   # the mode is part of the cache key
    add_block[(1,)](x, y, out, BLOCK=100, simt=True)   # the launch option: same binary
    assert add_block.cache_info().compiles == 2 and mode().startswith("cyclic")
    torch.testing.assert_close(out, x + y)

    @tj.kernel(simt=True)
    def add(x, y, out, BLOCK: tj.constexpr):
        tj.copy(out[0:BLOCK], x[0:BLOCK] + y[0:BLOCK])

    add[(1,)](x, y, out, BLOCK=100)
    per_thread(add)
    add[(1,)](x, y, out, BLOCK=100, simt=False)   # the launch beats the kernel's option
    assert add.compiled_kernels()[-1].dispatch_log[0].distribution == "uniform"
    torch.testing.assert_close(out, x + y)
    with pytest.raises(tj.LaunchError, match="simt must be True or False"):
        add[(1,)](x, y, out, BLOCK=100, simt="yes")


def test_the_per_thread_ir_names_its_mode_and_has_only_the_barriers_it_needs():
    """Per thread, nothing fences a primitive but the barriers sync-hazards inserts: none
    for a vector add between tensors; one before each primitive that reads a fragment
    another primitive's threads wrote (a cyclic split moves its elements)."""
    x, y = torch.randn(64), torch.randn(64)
    compiled = vector_add.compile(x, y, torch.empty(64), BLOCK=64, simt=True)
    lowered = compiled.asm["lowered"]
    assert 'distribution = "per_thread"' in lowered.splitlines()[0]
    assert "single {team = cta}" not in lowered and "sync" not in lowered
    assert "cyclic over 128 threads" in str(compiled.dispatch_log[0])
    rows = torch.randn(2, 40)
    lowered = row_softmax.compile(rows, torch.empty_like(rows), BM=2, BN=40,
                                  simt=True).asm["lowered"]
    reasons = [line for line in lowered.splitlines() if "auto_sync: fragment buffer" in line]
    assert reasons and all(line.strip().startswith("sync") for line in reasons)
    assert "single {team = cta}" not in lowered
    compiled = row_softmax.compile(rows, torch.empty_like(rows), BM=2, BN=40)   # team_once
    assert "auto_sync: fragment buffer acc" not in compiled.asm["lowered"]


# --------------------------------------------------------------------------- examples
def test_vector_add_example():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(1000, generator=gen), torch.randn(1000, generator=gen)
    out = torch.empty(1000)
    with knobs.scoped(simt=True):
        run_vector_add(x, y, out, block=256)
    torch.testing.assert_close(out, x + y)
    per_thread(vector_add)


@pytest.mark.parametrize("rows, cols, rows_per_cta", [(6, 100, 2), (3, 33, 1)])
def test_softmax_example(rows, cols, rows_per_cta):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols))
    out = torch.empty_like(x)
    with knobs.scoped(simt=True):
        run_softmax(x, out, rows_per_cta=rows_per_cta)
    torch.testing.assert_close(out, torch.softmax(x, 1))
    per_thread(row_softmax)


def test_layer_norm_example():
    gen = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(10, 100, generator=gen), torch.randn(100, generator=gen), \
        torch.randn(100, generator=gen)
    out = torch.empty_like(x)
    with knobs.scoped(simt=True):
        run_layer_norm(x, w, b, out)
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (100,), w, b),
                               rtol=1e-4, atol=1e-4)
    per_thread(layer_norm)


def test_matmul_example_with_shared_tiles_and_edges():
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(40, 50, generator=gen), torch.randn(50, 30, generator=gen)
    c = torch.empty(40, 30)
    with knobs.scoped(simt=True):
        run_matmul(a, b, c, 32, 32, 16)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    per_thread(matmul, shared=True)


# --------------------------------------------------------------------------- e2e kernels
@pytest.mark.parametrize("n, block", [(37, 16), (200, 64)])
def test_masked_vector_add(n, block):
    gen = torch.Generator().manual_seed(n)
    x, y = torch.randn(n + 5, generator=gen), torch.randn(n + 5, generator=gen)
    out = torch.full((n + 5,), 7.0)
    masks.vector_add[(tj.cdiv(n, block),)](x, y, out, n, BLOCK=block, simt=True)
    torch.testing.assert_close(out[:n], x[:n] + y[:n])
    assert (out[n:] == 7).all()
    per_thread(masks.vector_add)


def test_masked_row_softmax_with_minus_inf_fill():
    x = -torch.rand(3, 45, generator=torch.Generator().manual_seed(3)) - 1
    out = torch.zeros(3, 45)
    masks.row_softmax[(3,)](x, out, 45, BLOCK=64, simt=True)
    torch.testing.assert_close(out, torch.softmax(x, 1))
    per_thread(masks.row_softmax)


def test_masked_load_and_store_with_a_global_mask():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(9, 11, generator=gen)
    keep = torch.randint(0, 2, (9, 11), generator=gen).bool()
    out, loaded = torch.full((9, 11), 5.0), torch.zeros(9, 11)
    masks.masked_load_store[(3, 2)](x, keep, out, loaded, BM=4, BN=8, OTHER=-3, simt=True)
    torch.testing.assert_close(loaded, torch.where(keep, x, torch.tensor(-3.0)))
    torch.testing.assert_close(out, torch.where(keep, x, torch.tensor(5.0)))
    per_thread(masks.masked_load_store)


@pytest.mark.parametrize("op, axis, source", [("sum", 1, "fragment"), ("max", 0, "shared"),
                                              ("argmax", 1, "global"), ("min", None, "fragment")])
def test_reductions(op, axis, source):
    x = (torch.randint(-32, 32, (5, 19), generator=torch.Generator().manual_seed(5)) / 4)
    expected = reduce_expr._torch_reduce(x, op, axis, False)
    dtype = torch.int64 if op.startswith("arg") else torch.float32
    out = torch.zeros(expected.shape, dtype=dtype)
    reduce_expr.reduce_expr[(1,)](x, out, OP=op, AXIS=axis, KEEP=False, SOURCE=source, M=5,
                                  N=19, OUT=tuple(expected.shape) or (1,), simt=True)
    torch.testing.assert_close(out.double().reshape(expected.shape), expected.double())
    per_thread(reduce_expr.reduce_expr)


@pytest.mark.parametrize("kernel, extra, expected", [
    (tile_flow.running_sum, (), tile_flow.X.sum(0)),
    (tile_flow.alternating, (1,), tile_flow._alternating(1)),
    (tile_flow.previous_product, (), tile_flow._previous_product()),
    (tile_flow.ping_pong, (), tile_flow.X[4]),
])
def test_tiles_through_loops_and_ifs(kernel, extra, expected):
    out = torch.zeros(8)
    kernel[(1,)](tile_flow.X, out, 5, *extra, simt=True)
    torch.testing.assert_close(out, expected)
    per_thread(kernel)


def test_fragments_and_shared_memory_from_native_code():
    x = torch.randn(200)
    out = torch.zeros(200)
    native.mixed_tile_and_native[(2,)](x, out, BLOCK=100, simt=True)
    torch.testing.assert_close(out, (x.reshape(2, 100).flip(1) * 3).reshape(-1))
    per_thread(native.mixed_tile_and_native, shared=True)


# A fragment laid out over lanes and warps: each thread visits the elements it holds.
LANES = TileLayout.parse("(8,2,4,2):(4@laneid,1@warpid,1@laneid,1@m)")


@tj.kernel
def laid_out(x, out, L: tj.constexpr):
    t = tj.fragment((8, 16), tj.float32, layout=L)
    tj.copy(t, x[0:8, 0:16])
    u = tj.fragment((8, 16), tj.float32, layout=L)
    tj.mul(u, t, 2.0)
    tj.copy(out[0:8, 0:16], u)


@tj.kernel
def laid_out_row_sums(x, out, L: tj.constexpr):
    t = tj.fragment((8, 16), tj.float32, layout=L)
    tj.copy(t, x[0:8, 0:16])
    s = tj.fragment((8,), tj.float32)
    tj.reduce(s, t, "sum", 1)
    tj.copy(out[0:8], s)


def test_a_laid_out_fragment_is_owned_by_its_threads():
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(6))
    out = torch.zeros(8, 16)
    laid_out[(1,)](x, out, L=LANES, simt=True, num_warps=2)
    torch.testing.assert_close(out, x * 2)
    compiled = per_thread(laid_out)
    assert [r.distribution.startswith("owned") for r in compiled.dispatch_log] == [True] * 3


def test_a_reduction_of_a_laid_out_fragment_gets_a_result_layout_per_thread():
    """A reduction of a fragment spread over threads into an unlaid-out one: layout
    inference gives the result the source's reduced layout, and the shuffle family
    combines each row's lanes and warps (before it, no thread held a whole row: a
    DispatchError)."""
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    out = torch.zeros(8)
    laid_out_row_sums[(1,)](x, out, L=LANES, simt=True, num_warps=2)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    compiled = per_thread(laid_out_row_sums)
    assert [r.rule for r in compiled.dispatch_log if r.primitive == "reduce"] == ["shuffle"]
    assert 'layout_note = "inferred: the reduction at line' in compiled.asm["lowered"]
    laid_out_row_sums[(1,)](torch.ones(8, 16), out := torch.zeros(8), L=LANES, num_warps=2)
    torch.testing.assert_close(out, torch.full((8,), 16.0))   # team_once runs it


def test_a_tile_atomic_reads_its_source_after_the_gemm_that_wrote_it():
    """Per thread, the split-K GEMM's accumulator is a register fragment (layout
    inference): the gemm and the atomic split it alike, so it needs no barrier. Left in
    shared memory (the pipeline without inference), it moves between the gemm's threads
    and the atomic's: sync-hazards orders them (a tile atomic's source is a plain read;
    only the memory it updates is its own sync)."""
    import test_e2e_atomics as atomics
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(16, 16, generator=gen), torch.randn(16, 16, generator=gen)
    c = torch.zeros(16, 16)
    with knobs.scoped(simt=True):
        atomics.split_k_gemm[(1, 1, 2)](a, b, c, 16, 16, 16, BM=16, BN=16, BK=8, SPLIT=2)
    torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)
    per_thread(atomics.split_k_gemm)
    compiled = atomics.split_k_gemm.compiled_kernels()[-1]
    assert "auto_sync: fragment buffer acc" not in compiled.asm["lowered"]
    passes = [name for name, _ in PIPELINE if name != "infer-fragment-layouts"]
    shared = run_pipeline(parse_kernel(compiled.asm["ir"]), dump=(), passes=passes)[1]
    assert any("auto_sync: fragment buffer acc" in line and "line 29" in line
               for line in shared["sync-hazards"].splitlines()), shared["sync-hazards"]
