"""Control flow: compile-time and run-time if/for/while/with, break/continue, filters."""
from tilejit.errors import CompilationError, ScopeError
from tilejit.frontend import language as tj
from tilejit.ir.attrs import FilterSpec
from tilejit.ir.types import TeamKind, i1

from .helpers import S, T, build, f32, i32, i64, op_lines, ops, raises


def test_constexpr_if_compiles_only_the_taken_branch():
    def kernel(out, MODE: tj.constexpr = 1):
        if MODE == 0:
            out[0] = undefined_name     # never compiled
        elif MODE == 1:
            out[0] = 1
        else:
            tj.static_assert(False, "unreachable")
    k = build(kernel, {"out": T(i32, 1)})
    assert ops(k, "if") == [] and len(ops(k, "store")) == 1


def test_run_time_if_merges_variables_through_yields():
    def kernel(a, out):
        x = 0
        y = 1.0
        if a > 0:
            x = a
            y = 2
        elif a < -5:
            x = 7
        out[0] = x + y
    k = build(kernel, {"a": S(i32), "out": T(f32, 1)})
    outer, inner = ops(k, "if")
    assert [(r.name_hint, r.type) for r in outer.results] == [("x", i32), ("y", f32)]
    assert [r.type for r in inner.results] == [i32]
    then_yield = outer.regions[0].ops[-1]
    assert then_yield.operands[0] is k.param("a")


def test_branch_types_promote():
    def kernel(a, b, out):
        if a > 0:
            v = a          # i32
        else:
            v = b          # f32
        out[0] = v
    k = build(kernel, {"a": S(i32), "b": S(f32), "out": T(f32, 1)})
    assert ops(k, "if")[0].results[0].type == f32


def test_a_name_defined_in_one_branch_is_unusable_after():
    def kernel(a, out):
        if a > 0:
            t = 1
        out[0] = t
    err = raises(kernel, "'t' is not assigned on every path through the if at line", "out[0] = t",
                 {"a": S(i32), "out": T(i32, 1)})
    assert err.col == 17

    def unused(a, out):
        if a > 0:
            t = 1
            out[0] = t
    build(unused, {"a": S(i32), "out": T(i32, 1)})


def test_for_loop_carries_assigned_variables():
    def kernel(x, n, out):
        acc = 0.0
        count = 0
        for i in range(n):
            acc += x[i]
            count = count + 1
        out[0] = acc / count
    k = build(kernel, {"x": T(f32, 1), "n": S(i64), "out": T(f32, 1)})
    loop, = ops(k, "for")
    assert [r.name_hint for r in loop.results] == ["acc", "count"]
    assert [a.type for a in loop.regions[0].args] == [i64, f32, i32]
    assert op_lines(k, "for")[0].startswith("%acc, %count = for(")


def test_loop_carried_types_widen_to_what_the_body_assigns():
    def kernel(x, n, out):
        acc = 0
        for i in range(0, n, 2):
            acc = acc + x[i]         # i32 accumulator becomes f32
        out[0] = acc
    k = build(kernel, {"x": T(f32, 1), "n": S(i32), "out": T(f32, 1)})
    loop, = ops(k, "for")
    assert loop.results[0].type == f32 and loop.operands[3].owner.attrs["value"] == 0.0


def test_loop_carried_fragments_and_unroll_attributes():
    def kernel(x, n):
        acc = tj.fragment((16,), tj.float32)
        tj.fill(acc, 0.0)
        for i in tj.range(0, n, 1, unroll=4):
            acc = acc * 2.0
        tj.copy(x[0:16], acc)
    k = build(kernel, {"x": T(f32, 1), "n": S(i32)})
    loop, = ops(k, "for")
    assert loop.attrs["unroll"] == 4
    assert not loop.results           # a register tile is carried by value, not as SSA
    init, carry_over, store = ops(k, "tile.copy")
    carry = init.operands[0]
    assert carry.owner.name == "alloc" and carry.type == init.operands[1].type
    assert carry_over in loop.regions[0].ops and carry_over.operands[0] is carry
    assert carry_over.operands[1].owner.name == "alloc"   # this iteration's acc * 2.0
    assert store.operands[1] is carry


def test_names_assigned_in_a_loop_body_are_unusable_after():
    def kernel(n, out):
        for i in range(n):
            fresh = i * 2
        out[0] = fresh
    raises(kernel, "'fresh' is assigned inside the run-time loop at line", "out[0] = fresh",
           {"n": S(i32), "out": T(i32, 1)})

    def loop_var(n, out):
        for i in range(n):
            pass
        out[0] = i
    raises(loop_var, "the loop variable 'i' of the run-time loop", "out[0] = i",
           {"n": S(i32), "out": T(i32, 1)})


def test_static_range_tuples_and_enumerate_unroll():
    def kernel(out, N: tj.constexpr = 3):
        total = 0
        for i in tj.static_range(N):
            total += i
        for j, w in enumerate((10, 20)):
            total += j * w
        for s in range(N):            # a range of constexprs is still a run-time loop
            out[s] = total
    k = build(kernel, {"out": T(i32, 1)})
    assert len(ops(k, "for")) == 1
    assert ops(k, "store")[0].operands[1].owner.attrs["value"] == 0 + 1 + 2 + 20


def test_continue_guards_the_rest_of_the_body():
    def kernel(x, n, out):
        total = 0.0
        for i in range(n):
            if x[i] < 0.0:
                continue
            total += x[i]
        out[0] = total
    k = build(kernel, {"x": T(f32, 1), "n": S(i32), "out": T(f32, 1)})
    flag_if, guard = ops(k, "if")
    assert flag_if.results[0].type == i1
    assert guard.operands[0].owner.name == "unary"           # if not $continue
    assert [r.name_hint for r in guard.results] == ["total"]


def test_break_in_a_for_loop_ends_it():
    def kernel(x, n, out):
        found = -1
        for i in range(n):
            if x[i] == 0.0:
                found = i
                break
        out[0] = found
    k = build(kernel, {"x": T(f32, 1), "n": S(i32), "out": T(i32, 1)})
    assert not ops(k, "for")
    loop, = ops(k, "while")   # over a hidden counter, while `not $break and counter < n`
    before, after = loop.regions
    assert [a.type for a in before.args] == [i32, i1, i32]   # found, $break, counter
    assert loop.results[0].name_hint == "found"
    condition = before.ops[-1].operands[0].owner
    assert condition.name == "binary" and condition.attrs["op"] == "and"
    assert after.ops[-2].name == "binary" and after.ops[-2].attrs["op"] == "add"   # counter += 1


def test_break_in_a_for_loop_with_a_run_time_step_tests_its_sign():
    def kernel(x, n, step, out):
        for i in range(n, 0, step):
            if x[i] == 0.0:
                break
            out[i] = 1.0
    k = build(kernel, {"x": T(f32, 1), "n": S(i32), "step": S(i32), "out": T(f32, 1)})
    before = ops(k, "while")[0].regions[0]
    assert sorted(op.attrs["pred"] for op in before.ops if op.name == "cmp") == \
        ["gt", "gt", "lt", "lt"]   # step > 0 and i < stop, or step < 0 and i > stop


def test_break_in_an_unrolled_or_pipelined_run_time_loop_is_an_error():
    def kernel(x, n, out):
        for i in tj.range(n, unroll=4):
            if x[i] == 0.0:
                break
    raises(kernel, "cannot be unrolled or pipelined", "for i in tj.range(n, unroll=4)",
           {"x": T(f32, 1), "n": S(i32), "out": T(f32, 1)})


def test_while_loop_with_break():
    def kernel(x, out):
        i = 0
        while True:
            if x[i] > 100.0:
                break
            i += 1
        out[0] = i
    k = build(kernel, {"x": T(f32, 1), "out": T(i32, 1)})
    loop, = ops(k, "while")
    before, after = loop.regions
    assert before.ops[-1].name == "condition" and after.ops[-1].name == "yield"
    assert [r.type for r in loop.results] == [i32, i1]
    assert any(op.name == "if" for op in before.ops)   # `not $break and cond` short-circuits


def test_while_loop_widens_and_known_false_loops_vanish():
    def kernel(x, n, out):
        v = 1
        while v < n:
            v = v * 1.5
        while False:
            out[1] = 3
        out[0] = v
    k = build(kernel, {"x": T(f32, 1), "n": S(i32), "out": T(f32, 1)})
    loop, = ops(k, "while")
    assert loop.results[0].type == f32
    assert len(ops(k, "store")) == 1


def test_break_in_an_unrolled_loop_folds_when_known():
    def kernel(out, N: tj.constexpr = 8):
        last = 0
        for i in tj.static_range(N):
            if i == 3:
                break
            last = i
        out[0] = last
    k = build(kernel, {"out": T(i32, 1)})
    assert ops(k, "if") == [] and ops(k, "store")[0].operands[1].owner.attrs["value"] == 2


def test_a_nested_loop_variable_is_not_carried_by_the_outer_loop():
    def kernel(x, n, out):
        i = 1
        for j in range(n):
            for i in range(n):
                out[i] = x[j]
    build(kernel, {"x": T(f32, 1), "n": S(i32), "out": T(f32, 1)})

    def reads_it_first(x, n, out):
        i = 1
        for j in range(n):
            out[j] = i          # Python: 1, then n - 1 from the inner loop
            for i in range(n):
                out[i] = x[j]
    raises(reads_it_first, "nested in this loop, so it is not defined here", "out[j] = i",
           {"x": T(f32, 1), "n": S(i32), "out": T(f32, 1)})


def test_nested_loops_keep_their_own_break():
    def kernel(x, n, out):
        hits = 0
        for i in range(n):
            for j in range(n):
                if x[j] > x[i]:
                    break
                hits += 1
        out[0] = hits
    k = build(kernel, {"x": T(f32, 1), "n": S(i32), "out": T(i32, 1)})
    outer, = ops(k, "for")
    inner, = ops(k, "while")
    assert [a.type for a in outer.regions[0].args] == [i32, i32]        # no flag outside
    assert [a.type for a in inner.regions[0].args] == [i32, i1, i32]    # hits, $break, j


def test_team_blocks_and_scoped_spellings():
    def kernel(x, out):
        frag = tj.fragment((64,), tj.float32)
        with tj.warpgroup():
            tj.copy(frag, x[0:64])
            total = tj.fragment((1,), tj.float32)
            tj.reduce(total, frag, "sum", 0)
        with tj.warp(), tj.thread():
            n = 3
        tj.warp.reduce(total, frag, "max", axis=0)
        tj.cta.copy(out[0:1], total)
        tj.cluster.exp(frag, frag)
    k = build(kernel, {"x": T(f32, 1), "out": T(f32, 1)})
    teams = ops(k, "team")
    assert [t.attrs["kind"] for t in teams] == [TeamKind.WARPGROUP, TeamKind.WARP, TeamKind.THREAD]
    assert [r.name_hint for r in teams[0].results] == ["total"]
    assert teams[1].results == ()      # a compile-time value needs no yield
    assert [op.attrs["team"] for op in ops(k) if op.name.startswith("tile.")][-3:] == [
        TeamKind.WARP, TeamKind.CTA, TeamKind.CLUSTER]


def test_filters_recognise_thread_id_comparisons():
    def kernel(out):
        if tj.warp_id() < 2:
            out[0] = 1
        if tj.warp_id() >= 1 and tj.warp_id() < 3:
            out[0] = 2
        if 5 > tj.lane_id():
            out[0] = 3
        if 1 <= tj.warp_id_in_wg() <= 2:
            out[0] = 4
        if tj.warpgroup_id() > 0:
            out[0] = 5
        if tj.warp_id() != 0:          # not a contiguous range: a plain if
            out[0] = 6
        with tj.tfilter(warp=(2, 4)):
            out[0] = 7
        with tj.tfilter(lane=0):
            out[0] = 8
    k = build(kernel, {"out": T(i32, 1)}, num_warps=8)
    assert [op.attrs["filter"] for op in ops(k, "if")] == [
        FilterSpec("warp", 0, 2), FilterSpec("warp", 1, 3), FilterSpec("lane", 0, 5),
        FilterSpec("warp_in_wg", 1, 3), FilterSpec("warpgroup", 1, 2), None,
        FilterSpec("warp", 2, 4), FilterSpec("lane", 0, 1)]


def test_a_comparison_with_a_run_time_value_is_no_filter():
    def kernel(n, out):
        if tj.warp_id() == n:
            out[0] = 1
    k = build(kernel, {"n": S(i32), "out": T(i32, 1)})
    assert ops(k, "if")[0].attrs["filter"] is None


def test_a_filter_that_keeps_no_thread_is_dead_code():
    def kernel(out, LIMIT: tj.constexpr = 0):
        if tj.warp_id() >= 4:                   # 4 warps: never true
            out[0] = 1
        else:
            out[0] = 2
        if tj.thread_id() < LIMIT and tj.lane_id() == 0:
            out[1] = 1
        with tj.tfilter(warp=(4, 6)):
            out[2] = 1
    k = build(kernel, {"out": T(i32, 1)}, num_warps=4)
    assert not ops(k, "if")
    store, = ops(k, "store")
    assert store.operands[1].owner.attrs["value"] == 2


def test_returns_in_device_functions_and_kernels():
    @tj.func
    def pick(a, FIRST: tj.constexpr):
        if FIRST:
            return a
        return a * 2

    def kernel(a, out):
        out[0] = pick(a, True) + pick(a, False)
        return
        out[1] = undefined_after_return
    k = build(kernel, {"a": S(i32), "out": T(i32, 1)})
    assert len(ops(k, "store")) == 1 and len(ops(k, "binary")) == 2


def test_return_under_run_time_control_flow_is_rejected():
    @tj.func
    def early(a):
        if a > 0:
            return a
        return 0

    def kernel(a, out):
        out[0] = early(a)
    err = raises(kernel, "returning a value inside run-time control flow", None,
                 {"a": S(i32), "out": T(i32, 1)})
    assert err.line == early.fn.__code__.co_firstlineno + 3
    assert isinstance(err, CompilationError)


def test_a_name_defined_under_a_thread_filter_is_unusable_after():
    def kernel(out):
        with tj.tfilter(warp=0):
            only_warp0 = 1
        out[0] = only_warp0
    raises(kernel, "'only_warp0' is not assigned on every path through the tj.tfilter block",
           "out[0] = only_warp0", {"out": T(i32, 1)})
