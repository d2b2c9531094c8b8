"""Placement-preserving layout operations used by dispatch: group, permute, slice, tile.

Each works on the shard split per logical dimension ("grouped"): dimension ``d`` of a
row-major ``shape`` owns a run of whole iters, so ``D(x) = sum_d g_d(x_d)`` with ``g_d`` the
mixed-radix map of its own iters. Every operation first tries the layout as written (to keep
the user's structure) and falls back to the canonical form, which groups more often.
"""
from __future__ import annotations

import math

from ..errors import LayoutError
from .axes import Axis, as_int, m
from .tile_layout import Iter, TileLayout

__all__ = ["group_iters", "group", "permute", "slice_layout", "tile"]

# Slices that the structural rules cannot express are retried by sampling the sub-tile;
# past this many elements in one dimension that costs too much and we give up instead.
_MAX_SAMPLED_EXTENT = 1 << 16

Groups = tuple[tuple[Iter, ...], ...]


def _shape(shape, what: str = "shape") -> tuple[int, ...]:
    dims = (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
    if not dims:
        raise LayoutError(f"{what} must have at least one dimension")
    dims = tuple(as_int(n, f"a {what} extent") for n in dims)
    if any(n <= 0 for n in dims):
        raise LayoutError(f"{what} extents must be positive, got {dims}")
    return dims


def _split_shard(shard: tuple[Iter, ...], shape: tuple[int, ...]) -> Groups:
    """Cut ``shard`` into whole-iter groups per dimension, splitting an iter ``(e, s)``
    into ``(e/c, s*c), (c, s)`` where a dimension boundary falls inside it."""
    pending = list(shard)
    groups: list[list[Iter]] = [[] for _ in shape]
    for dim in reversed(range(len(shape))):
        need = shape[dim]
        while need > 1:
            it = pending.pop()
            if need % it.extent == 0:
                groups[dim].append(it)
                need //= it.extent
            elif it.extent % need == 0:
                groups[dim].append(Iter(need, it.stride, it.axis))
                pending.append(Iter(it.extent // need, it.stride * need, it.axis))
                need = 1
            else:
                raise LayoutError(f"iter {it} crosses the boundary of dimension {dim} "
                                  f"(extent {shape[dim]}) of shape {shape}")
    groups[0].extend(reversed(pending))  # only extent-1 iters can remain
    return tuple(tuple(reversed(group)) for group in groups)


def group_iters(layout: TileLayout, shape) -> tuple[TileLayout, Groups]:
    """``(layout used, iters per dimension)``; the layout used is ``layout`` itself or, when
    its iters do not line up with ``shape``, its canonical form."""
    shape = _shape(shape)
    if math.prod(shape) != layout.size():
        raise LayoutError(f"shape {shape} has {math.prod(shape)} elements but layout "
                          f"{layout} has {layout.size()}")
    try:
        return layout, _split_shard(layout.shard, shape)
    except LayoutError as first:
        canonical = layout.canonicalize()
        try:
            return canonical, _split_shard(canonical.shard, shape)
        except LayoutError:
            raise LayoutError(f"cannot group {layout} by shape {shape}: {first.message}") \
                from None


def group(layout: TileLayout, shape) -> TileLayout:
    """Split the shard so each logical dimension of ``shape`` owns whole iters."""
    used, groups = group_iters(layout, shape)
    return TileLayout.from_iters(tuple(it for g in groups for it in g), used.replica,
                                 used.offset)


def permute(layout: TileLayout, order, shape=None) -> TileLayout:
    """Reorder logical dimensions: new dimension ``i`` is old dimension ``order[i]`` (as in
    numpy ``transpose``). Dimensions are the groups of ``shape``, or without ``shape`` the
    shard iters themselves. Each element keeps its physical place."""
    if shape is None:
        used, groups = layout, tuple((it,) for it in layout.shard)
    else:
        used, groups = group_iters(layout, shape)
    order = tuple(as_int(k, "a permutation entry") for k in order)
    if sorted(order) != list(range(len(groups))):
        raise LayoutError(f"order {order} is not a permutation of the {len(groups)} "
                          f"dimensions of {layout}")
    shard = tuple(it for k in order for it in groups[k]) or (Iter(1, 1, m),)
    return TileLayout.from_iters(shard, used.replica, used.offset)


# --------------------------------------------------------------------------- slice
def _region(shape: tuple[int, ...], region) -> list[tuple[int, int]]:
    """``[(begin, extent)]`` per dimension; an int picks one index, missing dims are full."""
    items = tuple(region) if isinstance(region, (tuple, list)) else (region,)
    if len(items) > len(shape):
        raise LayoutError(f"region {region!r} has more dimensions than shape {shape}")
    bounds = []
    for dim, n in enumerate(shape):
        item = items[dim] if dim < len(items) else slice(None)
        if isinstance(item, slice):
            if item.step not in (None, 1):
                raise LayoutError(f"region step {item.step} in dimension {dim}: only unit "
                                  "steps are supported")
            begin = 0 if item.start is None else as_int(item.start, "a region start")
            end = n if item.stop is None else as_int(item.stop, "a region stop")
        else:
            begin = as_int(item, "a region index")
            end = begin + 1
        if not 0 <= begin < end <= n:
            raise LayoutError(f"region [{begin}, {end}) is empty or outside dimension {dim} "
                              f"(extent {n}) of shape {shape}")
        bounds.append((begin, end - begin))
    return bounds


def _dim_value(iters, index: int) -> dict:
    """The per-axis coordinate one dimension's iters give its index ``index``."""
    value: dict = {}
    for it in reversed(iters[1:]):
        index, digit = divmod(index, it.extent)
        value[it.axis] = value.get(it.axis, 0) + digit * it.stride
    value[iters[0].axis] = value.get(iters[0].axis, 0) + index * iters[0].stride
    return value


def _one_axis_iter(extent: int, step: dict) -> Iter | None:
    moved = {axis: v for axis, v in step.items() if v != 0}
    if len(moved) > 1:
        return None  # one step moves along two axes: no single iter can say that
    axis, value = next(iter(moved.items())) if moved else (m, 0)
    return Iter(extent, value, axis)


def _slice_structural(iters, begin: int, count: int) -> list[Iter] | None:
    """The iters for indices ``[begin, begin+count)`` of one dimension, from the shape of
    its iters alone; None when the rules below do not apply."""
    if count == 1:
        return []
    inner = iters[-1]
    outer_step, start = divmod(begin, inner.extent)
    if start + count <= inner.extent:  # inside one step of the innermost iter
        return [Iter(count, inner.stride, inner.axis)]
    if start == 0 and count % inner.extent == 0:  # whole inner iters: recurse outwards
        outer = _slice_structural(iters[:-1], outer_step, count // inner.extent)
        return None if outer is None else outer + [inner]
    if start > 0 and count == 2 * (inner.extent - start):
        # From the middle of one outer step into the next, two runs of equal length: an
        # outer iter of extent 2 whose stride is the jump between the runs.
        run = inner.extent - start
        before, after = _dim_value(iters, begin), _dim_value(iters, begin + run)
        jump = {axis: after.get(axis, 0) - before.get(axis, 0) for axis in after}
        outer_iter = _one_axis_iter(2, jump)
        return None if outer_iter is None else [outer_iter, Iter(run, inner.stride, inner.axis)]
    return None


def _slice_sampled(iters, begin: int, count: int) -> list[Iter] | None:
    """Infer the iters of ``[begin, begin+count)`` from the coordinates themselves (the
    innermost iter is the first arithmetic run), then check every element."""
    if count > _MAX_SAMPLED_EXTENT:
        return None
    axes = list(dict.fromkeys(it.axis for it in iters))
    origin = _dim_value(iters, begin)

    def coords(index):
        value = _dim_value(iters, index)
        return tuple(value.get(a, 0) - origin.get(a, 0) for a in axes)

    values = [coords(begin + j) for j in range(count)]

    def infer(values) -> list[Iter] | None:
        if len(values) == 1:
            return []
        step = values[1]
        run = 1
        while run < len(values) and values[run] == tuple(run * s for s in step):
            run += 1
        if len(values) % run:
            return None
        inner = _one_axis_iter(run, dict(zip(axes, step)))
        if inner is None:
            return None
        for start in range(0, len(values), run):
            base = values[start]
            for u in range(run):
                if values[start + u] != tuple(b + u * s for b, s in zip(base, step)):
                    return None
        outer = infer(values[::run])
        return None if outer is None else outer + [inner]

    return infer(values)


def slice_layout(layout: TileLayout, shape, region) -> TileLayout:
    """The layout of the sub-tile ``region`` (slices, one per dimension) of a tensor with
    logical ``shape``: for every coordinate ``c`` in the region,
    ``result.apply(c - begin, shape=extents) == layout.apply(c, shape=shape)``."""
    shape = _shape(shape)
    bounds = _region(shape, region)
    used, groups = group_iters(layout, shape)
    candidates = [(used, groups)]
    if used == layout and layout.canonicalize() != layout:
        try:
            candidates.append(group_iters(layout.canonicalize(), shape))
        except LayoutError:
            pass
    reason = ""
    for candidate, groups in candidates:
        shard: list[Iter] = []
        for dim, ((begin, count), iters) in enumerate(zip(bounds, groups)):
            if not iters:
                continue  # an extent-1 dimension owns no iters and contributes nothing
            part = _slice_structural(iters, begin, count)
            if part is None:
                part = _slice_sampled(iters, begin, count)
            if part is None:
                reason = (f"dimension {dim} [{begin}, {begin + count}) of iters "
                          f"{', '.join(map(str, iters))} is not a strided pattern")
                break
            shard.extend(part)
        else:
            origin = candidate.apply(*(b for b, _ in bounds), shape=shape)
            offset = {name: value for name, value in origin.items() if value != 0}
            return TileLayout.from_iters(shard or (Iter(1, 1, m),), candidate.replica, offset)
    region_text = ", ".join(f"{b}:{b + n}" for b, n in bounds)
    raise LayoutError(f"region [{region_text}] of {layout} over shape {shape} is not one "
                      f"layout: {reason}")


# --------------------------------------------------------------------------- tile
def tile(inner: TileLayout, outer: TileLayout, outer_shape, inner_shape) -> TileLayout:
    """Repeat the tile ``inner`` (logical ``inner_shape``) as laid out by ``outer`` (logical
    ``outer_shape``). Outer strides and offsets count in tiles: on an axis the tile
    occupies they are scaled by the tile's extent there (``1 + sum((e-1)*|s|)``, without
    its offset). The result has logical shape ``outer_shape[i] * inner_shape[i]``."""
    outer_shape, inner_shape = _shape(outer_shape, "outer shape"), _shape(inner_shape,
                                                                          "inner shape")
    if len(outer_shape) != len(inner_shape):
        raise LayoutError(f"outer shape {outer_shape} and inner shape {inner_shape} must "
                          "have the same rank")
    inner_used, inner_groups = group_iters(inner, inner_shape)
    outer_used, outer_groups = group_iters(outer, outer_shape)
    tile_axes = set(inner_used.axes)

    def scale(axis) -> int:
        return inner_used.extent_span(axis) if axis in tile_axes else 1

    def scaled(it: Iter) -> Iter:
        return Iter(it.extent, it.stride * scale(it.axis), it.axis)

    shard: list[Iter] = []
    for outer_group, inner_group in zip(outer_groups, inner_groups):
        shard += [scaled(it) for it in outer_group] + list(inner_group)
    replica = list(inner_used.replica) + [scaled(it) for it in outer_used.replica]
    offset = list(inner_used.offset.items())
    offset += [(name, value * scale(Axis(name))) for name, value in outer_used.offset.items()]
    return TileLayout.from_iters(shard, replica, offset).canonicalize()
