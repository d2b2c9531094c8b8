"""The S[...] / R[...] / n@axis builder syntax, str/repr, and parse."""
import pytest

from tilejit.errors import LayoutError
from tilejit.layout import (Axis, Iter, R, S, TCol, TLane, TileLayout, laneid, m, parse_layout,
                            pid, tid_in_wg, warpid)

PAPER_TEXT = "(8,2,4,2):(4@laneid,1@warpid,1@laneid,1@m) + R[2:4@warpid] + 5@warpid"


# ---------------------------------------------------------------- builder
def test_shard_forms():
    assert TileLayout(S[8:4@laneid]).shard == (Iter(8, 4, laneid),)
    assert TileLayout(S[8, 4, 2]).shard == (Iter(8, 8), Iter(4, 2), Iter(2, 1))
    assert TileLayout(S[6]).shard == (Iter(6, 1),)
    assert TileLayout(S[(128, 64):(1@tid_in_wg, 1)]).shard == (Iter(128, 1, tid_in_wg),
                                                              Iter(64, 1, m))
    assert TileLayout(S[8:4@laneid, 2:1]) == TileLayout(S[(8, 2):(4@laneid, 1)])
    assert TileLayout(S[[3, 5]:[5, 1]]) == TileLayout(S[(3, 5):(5, 1)])


def test_replica_and_offsets_compose_in_any_order():
    expected = TileLayout(S[4:1@laneid] + R[2:4@warpid] + 5@warpid + 3)
    assert dict(expected.offset) == {"warpid": 5, "m": 3}
    assert TileLayout(5@warpid + S[4:1@laneid] + R[2:4@warpid] + 3) == expected
    assert TileLayout(3 + S[4:1@laneid] + 5@warpid + R[2:4@warpid]) == expected
    assert TileLayout(S[4:1] + 2@m + 3).offset == {"m": 5}
    assert TileLayout(S[4:1] - 2@warpid - 1).offset == {"warpid": -2, "m": -1}
    assert TileLayout(S[4:1] + R[2:8] + R[3:1@pid]).replica == (Iter(2, 8), Iter(3, 1, pid))


@pytest.mark.parametrize("build, message", [
    (lambda: S[(8, 2):(4@laneid,)], "2 extents"),
    (lambda: S[(8, 0):(1, 1)], "positive"),
    (lambda: S[(8, -2):(1, 1)], "positive"),
    (lambda: S[8:1.5], "integer"),
    (lambda: S["8":1], "integer"),
    (lambda: S[8:], "both extents and strides"),
    (lambda: S[8:1:2], "second ':'"),
    (lambda: S[()], "empty"),
    (lambda: S[((2, 4), 2):((4, 1), 8)], "nested"),
    (lambda: S[8:1, 4], "mixed"),
    (lambda: S[4:1] + S[4:1], "one shard part"),
    (lambda: S[4:1] + 1.5, "integer"),
    (lambda: S[4:1] - R[2:1], "only offsets"),
])
def test_builder_errors(build, message):
    with pytest.raises(LayoutError, match=message):
        build()


# ---------------------------------------------------------------- str / repr
def test_paper_notation():
    layout = TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1@m)]
                        + R[2:4@warpid] + 5@warpid)
    assert str(layout) == PAPER_TEXT
    assert repr(layout) == ("TileLayout(S[(8,2,4,2):(4@laneid,1@warpid,1@laneid,1@m)]"
                            " + R[2:4@warpid] + 5@warpid)")


@pytest.mark.parametrize("layout, text", [
    (S[(4, 4):(4, 1)], "(4,4):(4,1)"),           # memory-only layouts omit @m
    (S[(2, 4):(4, 1)] + 4, "(2,4):(4,1) + 4"),
    (S[8:1], "8:1"),
    (S[8:4@laneid], "8:4@laneid"),
    (S[(32, 2):(1@laneid, 1)], "(32,2):(1@laneid,1@m)"),  # mixed axes spell m out
    (S[4:-1] - 3, "4:-1 - 3"),
    (S[4:1@laneid] + 0@warpid, "4:1@laneid + 0@warpid"),
    (S[(2, 32, 128):(1@pid, 128@m, 1@m)] + R[2:2@pid],
     "(2,32,128):(1@pid,128@m,1@m) + R[2:2@pid]"),
    (S[4:1] + R[(2, 3):(4@warpid, 1@pid)] + 1@pid + 2,
     "4:1@m + R[(2,3):(4@warpid,1@pid)] + 1@pid + 2@m"),
])
def test_str(layout, text):
    assert str(TileLayout(layout)) == text
    assert TileLayout.parse(text) == TileLayout(layout)


def test_repr_evaluates_back():
    namespace = {"S": S, "R": R, "TileLayout": TileLayout, "laneid": laneid, "warpid": warpid,
                 "m": m, "pid": pid}
    for layout in [TileLayout.parse(PAPER_TEXT), TileLayout(S[(4, 4):(4, 1)] - 3),
                   TileLayout(S[4:-1@laneid] + R[2:1@pid])]:
        assert eval(repr(layout), namespace) == layout
        assert TileLayout.parse(repr(layout)) == layout


# ---------------------------------------------------------------- parse
@pytest.mark.parametrize("text, expected", [
    (PAPER_TEXT, S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1)] + R[2:4@warpid] + 5@warpid),
    ("(2,128,112):(112@TCol,1@TLane,1@TCol)", S[(2, 128, 112):(112@TCol, 1@TLane, 1@TCol)]),
    ("  ( 4 , 4 ) : ( 4 , 1 )  +  4 ", S[(4, 4):(4, 1)] + 4),
    ("(8):(4@laneid)", S[8:4@laneid]),
    ("(8,):(4@laneid,)", S[8:4@laneid]),
    ("(8,4,2)", S[8, 4, 2]),
    ("S[(8,2):(2,1)] + 3@warpid - 1", S[(8, 2):(2, 1)] + 3@warpid - 1),
    ("4:1 + -2", S[4:1] - 2),
    ("4:1 + 2 + 3", S[4:1] + 5),
    ("4:1@brand_new_axis", S[4:1@Axis("brand_new_axis")]),
])
def test_parse(text, expected):
    assert TileLayout.parse(text) == TileLayout(expected)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("   ", "empty"),
    ("(8,2):(1)", "2 extents but 1 strides"),
    ("(8,2):(1,2", "expected"),
    ("(8,0):(1,2)", "positive"),
    ("8:1 * 2", "unexpected character"),
    ("8:1 + R[2:1] + S[2:1]", "integer"),
    ("8:1 - R[2:1]", "cannot be subtracted"),
    ("8:1@", "axis name"),
    ("8:1@3", "axis name"),
    ("8:1.5", "unexpected"),
    ("8:1 4", "unexpected"),
    ("foo", "integer"),
    ("8:1 +", "integer"),
])
def test_parse_errors(text, message):
    with pytest.raises(LayoutError, match=message):
        TileLayout.parse(text)


def test_parse_rejects_non_strings():
    with pytest.raises(LayoutError, match="string"):
        TileLayout.parse(42)


def test_parse_layout_dispatches_on_notation():
    assert parse_layout("8:1") == TileLayout(S[8:1])
    swizzled = parse_layout("swizzle(3,3,3, (8,64):(64,1))")
    assert swizzled.tile_layout == TileLayout(S[(8, 64):(64, 1)])


def test_paper_layouts_round_trip():
    for layout in [S[(2, 32, 2, 64):(1@pid, 128@m, 2@pid, 1@m)],
                   S[(2, 128, 112):(112@TCol, 1@TLane, 1@TCol)],
                   S[(64, 128):(136, 1)], S[(2, 64):(1, 2)]]:
        layout = TileLayout(layout)
        assert TileLayout.parse(str(layout)) == layout
