"""tj.arange (index tiles), x[:, None] (new size-1 dims) and tj.copy's mask=/other=: the IR
they build, and their misuse as located CompilationErrors."""
import pytest

from tilejit.ir.types import MemScope, i1, i32

from .helpers import S, T, build, f32, kernel_from_source, op_lines, ops, raises




def test_arange_is_an_iota_into_an_int32_fragment_of_any_length(tmp_path):
    fn = kernel_from_source(tmp_path, """
def kernel(x, n, BLOCK: tj.constexpr):
    offs = tj.cta_id(0) * BLOCK + tj.arange(3, 3 + BLOCK)
    mask = offs < n
""")
    k = build(fn, {"x": T(f32, 1), "n": S(i32)}, {"BLOCK": 781})
    iota, = [op for op in ops(k, "tile.pointwise") if op.attrs["op"] == "iota"]
    dst, start = iota.operands
    assert (dst.type.scope, dst.type.dtype, dst.type.shape) == (MemScope.FRAGMENT, i32, (781,))
    assert start.owner.attrs["value"] == 3
    compare = [op for op in ops(k, "tile.pointwise") if op.attrs["op"] == "lt"]
    assert compare[0].operands[0].type.dtype == i1


def test_none_indexing_views_a_fragment_with_a_new_size_one_dim(tmp_path):
    fn = kernel_from_source(tmp_path, """
def kernel(x):
    rows = tj.arange(0, 5)
    cols = tj.arange(0, 7)
    causal = rows[:, None] >= cols[None, :]
    col = rows[:, None, None]
    flat = rows[None]
""")
    k = build(fn, {"x": T(f32, 1)})
    assert [op.result.type.shape for op in ops(k, "view")] == [(5, 1), (1, 7), (5, 1, 1),
                                                               (1, 5)]
    ge, = [op for op in ops(k, "tile.pointwise") if op.attrs["op"] == "ge"]
    assert ge.operands[0].type.shape == (5, 7)


def test_masked_copy_carries_its_mask_and_other(tmp_path):
    fn = kernel_from_source(tmp_path, """
def kernel(x, out, n, BLOCK: tj.constexpr):
    base = tj.cta_id(0) * BLOCK
    cols = tj.arange(0, BLOCK)
    t = tj.fragment((BLOCK,), tj.float32)
    tj.copy(t, x[base:base + BLOCK], mask=cols < n, other=float("-inf"))
    tj.copy(out[base:base + BLOCK], t, mask=base + cols < n)
    tj.copy(t, x[base:base + BLOCK], other=2)
    tj.copy(t, x[base:base + BLOCK], mask=n > 3)
""")
    k = build(fn, {"x": T(f32, 1), "out": T(f32, 1), "n": S(i32)}, {"BLOCK": 100})
    copies = ops(k, "tile.copy")
    assert [len(op.operands) for op in copies] == [3, 3, 2, 3]
    assert [op.attrs["other"] for op in copies] == [float("-inf"), None, 2, None]
    assert "other = -inf" in op_lines(k, "tile.copy")[0]
    assert copies[3].operands[2].type == i1


ARANGE_MISUSE = [
    ("v = tj.arange(0, n)", r"tj.arange\(start, end\) takes compile-time int bounds, but "
     r"end is a run-time i32 value: the length is the tile's shape, so add a run-time offset"),
    ("v = tj.arange(n, 8)", "takes compile-time int bounds, but start is a run-time"),
    ("v = tj.arange(0, 4.0)", "but end is the compile-time float 4.0"),
    ("v = tj.arange(4, 4)", r"tj.arange\(4, 4\) is empty"),
    ("v = tj.arange(0, 2**32)", "does not fit int32"),
    ("v = tj.arange(8)", r"tj.arange\(\): missing a required argument: 'end'"),
    ("v = x[:, None]", r"x\[:, None\] adds a dim to a whole fragment or on-chip buffer"),
    ("v = tj.arange(0, 8)[2:4, None]", r"x\[:, None\] takes ':' for every dim"),
    ("v = tj.arange(0, 8)[:, :, None]", r"x\[:, None\] takes ':' for every dim"),
]


@pytest.mark.parametrize("statement, message", ARANGE_MISUSE, ids=[s for s, _ in ARANGE_MISUSE])
def test_arange_misuse_is_located(tmp_path, statement, message):
    fn = kernel_from_source(tmp_path, f"def kernel(x, n):\n    {statement}\n")
    raises(fn, message, statement, {"x": T(f32, 1), "n": S(i32)})


COPY_MISUSE = [
    ("tj.copy(t, x[0:8], mask=tj.arange(0, 8))",
     "mask= must be a bool tile, got a tj.int32 tile; compare it"),
    ("tj.copy(t, x[0:8], mask=tj.arange(0, 5) < n)",
     r"mask of shape \(5,\) does not broadcast to dst of shape \(8,\)"),
    ("tj.copy(t, x[0:8], mask=n)", "mask= must be a bool tile .* or a bool scalar, got a run-time"),
    ("tj.copy(t, x[0:8], mask=1)", "mask= must be a bool tile"),
    ("tj.copy(t, x[0:8], other=n)", "other= must be a compile-time number"),
    ("tj.copy(t, x[0:8], other=1.0, config={'fill': 2})", "give other= or config"),
    ("tj.copy(i, x[0:8], other=float('-inf'))", "other=-inf does not fit the tj.int32 dst"),
    ("tj.copy(t, i, other=float('nan'))", "other=nan does not fit the tj.int32 src"),
    ("tj.copy_async(t, x[0:8], mask=t > 0)", "unexpected keyword argument 'mask'"),
]


@pytest.mark.parametrize("statement, message", COPY_MISUSE, ids=[s for s, _ in COPY_MISUSE])
def test_masked_copy_misuse_is_located(tmp_path, statement, message):
    fn = kernel_from_source(tmp_path, "def kernel(x, n):\n"
                                      "    t = tj.fragment((8,), tj.float32)\n"
                                      "    i = tj.fragment((8,), tj.int32)\n"
                                      f"    {statement}\n")
    raises(fn, message, statement, {"x": T(f32, 1), "n": S(i32)})
