"""ActiveSet filters, team-switch decomposition and the ExecScope text form (TIRx §4)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilejit.errors import ScopeError
from tilejit.ir.scope import ActiveSet, ExecScope, decompose
from tilejit.ir.types import TeamKind

THREAD, WARP, WARPGROUP, CTA, CLUSTER = (TeamKind.THREAD, TeamKind.WARP, TeamKind.WARPGROUP,
                                         TeamKind.CTA, TeamKind.CLUSTER)


def warps(num_warps: int, lo: int, hi: int) -> ActiveSet:
    return ActiveSet.entry(num_warps).narrow("warp", lo, hi)


def split(active: ActiveSet, kind: TeamKind) -> tuple[str, str]:
    inter, intra = decompose(active, kind)
    return str(inter), str(intra)


# --------------------------------------------------------------------------- the paper's §4.2
def test_entry_layout_is_everything():
    assert str(ActiveSet.entry(16, 4).as_layout()) == "(32,16,4):(1@laneid,1@warpid,1@cbx)"


def test_filter_to_warp_0_drops_the_warp_iter():
    active = ActiveSet.entry(16, 4).narrow("warp", 0, 1)
    assert str(active.as_layout()) == "(32,4):(1@laneid,1@cbx)"


def test_warp_switch_gives_64_teams_of_32_lanes():
    scope = ExecScope.of(WARP, ActiveSet.entry(16, 4))
    assert (str(scope.inter), str(scope.intra)) == ("(16,4):(1@warpid,1@cbx)", "32:1@laneid")
    assert (scope.num_teams, scope.team_size) == (64, 32)


def test_warpgroup_switch_gives_16_teams_of_128_threads():
    scope = ExecScope.of(WARPGROUP, ActiveSet.entry(16, 4))
    assert str(scope.intra) == "(32,4):(1@laneid,1@wid_in_wg)"
    assert str(scope.inter) == "(4,4):(1@wgid,1@cbx)"
    assert (scope.num_teams, scope.team_size) == (16, 128)


# --------------------------------------------------------------------------- warpgroup switch
def test_warps_4_to_8_are_one_warpgroup():
    assert split(warps(8, 4, 8), WARPGROUP) == ("1:1@wgid + 1@wgid", "(32,4):(1@laneid,1@wid_in_wg)")


def test_warps_8_to_16_are_two_warpgroups():
    assert split(warps(16, 8, 16), WARPGROUP) == ("2:1@wgid + 2@wgid",
                                                  "(32,4):(1@laneid,1@wid_in_wg)")


def test_warps_6_to_8_are_one_team_of_two_warps():
    scope = ExecScope.of(WARPGROUP, warps(8, 6, 8))
    assert str(scope.intra) == "(32,2):(1@laneid,1@wid_in_wg) + 2@wid_in_wg"
    assert (scope.num_teams, scope.team_size, scope.full_team) == (1, 64, False)
    assert scope.threads_per_team_pattern == {"laneid": range(0, 32), "wid_in_wg": range(2, 4)}


def test_warps_2_to_6_are_rejected():
    with pytest.raises(ScopeError, match=r"warps \[2, 6\) cross a warpgroup boundary: "
                       r"warpgroup 0 would get 2 warps and warpgroup 1 2 warps \(at different"):
        decompose(warps(8, 2, 6), WARPGROUP)


def test_warps_3_to_7_message_names_the_uneven_split():
    with pytest.raises(ScopeError) as info:
        decompose(warps(8, 3, 7), WARPGROUP)
    assert "warpgroup 0 would get 1 warp and warpgroup 1 3 warps" in str(info.value)


def test_other_kinds_never_fail_on_a_misaligned_range():
    active = warps(8, 3, 7)
    assert split(active, WARP) == ("4:1@warpid + 3@warpid", "32:1@laneid")
    assert split(active, CTA) == ("1:1@cbx", "(32,4):(1@laneid,1@warpid) + 3@warpid")
    assert split(active, THREAD) == ("(32,4):(1@laneid,1@warpid) + 3@warpid", "1:1@laneid")


def test_cluster_team_is_one_team_of_everything():
    scope = ExecScope.of(CLUSTER, ActiveSet.entry(4, 2))
    assert (scope.num_teams, scope.team_size, scope.full_team) == (1, 256, True)


# --------------------------------------------------------------------------- filters
def test_thread_range_inside_one_warp():
    active = ActiveSet.entry(4).narrow("thread", 34, 40)
    assert (active.warps, active.lanes) == ((1, 2), (2, 8))
    assert split(active, WARP) == ("1:1@warpid + 1@warpid", "6:1@laneid + 2@laneid")


def test_thread_range_of_whole_warps():
    active = ActiveSet.entry(4).narrow("thread", 32, 96)
    assert (active.warps, active.lanes) == ((1, 3), (0, 32))


def test_thread_range_across_partial_warps_is_rejected():
    with pytest.raises(ScopeError, match="lanes 2..31 of warp 1 but lanes 0..5 of warp 2"):
        ActiveSet.entry(4).narrow("thread", 34, 70)


def test_thread_range_is_fine_when_the_lanes_already_agree():
    active = ActiveSet.entry(4).narrow("lane", 0, 8).narrow("thread", 0, 72)
    assert (active.warps, active.lanes) == ((0, 3), (0, 8))


def test_warpgroup_filter_keeps_whole_groups():
    assert ActiveSet.entry(12).narrow("warpgroup", 1, 3).warps == (4, 12)


def test_warp_in_wg_filter_gives_a_strided_warp_set():
    active = ActiveSet.entry(8).narrow("warp_in_wg", 0, 1)
    assert active.warp_ids == (0, 4)
    assert str(active.as_layout()) == "(32,2):(1@laneid,4@warpid)"
    assert split(active, WARPGROUP) == ("2:1@wgid", "32:1@laneid")
    assert split(active, WARP) == ("2:4@warpid", "32:1@laneid")


def test_strided_set_narrows_further():
    active = ActiveSet.entry(12).narrow("warp_in_wg", 1, 3).narrow("warpgroup", 1, 3)
    assert active.warp_ids == (5, 6, 9, 10)
    assert str(active.as_layout()) == "(32,2,2):(1@laneid,4@warpid,1@warpid) + 5@warpid"
    assert active.narrow("warp", 0, 7).warp_ids == (5, 6)  # back to a contiguous run


def test_non_uniform_strided_set_is_rejected():
    with pytest.raises(ScopeError, match=r"keeps warps \{1, 4, 5\}: neither a contiguous"):
        ActiveSet.entry(8).narrow("warp", 1, 8).narrow("warp_in_wg", 0, 2)


def test_empty_filter_names_the_kernel_size():
    with pytest.raises(ScopeError, match=r"filter leaves no active thread: warp_id\(\) == 9 "
                       r"but the kernel has 4 warps"):
        ActiveSet.entry(4).narrow("warp", 9, 10)


def test_empty_filter_names_what_is_active():
    with pytest.raises(ScopeError, match=r"warp_id\(\) == 0 but only warp 2, lanes 0..31 are"):
        warps(4, 2, 3).narrow("warp", 0, 1)


@pytest.mark.parametrize("lo, hi, word", [(3, 1, "inverted"), (2, 2, "empty")])
def test_bad_ranges(lo, hi, word):
    with pytest.raises(ScopeError, match=word):
        ActiveSet.entry(4).narrow("warp", lo, hi)


def test_filters_only_shrink():
    active = warps(8, 2, 4).narrow("warp", 0, 8)
    assert active.warps == (2, 4)


def test_cta_filter_in_a_cluster():
    active = ActiveSet.entry(4, 4).narrow("cta", 1, 3)
    assert str(active.as_layout()) == "(32,4,2):(1@laneid,1@warpid,1@cbx) + 1@cbx"
    with pytest.raises(ScopeError, match="the cluster has 4 CTAs"):
        active.narrow("cta", 5, 6)


def test_elect_keeps_one_lane_per_warp():
    active = ActiveSet.entry(4).narrow("warp", 0, 2).narrow("elect")
    assert active.num_threads == 2
    assert str(active.as_layout()) == "2:1@warpid"
    assert ExecScope.of(WARP, active).team_size == 1
    assert active.narrow("warp", 1, 2).warps == (1, 2)  # warp filters after elect are fine


def test_lane_filter_after_elect_is_rejected():
    with pytest.raises(ScopeError, match="after elect_sync"):
        ActiveSet.entry(4).narrow("elect").narrow("lane", 0, 1)


# --------------------------------------------------------------------------- complement
def test_complement_of_a_prefix_is_a_range():
    assert ActiveSet.entry(4).complement("warp", 0, 1).warps == (1, 4)


def test_complement_with_a_hole_is_not_representable():
    with pytest.raises(ScopeError, match=r"else-branch of warp_id\(\) == 1 keeps warps \{0, 2, 3\}"):
        ActiveSet.entry(4).complement("warp", 1, 2)


def test_complement_of_everything_is_empty():
    with pytest.raises(ScopeError, match="no thread runs the else-branch"):
        ActiveSet.entry(4).complement("warp", 0, 4)


def test_complement_of_elect_is_not_static():
    with pytest.raises(ScopeError, match="decided at run time"):
        ActiveSet.entry(4).complement("elect")


# --------------------------------------------------------------------------- text form
@pytest.mark.parametrize("text", [
    "warpgroup(lane 0:32, warp 4:8, cta 0:1; num_warps=8, cluster=1)",
    "warp(lane 0:32 elect, wg 0:2 in_wg 0:1, cta 0:1; num_warps=8, cluster=1)",
    "thread(lane 2:8, warp 1:2, cta 1:3; num_warps=4, cluster=4)",
])
def test_text_round_trip(text):
    assert str(ExecScope.parse(text)) == text


@pytest.mark.parametrize("text", ["warp", "team(lane 0:32, warp 0:4, cta 0:1; num_warps=4, cluster=1)",
                                  "warp(lane 0:33, warp 0:4, cta 0:1; num_warps=4, cluster=1)"])
def test_bad_text_is_a_scope_error(text):
    with pytest.raises(ScopeError):
        ExecScope.parse(text)


# --------------------------------------------------------------------------- properties
AXIS_SIZES = {"lane": 32, "warp": 16, "warp_in_wg": 4, "warpgroup": 4, "thread": 512, "cta": 4}


@st.composite
def filters(draw):
    axis = draw(st.sampled_from([*AXIS_SIZES, "elect"]))
    if axis == "elect":
        return axis, None, None
    size = AXIS_SIZES[axis]
    lo = draw(st.integers(0, size - 1))
    return axis, lo, draw(st.integers(lo + 1, size + 1))


def _passes(axis, lo, hi, lane, warp, cta) -> bool:
    value = {"lane": lane, "warp": warp, "warp_in_wg": warp % 4, "warpgroup": warp // 4,
             "thread": 32 * warp + lane, "cta": cta}[axis]
    return lo <= value < hi


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 16), st.integers(1, 4), st.lists(filters(), max_size=4))
def test_filters_match_brute_force_and_text_round_trips(num_warps, cluster, filters):
    active = ActiveSet.entry(num_warps, cluster)
    threads = set(itertools.product(range(32), range(num_warps), range(cluster)))
    for axis, lo, hi in filters:
        try:
            active = active.narrow(axis, lo, hi)
        except ScopeError:
            continue  # empty or not representable: the filter is rejected, nothing changes
        if axis != "elect":
            threads = {t for t in threads if _passes(axis, lo, hi, *t)}
    layout = active.as_layout()
    placed = {(p.get("laneid", 0), p.get("warpid", 0), p.get("cbx", 0))
              for p in map(layout.apply, range(layout.size()))}
    if active.elected:  # the layout shows the lowest candidate lane of each active warp
        threads = {(active.lanes[0], w, c) for (_, w, c) in threads}
    assert placed == threads
    for kind in TeamKind:
        try:
            scope = ExecScope.of(kind, active)
        except ScopeError:
            assert kind is WARPGROUP
            continue
        assert ExecScope.parse(str(scope)) == scope
        assert scope.team_size * scope.num_teams == len(threads)
