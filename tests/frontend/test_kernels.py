"""The four reference kernels: they build, verify, round-trip, and carry the right ops."""
import re

from tilejit.ir.attrs import FilterSpec
from tilejit.ir.types import TeamKind

from . import kernels as K
from .helpers import S, T, build, f16, f32, i32, line_of, op_lines, ops


def test_vector_add():
    k = build(K.vector_add, {"x": T(f32, 1, unit_stride=True), "y": T(f32, 1), "out": T(f32, 1)})
    text = str(k)
    assert text.startswith("kernel @vector_add(%x: buffer<global, f32, [?], strides=[1]>, "
                           "%y: buffer<global, f32, [?], strides=[?]>")
    assert "constexprs = {BLOCK = 1024}" in text
    assert "specialization = {x = [\"unit_stride\"]}" in text
    region = "region(%{}, %base) {{sizes = [1024], keep = [true]}} : region<{}, [1024]>"
    assert [line.split(" = ", 1)[1] for line in op_lines(k, "region")] == [
        region.format("x", "buffer<global, f32, [?], strides=[1]>"),
        region.format("y", "buffer<global, f32, [?], strides=[?]>"),
        region.format("out", "buffer<global, f32, [?], strides=[?]>"),
    ]
    total, = op_lines(k, "tile.pointwise")
    assert re.fullmatch(r"tile.pointwise\((%\d+), %a, %b\) \{op = add\}", total)
    assert op_lines(k, "tile.copy")[-1].endswith(total.split("(")[1].split(",")[0] + ")")
    # Every op points into the kernel's own file; the sum is on the last line.
    last = ops(k, "tile.copy")[-1]
    assert last.loc.file == K.__file__ and last.loc.line == line_of(K.vector_add, "a + b")
    assert last.loc.col == 4


def test_vector_add_with_a_constexpr_override():
    k = build(K.vector_add, {"x": T(f16, 1), "y": T(f16, 1), "out": T(f16, 1)}, {"BLOCK": 256})
    assert "constexprs = {BLOCK = 256}" in str(k)
    assert "alloc {scope = fragment, dtype = f16, shape = [256]}" in str(k)


def test_row_softmax():
    k = build(K.row_softmax, {"x": T(f32, 2), "out": T(f32, 2)})
    reduces = op_lines(k, "tile.reduce")
    assert reduces == ["tile.reduce(%row_max, %tile) {op = max, axis = 1}",
                       "tile.reduce(%denom, %shifted) {op = sum, axis = 1}"]
    pointwise = op_lines(k, "tile.pointwise")
    assert pointwise[0].endswith("{op = sub}") and "%tile, %row_max" in pointwise[0]
    assert pointwise[1] == "tile.pointwise(%shifted, %6) {op = exp}"
    assert pointwise[2].endswith("{op = div}")
    assert "view(%denom) {shape = [4, 1]} : buffer<fragment, f32, [4, 1]>" in str(k)
    allocs = [op.result.type.shape for op in ops(k, "alloc")]
    assert allocs == [(4, 128), (4, 1), (4, 128), (4, 128), (4,), (4, 128)]


def test_tiled_gemm():
    k = build(K.tiled_gemm, {"A": T(f16, 2), "B": T(f16, 2), "C": T(f16, 2), "K": S(i32)})
    loop, = ops(k, "for")
    assert loop.attrs["pipeline"] == 2 and loop.results == ()
    assert re.fullmatch(r"for\(%\d+, %K, %\d+\) \{pipeline = 2\}", op_lines(k, "for")[0])
    body = [op.name for op in loop.regions[0].ops]
    assert body.count("sync") == 2 and body.count("tile.copy") == 4
    assert body.index("tile.gemm") < len(body) - 2
    assert op_lines(k, "tile.gemm") == ["tile.gemm(%acc, %a_frag, %b_frag)"]
    # k0:k0 + BK has the static size BK though k0 is the induction variable.
    assert ("region(%A, %m0, %k0) {sizes = [64, 32], keep = [true, true]}"
            in " ".join(op_lines(k, "region")))
    cast = op_lines(k, "tile.pointwise")[-1]
    assert re.fullmatch(r"tile.pointwise\(%\d+, %acc\) \{op = cast\}", cast)


def test_warp_specialized_gemm():
    specs = {"A": T(f16, 2), "B": T(f16, 2), "C": T(f16, 2), "K": S(i32)}
    k = build(K.warp_specialized_gemm, specs, num_warps=8)
    assert k.attrs["num_warps"] == 8
    filters = [op.attrs["filter"] for op in ops(k, "if")]
    assert filters == [FilterSpec("thread", 0, 1), FilterSpec("warpgroup", 0, 1),
                       FilterSpec("warp", 0, 1), FilterSpec("elect")]
    assert len(ops(k, "mbarrier_init")) == 4        # static_range unrolled 2 x 2
    producer_loop, consumer_loop = ops(k, "for")
    names = [op.name for op in producer_loop.regions[0].ops]
    assert names.index("mbarrier_wait") < names.index("mbarrier_expect_tx") \
        < names.index("tile.copy_async")
    copies = ops(k, "tile.copy_async")
    assert len(copies) == 2 and all(len(c.operands) == 4 for c in copies)
    assert copies[0].operands[2].name_hint == "full"
    # a_smem[s] drops the stage dimension; k * BK:(k + 1) * BK has the static size BK.
    a_stage = copies[0].operands[0].type
    assert a_stage.shape == (128, 64) and a_stage.keep == (False, True, True)
    assert copies[0].operands[1].type.sizes == (128, 64)
    team, = ops(k, "team")
    assert team.attrs["kind"] is TeamKind.WARPGROUP
    assert [op.name for op in team.regions[0].ops][-2:] == ["tile.gemm", "yield"]
    consumer = [op.name for op in consumer_loop.regions[0].ops]
    assert consumer.index("mbarrier_wait") < consumer.index("team") \
        < consumer.index("mbarrier_arrive")
    assert ops(k, "tile.copy")[-1].attrs["team"] is TeamKind.WARPGROUP  # tj.wg.copy


def test_warp_specialized_gemm_passes_scope_analysis():
    from tilejit.passes import scope_analysis
    specs = {"A": T(f16, 2), "B": T(f16, 2), "C": T(f16, 2), "K": S(i32)}
    k = scope_analysis.run(build(K.warp_specialized_gemm, specs, num_warps=8))
    scopes = {op.name: op.attrs["scope"] for op in ops(k) if op.name.startswith("tile.")}
    assert scopes["tile.gemm"].kind is TeamKind.WARPGROUP
