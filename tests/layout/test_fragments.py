"""Property tests of the register-fragment layouts (tilejit/layout/fragments.py), checked
element by element on small shapes, most of them not powers of two."""
import collections
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilejit.errors import LayoutError
from tilejit.layout import TileLayout
from tilejit.layout.fragments import blocked_layout, reduced_layout
from tilejit.passes.ownership import owners, unflatten

FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

EXTENTS = [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64]
shapes = st.lists(st.sampled_from(EXTENTS), min_size=1, max_size=3).map(tuple).filter(
    lambda s: math.prod(s) <= 4096)
lane_counts = st.sampled_from([1, 2, 4, 8, 16, 32])
warp_counts = st.sampled_from([1, 2, 3, 4, 8])
vectors = st.sampled_from([1, 2, 4, 8])


def expected_run(shape, threads: int, vector: int) -> int:
    """The widest power-of-two run (at most ``vector``) that divides the last dimension
    and leaves every thread the same whole number of runs."""
    n, run = math.prod(shape), 1 << (vector.bit_length() - 1)
    while shape[-1] % run or (n // run) % threads:
        run //= 2
    return run


def placement(layout: TileLayout, n: int, warp_axis: str = "warpid"):
    """Per flat element its one location (lane, warp, register); fails on copies."""
    places = []
    for flat in range(n):
        (loc,) = layout.locations(flat)   # blocked layouts hold no copies
        assert set(loc) <= {"m", "laneid", warp_axis}, loc
        places.append((loc.get("laneid", 0), loc.get(warp_axis, 0), loc.get("m", 0)))
    return places


@FAST
@given(shapes, lane_counts, warp_counts, vectors)
def test_blocked_gives_every_thread_an_equal_share_in_runs(shape, lanes, warps, vector):
    layout = blocked_layout(shape, lanes=lanes, warps=warps, vector=vector)
    n, threads = math.prod(shape), lanes * warps
    if n % threads:   # no way to give every thread the same whole number of elements
        assert layout is None
        return
    assert layout is not None and layout.size() == n
    places = placement(layout, n)
    assert len(set(places)) == n   # every element placed once, no two in one place
    per_thread = collections.Counter((lane, warp) for lane, warp, _ in places)
    assert set(per_thread) == {(lane, warp) for lane in range(lanes) for warp in range(warps)}
    assert set(per_thread.values()) == {n // threads}
    assert sorted({m for *_, m in places}) == list(range(n // threads))   # packed registers
    run, last = expected_run(shape, threads, vector), shape[-1]
    for flat in range(0, n, run):   # each run: one thread, consecutive registers
        assert flat % last % run == 0
        lane, warp, m = places[flat]
        assert places[flat:flat + run] == [(lane, warp, m + k) for k in range(run)]
    if math.gcd(lanes, last // run) > 1:   # lanes split the row: the next run, next lane
        assert places[run][0] == places[0][0] + 1


@pytest.mark.parametrize("shape, warps, expected", [
    ((3, 64), 1, "(3,32,2):(2@m,1@laneid,1@m)"),
    ((6, 128), 4, "(3,2,2,32,2):(2@m,2@warpid,1@warpid,1@laneid,1@m)"),
    ((16, 64), 4, "(2,4,2,16,4):(4@m,1@warpid,16@laneid,1@laneid,1@m)"),
    ((3, 64), 4, None),   # 192 elements over 128 threads
])
def test_blocked_examples(shape, warps, expected):
    layout = blocked_layout(shape, lanes=32, warps=warps, vector=4)
    assert (None if layout is None else str(layout)) == expected


def test_a_warpgroup_axis():
    layout = blocked_layout((4, 64), lanes=32, warps=4, warp_axis="wid_in_wg", vector=4)
    assert str(layout) == "(4,32,2):(1@wid_in_wg,1@laneid,1@m)"   # 2 elements a thread


@FAST
@given(shapes, lane_counts, warp_counts, vectors, st.data())
def test_reduced_owners_are_the_owners_of_the_row(shape, lanes, warps, vector, data):
    layout = blocked_layout(shape, lanes=lanes, warps=warps, vector=vector)
    if layout is None:
        return
    axis = data.draw(st.integers(0, len(shape) - 1))
    reduced = reduced_layout(layout, shape, axis)
    held = owners(layout, shape)
    rows = collections.defaultdict(set)
    for flat, threads in enumerate(held):
        idx = list(unflatten(flat, shape))
        del idx[axis]
        rows[tuple(idx)] |= threads
    out_shape = shape[:axis] + shape[axis + 1:] or (1,)
    kept = shape[:axis] + (1,) + shape[axis + 1:]   # keep_dims: the same layout
    for result_shape in (out_shape, kept):
        result = owners(reduced, result_shape)
        assert result == [frozenset(rows[idx]) for idx in sorted(rows)]
    registers = collections.defaultdict(set)   # each thread's results, packed
    for flat in range(math.prod(out_shape)):
        for loc in reduced.locations(flat):
            registers[loc.get("laneid", 0), loc.get("warpid", 0)].add(loc.get("m", 0))
    for held_registers in registers.values():
        assert sorted(held_registers) == list(range(len(held_registers)))


def test_reduced_keeps_copies_and_thread_offsets():
    """A source that is itself copied over warps, at a lane offset: the result keeps both."""
    src = TileLayout.parse("(4,8):(1@m,1@laneid) + R[2:1@warpid] + 8@laneid")
    reduced = reduced_layout(src, (4, 8), 1)
    assert owners(reduced, (4,)) == [frozenset((lane, warp) for lane in range(8, 16)
                                               for warp in range(2))] * 4
    with pytest.raises(LayoutError, match="memory offset"):
        reduced_layout(TileLayout.parse("(4,8):(8@m,1@laneid) + 3@m"), (4, 8), 1)
    with pytest.raises(LayoutError, match="cannot reduce axis 2"):
        reduced_layout(src, (4, 8), 2)

