"""The ``packed`` pointwise family at the pass level: which register layouts give a thread
pairs in one 32-bit register (proved from the layout, else declined with the reason), the
ops and archs it takes, and its lowering (one packed_binary per pair) run by the IR
executor against numpy's f16 arithmetic bit for bit."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.ir_exec import run_kernel
from support.tile_kernels import SIMT, global_matrix, lowered, make_kernel

from tilejit.ir.core import walk
from tilejit.ir.types import MemScope, TeamKind, f16, f32, i32
from tilejit.layout import TileLayout
from tilejit.passes import scope_analysis
from tilejit.passes.dispatch import Decline
from tilejit.passes.dispatch.call import PrimitiveCall
from tilejit.passes.rules.pointwise_packed import PACKED_POINTWISE

FRAGMENT, SHARED = MemScope.FRAGMENT, MemScope.SHARED

PAIRED = [  # (shape, fragment layout, num_warps, team)
    ((8, 4), "(8,4):(4@laneid,1@m)", 1, TeamKind.WARP),
    ((32, 8), "(32,8):(1@laneid,1@m) + R[2:1@warpid]", 2, None),  # replicated on both warps
    ((16, 16), "(2,8,2,4,2):(2@m,4@laneid,4@m,1@laneid,1@m)", 1, TeamKind.WARP),  # mma A
    ((6, 12), "(6,2,3,2):(4@laneid,1@laneid,2@m,1@m)", 1, TeamKind.WARP),
]


def pointwise_kernel(shape, layout, num_warps, team, op="add", dtype=f16, dst_scope=FRAGMENT,
                     src_shape=None):
    """x and y copied into fragments of ``layout``; ``op`` of them (``x * y + y`` for fma)
    into the destination; the destination copied to out."""
    layout = TileLayout.parse(layout) if isinstance(layout, str) else layout

    def body(b, x, y, out):
        zero = b.const(0, i32)
        a = b.alloc(FRAGMENT, dtype, shape, layout)
        c = b.alloc(FRAGMENT, dtype, src_shape or shape,
                    layout if src_shape is None else None)
        d = b.alloc(dst_scope, dtype, shape, layout if dst_scope is FRAGMENT else None)
        b.tile("copy", a, b.region(x, [zero, zero], shape), team=team)
        b.tile("copy", c, b.region(y, [zero, zero], src_shape or shape), team=team)
        sources = {"fma": (a, c, c), "neg": (a,)}.get(op, (a, c))
        b.tile("pointwise", d, *sources, op=op, team=team)
        b.tile("copy", b.region(out, [zero, zero], shape), d, team=team)
    return make_kernel([("x", global_matrix(dtype)), ("y", global_matrix(dtype)),
                        ("out", global_matrix(dtype))], body, num_warps=num_warps)


def record_of(log):
    (record,) = [r for r in log if r.primitive == "pointwise"]
    return record


@pytest.mark.parametrize("op, numpy_op", [("add", np.add), ("mul", np.multiply),
                                          ("maximum", np.maximum),
                                          ("neg", lambda x, y: np.negative(x))])
@pytest.mark.parametrize("shape, layout, num_warps, team", PAIRED, ids=[p[1] for p in PAIRED])
def test_pairs_match_numpy_f16_bit_for_bit(shape, layout, num_warps, team, op, numpy_op):
    k, log = lowered(pointwise_kernel(shape, layout, num_warps, team, op), SIMT)
    record = record_of(log)
    assert (record.rule, record.shape) == ("packed", (2,))
    kind = "packed_unary" if op == "neg" else "packed_binary"
    pairs = [o for o in walk(k.body) if o.name == kind]
    assert pairs and all(o.attrs["op"] == op.removesuffix("imum") for o in pairs)
    rng = np.random.default_rng(shape[0] * shape[1])
    x = (rng.standard_normal(shape) * 300).astype(np.float16)
    y = rng.standard_normal(shape).astype(np.float16)
    x[0, 0], y[0, 1] = np.nan, np.nan
    out = np.zeros(shape, np.float16)
    run_kernel(k, {"x": x, "y": y, "out": out})
    with np.errstate(all="ignore"):
        expected = numpy_op(x, y)
    np.testing.assert_array_equal(out.view(np.int16)[~np.isnan(expected)],
                                  expected.view(np.int16)[~np.isnan(expected)])
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))


def declined(kernel, context=SIMT) -> str:
    return dict(record_of(lowered(kernel, context)[1]).rejected)["packed"]


@pytest.mark.parametrize("shape, layout, reason", [
    ((4, 8), "(4,8):(1@m,4@laneid)", "dst's layout (4,8):(1@m,4@laneid) gives each thread "
                                     "single elements of the last dim, no pairs"),
    ((16, 4), "(16,2,2):(1@laneid,1@m,16@laneid)", "gives each thread single elements"),
    ((8, 6), "(8,2,3):(2@laneid,1@laneid,1@m)", "gives each thread runs of 3 elements of the "
                                            "last dim, no pairs"),
    ((8, 8), "(8,2,2,2):(4@laneid,3@m,2@laneid,1@m)", "starts pairs at odd registers: a pair "
                                                       "would straddle two 32-bit registers"),
], ids=["column-major", "lanes-inside-pairs", "runs-of-three", "odd-registers"])
def test_layouts_without_register_pairs_are_declined_with_their_reason(shape, layout, reason):
    assert reason in declined(pointwise_kernel(shape, layout, 1, TeamKind.WARP))


def test_what_else_it_cannot_take_is_named():
    paired = ((8, 4), "(8,4):(4@laneid,1@m)", 1, TeamKind.WARP)
    assert "fma: the scalar fma rounds its product and its sum" in declined(
        pointwise_kernel(*paired, op="fma"))
    assert "div has no packed f16x2/bf16x2 form here" in declined(
        pointwise_kernel(*paired, op="div"))
    assert "add computes f32: pairs are f16 or bf16" in declined(
        pointwise_kernel(*paired, dtype=f32))
    assert "dst is in shared memory: pairs are packed from registers" in declined(
        pointwise_kernel(*paired, dst_scope=SHARED))
    assert "[8, 1] broadcasts to dst [8, 4]: its pairs are not two of its own registers" in \
        declined(pointwise_kernel(*paired, src_shape=(8, 1)))


def test_arch_decides_which_ops_pack():
    """f16 add pairs from sm_53, max/min pairs from sm_80 (PTX ISA)."""
    for op, arch, legal in (("add", "sm_75", True), ("maximum", "sm_75", False),
                            ("maximum", "sm_80", True)):
        kernel = scope_analysis.run(pointwise_kernel((8, 4), "(8,4):(4@laneid,1@m)", 1,
                                                     TeamKind.WARP, op))
        (tile,) = [o for o in walk(kernel.body) if o.name == "tile.pointwise"]
        verdict = PACKED_POINTWISE.check(PrimitiveCall.of(tile, dataclasses.replace(SIMT,
                                                                                   arch=arch)))
        if legal:
            assert not isinstance(verdict, Decline), verdict
        else:
            assert verdict.reasons == ("f16 pairs of maximum need sm_80 or later; compiling "
                                       "for sm_75",)


def test_a_copy_rounding_f32_registers_to_f16_packs_and_one_without_conversion_does_not():
    layout = TileLayout.parse("(8,4):(4@laneid,1@m)")

    def body(b, x, out):
        zero = b.const(0, i32)
        wide = b.alloc(FRAGMENT, f32, (8, 4), layout)
        narrow = b.alloc(FRAGMENT, f16, (8, 4), layout)
        b.tile("copy", wide, b.region(x, [zero, zero], (8, 4)), team=TeamKind.WARP)
        b.tile("copy", narrow, wide, team=TeamKind.WARP)
        b.tile("copy", b.region(out, [zero, zero], (8, 4)), narrow, team=TeamKind.WARP)
    k, log = lowered(make_kernel([("x", global_matrix(f32)), ("out", global_matrix(f16))],
                                 body), SIMT)
    load, convert, store = log
    assert convert.rule == "packed"
    assert dict(load.rejected)["packed"] == "copy computes f32: pairs are f16 or bf16"
    assert dict(store.rejected)["packed"] == ("a copy from f16: cvt.rn.{f16,bf16}x2 rounds "
                                              "pairs of f32")
    assert len([o for o in walk(k.body) if o.name == "packed_cast"]) == 1
    x = (np.random.default_rng(3).standard_normal((8, 4)) * 1e4).astype(np.float32)
    x[0, :2] = [1 + 2 ** -11, 70000.0]   # a tie (rounds to even), an overflow to inf
    out = np.zeros((8, 4), np.float16)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_array_equal(out, x.astype(np.float16))
