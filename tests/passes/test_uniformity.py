"""The uniformity analysis, and scope analysis refusing tile ops under divergent control."""
from __future__ import annotations

import pytest

from tilejit.errors import ScopeError
from tilejit.frontend import ArgSpec, LaunchOptions, compile_to_ir
from tilejit.frontend import language as tj
from tilejit.ir.types import TeamKind, f32, i32
from tilejit.passes import scope_analysis
from tilejit.passes.uniformity import uniform_within

SPECS = {"x": ArgSpec.tensor(f32, 1, unit_stride=True), "n": ArgSpec.scalar(i32)}
THREAD, WARP, WARPGROUP, CTA, CLUSTER = (TeamKind.THREAD, TeamKind.WARP, TeamKind.WARPGROUP,
                                         TeamKind.CTA, TeamKind.CLUSTER)


def values(fn) -> dict[str, TeamKind]:
    """Uniformity of every named value (the last value bound to each name wins)."""
    kernel = compile_to_ir(fn, SPECS, {}, LaunchOptions(num_warps=8))
    return {value.name_hint: kind for value, kind in uniform_within(kernel).items()
            if value.name_hint}


def test_thread_indices_arguments_and_arithmetic():
    def kernel(x, n):
        t = tj.thread_id()
        lane = tj.lane_id()
        w = tj.warp_id()
        g = tj.warpgroup_id()
        c = tj.cta_id(0)
        w_and_n = w * n + 1
        g_and_c = g + c
        mixed = w_and_n + lane
        x[c] = 1.0
    got = values(kernel)
    assert (got["t"], got["lane"], got["w"], got["g"], got["c"], got["n"]) == \
        (THREAD, THREAD, WARP, WARPGROUP, CTA, CLUSTER)
    assert (got["w_and_n"], got["g_and_c"], got["mixed"]) == (WARP, WARPGROUP, THREAD)


def test_loads_elect_and_private_memory():
    def kernel(x, n):
        c = tj.cta_id(0)
        shared_value = x[c]                      # global memory at a uniform index
        per_thread = x[tj.thread_id()]
        scratch = tj.alloc_local((4,), tj.float32)
        scratch[0] = shared_value
        private = scratch[0]                     # thread-private memory
        elected = tj.elect_sync()
    got = values(kernel)
    assert (got["shared_value"], got["per_thread"], got["private"], got["elected"]) == \
        (CTA, THREAD, THREAD, THREAD)


def test_control_flow_results_follow_their_condition_and_loops_reach_a_fixed_point():
    def kernel(x, n):
        w = tj.warp_id()
        picked = 0
        if w < 2:
            picked = 1                           # constant yields, a per-warp choice
        acc = 0
        late = 0
        for i in range(n):
            late = acc                           # only lowered once acc is, next sweep
            acc = acc + w
        steps = 0
        for j in range(tj.lane_id()):
            steps = steps + 1                    # uniform body, per-thread trip count
        k = n
        while k > w:
            k = k - 1
        uniform = 0
        for m in range(n):
            uniform = uniform + m
    got = values(kernel)
    assert (got["picked"], got["acc"], got["late"]) == (WARP, WARP, WARP)
    assert (got["steps"], got["k"], got["uniform"]) == (THREAD, WARP, CLUSTER)


def scope_error(fn) -> ScopeError:
    kernel = compile_to_ir(fn, SPECS, {}, LaunchOptions(num_warps=8))
    with pytest.raises(ScopeError) as info:
        scope_analysis.run(kernel)
    return info.value


def test_a_tile_op_under_a_condition_that_varies_inside_its_team_is_refused():
    def odd_threads(x, n):
        tile = tj.fragment((8,), tj.float32)
        if tj.thread_id() % 2 == 1:              # not a range: no thread filter
            tj.copy(tile, x[0:8])
    err = scope_error(odd_threads)
    assert "tile.copy runs at team cta" in err.message
    assert "the same only within each thread" in err.message
    assert err.line is not None and "`if A and B:` with an `else`" in err.message

    def per_thread_trip_count(x, n):
        tile = tj.fragment((8,), tj.float32)
        for i in range(tj.thread_id()):
            tj.fill(tile, 1.0)
    assert "the bounds of the `for` loop" in scope_error(per_thread_trip_count).message

    def per_warp_condition_at_warpgroup(x, n):
        tile = tj.fragment((8,), tj.float32)
        with tj.warpgroup():
            if tj.warp_id() % 2 == 0:
                tj.fill(tile, 1.0)
    err = scope_error(per_warp_condition_at_warpgroup)
    assert "team warpgroup" in err.message and "with tj.warp()" in err.message


def test_conditions_uniform_within_the_team_are_fine():
    def kernel(x, n):
        tile = tj.fragment((8,), tj.float32)
        if n > 4:                                # the same for every thread
            tj.fill(tile, 1.0)
        with tj.warp():
            if tj.warp_id() % 2 == 0:            # differs between warps, not inside one
                tj.fill(tile, 2.0)
        with tj.thread():
            if tj.thread_id() % 3 == 0:
                tj.fill(tile, 3.0)
        if tj.warp_id() == 0:                    # a thread filter narrows the team instead
            tj.fill(tile, 4.0)
    kernel_ir = compile_to_ir(kernel, SPECS, {}, LaunchOptions(num_warps=8))
    annotated = scope_analysis.run(kernel_ir)
    fills = [op for op in annotated.walk() if op.attrs.get("op") == "fill"]
    assert len(fills) == 4 and all(op.attrs["scope"] is not None for op in fills)
