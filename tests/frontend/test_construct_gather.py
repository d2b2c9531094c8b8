"""tj.zeros/full, x.to, tj.trans/x.T/permute, broadcast_to, expand_dims, reshape, tj.gather,
tj.scatter and table[idx, :] copies: the IR they build, and their misuse as located
CompilationErrors."""
import pytest

from tilejit.ir.types import MemScope, f16, i8

from .helpers import S, T, build, f32, i32, kernel_from_source, ops, raises

SPECS = {"x": T(f32, 2), "ids": T(i32, 1), "n": S(i32)}


def test_construction_and_conversion_ops(tmp_path):
    fn = kernel_from_source(tmp_path, """
def kernel(x, ids, n):
    z = tj.zeros((3, 5), tj.float32)
    f = tj.full((3, 5), n, tj.int8)
    h = z.to(tj.float16)
    s = n.to(tj.float32)
    t = tj.trans(h)
    u = h.T
    p = tj.permute(tj.reshape(z, (5, 1, 3)), 2, 0, 1)
    b = tj.broadcast_to(tj.arange(0, 5), (3, 5))
    e = tj.expand_dims(tj.arange(0, 5), (0, 2))
""")
    k = build(fn, SPECS)
    fills = [op for op in ops(k, "tile.pointwise") if op.attrs["op"] == "fill"]
    assert [(op.operands[0].type.shape, op.operands[0].type.dtype) for op in fills] == [
        ((3, 5), f32), ((3, 5), i8)]
    casts = [op for op in ops(k, "tile.pointwise") if op.attrs["op"] == "cast"]
    assert casts[0].operands[0].type.dtype == f16
    assert [op.attrs["to"] for op in ops(k, "cast")] == [i8, f32]   # full's n, then n.to
    permutes = ops(k, "tile.permute")
    assert [(op.attrs["dims"], op.operands[0].type.shape) for op in permutes] == [
        ((1, 0), (5, 3)), ((1, 0), (5, 3)), ((2, 0, 1), (3, 5, 1))]
    assert all(op.operands[0].type.scope is MemScope.FRAGMENT for op in permutes)
    assert [op.result.type.shape for op in ops(k, "view")] == [(5, 1, 3), (1, 5, 1)]


def test_gather_scatter_and_row_copies(tmp_path):
    fn = kernel_from_source(tmp_path, """
def kernel(x, ids, n):
    idx = tj.fragment((4,), tj.int32)
    tj.copy(idx, ids[0:4])
    rows = tj.fragment((4, 6), tj.float32)
    tj.copy(rows, x[idx, :])
    tj.copy(x[idx, :], rows)
    g = tj.gather(rows, idx[:, None], 1, other=-1.0)
    tj.scatter(rows, idx[:, None], 0.5, axis=0)
""")
    k = build(fn, SPECS)
    gathers, scatters = ops(k, "tile.gather"), ops(k, "tile.scatter")
    assert [(op.attrs["axis"], op.attrs["other"]) for op in gathers] == [(0, None), (1, -1.0)]
    assert gathers[0].operands[1].type.shape == (None, None)      # the whole table
    assert gathers[0].operands[2].type.shape == (4, 1)            # idx on the indexed dim
    assert gathers[1].operands[0].type.shape == (4, 1)            # torch.gather: index's shape
    assert [op.attrs["axis"] for op in scatters] == [0, 0]


MISUSE = [
    ("v = tj.zeros((n, 4), tj.float32)", "tile shapes must be compile-time constants"),
    ("v = tj.full((4,), t, tj.float32)", r"tj.full\(shape, value, dtype\) fills with a scalar"),
    ("v = t.to(5)", r"x.to\(dtype\) takes a tj dtype"),
    ("v = tj.trans(tj.zeros((2, 3, 4), tj.float32))", "without dims transposes a 2-D tile"),
    ("v = tj.permute(t, 0, 0)", r"dims \[0, 0\] must name each of the 2 dims"),
    ("v = tj.reshape(t, (4, 4))", r"tj.reshape: \(3, 5\) has 15 elements, \(4, 4\) has 16"),
    ("v = tj.broadcast_to(t, (3, 4))", r"tj.broadcast_to: \(3, 5\) does not broadcast"),
    ("v = tj.expand_dims(t, 3)", r"tj.expand_dims: axis must be a compile-time int in \[-3, 3\)"),
    ("v = tj.gather(t, t, 0)", "tj.gather: the index must be an integer tile, got"),
    ("v = tj.gather(t, tj.arange(0, 3), 0)", "tj.gather: the index has rank 1 but src has rank 2"),
    ("v = tj.gather(t, tj.zeros((3, 6), tj.int32), 0)", "dim 1 of the result \\(6\\) is larger"),
    ("v = tj.gather(t, tj.zeros((3, 5), tj.int32), 2)", "tj.gather: axis must be"),
    ("v = tj.gather(t, tj.zeros((3, 5), tj.int32))", r"tj.gather is called as"),
    ("tj.scatter(t, tj.zeros((3, 5), tj.bool), t, 0)", "the index must be an integer tile"),
    ("tj.scatter(t, tj.zeros((3,), tj.int32), t, 0)", "the index has rank 1 but dst has rank 2"),
    ("tj.scatter(t, tj.zeros((3, 5), tj.int32), tj.zeros((2, 5), tj.float32), 0)",
     r"tj.scatter: src of shape \(2, 5\) does not broadcast"),
    ("tj.copy(t, x[tj.zeros((3, 5), tj.int32), :])", "a tile index must be one 1-D integer"),
    ("tj.copy(t, x[tj.arange(0, 3), 1:5])", r"x\[idx, :\] takes the other dims whole"),
    ("tj.copy(t, x[tj.arange(0, 3), :], mask=t > 0)", "takes no mask="),
]


@pytest.mark.parametrize("statement, message", MISUSE, ids=[s for s, _ in MISUSE])
def test_misuse_is_located(tmp_path, statement, message):
    fn = kernel_from_source(tmp_path, f"""
def kernel(x, ids, n):
    t = tj.zeros((3, 5), tj.float32)
    {statement}
""")
    raises(fn, message, statement, SPECS)
