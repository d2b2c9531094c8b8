"""Dispatch decisions: priority, dispatch= / config= overrides, fallbacks, errors, the log."""
from __future__ import annotations

import pytest
from support.tile_kernels import (
    FILE,
    GENERIC,
    SIMT,
    TILE_LINE,
    dispatched,
    global_matrix,
    lowered,
    make_kernel,
)

from tilejit.errors import CompilationError, DispatchError
from tilejit.ir.parser import parse_kernel
from tilejit.ir.types import MemScope, f16, f32, i32
from tilejit.knobs import knobs
from tilejit.passes.dispatch import (
    Decline,
    DispatchContext,
    Plan,
    Rule,
    context_for,
    dispatch_log,
    format_log,
    register,
    register_target,
    rules_for,
    unregister,
    unregister_target,
)
from tilejit.passes.dispatch import lower as lower_tiles
from tilejit.passes.pipeline import PIPELINE, run_pipeline


def copy_kernel(shape=(64, 96), dst_scope=MemScope.SHARED, dtype=f32, **attrs):
    """``dst[shape] <- x[0:, 0:]`` from a global tensor of run-time shape."""
    def body(b, x):
        zero = b.const(0, i32)
        dst = b.alloc(dst_scope, dtype, shape)
        b.tile("copy", dst, b.region(x, [zero] * len(shape), shape), **attrs)
    return make_kernel([("x", global_matrix(dtype, len(shape)))], body)


def record(kernel, context=GENERIC):
    _, log = dispatched(kernel, context)
    (rec,) = log
    return rec


# --------------------------------------------------------------------------- selection
def test_largest_legal_vector_wins_and_is_annotated():
    k, (rec,) = dispatched(copy_kernel())
    assert (rec.primitive, rec.rule, rec.shape, rec.fallback, rec.rejected, rec.line) == \
        ("copy", "vector", (4,), False, (), TILE_LINE)
    assert rec.scope.startswith("cta(lane 0:32, warp 0:1")
    assert 'rule = "vector", inst_shape = [4]' in str(k)


def test_vector_width_follows_the_target_and_dtype():
    wide = DispatchContext("generic", vector_bytes=32)
    assert record(copy_kernel(dtype=f16)).shape == (8,)
    assert record(copy_kernel(dtype=f16), wide).shape == (16,)


def test_config_shape_picks_another_legal_shape():
    assert record(copy_kernel(config={"shape": (2,)})).shape == (2,)


def test_config_shape_illegal_for_the_family_falls_through_to_the_fallback():
    rec = record(copy_kernel(config={"shape": (1,)}))
    assert (rec.rule, rec.shape, rec.fallback) == ("scalar", (1,), True)
    why = "config shape (1,) is not legal here; legal shapes: (4,), (2,)"
    assert rec.rejected == (("vector", why),)


def test_dispatch_forces_a_family():
    rec = record(copy_kernel(dispatch="scalar"))
    assert (rec.rule, rec.fallback, rec.rejected) == ("scalar", True, ())


def test_forcing_an_unknown_family_names_the_registered_ones():
    with pytest.raises(DispatchError, match=r"dispatch='tma'.*registered: vector, stmatrix, tcgen05, vec, "
                                             r"packed, scalar"):
        dispatched(copy_kernel(dispatch="tma"))


def test_forced_family_that_declines_is_an_error_not_a_fallback():
    with pytest.raises(DispatchError) as info:
        dispatched(copy_kernel(shape=(5, 1), dispatch="vector"))
    assert "vector | the innermost extent 1 is shorter than two elements" in str(info.value)
    assert "scalar" not in info.value.message.split("\n", 1)[1]


def test_fallback_is_logged_with_why_the_specialized_rule_declined():
    rec = record(copy_kernel(shape=(96, 1)))
    assert (rec.rule, rec.fallback) == ("scalar", True)
    ((rule, why),) = rec.rejected
    assert rule == "vector" and "innermost extent 1" in why


def test_a_column_of_a_shared_tile_is_not_contiguous():
    def body(b):
        smem = b.alloc(MemScope.SHARED, f32, (8, 8))
        column = b.region(smem, [b.const(0, i32), b.const(3, i32)], (8, 1), keep=(True, False))
        b.tile("copy", b.alloc(MemScope.FRAGMENT, f32, (8,)), column)
    rec = record(make_kernel([], body))
    assert rec.rule == "scalar"
    assert rec.rejected == (("vector", "src's innermost dim has no static unit stride"),)


# --------------------------------------------------------------------------- errors
def test_no_legal_rule_reports_the_line_and_a_table_of_every_rule():
    with pytest.raises(DispatchError) as info:
        dispatched(copy_kernel(dst_scope=MemScope.TMEM))
    err = info.value
    assert (err.file, err.line) == (FILE, TILE_LINE)
    table = err.message.splitlines()
    assert table[0].startswith("no rule can implement tile.copy(dst: tmem f32[64, 96], "
                               "src: global f32[64, 96] (may run out of bounds))")
    assert table[1].split() == ["rule", "|", "reason"]
    assert table[3].startswith("  vector | dst is in tmem memory, which element loops "
                               "cannot reach")
    assert table[4].startswith("  scalar | dst is in tmem memory")


def test_async_primitives_have_no_generic_rule():
    def body(b, x):
        zero = b.const(0, i32)
        b.tile("copy_async", b.alloc(MemScope.SHARED, f32, (8, 8)), b.region(x, [zero, zero], (8, 8)))
    with pytest.raises(DispatchError, match="no rule is registered for copy_async"):
        dispatched(make_kernel([("x", global_matrix(f32))], body))


def test_local_tiles_need_a_thread_team():
    with pytest.raises(DispatchError, match="dst is a local .per-thread. buffer but the team "
                                            "is cta"):
        dispatched(copy_kernel(dst_scope=MemScope.LOCAL))


def test_unknown_target_is_a_compile_error():
    with pytest.raises(CompilationError, match="target 'nowhere' is not registered"):
        context_for(make_kernel([], lambda b: None, target="nowhere"))


# --------------------------------------------------------------------------- registry
@pytest.fixture
def dma_family():
    """A target-specific family, registered the way a target package does it."""
    context = register_target(DispatchContext("accel-test"))

    def check(call):
        dst, src = call["dst"], call["src"]
        if (src.role, dst.role) != (MemScope.GLOBAL, MemScope.SHARED):
            return Decline(f"dma moves global to shared, not {src.role} to {dst.role}")
        return Plan([dst.shape])

    def lower(call, plan, em):
        em.b.intrinsic("accel", "dma", [call["dst"].value, call["src"].value])

    rule = register(Rule("dma", "copy", check, lower, targets=("accel-test",), priority=10))
    yield rule
    unregister(rule)
    unregister_target(context)


def test_a_target_is_known_until_it_is_unregistered():
    kernel = make_kernel([], lambda b: None, target="accel-test")
    context = register_target(DispatchContext("accel-test"))
    assert context_for(kernel) == context
    with pytest.raises(ValueError, match="not registered as"):
        unregister_target(DispatchContext("accel-test", vector_bytes=64))  # not the one known
    unregister_target(context)
    with pytest.raises(CompilationError, match="target 'accel-test' is not registered"):
        context_for(kernel)


def test_a_target_family_is_tried_first_on_its_target_only(dma_family):
    accel = DispatchContext("accel-test")
    assert [r.family for r in rules_for("copy", "accel-test")] == ["dma", "vector", "stmatrix",
                                                                  "tcgen05", "vec", "packed",
                                                                  "scalar"]
    assert [r.family for r in rules_for("copy", "generic")] == ["vector", "stmatrix", "tcgen05",
                                                               "vec", "packed", "scalar"]
    k, (rec,) = lowered(copy_kernel(), accel)
    assert (rec.rule, rec.shape) == ("dma", (64, 96))
    assert 'intrinsic(%1, %2) {target = "accel", name = "dma"}' in str(k)


def test_a_declining_target_family_is_logged(dma_family):
    def body(b):
        s = b.alloc(MemScope.SHARED, f32, (16,))
        b.tile("copy", b.alloc(MemScope.FRAGMENT, f32, (16,)), s)
    rec = record(make_kernel([], body), DispatchContext("accel-test"))
    assert rec.rule == "vector"
    assert rec.rejected == (("dma", "dma moves global to shared, not shared to fragment"),)


def test_a_family_registers_once_per_primitive_and_target(dma_family):
    with pytest.raises(ValueError, match="already registered"):
        register(Rule("dma", "copy", dma_family.check, dma_family.lower,
                      targets=("accel-test",)))


# --------------------------------------------------------------------------- the log
def test_dispatch_log_is_recomputed_from_the_dispatched_ir():
    k, log = dispatched(copy_kernel(shape=(96, 1)))
    assert dispatch_log(k, GENERIC) == log
    table = format_log(log).splitlines()
    assert table[0].split() == ["line", "|", "primitive", "|", "rule", "|", "shape", "|",
                                "fallback", "|", "rejected"]
    assert table[2].split("|")[:5] == ["  7    ", " copy      ", " scalar ", " (1,)  ",
                                       " yes      "]


def test_the_dispatch_pass_prints_nothing_itself(capsys):
    # TILEJIT_DUMP=dispatch printed the log here and again in the runtime; the runtime,
    # which has the log on cache hits too, prints it (tests/runtime/test_dump_dispatch.py).
    with knobs.scoped(dump=frozenset({"dispatch"})):
        dispatched(copy_kernel())
    assert capsys.readouterr() == ("", "")


# --------------------------------------------------------------------------- lowering
def test_lower_tiles_needs_dispatched_ops():
    with pytest.raises(CompilationError, match="has not been dispatched"):
        lower_tiles.run(copy_kernel(), GENERIC)


def test_lower_tiles_runs_from_text_with_a_hand_written_rule():
    k, _ = dispatched(copy_kernel(shape=(8, 8)))
    text = str(k).replace('rule = "vector", inst_shape = [4]', 'rule = "scalar", inst_shape = [1]')
    lowered_text = str(lower_tiles.run(parse_kernel(text), GENERIC))
    assert "unroll" not in lowered_text and "store(" in lowered_text


def test_pipeline_runs_dispatch_then_lower_tiles():
    out, stages = run_pipeline(copy_kernel(), dump=())
    assert list(stages) == [name for name, _ in PIPELINE]
    assert [name for name in stages if name in ("scope-analysis", "dispatch", "lower-tiles")] \
        == ["scope-analysis", "dispatch", "lower-tiles"]
    assert 'rule = "vector"' in stages["dispatch"]
    assert "tile." not in stages["lower-tiles"] and "single {team = cta}" in str(out)
    # The log comes from the IR after dispatch (the lowered IR has no tile ops left).
    assert dispatch_log(out) == []
    assert dispatch_log(parse_kernel(stages["dispatch"])) == dispatched(copy_kernel())[1]


def test_per_thread_targets_emit_no_single():
    k, _ = lowered(copy_kernel(), SIMT)
    assert "single" not in str(k) and "thread_index {kind = lane_id}" in str(k)
