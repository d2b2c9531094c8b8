"""The scope-analysis pass and the pipeline around it, on textual IR."""
from __future__ import annotations

import re
import textwrap
import time

import pytest

from tilejit.errors import ScopeError
from tilejit.ir.parser import parse_kernel
from tilejit.ir.verifier import verify
from tilejit.passes import scope_analysis
from tilejit.passes.pipeline import PIPELINE, main, run_pipeline

HEADER = ('kernel @k(%x: buffer<global, f32, [?], strides=[1]>) {{{attrs}}} loc("k.py":1:0) {{\n'
          '  %s = alloc {{scope = shared, dtype = f32, shape = [128]}} : '
          'buffer<shared, f32, [128]> loc(2:4)\n'
          '  %c = const {{value = true}} : i1 loc(3:4)\n')


def kernel(body: str, attrs: str = "num_warps = 8"):
    """A kernel with a shared tile %s, a global %x and a condition %c around ``body``."""
    return parse_kernel(HEADER.format(attrs=attrs) + textwrap.indent(textwrap.dedent(body), "  ")
                        + "}\n")


def scopes(k) -> list[tuple[int, str]]:
    """(line, scope text) of every tile op, in print order."""
    return [(int(m.group(2)), m.group(1)) for m in
            re.finditer(r'scope = "([^"]*)"\}? loc\((\d+):\d+\)', str(k))]


def filtered_if(line: int, axis: str, lo: int, hi: int, then: str, orelse: str = "") -> str:
    """An ``if`` whose then-branch keeps ``lo <= axis < hi``."""
    def region(body):
        return textwrap.indent(textwrap.dedent(body), "  ") + f"  yield loc({line}:0)\n"
    return (f"if(%c) {{filter = {{axis = {axis}, lo = {lo}, hi = {hi}}}}} loc({line}:0) {{\n"
            f"^():\n{region(then)}}} {{\n^():\n{region(orelse)}}}\n")


def team(line: int, kind: str, body: str) -> str:
    return (f"team {{kind = {kind}}} loc({line}:0) {{\n^():\n"
            + textwrap.indent(textwrap.dedent(body), "  ") + f"  yield loc({line}:0)\n}}\n")


def copy(line: int, team_kind: str | None = None) -> str:
    attrs = f" {{team = {team_kind}}}" if team_kind else ""
    return f"tile.copy(%s, %x){attrs} loc({line}:4)\n"


# --------------------------------------------------------------------------- scopes
def test_kernel_body_runs_at_cta_with_everything_active():
    out = scope_analysis.run(kernel(copy(10)))
    assert scopes(out) == [(10, "cta(lane 0:32, warp 0:8, cta 0:1; num_warps=8, cluster=1)")]


def test_nested_team_filter_and_scoped_op():
    body = filtered_if(10, "warp", 0, 4,
                       then=team(11, "warp", copy(12) + copy(13, "warpgroup")),
                       orelse=copy(14))
    body += team(15, "warpgroup", copy(16) + filtered_if(17, "warp_in_wg", 0, 1, copy(18)))
    out = scope_analysis.run(kernel(body))
    assert scopes(out) == [
        (12, "warp(lane 0:32, warp 0:4, cta 0:1; num_warps=8, cluster=1)"),
        (13, "warpgroup(lane 0:32, warp 0:4, cta 0:1; num_warps=8, cluster=1)"),
        (14, "cta(lane 0:32, warp 4:8, cta 0:1; num_warps=8, cluster=1)"),  # the complement
        (16, "warpgroup(lane 0:32, warp 0:8, cta 0:1; num_warps=8, cluster=1)"),
        (18, "warpgroup(lane 0:32, wg 0:2 in_wg 0:1, cta 0:1; num_warps=8, cluster=1)"),
    ]


def test_scope_attribute_carries_the_decomposition():
    out = scope_analysis.run(kernel(team(10, "warpgroup", copy(11))))
    (op,) = [op for op in out.walk() if op.name == "tile.copy"]
    scope = op.attrs["scope"]
    assert (str(scope.inter), str(scope.intra)) == ("2:1@wgid", "(32,4):(1@laneid,1@wid_in_wg)")


def test_loops_inherit_the_scope():
    body = textwrap.dedent("""\
        %lb = const {value = 0} : i32 loc(10:0)
        %n = const {value = 4} : i32 loc(10:0)
        for(%lb, %n, %n) loc(10:0) {
        ^(%i: i32):
        """) + textwrap.indent(filtered_if(11, "thread", 34, 40, copy(12, "thread")), "  ") + \
        "  yield loc(10:0)\n}\n"
    out = scope_analysis.run(kernel(body))
    assert scopes(out) == [(12, "thread(lane 2:8, warp 1:2, cta 0:1; num_warps=8, cluster=1)")]


def test_cluster_kernel_and_cta_filter():
    body = filtered_if(10, "cta", 1, 2, team(11, "cluster", copy(12)))
    out = scope_analysis.run(kernel(body, "num_warps = 4, cluster = [2, 1, 1]"))
    assert scopes(out) == [(12, "cluster(lane 0:32, warp 0:4, cta 1:2; num_warps=4, cluster=2)")]


def test_elect_filter_and_native_ops_in_an_unrepresentable_else():
    body = ("if(%c) {filter = {axis = elect}} loc(10:0) {\n^():\n" + "  " + copy(11, "thread")
            + "  yield loc(10:0)\n} {\n^():\n"
            "  %v = const {value = 1} : i32 loc(12:4)\n  yield loc(10:0)\n}\n")
    out = scope_analysis.run(kernel(body))
    assert scopes(out) == [(11, "thread(lane 0:32 elect, warp 0:8, cta 0:1; num_warps=8, cluster=1)")]


def test_input_is_untouched_and_output_round_trips():
    k = kernel(team(10, "warp", copy(11)))
    before = str(k)
    out = scope_analysis.run(k)
    assert str(k) == before and "scope = \"" not in before
    verify(out)
    assert str(parse_kernel(str(out))) == str(out)


# --------------------------------------------------------------------------- errors
def error_of(body: str, attrs: str = "num_warps = 4") -> ScopeError:
    with pytest.raises(ScopeError) as info:
        scope_analysis.run(kernel(body, attrs))
    return info.value


def test_a_tile_op_under_a_filter_no_thread_passes_points_at_the_op():
    err = error_of(filtered_if(10, "warp", 9, 10, copy(11)))
    assert err.line == 11
    assert "filter leaves no active thread: warp_id() == 9 but the kernel has 4 warps" in str(err)


def test_native_code_under_a_filter_no_thread_passes_is_dead_code():
    nested = filtered_if(10, "warp", 0, 1, filtered_if(11, "warp", 1, 2, "") + copy(12))
    out = scope_analysis.run(kernel(nested))   # no ScopeError: nothing runs in warp 0 and 1
    verify(out)
    assert [line for line, _ in scopes(out)] == [12]


def test_non_uniform_team_switch_points_at_the_team_op():
    err = error_of(filtered_if(10, "warp", 3, 7, team(11, "warpgroup", "")), "num_warps = 8")
    assert err.line == 11
    assert "warps [3, 7) cross a warpgroup boundary" in str(err)


def test_non_uniform_scoped_spelling_points_at_the_tile_op():
    err = error_of(filtered_if(10, "warp", 2, 6, copy(11, "warpgroup")), "num_warps = 8")
    assert err.line == 11 and "cross a warpgroup boundary" in str(err)


def test_tile_op_in_unrepresentable_else_branch():
    err = error_of(filtered_if(10, "warp", 1, 2, then=copy(11), orelse=copy(12)))
    assert err.line == 12
    assert "tile.copy needs a statically known set of active threads" in str(err)
    assert "else-branch of `if warp_id() == 1`" in str(err)
    assert "keeps warps {0, 2, 3}" in str(err)


# --------------------------------------------------------------------------- pipeline
def test_pipeline_records_text_and_timing_per_pass():
    start = time.perf_counter()
    out, stages = run_pipeline(kernel(copy(10)), dump=(), passes=["scope-analysis"])
    elapsed = time.perf_counter() - start
    names = [name for name, _ in PIPELINE]
    assert names[:2] == ["software-pipeline", "scope-analysis"]   # loops rewritten first
    assert stages["scope-analysis"] == str(out)
    seconds = stages.timings["scope-analysis"]
    assert list(stages.timings) == ["scope-analysis"] and 0 < seconds <= elapsed
    milliseconds = f"{seconds * 1e3:.3f}"
    assert [row.split() for row in stages.timing_table().splitlines()] == [
        ["scope-analysis", milliseconds, "ms"], ["total", milliseconds, "ms"]]


def test_pipeline_dumps_the_named_stages(capsys):
    run_pipeline(kernel(copy(10)), dump={"scope-analysis"}, passes=["scope-analysis"])
    assert "IR after scope-analysis" in capsys.readouterr().err


def test_cli_runs_one_pass_on_a_text_file(tmp_path, capsys):
    path = tmp_path / "k.ir"
    path.write_text(str(kernel(copy(10))))
    assert main([str(path), "--passes", "scope-analysis", "--timing"]) == 0
    captured = capsys.readouterr()
    assert 'scope = "cta(lane 0:32, warp 0:8' in captured.out
    assert "scope-analysis" in captured.err


def test_cli_reports_errors(tmp_path, capsys):
    path = tmp_path / "k.ir"
    path.write_text(str(kernel(copy(10))))
    assert main([str(path), "--passes", "no-such-pass"]) == 1
    assert "no pass named 'no-such-pass'" in capsys.readouterr().err


@pytest.mark.parametrize("layout, attrs, message", [
    ("(8,32):(1@warpid,1@laneid)", "num_warps = 4", "warpid 0..7, but the kernel has warpid 0..3"),
    ("(2,32):(-1@laneid,1@m)", "num_warps = 4", "laneid -1..0"),
    ("(4,16):(1@warpid,1@m) + R[2:4@warpid]", "num_warps = 4", "warpid 0..7"),
    ("(2,64):(1@wgid,1@m)", "num_warps = 4", "wgid 0..1, but the kernel has wgid 0..0"),
])
def test_a_layout_on_threads_the_cta_lacks_is_refused(layout, attrs, message):
    body = (f'%f = alloc {{scope = fragment, dtype = f32, shape = [{layout.split(")")[0][1:]}], '
            f'layout = "{layout}"}} : buffer<fragment, f32, [{layout.split(")")[0][1:]}], '
            f'layout = "{layout}"> loc(9:4)\n')
    with pytest.raises(ScopeError, match=re.escape(message)) as err:
        scope_analysis.run(kernel(body, attrs))
    assert err.value.loc.line == 9


def test_a_layout_on_every_warp_of_the_cta_is_accepted():
    layout = "(8,32):(1@warpid,1@laneid)"
    body = (f'%f = alloc {{scope = fragment, dtype = f32, shape = [8, 32], layout = "{layout}"}}'
            f' : buffer<fragment, f32, [8, 32], layout = "{layout}"> loc(9:4)\n')
    scope_analysis.run(kernel(body, "num_warps = 8"))
