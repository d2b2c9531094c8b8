import pytest

from tilejit.errors import SourceLocation
from tilejit.ir import (
    Builder,
    KernelIR,
    Operation,
    Rewriter,
    parse_kernel,
    rewrite,
    verify,
    walk,
)
from tilejit.ir.rewrite import RewriteError, clone_ops
from tilejit.ir.types import f32, i1, i32

from .samples import ALL, FILE

LOC = SourceLocation(FILE, 5, 4)


def is_const(value):
    return value.owner is not None and getattr(value.owner, "name", None) == "const"


def fold_add(op, ctx):
    lhs, rhs = op.operands
    if op.attrs["op"] != "add" or not (is_const(lhs) and is_const(rhs)):
        return None
    return ctx.builder.const(lhs.owner.attrs["value"] + rhs.owner.attrs["value"], op.result.type)


def drop_sync(op, ctx):
    return ()


def sum_chain():
    """%r = ((1 + 2) + 3) + 4, stored; plus a sync to drop."""
    k = KernelIR.new("chain", ["n"], [i32], {}, LOC)
    b = Builder(LOC)
    with b.insert_into(k.body):
        total = b.const(1, i32)
        for value in (2, 3, 4):
            total = b.binary("add", total, b.const(value, i32))
        total.name_hint = "total"
        b.sync()
        b.device_print("%d", [total])
    return k


def test_fold_to_fixpoint_counts_and_locates_patterns():
    k = sum_chain()
    before = str(k)
    rewriter = Rewriter([("binary", fold_add), ("sync", drop_sync)], name="fold")
    folded = rewriter.run(k)
    verify(folded)
    assert str(k) == before  # the input kernel is untouched
    ops = [op.name for op in folded.body]
    assert "binary" not in ops and "sync" not in ops
    printed = folded.body.ops[-1]
    assert printed.name == "device_print" and printed.operands[0].owner.attrs["value"] == 10
    counts = {p.name: n for p, n in rewriter.counts.items()}
    assert counts == {"fold_add": 3, "drop_sync": 1}
    report = rewriter.report().splitlines()
    assert report[0].startswith("fold: fold_add (") and report[0].endswith(": 3")
    assert f"{__file__}:{fold_add.__code__.co_firstlineno}" in report[0]
    assert str(parse_kernel(str(folded))) == str(folded)


def test_patterns_see_rewritten_regions_and_know_their_parents():
    seen = []

    def force_dispatch(op, ctx):
        seen.append([p.name for p in ctx.parents])
        return op.replace(attrs={"dispatch": "generic"})

    k = ALL["gemm"]()
    new = rewrite(k, [(lambda op: op.name == "tile.copy" and op.attrs["dispatch"] is None,
                       force_dispatch, "force_dispatch")])
    verify(new)
    copies = [op for op in walk(new.body) if op.name == "tile.copy"]
    assert {op.attrs["dispatch"] for op in copies} == {"generic", "cp_async"}
    assert sorted(seen) == [[], ["for"]]
    assert sum(1 for line in str(new).splitlines() if 'dispatch = "generic"' in line) == 2


def test_returning_unplaced_ops_appends_them_and_maps_results():
    def neg_to_sub(op, ctx):
        zero = Operation("const", (), {"value": 0.0}, (f32,), loc=op.loc)
        return [zero, Operation("binary", (zero.result, op.operands[0]), {"op": "sub"}, loc=op.loc)]

    k = KernelIR.new("neg", [], [], {}, LOC)
    b = Builder(LOC)
    with b.insert_into(k.body):
        b.device_print("%f", [b.unary("neg", b.const(2.0, f32))])
    new = rewrite(k, [("unary", neg_to_sub)])
    verify(new)
    assert [op.name for op in new.body] == ["const", "const", "binary", "device_print"]


def test_a_declining_pattern_leaves_no_trace_and_the_next_one_is_tried():
    def half_built(op, ctx):
        ctx.builder.const(99, i32)
        return None

    k = sum_chain()
    rewriter = Rewriter([("binary", half_built), ("binary", fold_add)])
    new = rewriter.run(k)
    assert all(op.attrs.get("value") != 99 for op in new.body)
    assert [rewriter.counts[p] for p in rewriter.patterns] == [0, 3]


def test_value_replacement_inside_structured_ops():
    def select_true(op, ctx):
        cond = op.operands[0]
        return op.operands[1] if is_const(cond) and cond.owner.attrs["value"] is True else None

    k = KernelIR.new("sel", ["n"], [i32], {}, LOC)
    b = Builder(LOC)
    with b.insert_into(k.body):
        zero = b.const(0, i32)
        loop, body = b.for_(zero, k.params[0], b.const(1, i32), [zero])
        with b.insert_into(body):
            iv, acc = body.args
            b.yield_([b.select(b.const(True, i1), iv, acc)])
    new = rewrite(k, [("select", select_true)])
    verify(new)
    (new_loop,) = [op for op in new.body if op.name == "for"]
    new_body = new_loop.regions[0]
    assert new_body.ops[-1].operands == (new_body.args[0],)


def test_clone_ops_substitutes_values_renews_nested_blocks_and_folds():
    k = KernelIR.new("clone", ["n", "m"], [i32, i32], {}, LOC)
    b = Builder(LOC)
    with b.insert_into(k.body):
        n, m = k.params
        total = b.binary("add", n, b.const(1, i32))
        loop, body = b.for_(b.const(0, i32), total, b.const(1, i32), [n])
        with b.insert_into(body):
            b.yield_([b.binary("mul", body.args[1], n)])
    seven = Operation("const", (), {"value": 7}, (i32,), (), LOC)
    values = {n: m}

    def fold_add(op, operands):   # n + 1 with n -> m: a constant in its place
        return seven if op.name == "binary" and op.attrs["op"] == "add" else None
    cloned = clone_ops(k.body.ops, values, fold_add)
    assert [op.name for op in cloned] == ["const", "const", "const", "const", "for"]
    assert cloned[1] is seven and values[total] is seven.result
    new_loop, old_body = cloned[-1], loop.regions[0]
    new_body = new_loop.regions[0]
    assert new_loop is not loop and new_body is not old_body
    assert new_loop.operands[1] is seven.result and new_loop.operands[3] is m
    assert new_body.args[1] is values[old_body.args[1]]
    mul = new_body.ops[0]
    assert mul.operands == (new_body.args[1], m) and mul is not old_body.ops[0]


def test_contract_violations_are_reported():
    k = sum_chain()
    with pytest.raises(RewriteError, match="erased or never defined"):
        rewrite(k, [("binary", lambda op, ctx: ())])
    with pytest.raises(RewriteError, match="replaced 1 result"):
        rewrite(k, [("binary", lambda op, ctx: (op.operands[0], op.operands[1]))])
    with pytest.raises(RewriteError, match="still rewriting after 3 sweeps"):
        Rewriter([("sync", lambda op, ctx: op.replace())]).run(k, max_sweeps=3)
