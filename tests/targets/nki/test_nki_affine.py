"""Index tiles on the nki target (rules/affine.py): ``tj.where`` on a comparison of
``tj.arange`` tiles is one ``nisa.affine_select`` per tile (a causal mask), a copy of an
index tile into SBUF is ``nisa.iota``; the lines that matter, the modules on the NKI
reference against numpy, the same kernels on the CPU, and what is declined, saying why."""
import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit.errors import DispatchError

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")
nki_lint = pytest.importorskip("nki_lint", reason="the NKI subset lint is absent")

FALSE = -30000.0


@tj.kernel
def causal_blocks(x, out, R: tj.constexpr):
    """Keeps x[r, c] where r >= c, block of 128 columns by block: the mask's offset is
    the block's run-time start, the rows run over two partition tiles."""
    with tj.thread():
        t = tj.alloc_shared((R, 128), tj.float32)
        for j in range(R // 128):
            tj.copy(t, x[0:R, j * 128:j * 128 + 128])
            rows = tj.arange(0, R)
            cols = tj.arange(0, 128) + j * 128
            tj.where(t, rows[:, None] >= cols[None, :], t, FALSE)
            tj.copy(out[0:R, j * 128:j * 128 + 128], t)


@tj.kernel
def band(x, out):
    """The number on the left: keeps x where c - r > 2 is false, i.e. c <= r + 2."""
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.float32)
        tj.copy(t, x[0:128, 0:64])
        rows = tj.arange(0, 128)
        cols = tj.arange(0, 64)
        tj.where(t, cols[None, :] - rows[:, None] > 2, FALSE, t)
        tj.copy(out[0:128, 0:64], t)


@tj.kernel
def positions(out):
    """out[r, c] = 64 * r + c - 5 from one iota."""
    with tj.thread():
        t = tj.alloc_shared((128, 64), tj.int32)
        rows = tj.arange(0, 128)
        cols = tj.arange(0, 64)
        tj.copy(t, rows[:, None] * 64 + cols[None, :] - 5)
        tj.copy(out[0:128, 0:64], t)


def spec(*shape, dtype=tj.float32):
    return tj.TensorSpec(shape, dtype)


def calls(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip().startswith("nisa.")]


def test_a_causal_mask_is_one_affine_select_per_tile_with_the_block_offset():
    compiled = causal_blocks.compile(spec(256, 256), spec(256, 256), R=256, target="nki")
    log = [(r.primitive, r.rule) for r in compiled.dispatch_log]
    assert log.count(("pointwise", "index_tile")) == 4   # two aranges, the add, the >=
    assert ("pointwise", "affine_select") in log
    assert ("nisa.affine_select(dst=t[0:128, i0, 0:128], pattern=[[-1, 128]], "
            "channel_multiplier=1, on_true_tile=t[0:128, i0, 0:128], on_false_value=-30000.0, "
            "cmp_op=nl.greater_equal, offset=0 - j * 128 + i0 * 128)") in calls(compiled.asm["nki"])
    assert "arange" not in "".join(calls(compiled.asm["nki"]))
    assert nki_lint.lint(compiled.asm["nki"]) == []
    x = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
    y = reference.run(compiled.asm["nki"], "causal_blocks", x, strict_reads=True)
    np.testing.assert_array_equal(y, np.where(np.tri(256, dtype=bool), x, FALSE))


def test_a_number_on_the_true_side_negates_the_comparison():
    compiled = band.compile(spec(128, 64), spec(128, 64), target="nki")
    assert ("nisa.affine_select(dst=t, pattern=[[1, 64]], channel_multiplier=-1, "
            "on_true_tile=t, on_false_value=-30000.0, cmp_op=nl.less_equal, offset=-2)"
            ) in calls(compiled.asm["nki"])
    x = np.random.default_rng(1).standard_normal((128, 64), dtype=np.float32)
    r, c = np.indices((128, 64))
    np.testing.assert_array_equal(reference.run(compiled.asm["nki"], "band", x),
                                  np.where(c - r > 2, FALSE, x))


def test_a_copy_of_an_index_tile_is_one_iota():
    compiled = positions.compile(spec(128, 64, dtype=tj.int32), target="nki")
    assert calls(compiled.asm["nki"])[0] == (
        "nisa.iota(dst=t, pattern=[[1, 64]], offset=-5, channel_multiplier=64)")
    y = reference.run(compiled.asm["nki"], "positions")
    np.testing.assert_array_equal(y, np.arange(128 * 64).reshape(128, 64) - 5)


def test_the_same_kernels_run_on_the_cpu():
    x = torch.randn(256, 256)
    out = torch.empty_like(x)
    causal_blocks[(1,)](x, out, R=256, num_warps=1)
    torch.testing.assert_close(out, torch.where(torch.ones(256, 256).tril().bool(), x,
                                                torch.tensor(FALSE)))
    ids = torch.empty(128, 64, dtype=torch.int32)
    positions[(1,)](ids, num_warps=1)
    torch.testing.assert_close(ids, torch.arange(128 * 64, dtype=torch.int32).view(128, 64) - 5)


def test_the_lowered_ir_with_affine_instructions_prints_parses_and_verifies():
    from tilejit.ir.parser import parse_kernel
    from tilejit.ir.verifier import verify
    text = causal_blocks.compile(spec(256, 256), spec(256, 256), R=256,
                                 target="nki").asm["lowered"]
    assert "nki.affine_select(" in text and "pattern = [[-1, 128]]" in text
    kernel = parse_kernel(text)
    verify(kernel)
    assert str(kernel) == text


def test_a_select_on_data_is_declined_saying_what_affine_select_needs():
    @tj.kernel
    def data_mask(x, out):
        with tj.thread():
            t = tj.alloc_shared((128, 64), tj.float32)
            tj.copy(t, x[0:128, 0:64])
            tj.where(t, t > 0.0, t, 0.0)
            tj.copy(out[0:128, 0:64], t)

    with pytest.raises(DispatchError) as err:
        data_mask.compile(spec(128, 64), spec(128, 64), target="nki")
    assert "affine_select" in str(err.value) and "tj.where(t, t > 0.0, t, 0.0)" in str(err.value)


def test_a_product_of_index_tiles_is_declined_at_its_line():
    @tj.kernel
    def quadratic(out):
        with tj.thread():
            t = tj.alloc_shared((128, 64), tj.int32)
            rows = tj.arange(0, 128)
            cols = tj.arange(0, 64)
            tj.copy(t, rows[:, None] * cols[None, :])
            tj.copy(out[0:128, 0:64], t)

    with pytest.raises(DispatchError, match="not affine") as err:
        quadratic.compile(spec(128, 64, dtype=tj.int32), target="nki")
    assert "rows[:, None] * cols[None, :]" in str(err.value)


@tj.kernel
def padded_rows(x, out, N: tj.constexpr):
    """Rows of N columns loaded into a 256-wide tile: past the tensor's end (column 200)
    and where the mask drops them (from column N) the tile holds -inf."""
    with tj.thread():
        t = tj.alloc_shared((128, 256), tj.float32)
        cols = tj.arange(0, 256)
        tj.copy(t, x[0:128, 0:256], mask=cols[None, :] < N, other=float("-inf"))
        tj.copy(out[0:128, 0:256], t)


def test_a_masked_load_fills_then_copies_then_selects():
    compiled = padded_rows.compile(spec(128, 200), spec(128, 256), N=192, target="nki")
    assert calls(compiled.asm["nki"])[:3] == [
        "nisa.memset(dst=t, value=float('-inf'))",
        "nisa.dma_copy(dst=t[0:128, 0:200], src=x)",
        "nisa.affine_select(dst=t, pattern=[[1, 256]], channel_multiplier=0, on_true_tile=t, "
        "on_false_value=float('-inf'), cmp_op=nl.less, offset=-192)"]
    assert nki_lint.lint(compiled.asm["nki"]) == []
    x = np.random.default_rng(4).standard_normal((128, 200), dtype=np.float32)
    want = np.full((128, 256), -np.inf, dtype=np.float32)
    want[:, :192] = x[:, :192]
    np.testing.assert_array_equal(
        reference.run(compiled.asm["nki"], "padded_rows", x, strict_reads=True), want)
    out = torch.empty(128, 256)
    padded_rows[(1,)](torch.from_numpy(x), out, N=192, num_warps=1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_a_load_past_the_tensors_end_fills_the_rest_with_other_as_on_the_cpu():
    @tj.kernel
    def past_end(x, out):
        with tj.thread():
            t = tj.alloc_shared((128, 64), tj.float32)
            tj.copy(t, x[0:128, 0:64], other=1.5)
            tj.copy(out[0:128, 0:64], t)

    compiled = past_end.compile(spec(100, 64), spec(128, 64), target="nki")
    assert calls(compiled.asm["nki"])[:2] == ["nisa.memset(dst=t, value=1.5)",
                                              "nisa.dma_copy(dst=t[0:100, 0:64], src=x)"]
    x = np.random.default_rng(5).standard_normal((100, 64), dtype=np.float32)
    want = np.concatenate([x, np.full((28, 64), 1.5, dtype=np.float32)])
    np.testing.assert_array_equal(
        reference.run(compiled.asm["nki"], "past_end", x, strict_reads=True), want)
    out = torch.empty(128, 64)
    past_end[(1,)](torch.from_numpy(x), out, num_warps=1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_a_masked_store_is_declined_saying_why():
    @tj.kernel
    def masked_store(x, out):
        with tj.thread():
            t = tj.alloc_shared((128, 64), tj.float32)
            cols = tj.arange(0, 64)
            tj.copy(t, x[0:128, 0:64])
            tj.copy(out[0:128, 0:64], t, mask=cols[None, :] < 10)

    with pytest.raises(DispatchError, match="a masked store: a DMA writes whole slices") as err:
        masked_store.compile(spec(128, 64), spec(128, 64), target="nki")
    assert "tj.copy(out[0:128, 0:64], t, mask=cols[None, :] < 10)" in str(err.value)
