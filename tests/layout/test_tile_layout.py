"""TileLayout data, apply/locations, canonical form, size/span, and the paper's examples."""
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tilejit.errors import LayoutError
from tilejit.layout import (F, Iter, OffsetMap, P, R, S, TCol, TLane, TileLayout, laneid, m, pid,
                            warpid)

TENSOR_CORE = TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1@m)]
                         + R[2:4@warpid] + 5@warpid)


# ---------------------------------------------------------------- construction
def test_fields():
    assert TENSOR_CORE.shard == (Iter(8, 4, laneid), Iter(2, 1, warpid), Iter(4, 1, laneid),
                                 Iter(2, 1, m))
    assert TENSOR_CORE.replica == (Iter(2, 4, warpid),)
    assert dict(TENSOR_CORE.offset) == {"warpid": 5}
    assert TENSOR_CORE.offset[warpid] == 5
    first = TENSOR_CORE.shard[0]
    assert (first.extent, first.stride, first.axis.name) == (8, 4, "laneid")


def test_from_iters_matches_builder():
    built = TileLayout.from_iters(
        [Iter(8, 4, laneid), Iter(2, 1, warpid), Iter(4, 1, laneid), Iter(2, 1)],
        replica=[Iter(2, 4@warpid)], offset={warpid: 5})
    assert built == TENSOR_CORE
    assert hash(built) == hash(TENSOR_CORE)
    assert TileLayout.from_iters([Iter(4, 1, "laneid")]) == TileLayout(S[4:1@laneid])


def test_shard_alone_and_copies():
    layout = TileLayout(S[8:4@laneid])
    assert layout.replica == () and dict(layout.offset) == {}
    assert TileLayout(layout) == layout
    assert TileLayout("8:4@laneid") == layout


def test_layouts_are_immutable_and_picklable():
    with pytest.raises(AttributeError):
        TENSOR_CORE.shard = ()
    with pytest.raises(TypeError):
        TENSOR_CORE.offset["warpid"] = 1
    assert pickle.loads(pickle.dumps(TENSOR_CORE)) == TENSOR_CORE
    assert len({TENSOR_CORE, TileLayout(TENSOR_CORE)}) == 1


def test_offset_map_is_hashable_mapping():
    a, b = OffsetMap({"m": 1, "warpid": 2}), OffsetMap([(warpid, 2), (m, 1)])
    assert a == b and hash(a) == hash(b) and a == {"m": 1, "warpid": 2}
    assert OffsetMap([(m, 2), (m, 3)]) == {"m": 5}


@pytest.mark.parametrize("make, message", [
    (lambda: Iter(0, 1), "positive"),
    (lambda: Iter(-3, 1), "positive"),
    (lambda: Iter(2.0, 1), "integer"),
    (lambda: Iter(2, "1"), "integer"),
    (lambda: Iter(2, 1@laneid, warpid), "contradicts"),
    (lambda: TileLayout.from_iters([]), "at least one shard iter"),
    (lambda: TileLayout.from_iters([(4, 1)]), "Iter objects"),
    (lambda: TileLayout.from_iters([Iter(4, 1)], offset={"m": 1.5}), "integer"),
    (lambda: TileLayout(R[2:1]), "needs a shard"),
    (lambda: TileLayout(42), "expects"),
])
def test_bad_construction(make, message):
    with pytest.raises(LayoutError, match=message):
        make()


# ---------------------------------------------------------------- apply
def test_apply_flat_index_outermost_absorbs():
    layout = TileLayout(S[(4, 4):(5, 1)])
    assert layout.apply(6) == {"m": 7}
    assert layout.apply(21) == {"m": 26}  # past the end: keeps walking the outer stride


def test_apply_with_shape_flattens_row_major():
    layout = TileLayout(S[(4, 6):(1, 4)])  # column-major 4x6
    assert layout.apply(2, 3, shape=(4, 6)) == {"m": 2 + 12}
    assert layout.apply(2 * 6 + 3) == layout.apply(2, 3, shape=(4, 6))
    assert layout.apply((2, 3), shape=(4, 6)) == layout.apply(2, 3, shape=(4, 6))


@pytest.mark.parametrize("coord, shape, message", [
    ((8, 0), (8, 16), "outside"),
    ((0, 16), (8, 16), "outside"),
    ((-1, 0), (8, 16), "outside"),
    ((0,), (8, 16), "dims"),
    ((1, 2), None, "needs shape"),
    ((-1,), None, "negative"),
    ((0.5,), None, "integer"),
    ((), None, "needs a coordinate"),
])
def test_apply_errors(coord, shape, message):
    with pytest.raises(LayoutError, match=message):
        TENSOR_CORE.apply(*coord, shape=shape)


def test_tensor_core_tile():
    shape = (8, 16)
    assert TENSOR_CORE.apply(0, 0, shape=shape) == {"laneid": 0, "warpid": 5, "m": 0}
    assert TENSOR_CORE.apply(1, 0, shape=shape) == {"laneid": 4, "warpid": 5, "m": 0}
    assert TENSOR_CORE.apply(0, 1, shape=shape) == {"laneid": 0, "warpid": 5, "m": 1}
    assert TENSOR_CORE.apply(0, 2, shape=shape) == {"laneid": 1, "warpid": 5, "m": 0}
    assert TENSOR_CORE.apply(3, 9, shape=shape) == {"laneid": 12, "warpid": 6, "m": 1}
    holders = {loc["warpid"] for loc in TENSOR_CORE.locations(0, 0, shape=shape)}
    assert holders == {5, 9}
    every_warp = {loc["warpid"] for i in range(8) for j in range(16)
                  for loc in TENSOR_CORE.locations(i, j, shape=shape)}
    assert every_warp == {5, 6, 9, 10}
    # each warp holds the whole tile once: 32 lanes x 2 registers x 2 warps per copy
    places = {(loc["warpid"], loc["laneid"], loc["m"]) for i in range(8) for j in range(16)
              for loc in TENSOR_CORE.locations(i, j, shape=shape)}
    assert len(places) == 2 * 128


def test_locations_sorted_and_deduplicated():
    layout = TileLayout(S[4:1@laneid] + R[(2, 2):(1@warpid, 0@warpid)])
    assert layout.locations(3) == [{"laneid": 3, "warpid": 0}, {"laneid": 3, "warpid": 1}]


MESH_S0S1 = TileLayout(S[(2, 32, 2, 64):(1@pid, 128@m, 2@pid, 1@m)])
MESH_S0R = TileLayout(S[(2, 32, 128):(1@pid, 128@m, 1@m)] + R[2:2@pid])


def test_mesh_full_sharding():
    # devices [[GPU0, GPU2], [GPU1, GPU3]] over the 64x128 matrix
    quadrant = {(i // 32, j // 64): MESH_S0S1.apply(i, j, shape=(64, 128))["pid"]
                for i in range(0, 64, 8) for j in range(0, 128, 16)}
    assert quadrant == {(0, 0): 0, (1, 0): 1, (0, 1): 2, (1, 1): 3}
    assert MESH_S0S1.apply(33, 65, shape=(64, 128)) == {"pid": 3, "m": 128 + 1}


def test_mesh_shard_and_replicate():
    locs = MESH_S0R.locations(40, 5, shape=(64, 128))
    assert locs == [{"pid": 1, "m": 128 * 8 + 5}, {"pid": 3, "m": 128 * 8 + 5}]
    assert {loc["pid"] for loc in MESH_S0R.locations(3, 100, shape=(64, 128))} == {0, 2}


def test_trainium_sbuf_layout():
    layout = TileLayout(S[(2, 128, 512):(512@F, 1@P, 1@F)])
    assert layout.apply(130, 7, shape=(256, 512)) == {"F": 512 + 7, "P": 2}
    assert layout.size(P) == 128 and layout.span(F) == 1024


def test_tmem_layout_non_power_of_two():
    layout = TileLayout(S[(2, 128, 112):(112@TCol, 1@TLane, 1@TCol)])
    assert layout.apply(1, 5, 111, shape=(2, 128, 112)) == {"TCol": 223, "TLane": 5}
    assert layout.span(TCol) == 224 and layout.span(TLane) == 128
    assert layout.span() == 1  # no m coordinate at all


# ---------------------------------------------------------------- size / span
def test_size_and_span():
    assert TENSOR_CORE.size() == 128
    assert TENSOR_CORE.size(laneid) == 32 and TENSOR_CORE.size("warpid") == 2
    assert TENSOR_CORE.size(pid) == 1
    assert TENSOR_CORE.span() == 2  # registers per thread
    assert TENSOR_CORE.span(warpid) == 5 + 1 + 1 + 4  # offset + shard + replica
    assert TENSOR_CORE.extent_span(warpid) == 6
    assert TileLayout(S[(64, 128):(136, 1)]).span() == 63 * 136 + 128
    assert TileLayout(S[(3, 5):(5, 1)] + 7).span() == 22


# ---------------------------------------------------------------- canonical form
@pytest.mark.parametrize("layout, canonical", [
    (S[(2, 4):(4, 1)], S[8:1]),
    (S[(1, 4, 1):(9, 1, 3)] + 0@warpid, S[4:1]),
    (S[(3, 2, 2):(4, 2, 1)], S[12:1]),
    (S[(2, 3):(3@laneid, 1@m)], S[(2, 3):(3@laneid, 1@m)]),
    (S[(2, 2):(0@laneid, 0@warpid)], S[4:0]),
    (S[(1, 1):(4@laneid, 2@warpid)], S[1:1]),
    (S[(4, 8, 4):(64@laneid, 4@laneid, 1@laneid)], S[(4, 32):(64@laneid, 1@laneid)]),
    (S[8:1] + R[(2, 2):(1@warpid, 2@warpid)], S[8:1] + R[4:1@warpid]),
    (S[8:1] + R[2:-4@warpid] + 0@m, S[8:1] + R[2:-4@warpid]),  # the base stays put
    (S[8:1] + R[(2, 2):(-2, -1)], S[8:1] + R[4:-1]),
    (S[8:1] + R[(2, 3):(0@warpid, 1@pid)] + R[1:5], S[8:1] + R[3:1@pid]),
])
def test_canonicalize(layout, canonical):
    result = TileLayout(layout).canonicalize()
    assert result == TileLayout(canonical)
    assert result.canonicalize() == result


def test_paper_canonical_example():
    assert TileLayout(S[(2, 4):(4@m, 1@m)]).equivalent(TileLayout(S[8:1@m]))


def test_equivalent_versus_structural_equality():
    a, b = TileLayout(S[(2, 4):(4, 1)]), TileLayout(S[8:1])
    assert a != b and a.equivalent(b)
    assert not a.equivalent(TileLayout(S[(2, 4):(1, 2)]))
    assert not a.equivalent(TileLayout(S[8:1] + 1))
    assert not a.equivalent(TileLayout(S[8:1@laneid]))  # 1@laneid is not 1@m
    assert not a.equivalent("8:1")


def test_canonicalize_keeps_the_base_of_negative_replicas():
    # {x, x-1} is also {x-1, x}, but apply's base D(x) + O must stay x: a slice or group
    # taken through the canonical form has to agree with the layout on apply.
    layout = TileLayout(S[(3, 2):(2, 1)] + R[2:-1])
    canonical = layout.canonicalize()
    assert [canonical.apply(x) for x in range(6)] == [layout.apply(x) for x in range(6)]
    assert canonical.equivalent(TileLayout(S[6:1] + R[2:1] - 1))
    sliced = layout.slice((2, 3), (1, slice(None)))  # groups only in the canonical form
    assert [sliced.apply(0, j, shape=(1, 3)) for j in range(3)] == \
        [layout.apply(1, j, shape=(2, 3)) for j in range(3)]
    grouped = layout.group((2, 3))
    assert [grouped.apply(x) for x in range(6)] == [layout.apply(x) for x in range(6)]


def test_equivalent_with_overlapping_replica_spellings():
    # {0,3} + {0,2,...,10} and {0,3,6,9} + {0,2,4} are the same set of copies
    a = TileLayout(S[4:1] + R[(2, 6):(3@warpid, 2@warpid)])
    b = TileLayout(S[4:1] + R[(4, 3):(3@warpid, 2@warpid)])
    assert a.equivalent(b)
    assert not a.equivalent(TileLayout(S[4:1] + R[(4, 3):(3@warpid, 4@warpid)]))


# ---------------------------------------------------------------- visualize hook
def test_importing_layouts_does_not_import_matplotlib():
    code = "import sys, tilejit.layout; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_visualize_method_forwards_to_the_drawing_module(monkeypatch):
    import tilejit.layout.visualize as drawing
    calls = []
    monkeypatch.setattr(drawing, "visualize", lambda *args: calls.append(args) or "figure")
    assert TENSOR_CORE.visualize((8, 16), path="out.png") == "figure"
    assert calls == [(TENSOR_CORE, (8, 16), "out.png")]
