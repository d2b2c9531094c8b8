"""Pass ``cpu-read-copies-in-place`` (targets/cpu/read_in_place.py): a read-only fragment
copy of a tensor box is read in place where the box lies inside the tensor, and copied
(zeros past the end) where it does not; kernels it must leave alone keep one version."""
import pytest
import torch
from rule_kernels import fresh_cache, records  # noqa: F401

import tilejit as tj
from tilejit.examples import layer_norm, row_softmax, run_layer_norm, run_softmax
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.knobs import knobs
from tilejit.targets.backend import get_backend
from tilejit.targets.cpu.read_in_place import read_copies_in_place

get_backend("cpu").register()   # the pass asks dispatch for the cpu target's distribution



def located(text: str) -> str:
    """``text`` with each op stamped with its line (the parser wants a location)."""
    return "\n".join(line if line.startswith(("kernel", "}")) else f"{line} loc({n}:3)"
                      for n, line in enumerate(text.splitlines(), start=1))


ROW_SUM_IR = """\
kernel @row_sum(%x: buffer<global, f32, [?, ?], strides=[?, 1]>, %out: buffer<global, f32, [?, ?], strides=[?, 1]>) {target = "cpu"} loc("/src/k.py":1:0) {
  %0 = thread_index {kind = cta_id} : i32
  %t = alloc {scope = fragment, dtype = f32, shape = [2, 40]} : buffer<fragment, f32, [2, 40]>
  %1 = const {value = 0} : i32
  %2 = region(%x, %0, %1) {sizes = [2, 40], keep = [true, true]} : region<buffer<global, f32, [?, ?], strides=[?, 1]>, [2, 40]>
  tile.copy(%t, %2)
  %s = alloc {scope = fragment, dtype = f32, shape = [2, 1]} : buffer<fragment, f32, [2, 1]>
  tile.reduce(%s, %t) {op = sum, axis = 1}
  %3 = region(%out, %0, %1) {sizes = [2, 1], keep = [true, true]} : region<buffer<global, f32, [?, ?], strides=[?, 1]>, [2, 1]>
  tile.copy(%3, %s)
}"""


def test_the_pass_versions_a_read_only_copy_on_a_run_time_bounds_check():
    kernel = read_copies_in_place(verify(parse_kernel(located(ROW_SUM_IR))))
    verify(kernel)
    text = str(kernel)
    assert str(parse_kernel(text)) == text                 # in_bounds prints and parses
    top = [op.name for op in kernel.body.ops]
    assert top.count("if") == 1 and "tile.reduce" not in top
    branch = next(op for op in kernel.body.ops if op.name == "if")
    in_place, copied = ([op.name for op in block.ops] for block in branch.regions)
    assert "tile.copy" in copied and in_place.count("tile.copy") == 1   # only the store
    region = next(op for op in branch.regions[0].ops if op.name == "region")
    assert region.attrs["in_bounds"] and region.attrs["sizes"] == (2, 40)
    reduce = next(op for op in branch.regions[0].ops if op.name == "tile.reduce")
    assert reduce.operands[1] is region.result
    # the check: start >= 0 and start + size <= the extent, for both dims
    assert text.count("buffer_dim(%x)") == 2 and text.count("{pred = le}") == 2


WRITE_BEFORE_READ = """\
  %w = region(%out, %0, %1) {sizes = [2, 40], keep = [true, true]} : region<buffer<global, f32, [?, ?], strides=[?, 1]>, [2, 40]>
  tile.copy(%w, %t)
  %s = alloc"""


def test_a_box_written_before_the_last_read_must_share_no_memory_with_the_copied_box():
    """out (maybe x) is written before t is read: in place only where, at run time, the
    bytes of out's box and x's box do not meet."""
    text = ROW_SUM_IR.replace("  %s = alloc", WRITE_BEFORE_READ, 1)
    kernel = read_copies_in_place(verify(parse_kernel(located(text))))
    verify(kernel)
    text = str(kernel)
    assert str(parse_kernel(text)) == text
    assert "buffer_address(%x)" in text and "buffer_address(%out)" in text
    assert text.count("{pred = le}") == 4     # two dims in bounds; out's end <= x's start, or x's end <= out's start
    assert [op.name for op in kernel.body.ops].count("if") == 1


RUN_TIME_START_WRITE = """  %4 = binary(%0, %0) {op = mul} : i32
  %w = region(%out, %4, %1) {sizes = [2, 40], keep = [true, true]} : region<buffer<global, f32, [?, ?], strides=[?, 1]>, [2, 40]>
  tile.copy(%w, %t)
  %s = alloc"""


@pytest.mark.parametrize("old, new", [
    ("  %s = alloc", RUN_TIME_START_WRITE),     # a written box that starts after the copy
    ("  %s = alloc", "  %f = const {value = 1.0} : f32\n  store(%out, %f, %0, %1)\n"
                    "  %s = alloc"),   # an element store
    ("  tile.reduce", "  tile.pointwise(%t, %t) {op = exp}\n  tile.reduce"),   # t written
    ("  tile.copy(%t, %2)", '  tile.copy(%t, %2) {config = {cache = "stream"}}'),
])
def test_the_pass_leaves_alone_what_it_cannot_prove(old, new):
    """A global write before the last read, a write into the fragment, a copy with a
    config: the kernel as written."""
    text = ROW_SUM_IR.replace(old, new, 1)
    kernel = verify(parse_kernel(located(text)))
    assert read_copies_in_place(kernel) is kernel


@pytest.mark.parametrize("rows, cols", [(37, 781), (5, 16), (3, 1)])
def test_softmax_in_place_and_at_the_ragged_end(rows, cols):
    """BM=2: the last CTA's box runs past the rows when ``rows`` is odd (the copy, zeros
    past the end); every other CTA reads in place. Rows not a multiple of 16 end in a
    masked vector either way."""
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows))
    out = torch.empty_like(x)
    compiled = row_softmax.warmup(x, out, BM=2, BN=cols)
    run_softmax(x, out, rows_per_cta=2)
    torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    assert "in_bounds = true" in compiled.asm["lowered"]
    assert len(records(compiled, "copy")) == 1      # the copy-in: in the fallback only
    assert [r.rule for r in records(compiled, "reduce")] == ["lanes"] * 4   # 2 versions


def test_softmax_into_its_own_input():
    """out is x: every read of the row comes before the first write to it."""
    x = torch.randn(9, 100, generator=torch.Generator().manual_seed(1))
    expected = torch.softmax(x, 1)
    run_softmax(x, x)
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-6)


@tj.kernel
def doubled_rows(x, out, N: tj.constexpr):
    t = tj.fragment((2, N), tj.float32)
    tj.copy(t, x[0:2, 0:N])
    tj.copy(out[1:3, 0:N], t * 2.0)


def test_an_output_box_overlapping_the_input_box_takes_the_copy():
    """out is x one row down: reading x in place would read row 1 after writing it."""
    x = torch.randn(3, 24, generator=torch.Generator().manual_seed(3))
    expected = x.clone()
    expected[1:3] = 2 * x[0:2]
    compiled = doubled_rows.warmup(x, x, N=24)
    doubled_rows[(1,)](x, x, N=24)
    assert "buffer_address" in compiled.asm["lowered"]
    torch.testing.assert_close(x, expected)


@tj.kernel
def doubled_at(x, out, off, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    tj.copy(out[off:off + N], t * 2.0)


@pytest.mark.parametrize("same", [False, True])
def test_a_written_box_may_start_at_a_kernel_argument(same):
    """out's start is a parameter, known before the copy: the guard bounds its box (in
    place into another tensor; into x one element down, the copy)."""
    x = torch.randn(9, generator=torch.Generator().manual_seed(5))
    out = x if same else torch.zeros(9)
    expected = out.clone()
    expected[1:9] = 2 * x[0:8]
    compiled = doubled_at.warmup(x, out, 1, N=8)
    doubled_at[(1,)](x, out, 1, N=8)
    assert "buffer_address(%out)" in compiled.asm["lowered"]
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("same", [False, True])
def test_layer_norm_reads_in_place_into_another_tensor_or_copies_into_its_own(same):
    x = torch.randn(7, 300, generator=torch.Generator().manual_seed(4))
    weight, bias = torch.randn(300), torch.randn(300)
    expected = torch.nn.functional.layer_norm(x, (300,), weight, bias, 1e-5)
    out = x if same else torch.empty_like(x)
    compiled = layer_norm.warmup(x, weight, bias, out, 1e-5, N=300, BM=2, BLOCK=300)
    run_layer_norm(x, weight, bias, out, block=300)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert "in_bounds = true" in compiled.asm["lowered"]


def test_a_box_past_the_columns_takes_the_copy():
    """BN larger than the row: no CTA is in bounds, so every one copies (zeros past the
    end, which the row sum counts as nothing)."""
    x = torch.randn(6, 30, generator=torch.Generator().manual_seed(2))
    out = torch.empty(6)
    row_sum[(3,)](x, out, BM=2, BN=32)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)


def test_simt_mode_keeps_the_copy():
    x = torch.randn(4, 32)
    out = torch.empty(4)
    with knobs.scoped(simt=True):
        compiled = row_sum.warmup(x, out, BM=2, BN=32)
        row_sum[(2,)](x, out, BM=2, BN=32)
    assert "in_bounds" not in compiled.asm["lowered"]
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)


@tj.kernel
def row_sum(x, out, BM: tj.constexpr, BN: tj.constexpr):
    row0 = tj.cta_id(0) * BM
    t = tj.fragment((BM, BN), tj.float32)
    tj.copy(t, x[row0:row0 + BM, 0:BN])
    tj.copy(out[row0:row0 + BM], tj.sum(t, axis=1))


@tj.kernel
def masked_row_sum(x, out, n, BN: tj.constexpr):
    row = tj.cta_id(0)
    t = tj.fragment((1, BN), tj.float32)
    tj.copy(t, x[row:row + 1, 0:BN], mask=(tj.arange(0, BN) < n)[None, :])
    tj.copy(out[row:row + 1], tj.sum(t, axis=1))


def test_a_masked_copy_keeps_its_copy():
    """The mask's zeros are part of what the copy means: no in-place version."""
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(3))
    out = torch.empty(3)
    compiled = masked_row_sum.warmup(x, out, 10, BN=16)
    masked_row_sum[(3,)](x, out, 10, BN=16)
    assert "in_bounds" not in compiled.asm["lowered"]
    assert len(records(compiled, "reduce")) == 1
    torch.testing.assert_close(out, x[:, :10].sum(1), rtol=1e-5, atol=1e-5)
