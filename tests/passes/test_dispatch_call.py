"""What rules see: operands' storage roles, shapes, sub-tile layouts and bounds."""
from __future__ import annotations

import pytest
from support.tile_kernels import GENERIC, global_matrix, make_kernel

from tilejit.errors import CompilationError
from tilejit.ir.types import MemScope, TeamKind, f16, f32, i32
from tilejit.layout import ComposeLayout, TileLayout
from tilejit.passes import scope_analysis
from tilejit.passes.dispatch import PrimitiveCall


def call_of(body, params=(), scoped=True, **kw):
    k = make_kernel(list(params), body, **kw)
    k = scope_analysis.run(k) if scoped else k
    (op,) = [op for op in k.walk() if op.name.startswith("tile.")]
    return PrimitiveCall.of(op, GENERIC)


def test_region_of_a_laid_out_shared_buffer_gets_the_sliced_layout():
    padded = TileLayout.parse("(64,64):(72,1)")

    def body(b):
        smem = b.alloc(MemScope.SHARED, f16, (64, 64), padded)
        tile = b.region(smem, [b.const(16, i32), b.const(32, i32)], (16, 32))
        b.tile("copy", b.alloc(MemScope.FRAGMENT, f16, (16, 32)), tile)
    src = call_of(body)["src"]
    assert (src.role, src.dtype, src.shape, src.may_oob) == (MemScope.SHARED, f16, (16, 32), False)
    assert src.layout == padded.slice((64, 64), (slice(16, 32), slice(32, 64)))
    assert str(src.layout) == "(16,32):(72,1) + 1184"


def test_swizzled_layouts_are_sliced_under_the_swizzle():
    swizzled = ComposeLayout.for_mode("B128", 2, TileLayout.parse("(64,64):(64,1)"))

    def body(b):
        smem = b.alloc(MemScope.SHARED, f16, (64, 64), swizzled)
        rows = b.region(smem, [b.const(8, i32), b.const(0, i32)], (8, 64))
        b.tile("copy", b.alloc(MemScope.FRAGMENT, f16, (8, 64)), rows)
    layout = call_of(body)["src"].layout
    assert isinstance(layout, ComposeLayout)
    assert (layout.per_element, layout.swizzle_len) == (3, 3)
    assert all(layout.apply(i) == swizzled.apply(512 + i) for i in range(8 * 64))


def test_run_time_starts_slice_at_the_origin():
    def body(b, n):
        smem = b.alloc(MemScope.SHARED, f32, (32, 32), TileLayout.parse("(32,32):(32,1)"))
        b.tile("copy", b.alloc(MemScope.FRAGMENT, f32, (8, 32)), b.region(smem, [n, n], (8, 32)))
    assert str(call_of(body, [("n", i32)])["src"].layout) == "(8,32):(32,1)"


def test_regions_of_run_time_shaped_tensors_may_run_out_of_bounds():
    def body(b, x):
        zero = b.const(0, i32)
        row = b.region(x, [zero, zero], (1, 128), keep=(False, True))
        b.tile("copy", b.alloc(MemScope.SHARED, f32, (128,)), row)
    call = call_of(body, [("x", global_matrix(f32))])
    src = call["src"]
    assert (src.shape, src.oob_dims, src.layout, src.is_region) == ((128,), (0, 1), None, True)
    assert call.describe() == ("tile.copy(dst: shared f32[128], src: global f32[128] (may run "
                               "out of bounds)) on target 'generic', team cta")


def test_pointwise_operands_are_named_after_their_role():
    def body(b):
        frag = b.alloc(MemScope.FRAGMENT, f32, (4, 4))
        b.tile("pointwise", frag, b.alloc(MemScope.FRAGMENT, i32, (4, 4)), frag,
               b.const(1.0, f32), op="select", team=TeamKind.WARP, config={"fill": 2})
    call = call_of(body, num_warps=4)
    assert [o.name for o in call.operands] == ["dst", "cond", "a", "b"]
    assert call["b"].is_scalar and call["b"].describe() == "b: scalar f32"
    assert (call.attrs, call.config, call.team) == ({"op": "select", "steps": None}, {"fill": 2},
                                                    TeamKind.WARP)
    assert call.scope.team_size == 32


def test_a_fragment_with_thread_axes_is_distributed():
    def body(b):
        frag = b.alloc(MemScope.FRAGMENT, f32, (32, 8), TileLayout.parse("(32,8):(1@laneid,1@m)"))
        b.tile("pointwise", frag, b.const(0.0, f32), op="fill")
    assert call_of(body)["dst"].thread_axes == ("laneid",)


def test_a_call_needs_its_execution_scope():
    def body(b):
        b.tile("pointwise", b.alloc(MemScope.FRAGMENT, f32, (4,)), b.const(0.0, f32), op="fill")
    with pytest.raises(CompilationError, match="run scope-analysis before dispatch"):
        call_of(body, scoped=False)


def test_fragment_writers_are_the_one_tile_op_writing_each_fragment():
    from tilejit.ir.rewrite import Rewriter
    from tilejit.passes.dispatch.call import RebuiltWriters, fragment_writers

    def body(b):
        once = b.alloc(MemScope.FRAGMENT, i32, (16,))
        b.tile("pointwise", once, b.const(0, i32), op="iota")
        twice = b.alloc(MemScope.FRAGMENT, i32, (16,))
        b.tile("pointwise", twice, b.const(0, i32), op="iota")
        b.tile("pointwise", twice, b.const(1, i32), op="fill")
    k = scope_analysis.run(make_kernel([], body))
    writers = fragment_writers(k)
    ((buffer, op),) = writers.items()   # the fragment written twice is no index tile
    assert op.attrs["op"] == "iota" and op.operands[0] is buffer
    seen = []

    def look(tile_op, ctx):   # a rule's view: rebuilt operands, writers with rebuilt operands
        rebuilt = RebuiltWriters(writers, ctx.lookup)
        if tile_op.operands[0] in rebuilt:
            seen.append((rebuilt[tile_op.operands[0]].operands[0], tile_op.operands[0]))
        return None
    Rewriter([(lambda o: o.name == "tile.pointwise", look, "look")], "look").sweep(k)
    (writer_dst, rule_dst), = seen[:1]
    assert writer_dst is rule_dst and rule_dst is not buffer
