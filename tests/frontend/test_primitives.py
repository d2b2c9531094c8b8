"""Buffers, regions and tile primitives: IR shape and argument checks."""
import pytest

from tilejit.frontend import language as tj
from tilejit.ir.types import BarrierType, MemScope, RegionType
from tilejit.ir.types import f16 as F16
from tilejit.layout import S as Shard
from tilejit.layout import TileLayout

from .helpers import S, T, build, f16, f32, i32, kernel_from_source, op_lines, ops, raises

SMEM_LAYOUT = TileLayout(Shard[64, 32])


def test_allocations_views_and_layouts():
    def kernel(x):
        a = tj.alloc_shared((64, 32), tj.float16, layout=SMEM_LAYOUT)
        b = tj.alloc_local(4, tj.float32)
        c = tj.alloc_tmem((128, 64), tj.float32)
        d = a.view((32, 64))
        e = x.view((8, 8), layout=TileLayout(Shard[8, 8]))
        bars = tj.alloc_barriers(3)
    k = build(kernel, {"x": T(f16, 1)})
    scopes = [op.result.type.scope for op in ops(k, "alloc")]
    assert scopes == [MemScope.SHARED, MemScope.LOCAL, MemScope.TMEM]
    assert ops(k, "alloc")[0].result.type.layout == SMEM_LAYOUT
    assert [op.result.type.shape for op in ops(k, "view")] == [(32, 64), (8, 8)]
    assert ops(k, "alloc_barrier")[0].result.type == BarrierType(3)


def test_slices_of_every_kind():
    def kernel(x, i, j):
        smem = tj.alloc_shared((4, 64, 32), tj.float16)
        r1 = smem[1]                      # integer index drops a dim
        r2 = smem[i, 8:24, :]             # run-time start, static size; ':' of a static dim
        r3 = smem[:, j * 8:(j + 1) * 8, 16:]
        r4 = r2[4:8, j]                   # a region of a region
        r5 = x[i:i + 16, 0:4]
        r6 = x[2 * i + 1:2 * i + 33, j]
    k = build(kernel, {"x": T(f16, 2), "i": S(i32), "j": S(i32)})
    regions = [op.result.type for op in ops(k, "region")]
    assert [r.shape for r in regions] == [(64, 32), (16, 32), (4, 8, 16), (4,), (16, 4), (32,)]
    assert regions[3].keep == (False, True, False) and regions[3].sizes == (1, 4, 1)
    r4 = ops(k, "region")[3]
    assert r4.operands[0].name_hint == "smem"            # re-sliced from the buffer itself
    assert r4.operands[2].owner.attrs["op"] == "add"     # 8 + 4 folded into the start


def test_specialized_static_dims_allow_full_slices():
    def kernel(x):
        f = tj.fragment((16, 8), tj.float32)
        tj.copy(f, x[:, :])
    k = build(kernel, {"x": T(f32, 2, shape=(16, 8))})
    assert ops(k, "region")[0].result.type.sizes == (16, 8)


def test_copy_gemm_reduce_pointwise_attributes():
    def kernel(x):
        a = tj.alloc_shared((64, 16), tj.float16)
        b = tj.alloc_shared((32, 16), tj.float16)
        acc = tj.fragment((64, 32), tj.float32)
        row = tj.fragment((64, 1), tj.float32)
        bars = tj.alloc_barriers(2)
        tj.copy_async(a, x[0:64, 0:16], barrier=bars[1], dispatch="tma", config={"box": (64, 16)})
        tj.copy_async(b, x[0:32, 0:16])
        tj.gemm(acc, a, b, transpose_b=True, accum=False, config={"shape": [64, 32, 16]})
        tj.gemm_async(acc, a, b, False, True)
        tj.reduce(row, acc, "max", -1)
        tj.add(acc, acc, row)
        tj.fill(acc, 0)
        tj.select(acc, row, acc, 1.0)
        tj.fma(acc, acc, 2.0, row, dispatch="ffma")
        tj.cast(acc, row)
    k = build(kernel, {"x": T(f16, 2)})
    first, second = ops(k, "tile.copy_async")
    assert first.attrs["dispatch"] == "tma" and first.attrs["config"] == {"box": (64, 16)}
    assert len(first.operands) == 4 and first.operands[3].owner.attrs["value"] == 1
    assert len(second.operands) == 2
    gemm, gemm_async = ops(k, "tile.gemm") + ops(k, "tile.gemm_async")
    assert (gemm.attrs["transpose_b"], gemm.attrs["accum"]) == (True, False)
    assert gemm.attrs["config"] == {"shape": (64, 32, 16)}
    assert gemm_async.attrs["transpose_b"] is True
    assert ops(k, "tile.reduce")[0].attrs["axis"] == 1
    assert [op.attrs["op"] for op in ops(k, "tile.pointwise")] == ["add", "fill", "select", "fma",
                                                                   "cast"]
    assert op_lines(k, "tile.pointwise")[1].startswith("tile.pointwise(%acc, %")
    select = ops(k, "tile.pointwise")[2]
    assert select.operands[1].name_hint == "row" and select.operands[3].type == f32


def test_reduce_may_drop_or_keep_the_axis():
    def kernel(x):
        src = tj.fragment((8, 16), tj.float32)
        tj.reduce(tj.fragment((8,), tj.float32), src, "sum", 1)
        tj.reduce(tj.fragment((1, 16), tj.float32), src, "min", -2)
    reduces = ops(build(kernel, {"x": S(f32)}), "tile.reduce")
    assert [(op.attrs["op"], op.attrs["axis"]) for op in reduces] == [("sum", 1), ("min", 0)]
    assert [(op.operands[0].type.shape, op.operands[1].type.shape) for op in reduces] == [
        ((8,), (8, 16)), ((1, 16), (8, 16))]


# Short names for the one-line kernels below.
ALIASES = "F = tj.fragment\nF32, F16, I32 = tj.float32, tj.float16, tj.int32\n\n"
SHAPE_ERRORS = [
    ("tj.copy(F((8,), F32), F((4,), F32))",
     r"tj.copy: src of shape \(4,\) does not fit dst of shape \(8,\)"),
    ("tj.gemm(F((8, 8), F32), F((8, 4), F16), F((8, 8), F16))",
     r"tj.gemm: A\(8, 4\) and B\(8, 8\) disagree on K \(4 vs 8\)"),
    ("tj.gemm(F((8, 8), F32), F((4, 8), F16), F((4, 8), F16), transpose_a=True)",
     None),
    ("tj.gemm(F((8, 4), F32), F((8, 4), F16), F((4, 8), F16))",
     r"tj.gemm: C has shape \(8, 4\) but A @ B has shape \(8, 8\)"),
    ("tj.gemm(F((8, 8), I32), F((8, 8), F16), F((8, 8), F16))",
     "must be all float or all integer"),
    ("tj.gemm(F((8,), F32), F((8, 8), F16), F((8, 8), F16))",
     "C must be a rank-2 tile"),
    ("tj.reduce(F((16,), F32), F((8, 16), F32), 'sum', 1)",
     r"reducing \(8, 16\) over axis 1 gives \(8,\) or \(8, 1\), but dst has shape \(16,\)"),
    ("tj.reduce(F((16, 1), F32), F((8, 16), F32), 'sum', 0)",
     r"reducing \(8, 16\) over axis 0 gives \(16,\) or \(1, 16\), but dst has shape \(16, 1\)"),
    ("tj.reduce(F((8, 16), F32), F((8, 16), F32), 'max', 1)",
     r"over axis 1 gives \(8,\) or \(8, 1\), but dst has shape \(8, 16\)"),
    ("tj.reduce(F((8,), F32), F((8, 16), F32), 'mean', 1)",
     "op must be one of 'sum', 'max', 'min'"),
    ("tj.reduce(F((8,), F32), F((8, 16), F32), 'sum', 2)",
     r"axis must be a compile-time int in \[-2, 2\)"),
    ("tj.add(F((8, 16), F32), F((8, 16), F32), F((16, 1), F32))",
     r"source 1 of shape \(16, 1\) does not broadcast to dst of shape \(8, 16\)"),
    ("tj.exp(F((8,), I32), F((8,), I32))",
     "tj.exp needs a float destination"),
    ("tj.fill(F((8,), I32), F((8,), I32))",
     "tj.fill\\(dst, value\\) takes a scalar value"),
    ("tj.add(F((8,), I32))", r"tj.add is called as tj.add\(dst, src0, src1\)"),
    ("tj.copy(F((8,), I32), 3)", "tj.copy: src must be a buffer or region"),
    ("tj.copy(F((8,), I32))", r"tj.copy\(\): missing a required argument: 'src'"),
    ("tj.copy(F((8,), I32), F((8,), I32), dispatch=3)",
     "dispatch= must be a string"),
    ("tj.copy(F((8,), I32), F((8,), I32), config={'k': x})",
     "config= must be a dict of compile-time values"),
    ("tj.gemm(F((8, 8), F32), F((8, 8), F16), F((8, 8), F16), transpose_a=x > 0)",
     "transpose_a= must be a compile-time bool"),
    ("F((8, x), F32)", "tile shapes must be compile-time constants"),
    ("F((8, 0), F32)", "a tile shape is a tuple of positive ints"),
    ("F((8,), 'f32')", "dtype must be a tj dtype"),
    ("tj.alloc_shared((8,), F32, layout=3)", "layout= must be a TileLayout or ComposeLayout"),
    ("F((8,), F32).view((3,))", r"view changes the element count: \[8\] -> \[3\]"),
    ("tj.alloc_barriers(x)", "tj.alloc_barriers needs a positive compile-time count"),
    ("tj.mbarrier_arrive(3)", "expected a barrier such as bars\\[i\\]"),
    ("tj.alloc_barriers(2)[2]", "index 2 is out of bounds for dimension 0 of size 2"),
    ("F((8, 4), F32) + F((3,), F32)", r"tile shapes \(8, 4\) and \(3,\) do not broadcast"),
    ("F((8,), F32) < 1.0", None),
    ("F((8,), F32) ** 2", None),
    ("F((8,), F32) & 1", "tj.bitwise_and needs integer operands, got tj.float32"),
    ("F((8,), F32) @ F((8,), F32)", "use tj.gemm"),
    ("F((8,), F32) + y", "a tile expression needs static shapes"),
]


@pytest.mark.parametrize("call, message", SHAPE_ERRORS, ids=[c[:40] for c, _ in SHAPE_ERRORS])
def test_primitive_argument_checks(tmp_path, call, message):
    fn = kernel_from_source(tmp_path, f"{ALIASES}def kernel(x, y):\n    {call}\n")
    specs = {"x": S(i32), "y": T(f32, 1)}
    if message is None:
        build(fn, specs)
    else:
        raises(fn, message, call, specs)


SLICE_ERRORS = [
    ("x[i:j]", "the size of slice 0 must be a compile-time constant"),
    ("x[:]", "dimension 0 has a run-time size, so ':' has no static size"),
    ("x[0:8:2]", "strided slices are not supported"),
    ("x[4:4]", "slice 0 is empty"),
    ("F((8,), F32)[4:12]", "slice 0 of size 8 does not fit in a dimension of size 8"),
    ("F((8,), F32)[8]", "index 8 is out of bounds"),
    ("F((8,), F32)[1, 2]", r"too many indices \(2\) for a rank-1 buffer"),
    ("F((8,), F32)[1.5]", "index 0 must be an integer"),
    ("x[0:8][1:2][0:1]", None),
    ("i[0]", "cannot index a run-time i32 value"),
    ("x.shape[3]", r"shape index must be a compile-time int in \[-1, 1\)"),
    ("x[0:8] = 1", "assigning to a slice is not supported; use tj.copy"),
]


@pytest.mark.parametrize("expr, message", SLICE_ERRORS, ids=[e for e, _ in SLICE_ERRORS])
def test_slice_checks(tmp_path, expr, message):
    fn = kernel_from_source(tmp_path, f"{ALIASES}def kernel(x, i, j):\n    {expr}\n")
    specs = {"x": T(f32, 1), "i": S(i32), "j": S(i32)}
    if message is None:
        build(fn, specs)
    else:
        raises(fn, message, expr, specs)


def test_regions_have_region_types():
    def kernel(x):
        r = x[0:16]
        tj.static_assert(r.shape == (16,) and r.dtype == tj.float16, "static region facts")
    k = build(kernel, {"x": T(F16, 1)})
    assert isinstance(ops(k, "region")[0].result.type, RegionType)
