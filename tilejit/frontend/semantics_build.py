"""Building, converting and indexing tiles: ``tj.zeros/full``, ``x.to``, ``tj.trans`` /
``permute``, ``broadcast_to`` / ``expand_dims`` / ``reshape``, ``tj.gather`` /
``tj.scatter`` and the row copies ``tj.copy(dst, table[idx, :])``.

A mixin of ``TileSemantics`` (``semantics_tile.py``): the methods use its operand checks,
``copy``, ``pointwise`` and ``expression``, and the reductions' ``_axis``.
"""
from __future__ import annotations

import math

from tilejit.errors import CompilationError
from tilejit.ir.types import BufferType, MemScope, ScalarType

from .tile_shapes import IndexedTile, broadcast_shapes, broadcasts_to, shape_text
from .values import describe, is_number, is_scalar, is_tile, python_number_type

__all__ = ["BuildSemantics"]


class BuildSemantics:
    def full(self, shape, value, dtype, name: str):
        """``tj.zeros``/``tj.full``: a new fragment of ``shape`` holding ``value`` (a fill)."""
        if not (is_scalar(value) or is_number(value)):
            raise CompilationError(f"tj.{name}(shape, value, dtype) fills with a scalar value, "
                                   f"got {describe(value)}")
        dst = self.sem.memory.alloc(MemScope.FRAGMENT, shape, dtype, None)
        self.pointwise("fill", dst, (value,), None, None)
        return dst

    def convert(self, x, dtype):
        """``x.to(dtype)``: a cast, into a new fragment for a tile."""
        if not isinstance(dtype, ScalarType):
            raise CompilationError(f"x.to(dtype) takes a tj dtype such as tj.float16, got "
                                   f"{describe(dtype)}")
        if is_tile(x):
            return self.expression("cast", (self._expression_source("to", x, None),), dtype)
        return self.sem.cast(x, dtype)

    def _whole(self, x, name: str):
        """``x`` as a whole on-chip buffer: itself, or a new fragment holding a copy of it."""
        x = self._expression_source(name, x, None)
        t = x.type
        if isinstance(t, BufferType) and t.scope is not MemScope.GLOBAL:
            return x
        whole = self.b.alloc(MemScope.FRAGMENT, t.dtype, t.shape)
        self.copy(whole, x, None, None, None)
        return whole

    def permute(self, x, dims, name: str):
        """``tj.trans(x, *dims)``, ``tj.permute``, ``x.T``: a new fragment ``dst`` with
        ``dst[i] = x[j]``, ``j[dims[k]] = i[k]``; no dims transposes a 2-D tile. A copy at
        permuted indices (the ``permute`` op), not a view: the result gets the default
        row-major layout whatever ``x``'s layout, and later rules see a plain fragment."""
        x = self._expression_source(name, x, None)
        shape = x.type.shape
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if not dims:
            if len(shape) != 2:
                raise CompilationError(f"tj.{name} without dims transposes a 2-D tile, but "
                                       f"{describe(x)} has rank {len(shape)}; give the order "
                                       f"of its dims, e.g. tj.permute(x, (2, 0, 1))")
            dims = (1, 0)
        dims = tuple(self._axis(name, d, shape) for d in dims)
        if sorted(dims) != list(range(len(shape))):
            raise CompilationError(f"tj.{name}: dims {list(dims)} must name each of the "
                                   f"{len(shape)} dims of {describe(x)} once")
        dst = self.b.alloc(MemScope.FRAGMENT, x.type.dtype, tuple(shape[d] for d in dims))
        self.b.tile("permute", dst, x, dims=dims, **self._attrs(None, None))
        return dst

    def broadcast_to(self, x, shape):
        """``tj.broadcast_to(x, shape)``: a new fragment of ``shape`` (numpy broadcasting)."""
        shape = self.sem.memory.static_shape(shape)
        if not is_tile(x):
            if not (is_scalar(x) or is_number(x)):
                raise CompilationError(f"tj.broadcast_to takes a tile or a scalar, got "
                                       f"{describe(x)}")
            return self.full(shape, x, x.type if is_scalar(x) else python_number_type(x),
                             "broadcast_to")
        x = self._expression_source("broadcast_to", x, None)
        if not broadcasts_to(x.type.shape, shape):
            raise CompilationError(f"tj.broadcast_to: {shape_text(x.type.shape)} does not "
                                   f"broadcast to {shape_text(shape)}")
        dst = self.b.alloc(MemScope.FRAGMENT, x.type.dtype, shape)
        self.copy(dst, x, None, None, None)
        return dst

    def expand_dims(self, x, axis):
        """``tj.expand_dims(x, axis)``: ``x[:, None]`` with the new dims at ``axis`` (an int
        or a tuple); a view of ``x`` (a region is copied into a fragment first)."""
        x = self._whole(x, "expand_dims")
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        rank = x.type.rank + len(axes)
        axes = {self._axis("expand_dims", a, (None,) * rank) for a in axes}
        if len(axes) != rank - x.type.rank:
            raise CompilationError(f"tj.expand_dims: axis {axis!r} names a dim twice")
        items = tuple(None if d in axes else slice(None) for d in range(rank))
        return self.sem.memory.expand_dims(x, items)

    def reshape(self, x, shape):
        """``tj.reshape(x, shape)``: the same elements in row-major order. A view of ``x``
        (a region is copied into a fragment first): a layout places the row-major flat
        index whatever the shape, so nothing moves."""
        shape = self.sem.memory.static_shape(shape)
        x = self._whole(x, "reshape")
        if math.prod(shape) != math.prod(x.type.shape):
            raise CompilationError(f"tj.reshape: {shape_text(x.type.shape)} has "
                                   f"{math.prod(x.type.shape)} elements, "
                                   f"{shape_text(shape)} has {math.prod(shape)}")
        return self.b.view(x, shape, x.type.layout)

    def _index(self, index, name: str):
        if not (is_tile(index) and index.type.dtype.is_int and not index.type.dtype.is_bool):
            raise CompilationError(f"tj.{name}: the index must be an integer tile, got "
                                   f"{describe(index)}")
        if None in index.type.shape:
            raise CompilationError(f"tj.{name}: the index needs a static shape, got "
                                   f"{describe(index)}")
        return index

    @staticmethod
    def _same_rank(name: str, index, role: str, tile):
        if index.type.rank != tile.type.rank:
            raise CompilationError(f"tj.{name}: the index has rank {index.type.rank} but {role} "
                                   f"has rank {tile.type.rank}; they must match (as in "
                                   f"torch.{name}); add size-1 dims with x[:, None]")

    def gather(self, args, axis, other, dispatch, config):
        """``tj.gather(src, index, axis)`` (a new fragment of index's shape) or
        ``tj.gather(dst, src, index, axis)``: ``dst[i] = src[i with i[axis] = index[i]]``,
        ``other`` (default 0) where the index is outside ``src``."""
        if axis is None and args:
            args, axis = args[:-1], args[-1]
        if len(args) not in (2, 3):
            raise CompilationError("tj.gather is called as tj.gather(src, index, axis) or "
                                   "tj.gather(dst, src, index, axis)")
        src = self._tile(args[-2], "src", "gather")
        index = self._index(args[-1], "gather")
        self._same_rank("gather", index, "src", src)
        axis = self._axis("gather", axis, src.type.shape)
        if len(args) == 2:
            dst = self.b.alloc(MemScope.FRAGMENT, src.type.dtype, index.type.shape)
        else:
            dst = self._tile(args[0], "dst", "gather")
            if dst.type.rank != src.type.rank:
                raise CompilationError(f"tj.gather: dst has rank {dst.type.rank} but src has "
                                       f"rank {src.type.rank}")
            if not broadcasts_to(index.type.shape, dst.type.shape):
                raise CompilationError(f"tj.gather: index of shape "
                                       f"{shape_text(index.type.shape)} does not broadcast to "
                                       f"dst of shape {shape_text(dst.type.shape)}")
        for d, (n, m) in enumerate(zip(dst.type.shape, src.type.shape)):
            if d != axis and None not in (n, m) and n > m:
                raise CompilationError(f"tj.gather: dim {d} of the result ({n}) is larger than "
                                       f"that of src ({m}); only dim {axis} is indexed")
        attrs = self._attrs(dispatch, config)
        self.b.tile("gather", dst, src, index, axis=axis,
                    other=self._other(other, attrs, dst, src), **attrs)
        return dst if len(args) == 2 else None

    def scatter(self, dst, index, src, axis, dispatch, config):
        """``tj.scatter(dst, index, src, axis)``: ``dst[j with j[axis] = index[j]] = src[j]``
        for every ``j`` of the broadcast shape of index and src, in row-major order;
        indices outside ``dst`` write nothing."""
        dst = self._tile(dst, "dst", "scatter")
        index = self._index(index, "scatter")
        self._same_rank("scatter", index, "dst", dst)
        axis = self._axis("scatter", axis, dst.type.shape)
        domain = index.type.shape
        if is_tile(src):
            src = self._expression_source("scatter", src, None)
            domain = broadcast_shapes([domain, src.type.shape])
            if domain is None or len(domain) != index.type.rank:
                raise CompilationError(f"tj.scatter: src of shape {shape_text(src.type.shape)} "
                                       f"does not broadcast with the index's "
                                       f"{shape_text(index.type.shape)}")
        elif is_scalar(src) or is_number(src):
            src = self.sem.to_ir(src, dst.type.dtype)
        else:
            raise CompilationError(f"tj.scatter: src must be a tile or a scalar, got "
                                   f"{describe(src)}")
        for d, (n, m) in enumerate(zip(domain, dst.type.shape)):
            if d != axis and m is not None and n > m:
                raise CompilationError(f"tj.scatter: dim {d} of the index and src ({n}) is "
                                       f"larger than that of dst ({m}); only dim {axis} is "
                                       "indexed")
        return self.b.tile("scatter", dst, index, src, axis=axis,
                           **self._attrs(dispatch, config))

    def indexed_copy(self, dst, src, other, dispatch, config):
        """``tj.copy(dst, table[idx, :])`` (a gather of rows) or ``tj.copy(out[idx, :],
        src)`` (a scatter): the 1-D index viewed with its extent on the indexed axis."""
        indexed = src if isinstance(src, IndexedTile) else dst
        index = self._whole(indexed.index, "copy")
        rank = indexed.buffer.type.rank
        shape = tuple(index.type.shape[0] if d == indexed.axis else 1 for d in range(rank))
        index = self.b.view(index, shape, index.type.layout)
        if isinstance(src, IndexedTile):
            return self.gather((dst, src.buffer, index), src.axis, other, dispatch, config)
        if other is not None:
            raise CompilationError("tj.copy into a tile indexed by an integer tile takes no "
                                   "other=")
        return self.scatter(dst.buffer, index, src, dst.axis, dispatch, config)

    # ------------------------------------------------------------------ pointwise
