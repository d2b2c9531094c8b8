"""Named axes: interning, kinds, and the `n @ axis` notation."""
import pickle

import pytest

from tilejit.errors import LayoutError
from tilejit.layout import (Axis, AxisKind, AxisValue, Bank, F, P, TCol, TLane, bx, by, bz, cbx,
                            cby, cbz, laneid, m, pid, tid_in_wg, tx, warpid, wgid, wid_in_wg)


def test_axis_is_interned_by_name():
    assert Axis("laneid") is laneid
    assert Axis("some_new_axis") is Axis("some_new_axis")
    assert Axis(laneid) is laneid


@pytest.mark.parametrize("axis", [m, P, F, Bank, TLane, TCol])
def test_memory_axes(axis):
    assert axis.kind is AxisKind.MEMORY


@pytest.mark.parametrize("axis, scope, subscope", [
    (laneid, "warp", "thread"), (warpid, "cta", "warp"), (wid_in_wg, "warpgroup", "warp"),
    (tid_in_wg, "warpgroup", "thread"), (wgid, "cta", "warpgroup"), (tx, "cta", "thread"),
    (bx, "grid", "cta"), (by, "grid", "cta"), (bz, "grid", "cta"),
    (cbx, "cluster", "cta"), (cby, "cluster", "cta"), (cbz, "cluster", "cta"),
])
def test_thread_axes_know_their_teams(axis, scope, subscope):
    assert axis.kind is AxisKind.THREAD
    assert (axis.scope, axis.subscope) == (scope, subscope)


def test_device_axis():
    assert pid.kind is AxisKind.DEVICE


def test_unknown_axis_defaults_to_memory():
    axis = Axis("foo_scratch")
    assert axis.kind is AxisKind.MEMORY and axis.name == "foo_scratch"


def test_redefining_an_axis_kind_is_an_error():
    with pytest.raises(LayoutError, match="already exists"):
        Axis("laneid", AxisKind.MEMORY)
    assert Axis("laneid", AxisKind.THREAD) is laneid


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", 3, None])
def test_bad_axis_names(name):
    with pytest.raises(LayoutError, match="axis name"):
        Axis(name)


def test_axes_are_immutable_and_pickle_to_themselves():
    with pytest.raises(AttributeError):
        laneid.name = "x"
    assert pickle.loads(pickle.dumps(laneid)) is laneid


def test_stride_on_axis():
    value = 4 @ laneid
    assert value == AxisValue(4, laneid)
    assert (value.value, value.axis) == (4, laneid)
    assert str(value) == "4@laneid"
    assert -value == AxisValue(-4, laneid)


def test_stride_on_axis_needs_an_int():
    with pytest.raises(LayoutError, match="integer"):
        2.5 @ laneid
    with pytest.raises(LayoutError, match="integer"):
        True @ laneid
    with pytest.raises(LayoutError, match="number first"):
        laneid @ 2


def test_numpy_ints_are_accepted():
    np = pytest.importorskip("numpy")
    assert np.int64(3) @ warpid == AxisValue(3, warpid)
