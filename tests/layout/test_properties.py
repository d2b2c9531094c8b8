"""Property tests on random, mostly non-power-of-two layouts.

Placements are compared as set-valued maps: each logical index maps to the set of its
locations, with zero coordinates dropped (an axis a layout does not mention is at 0).
Operations that promise more also keep ``apply``'s base coordinate (compared the same way).
"""
import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tilejit.errors import LayoutError
from tilejit.layout import (ComposeLayout, Iter, R, S, TileLayout, TLane, laneid, m, pid,
                            warpid)

AXES = [m, m, laneid, warpid, TLane, pid]  # m twice: memory layouts are the common case
FAST = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ---------------------------------------------------------------- strategies
@st.composite
def iter_lists(draw, min_size, max_size, max_extent, strides):
    count = draw(st.integers(min_size, max_size))
    return [Iter(draw(st.integers(1, max_extent)), draw(strides), draw(st.sampled_from(AXES)))
            for _ in range(count)]


@st.composite
def dense_shards(draw, max_extent):
    """Row-major-ish shards on one or two axes, walking up or down: these merge and group
    in interesting ways."""
    extents = draw(st.lists(st.integers(1, max_extent), min_size=1, max_size=4))
    axis = draw(st.sampled_from(AXES))
    shard, stride = [], draw(st.integers(1, 3)) * draw(st.sampled_from([1, -1]))
    for extent in reversed(extents):
        if draw(st.booleans()):
            shard.append(Iter(extent, stride, axis))
        else:
            shard.append(Iter(extent, draw(st.integers(-9, 9)), draw(st.sampled_from(AXES))))
        stride *= extent + draw(st.sampled_from([0, 0, 0, 1]))  # sometimes padded
    return shard[::-1]


@st.composite
def cut_runs(draw, max_extent):
    """One dense run on one axis, up or down, written as several iters: the canonical form
    merges them, so a shape that cuts the run elsewhere groups only that way."""
    extents = draw(st.lists(st.integers(2, max_extent), min_size=2, max_size=3))
    axis = draw(st.sampled_from(AXES))
    shard, stride = [], draw(st.sampled_from([1, 2, -1]))
    for extent in reversed(extents):
        shard.append(Iter(extent, stride, axis))
        stride *= extent
    return shard[::-1]


@st.composite
def layouts(draw, max_extent=6, max_replica=2):
    shard = draw(st.one_of(
        dense_shards(max_extent),
        iter_lists(1, 4, max_extent, st.integers(-3, 12)),
        cut_runs(max_extent)))
    replica = draw(iter_lists(0, max_replica, 3, st.integers(-4, 8)))
    offset = draw(st.dictionaries(st.sampled_from([a.name for a in AXES]),
                                  st.integers(-5, 10), max_size=2))
    return TileLayout.from_iters(shard, replica, offset)


def placement(layout, *coord, shape=None):
    return frozenset(frozenset((k, v) for k, v in loc.items() if v)
                     for loc in layout.locations(*coord, shape=shape))


def base(layout, *coord, shape=None):
    return {k: v for k, v in layout.apply(*coord, shape=shape).items() if v}


def placement_map(layout):
    return [placement(layout, x) for x in range(layout.size())]


def coords(shape):
    return itertools.product(*(range(n) for n in shape))


@st.composite
def fitting_shapes(draw, layout):
    """A shape whose dimensions are runs of (possibly split) shard iters of the layout or of
    its canonical form (which merges iters, so some of these group only that way): always
    groupable."""
    extents = []
    for it in draw(st.sampled_from([layout.shard, layout.canonicalize().shard])):
        divisors = [d for d in range(1, it.extent + 1) if it.extent % d == 0]
        inner = draw(st.sampled_from(divisors))
        extents += [it.extent // inner, inner]
    shape, run = [], 1
    for extent in extents:
        run *= extent
        if draw(st.booleans()):
            shape.append(run)
            run = 1
    shape.append(run)
    return tuple(shape)


@st.composite
def factored_shapes(draw, size):
    """Any shape of ``size`` elements, up to four dimensions: groupable or not."""
    shape = []
    while size > 1 and len(shape) < 3:
        divisor = draw(st.sampled_from([d for d in range(2, size + 1) if size % d == 0]))
        shape.append(divisor)
        size //= divisor
    return tuple(shape) + (size,)


# ---------------------------------------------------------------- canonical form / text
@FAST
@given(layouts())
def test_canonicalize_keeps_apply_and_locations(layout):
    canonical = layout.canonicalize()
    assert placement_map(canonical) == placement_map(layout)
    assert [base(canonical, x) for x in range(layout.size())] == \
        [base(layout, x) for x in range(layout.size())]
    assert canonical.canonicalize() == canonical
    assert layout.equivalent(canonical)


@FAST
@given(layouts())
def test_text_round_trip(layout):
    assert TileLayout.parse(str(layout)) == layout
    assert TileLayout.parse(repr(layout)) == layout
    assert TileLayout.parse(str(layout.canonicalize())) == layout.canonicalize()


# ---------------------------------------------------------------- group / permute
@FAST
@given(st.data())
def test_group_and_permute_keep_placement(data):
    layout = data.draw(layouts(max_extent=5))
    shape = data.draw(fitting_shapes(layout))
    grouped = layout.group(shape)
    assert len(grouped.group_iters(shape)) == len(shape)
    order = data.draw(st.permutations(range(len(shape))))
    permuted = layout.permute(order, shape=shape)
    new_shape = tuple(shape[k] for k in order)
    for c in coords(shape):
        expected = placement(layout, *c, shape=shape)
        assert placement(grouped, *c, shape=shape) == expected
        assert placement(permuted, *(c[k] for k in order), shape=new_shape) == expected
        expected = base(layout, *c, shape=shape)
        assert base(grouped, *c, shape=shape) == expected
        assert base(permuted, *(c[k] for k in order), shape=new_shape) == expected


@FAST
@given(layouts(max_extent=5), st.data())
def test_group_by_any_factorization_fails_cleanly_or_keeps_placement(layout, data):
    shape = data.draw(factored_shapes(layout.size()))
    try:
        grouped = layout.group(shape)
    except LayoutError:
        event("group refused")
        return
    for c in coords(shape):
        assert placement(grouped, *c, shape=shape) == placement(layout, *c, shape=shape)
        assert base(grouped, *c, shape=shape) == base(layout, *c, shape=shape)


# ---------------------------------------------------------------- slice
@st.composite
def regions(draw, shape):
    region = []
    for n in shape:
        kind = draw(st.sampled_from(["full", "index", "range"]))
        if kind == "full":
            region.append(slice(None))
        elif kind == "index":
            region.append(draw(st.integers(0, n - 1)))
        else:
            begin = draw(st.integers(0, n - 1))
            region.append(slice(begin, draw(st.integers(begin + 1, n))))
    return tuple(region)


def region_bounds(region, shape):
    bounds = []
    for r, n in zip(region, shape):
        if isinstance(r, slice):
            begin, end = r.start or 0, n if r.stop is None else r.stop
        else:
            begin, end = r, r + 1
        bounds.append((begin, end - begin))
    return bounds


@FAST
@given(st.data())
def test_every_successful_slice_agrees_with_its_parent(data):
    layout = data.draw(layouts(max_extent=5))
    shape = data.draw(st.one_of(fitting_shapes(layout), factored_shapes(layout.size())))
    region = data.draw(regions(shape))
    bounds = region_bounds(region, shape)
    whole_or_point = all(count in (1, n) for (_, count), n in zip(bounds, shape))
    try:
        sliced = layout.slice(shape, region)
    except LayoutError:
        event("slice refused")
        if whole_or_point:  # these always slice, unless the layout does not group by shape
            with pytest.raises(LayoutError):
                layout.group(shape)
        return
    extents = tuple(count for _, count in bounds)
    assert sliced.size() == math.prod(extents)
    for c in coords(extents):
        parent = tuple(b + x for (b, _), x in zip(bounds, c))
        assert placement(sliced, *c, shape=extents) == placement(layout, *parent, shape=shape)
        assert base(sliced, *c, shape=extents) == base(layout, *parent, shape=shape)


def ordered_factorizations(n):
    if n == 1:
        yield ()
        return
    for first in range(2, n + 1):
        if n % first == 0:
            for rest in ordered_factorizations(n // first):
                yield (first,) + rest


def expressible(values):
    """Oracle: is ``j -> values[j]`` (dicts, values[0] all zero) some single-axis strided
    layout? Try every ordered factorization of its length."""
    n = len(values)
    keys = sorted({k for v in values for k in v})
    vec = [tuple(v.get(k, 0) for k in keys) for v in values]
    for extents in ordered_factorizations(n):
        inner_products = [math.prod(extents[i + 1:]) for i in range(len(extents))]
        strides = [vec[b] for b in inner_products]
        if any(sum(1 for s in stride if s) > 1 for stride in strides):
            continue
        ok = True
        for j in range(n):
            digits = [(j // b) % e for b, e in zip(inner_products, extents)]
            want = tuple(sum(d * s[k] for d, s in zip(digits, strides)) for k in range(len(keys)))
            if want != vec[j]:
                ok = False
                break
        if ok:
            return True
    return n == 1


@FAST
@given(layouts(max_extent=4, max_replica=0), st.data())
def test_one_dimensional_slice_succeeds_exactly_when_affine(layout, data):
    size = layout.size()
    assume(size <= 64)
    begin = data.draw(st.integers(0, size - 1))
    end = data.draw(st.integers(begin + 1, size))
    origin = layout.apply(begin)
    values = [{k: v - origin[k] for k, v in layout.apply(begin + j).items()}
              for j in range(end - begin)]
    try:
        sliced = layout.slice((size,), (slice(begin, end),))
    except LayoutError:
        event("not affine: refused")
        assert not expressible(values)
        return
    event(f"affine: sliced into {len(sliced.shard)} iters")
    assert expressible(values)
    for j in range(end - begin):
        assert placement(sliced, j) == placement(layout, begin + j)
        assert base(sliced, j) == base(layout, begin + j)


# ---------------------------------------------------------------- tile
@FAST
@given(st.data())
def test_tile_places_each_copy_at_the_scaled_outer_position(data):
    rank = data.draw(st.integers(1, 2))
    inner_shape = tuple(data.draw(st.integers(1, 4)) for _ in range(rank))
    outer_shape = tuple(data.draw(st.integers(1, 3)) for _ in range(rank))
    inner = TileLayout(S[inner_shape])
    column_major = [math.prod(outer_shape[:k]) for k in range(rank)]
    outer = TileLayout.from_iters([Iter(n, s) for n, s in zip(outer_shape, column_major)])
    tiled = inner.tile(outer, outer_shape, inner_shape)
    shape = tuple(o * i for o, i in zip(outer_shape, inner_shape))
    tile_span = math.prod(inner_shape)
    for c in coords(shape):
        o = outer.apply(*(x // i for x, i in zip(c, inner_shape)), shape=outer_shape)["m"]
        t = inner.apply(*(x % i for x, i in zip(c, inner_shape)), shape=inner_shape)["m"]
        assert tiled.apply(*c, shape=shape).get("m", 0) == o * tile_span + t


# ---------------------------------------------------------------- swizzle
@FAST
@given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2), st.integers(1, 3))
def test_swizzles_are_bijections_on_their_span(per_element, swizzle_len, extra, blocks):
    atom_len = swizzle_len + extra
    span = blocks << (per_element + swizzle_len + atom_len)
    layout = ComposeLayout(per_element, swizzle_len, atom_len, TileLayout(S[span:1]))
    addresses = [layout.apply(x)["m"] for x in range(span)]
    assert sorted(addresses) == list(range(span))
    assert layout.span() == span
    assert all(layout.swizzle(layout.swizzle(a)) == a for a in range(span))  # an involution


# ---------------------------------------------------------------- equivalence
@st.composite
def rewritten(draw, layout):
    """``layout`` spelled differently without moving any element."""
    shard, replica = list(layout.shard), list(layout.replica)
    offset = dict(layout.offset)
    for _ in range(draw(st.integers(1, 4))):
        move = draw(st.sampled_from(["split", "unit", "zero_offset", "flip", "shuffle",
                                     "zero_axis", "split_replica", "dead_replica"]))
        if move == "split":
            k = draw(st.integers(0, len(shard) - 1))
            it = shard[k]
            inner = draw(st.sampled_from([d for d in range(1, it.extent + 1)
                                          if it.extent % d == 0]))
            shard[k:k + 1] = [Iter(it.extent // inner, it.stride * inner, it.axis),
                              Iter(inner, it.stride, it.axis)]
        elif move == "unit":
            shard.insert(draw(st.integers(0, len(shard))),
                         Iter(1, draw(st.integers(-3, 9)), draw(st.sampled_from(AXES))))
        elif move == "zero_offset":
            offset.setdefault(draw(st.sampled_from(AXES)).name, 0)
        elif move == "flip" and replica:
            k = draw(st.integers(0, len(replica) - 1))
            it = replica[k]
            replica[k] = Iter(it.extent, -it.stride, it.axis)
            offset[it.axis.name] = offset.get(it.axis.name, 0) + (it.extent - 1) * it.stride
        elif move == "shuffle":
            replica = draw(st.permutations(replica))
        elif move == "zero_axis":
            shard = [Iter(it.extent, 0, draw(st.sampled_from(AXES))) if it.stride == 0 else it
                     for it in shard]
        elif move == "split_replica" and replica:
            k = draw(st.integers(0, len(replica) - 1))
            it = replica[k]
            inner = draw(st.sampled_from([d for d in range(1, it.extent + 1)
                                          if it.extent % d == 0]))
            replica[k:k + 1] = [Iter(it.extent // inner, it.stride * inner, it.axis),
                                Iter(inner, it.stride, it.axis)]
        elif move == "dead_replica":
            replica.append(Iter(draw(st.integers(1, 3)), 0, draw(st.sampled_from(AXES))))
    return TileLayout.from_iters(shard, list(replica), offset)


@st.composite
def mutated(draw, layout):
    """``layout`` with one small change that usually, but not always, moves elements."""
    shard, replica = list(layout.shard), list(layout.replica)
    offset = dict(layout.offset)
    move = draw(st.sampled_from(["stride", "axis", "swap", "offset", "replica"]))
    k = draw(st.integers(0, len(shard) - 1))
    it = shard[k]
    if move == "stride":
        shard[k] = Iter(it.extent, it.stride + draw(st.sampled_from([-1, 1])), it.axis)
    elif move == "axis":
        shard[k] = Iter(it.extent, it.stride, draw(st.sampled_from(AXES)))
    elif move == "swap" and k + 1 < len(shard):
        shard[k], shard[k + 1] = shard[k + 1], shard[k]
    elif move == "offset":
        axis = draw(st.sampled_from(AXES)).name
        offset[axis] = offset.get(axis, 0) + draw(st.sampled_from([-1, 1]))
    elif move == "replica":
        replica.append(Iter(2, draw(st.integers(-2, 2)), draw(st.sampled_from(AXES))))
    return TileLayout.from_iters(shard, replica, offset)


def same_map(a, b):
    return a.size() == b.size() and placement_map(a) == placement_map(b)


@FAST
@given(st.data())
def test_equivalent_holds_for_respellings(data):
    layout = data.draw(layouts(max_extent=4))
    other = data.draw(rewritten(layout))
    assert same_map(layout, other)
    assert layout.equivalent(other) and other.equivalent(layout)


@FAST
@given(st.data())
def test_equivalent_iff_placements_agree(data):
    layout = data.draw(layouts(max_extent=4))
    other = data.draw(st.one_of(mutated(layout), layouts(max_extent=4),
                                rewritten(layout).flatmap(mutated)))
    agree = same_map(layout, other)
    event(f"placements agree: {agree}")
    assert layout.equivalent(other) == agree


def test_paper_layouts_survive_the_round_trips():
    paper = [
        TileLayout(S[(8, 2, 4, 2):(4@laneid, 1@warpid, 1@laneid, 1@m)] + R[2:4@warpid]
                   + 5@warpid),
        TileLayout(S[(2, 32, 2, 64):(1@pid, 128@m, 2@pid, 1@m)]),
        TileLayout(S[(2, 32, 128):(1@pid, 128@m, 1@m)] + R[2:2@pid]),
        TileLayout(S[(24, 24):(1, 24)]),
    ]
    for layout in paper:
        assert TileLayout.parse(str(layout)) == layout
        assert layout.canonicalize().equivalent(layout)
