"""``Builder``: creates ops at an insertion point, stamped with the current source location.

API (every method validates against the op catalogue and raises a located
``CompilationError`` on misuse)::

    b = Builder(loc)                      # b.loc is settable (the frontend sets it per AST node)
    with b.insert_into(block): ...        # set the insertion point (restored on exit)
    b.create(name, operands=(), attrs=None, result_types=None, regions=()) -> Operation

    # single-result ops return the result Value
    b.const(value, type)          b.binary(op, lhs, rhs)     b.cmp(pred, lhs, rhs)
    b.unary(op, x)                b.select(c, a, b)          b.cast(x, to)
    b.thread_index(kind, dim=0)   b.buffer_dim(buf, dim)     b.buffer_stride(buf, dim)
    b.buffer_address(buf)
    b.alloc(scope, dtype, shape, layout=None)                b.view(buf, shape, layout=None)
    b.region(buf, starts, sizes, keep=None)                  b.load(buf, indices)
    b.atomic(op, buf, value, indices)   b.atomic_cas(buf, compare, value, indices)
    b.warp_shuffle(mode, value, lane)   b.elect_sync()
    b.mma_sync(a, b, c, shape="m16n8k16") -> the lane's D values (a list)
    b.ldmatrix(buf, indices, num, trans=False) -> the lane's 2 * num values (a list)
    b.stmatrix(buf, values, indices, trans=False)  (num = len(values) // 2)
    b.alloc_barrier(count)        b.intrinsic(target, name, args, result_type=None)

    # ops without results return the Operation
    b.store(buf, value, indices)  b.sync()  b.device_print(fmt, args)
    b.mbarrier_init(bar, index, count)      b.mbarrier_arrive(bar, index)
    b.mbarrier_expect_tx(bar, index, nbytes, arrive=False)  b.mbarrier_wait(bar, index, phase)
    b.yield_(values=())           b.condition(cond, values=())
    b.tile(primitive, *operands, **attrs)   # b.tile("copy", dst, src, dispatch="tma")

    # structured ops: created with empty region blocks, returned with them
    b.for_(lb, ub, step, inits=(), unroll=None, pipeline=None) -> (op, body)
        # body.args == (iv, *iter_args), typed (lb's type, *inits' types)
    b.if_(cond, result_types=(), filter=None) -> (op, then_block, else_block)
    b.while_(inits, result_types=None) -> (op, before, after)  # result types default to inits'
    b.team(kind, result_types=()) -> (op, body)
    b.single(team) -> (op, body)           # once per team instance (CPU lowering)

Example::

    k = KernelIR.new("add", ["x", "n"], [xtype, i32], {"num_warps": 4}, loc)
    b = Builder(loc)
    with b.insert_into(k.body):
        pid = b.thread_index("cta_id")
        loop, body = b.for_(b.const(0, i32), k.param("n"), b.const(1, i32), [b.const(0.0, f32)])
        with b.insert_into(body):
            iv, acc = body.args
            b.yield_([b.binary("add", acc, b.load(k.param("x"), [iv]))])
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

from tilejit.errors import UNKNOWN_LOCATION, CompilationError, SourceLocation

from .core import Block, Operation, Value

__all__ = ["Builder"]


class Builder:
    def __init__(self, loc: SourceLocation = UNKNOWN_LOCATION):
        self.loc = loc
        self.block: Block | None = None

    @contextmanager
    def insert_into(self, block: Block):
        """Append new ops to the end of ``block`` inside the ``with``."""
        saved, self.block = self.block, block
        try:
            yield block
        finally:
            self.block = saved

    @contextmanager
    def at(self, loc: SourceLocation):
        """Stamp ops created inside the ``with`` with ``loc``."""
        saved, self.loc = self.loc, loc
        try:
            yield
        finally:
            self.loc = saved

    def create(self, name: str, operands: Sequence[Value] = (), attrs: dict | None = None,
               result_types: Sequence | None = None, regions: Sequence[Block] = ()) -> Operation:
        """Build op ``name`` (validated against the catalogue) and append it."""
        if self.block is None:
            raise CompilationError(f"no insertion point for {name} (use insert_into)", self.loc)
        op = Operation(name, operands, attrs, result_types, regions, self.loc)
        self.block.ops.append(op)
        return op

    def _value(self, name, operands=(), **attrs) -> Value:
        return self.create(name, operands, attrs).result

    # -- native -----------------------------------------------------------------------
    def const(self, value, type) -> Value:
        if getattr(type, "is_float", False) and not isinstance(value, bool):
            value = float(value)  # so `const(0, f32)` is accepted and prints as 0.0
        return self.create("const", (), {"value": value}, (type,)).result

    def binary(self, op: str, lhs: Value, rhs: Value) -> Value:
        return self._value("binary", (lhs, rhs), op=op)

    def cmp(self, pred: str, lhs: Value, rhs: Value) -> Value:
        return self._value("cmp", (lhs, rhs), pred=pred)

    def unary(self, op: str, x: Value, approx: bool = False) -> Value:
        return self._value("unary", (x,), op=op, **({"approx": True} if approx else {}))

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self._value("select", (cond, a, b))

    def cast(self, x: Value, to) -> Value:
        return self._value("cast", (x,), to=to)

    def thread_index(self, kind: str, dim: int = 0) -> Value:
        return self._value("thread_index", (), kind=kind, dim=dim)

    # -- memory -----------------------------------------------------------------------
    def buffer_dim(self, buf: Value, dim: int) -> Value:
        return self._value("buffer_dim", (buf,), dim=dim)

    def buffer_stride(self, buf: Value, dim: int) -> Value:
        return self._value("buffer_stride", (buf,), dim=dim)

    def buffer_address(self, buf: Value) -> Value:
        return self._value("buffer_address", (buf,))

    def alloc(self, scope, dtype, shape: Sequence[int], layout=None) -> Value:
        return self._value("alloc", (), scope=scope, dtype=dtype, shape=tuple(shape), layout=layout)

    def view(self, buf: Value, shape: Sequence[int], layout=None) -> Value:
        return self._value("view", (buf,), shape=tuple(shape), layout=layout)

    def region(self, buf: Value, starts: Sequence[Value], sizes: Sequence[int],
               keep: Sequence[bool] | None = None) -> Value:
        keep = (True,) * len(sizes) if keep is None else tuple(keep)
        return self._value("region", (buf, *starts), sizes=tuple(sizes), keep=keep)

    def load(self, buf: Value, indices: Sequence[Value]) -> Value:
        return self._value("load", (buf, *indices))

    def store(self, buf: Value, value: Value, indices: Sequence[Value]) -> Operation:
        return self.create("store", (buf, value, *indices))

    def atomic(self, op: str, buf: Value, value: Value, indices: Sequence[Value],
               order: str = "acq_rel", sync_scope: str = "gpu") -> Value:
        return self._value("atomic", (buf, value, *indices), op=op, order=order,
                           sync_scope=sync_scope)

    def atomic_cas(self, buf: Value, compare: Value, value: Value, indices: Sequence[Value],
                   order: str = "acq_rel", sync_scope: str = "gpu") -> Value:
        return self._value("atomic_cas", (buf, compare, value, *indices), order=order,
                           sync_scope=sync_scope)

    # -- sync and intrinsics ----------------------------------------------------------
    def warp_shuffle(self, mode: str, value: Value, lane: Value) -> Value:
        return self._value("warp_shuffle", (value, lane), mode=mode)

    def packed_binary(self, op: str, a: Sequence[Value], b: Sequence[Value]) -> list[Value]:
        """``(a[0] op b[0], a[1] op b[1])`` on a pair of f16 or bf16 values."""
        return list(self.create("packed_binary", (*a, *b), {"op": op}).results)

    def packed_unary(self, op: str, a: Sequence[Value]) -> list[Value]:
        """``(op a[0], op a[1])`` on a pair of f16 or bf16 values."""
        return list(self.create("packed_unary", tuple(a), {"op": op}).results)

    def packed_cast(self, x0: Value, x1: Value, to) -> list[Value]:
        """A pair of f32 values rounded into ``to`` (f16 or bf16)."""
        return list(self.create("packed_cast", (x0, x1), {"to": to}).results)

    def mma_sync(self, a: Sequence[Value], b: Sequence[Value], c: Sequence[Value],
                 shape: str = "m16n8k16") -> list[Value]:
        """A warp's ``D = A @ B + C`` from this lane's fragment values; its D values."""
        op = self.create("mma_sync", (*a, *b, *c),
                         {"shape": shape, "a_type": a[0].type, "b_type": b[0].type,
                          "c_type": c[0].type})
        return list(op.results)

    def ldmatrix(self, buf: Value, indices: Sequence[Value], num: int,
                 trans: bool = False) -> list[Value]:
        """A warp's load of ``num`` 8x8 matrices; ``indices``: this lane's matrix row."""
        return list(self.create("ldmatrix", (buf, *indices), {"num": num, "trans": trans}).results)

    def stmatrix(self, buf: Value, values: Sequence[Value], indices: Sequence[Value],
                 trans: bool = False) -> Operation:
        """A warp's store of ``len(values) // 2`` 8x8 matrices; ``indices``: this lane's
        matrix row."""
        return self.create("stmatrix", (buf, *values, *indices),
                           {"num": len(values) // 2, "trans": trans})

    def elect_sync(self) -> Value:
        return self._value("elect_sync")

    def sync(self) -> Operation:
        return self.create("sync")

    def alloc_barrier(self, count: int) -> Value:
        return self._value("alloc_barrier", (), count=count)

    def mbarrier_init(self, bar: Value, index: Value, count: Value) -> Operation:
        return self.create("mbarrier_init", (bar, index, count))

    def mbarrier_arrive(self, bar: Value, index: Value) -> Operation:
        return self.create("mbarrier_arrive", (bar, index))

    def mbarrier_expect_tx(self, bar: Value, index: Value, nbytes: Value,
                           arrive: bool = False) -> Operation:
        return self.create("mbarrier_expect_tx", (bar, index, nbytes), {"arrive": arrive})

    def mbarrier_wait(self, bar: Value, index: Value, phase: Value) -> Operation:
        return self.create("mbarrier_wait", (bar, index, phase))

    def mbarrier_complete_tx(self, bar: Value, index: Value, nbytes: Value) -> Operation:
        return self.create("mbarrier_complete_tx", (bar, index, nbytes))

    def cp_async_commit(self) -> Operation:
        return self.create("cp_async_commit")

    def cp_async_wait(self, pending: int) -> Operation:
        return self.create("cp_async_wait", attrs={"pending": pending})

    def intrinsic(self, target: str, name: str, args: Sequence[Value] = (),
                  result_type=None) -> Value | Operation:
        """A raw target intrinsic; returns its Value when it has a result, else the op."""
        op = self.create("intrinsic", args, {"target": target, "name": name},
                         () if result_type is None else (result_type,))
        return op.result if op.results else op

    def device_print(self, fmt: str, args: Sequence[Value] = ()) -> Operation:
        return self.create("device_print", args, {"fmt": fmt})

    def tile(self, primitive: str, *operands: Value, **attrs) -> Operation:
        """A tile primitive, e.g. ``tile("reduce", dst, src, op="sum", axis=1)``."""
        return self.create(f"tile.{primitive}", operands, attrs)

    # -- control flow -----------------------------------------------------------------
    def yield_(self, values: Sequence[Value] = ()) -> Operation:
        return self.create("yield", values)

    def condition(self, cond: Value, values: Sequence[Value] = ()) -> Operation:
        return self.create("condition", (cond, *values))

    def for_(self, lb: Value, ub: Value, step: Value, inits: Sequence[Value] = (),
             unroll: int | None = None, pipeline: int | None = None,
             independent: bool = False) -> tuple[Operation, Block]:
        body = Block.with_arg_types([lb.type, *(v.type for v in inits)])
        op = self.create("for", (lb, ub, step, *inits),
                         {"unroll": unroll, "pipeline": pipeline, "independent": independent},
                         regions=(body,))
        return op, body

    def if_(self, cond: Value, result_types: Sequence = (),
            filter=None) -> tuple[Operation, Block, Block]:
        then_block, else_block = Block(), Block()
        op = self.create("if", (cond,), {"filter": filter}, tuple(result_types),
                         (then_block, else_block))
        return op, then_block, else_block

    def while_(self, inits: Sequence[Value],
               result_types: Sequence | None = None) -> tuple[Operation, Block, Block]:
        init_types = [v.type for v in inits]
        result_types = init_types if result_types is None else list(result_types)
        before = Block.with_arg_types(init_types)
        after = Block.with_arg_types(result_types)
        op = self.create("while", inits, None, result_types, (before, after))
        return op, before, after

    def team(self, kind, result_types: Sequence = ()) -> tuple[Operation, Block]:
        body = Block()
        op = self.create("team", (), {"kind": kind}, tuple(result_types), (body,))
        return op, body

    def single(self, team) -> tuple[Operation, Block]:
        body = Block()
        op = self.create("single", (), {"team": team}, (), (body,))
        return op, body
