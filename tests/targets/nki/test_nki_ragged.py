"""Ragged edges at run-time tile starts on the nki target: pass ``nki-peel-ragged-tiles``
runs the last iteration of a loop whose tile runs past a tensor's end on its own, where
its start is a number, so the copies cut it to a static slice (loads fill the rest of the
tile first, stores write the valid rows only). The peeled IR, the lines that matter, the
kernels of ``tilejit/kernels/`` with any R (attention: any S) on the NKI reference against
torch and on the CPU, and what is refused, saying why."""
import math

import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.errors import CompilationError, DispatchError
from tilejit.ir.parser import parse_kernel
from tilejit.kernels import attention, rmsnorm, softmax
from tilejit.targets.nki.peel import peel_ragged_tiles

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")
nki_lint = pytest.importorskip("nki_lint", reason="the NKI subset lint is absent")


def spec(*shape):
    return tj.TensorSpec(shape, tj.float32)


def body(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()
            if line.strip().startswith(("nisa.", "for "))]


# rows [START * r, START * r + 128) of a [ROWS, 64] tensor, r in range(TRIPS)
TILE_LOOP = """kernel @k(%x: buffer<global, f32, [ROWS, 64], strides=[64, 1]>) {num_warps = 1}
    loc("/k.py":1:0) {
  %lb = const {value = 0} : i32 loc(5:4)
  %ub = const {value = TRIPS} : i32 loc(5:4)
  %step = const {value = 1} : i32 loc(5:4)
  for(%lb, %ub, %step) loc(5:4) {
  ^(%r: i32):
    %t = alloc {scope = shared, dtype = f32, shape = [128, 64]} :
         buffer<shared, f32, [128, 64]> loc(5:4)
    %size = const {value = START} : i32 loc(5:4)
    %row = binary(%r, %size) {op = mul} : i32 loc(5:4)
    %zero = const {value = 0} : i32 loc(5:4)
    %tile = region(%x, %row, %zero) {sizes = [128, 64], keep = [true, true]} :
            region<buffer<global, f32, [ROWS, 64], strides=[64, 1]>, [128, 64]> loc(7:4)
    tile.copy(%t, %tile) loc(7:4)
    yield loc(5:4)
  }
}"""


def tile_loop(rows, trips, start=128):
    return parse_kernel(TILE_LOOP.replace("ROWS", str(rows)).replace("TRIPS", str(trips))
                        .replace("START", str(start)))


def test_the_last_iteration_past_the_end_is_peeled_with_its_start_a_number():
    peeled = str(peel_ragged_tiles(tile_loop(rows=300, trips=3)))
    assert "%0 = const {value = 2} : i32" in peeled          # the last r, the loop's end
    assert "for(%lb, %0, %step)" in peeled
    # after the loop: r * 128 folded to 256, the region at a static start
    assert "const {value = 256} : i32" in peeled
    assert peeled.count("tile.copy") == 2
    assert str(parse_kernel(peeled)) == peeled   # the textual IR round-trips


def test_a_loop_whose_tiles_stay_inside_is_left_alone():
    kernel = tile_loop(rows=384, trips=3)
    assert str(peel_ragged_tiles(kernel)) == str(kernel)


def test_a_single_ragged_iteration_becomes_straight_line_code():
    peeled = str(peel_ragged_tiles(tile_loop(rows=100, trips=1)))
    assert "for(" not in peeled and peeled.count("tile.copy") == 1


def test_a_tile_past_the_end_in_more_than_the_last_iteration_is_refused_at_its_line():
    # tiles of 128 stepping by 64: r = 1 and r = 2 both reach past row 150
    with pytest.raises(CompilationError, match=r"a tile of 128 runs past the end \(150\) of "
                                               r"a tensor in more than the last iteration") \
            as err:
        peel_ragged_tiles(tile_loop(rows=150, trips=3, start=64))
    assert err.value.loc.line == 7


@pytest.mark.parametrize("rows", [130, 257])
def test_softmax_of_any_rows_cuts_its_last_tile_on_the_reference(rows):
    compiled = softmax.compile(spec(rows, 96), spec(rows, 96), R=rows, N=96, target="nki")
    lines, full, last = body(compiled.asm["nki"]), rows // 128, rows % 128
    assert lines[0] == f"for r in nl.affine_range({full}):"
    assert "nisa.dma_copy(dst=out[r * 128:r * 128 + 128, 0:96], src=t)" in lines
    # the peeled last tile: zeros past the tensor's end, then only the valid rows stored
    assert lines[-8:-6] == ["nisa.memset(dst=t, value=0.0)",
                            f"nisa.dma_copy(dst=t[0:{last}, 0:96], "
                            f"src=x[{full * 128}:{rows}, 0:96])"]
    assert lines[-1] == f"nisa.dma_copy(dst=out[{full * 128}:{rows}, 0:96], src=t[0:{last}, 0:96])"
    assert nki_lint.lint(compiled.asm["nki"]) == []
    x = np.random.default_rng(rows).standard_normal((rows, 96), dtype=np.float32) * 4
    y = reference.run(compiled.asm["nki"], "softmax", x, strict_reads=True)
    np.testing.assert_allclose(y, torch.softmax(torch.from_numpy(x), 1).numpy(),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("rows", [130, 257])
def test_rmsnorm_of_any_rows_on_the_reference(rows):
    compiled = rmsnorm.compile(spec(rows, 96), spec(128, 96), spec(rows, 96), R=rows, N=96,
                               target="nki")
    assert (f"nisa.dma_copy(dst=out[{rows // 128 * 128}:{rows}, 0:96], "
            f"src=t[0:{rows % 128}, 0:96])") in body(compiled.asm["nki"])
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 96), dtype=np.float32)
    w = rng.standard_normal(96, dtype=np.float32)
    y = reference.run(compiled.asm["nki"], "rmsnorm", x, np.broadcast_to(w, (128, 96)).copy(),
                      strict_reads=True)
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [130, 257])
def test_the_same_kernels_of_any_rows_run_on_the_cpu(rows):
    x = torch.randn(rows, 96)
    out = torch.empty_like(x)
    softmax[(1,)](x, out, R=rows, N=96, num_warps=1)
    torch.testing.assert_close(out, torch.softmax(x, 1))
    w = torch.randn(96)
    rmsnorm[(1,)](x, w.expand(128, 96).contiguous(), out, R=rows, N=96, num_warps=1)
    torch.testing.assert_close(out, x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w,
                               rtol=1e-5, atol=1e-5)


@tj.kernel
def masked_store_rows(x, out, R: tj.constexpr):
    with tj.thread():
        for r in range(tj.cdiv(R, 128)):
            t = tj.alloc_shared((128, 64), tj.float32)
            cols = tj.arange(0, 64)
            tj.copy(t, x[r * 128:r * 128 + 128, 0:64])
            tj.copy(out[r * 128:r * 128 + 128, 0:64], t, mask=cols[None, :] < 10)


def test_a_masked_store_is_still_declined_saying_why():
    with pytest.raises(DispatchError, match="a masked store: a DMA writes whole slices"):
        masked_store_rows.compile(spec(130, 64), spec(130, 64), R=130, target="nki")


@tj.kernel
def overlapping_tiles(x, out, R: tj.constexpr):
    with tj.thread():
        for r in range(tj.cdiv(R, 64)):
            t = tj.alloc_shared((128, 64), tj.float32)
            tj.copy(t, x[r * 64:r * 64 + 128, 0:64])
            tj.copy(out[r * 64:r * 64 + 64, 0:64], t[0:64, 0:64])


def test_tiles_longer_than_the_loops_step_past_the_end_are_refused_at_the_kernels_line():
    with pytest.raises(CompilationError, match="in more than the last iteration") as err:
        overlapping_tiles.compile(spec(130, 64), spec(130, 64), R=130, target="nki")
    assert err.value.loc.line == overlapping_tiles.fn.__code__.co_firstlineno + 5


@tj.kernel
def tile_at_a_scalar(x, out, s):
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[s:s + 128, 0:64])
        tj.copy(out[0:128, 0:64], t)


def test_a_tile_at_a_run_time_scalar_in_a_ragged_dim_is_refused_at_its_line():
    """NKI cannot cut it where the tensor ends (130 rows), so it would read past them."""
    with pytest.raises(CompilationError, match=r"a tile of 128 at a start known only at run "
                       r"time may run past the end \(130\)") as err:
        tile_at_a_scalar.compile(spec(130, 64), spec(128, 64), 2, target="nki")
    assert err.value.loc.line == tile_at_a_scalar.fn.__code__.co_firstlineno + 4
    # a size that divides the dim: aligned tiles stay inside (the caller's contract)
    source = tile_at_a_scalar.compile(spec(256, 64), spec(128, 64), 128, target="nki").asm["nki"]
    assert "nisa.dma_copy(dst=t, src=x[s:s + 128, 0:64])" in body(source)


@pytest.mark.parametrize("seq, causal", [(130, False), (130, True), (257, False)])
def test_attention_of_any_length_masks_the_keys_past_its_end(seq, causal):
    heads, dim = 2, 64
    qkv = spec(heads, seq, dim)
    compiled = attention.compile(qkv, qkv, qkv, qkv, H=heads, S=seq, D=dim,
                                 scale=1 / math.sqrt(dim), causal=causal, target="nki")
    lines, full, last = body(compiled.asm["nki"]), seq // 128 * 128, seq % 128
    assert f"nisa.dma_copy(dst=V[0:{last}, 0:64], src=v[h, {full}:{seq}, 0:64])" in lines
    assert lines[-1] == f"nisa.dma_copy(dst=out[h, {full}:{seq}, 0:64], src=o[0:{last}, 0:64])"
    assert nki_lint.lint(compiled.asm["nki"]) == []
    if not causal:   # the peeled key block drops its keys past the end
        assert ("nisa.affine_select(dst=s, pattern=[[1, 128]], channel_multiplier=0, "
                "on_true_tile=s, on_false_value=-30000.0, cmp_op=nl.less, "
                f"offset={-last})") in lines
    rng = np.random.default_rng(seq)
    q, k, v = (rng.standard_normal((heads, seq, dim), dtype=np.float32) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), is_causal=causal)
    out = reference.run(compiled.asm["nki"], "attention", q, k, v, strict_reads=True)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-4)
    on_cpu = torch.empty(heads, seq, dim)
    attention[(1,)](*(torch.from_numpy(a) for a in (q, k, v)), on_cpu, H=heads, S=seq, D=dim,
                    scale=1 / math.sqrt(dim), causal=causal, num_warps=1)
    torch.testing.assert_close(on_cpu, want, rtol=1e-4, atol=1e-4)
