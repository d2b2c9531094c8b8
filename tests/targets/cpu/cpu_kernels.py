"""Helpers for the CPU backend tests: build native-IR kernels with the IR Builder and run
them. ``KernelBuilder`` stamps each op with a source line (``kb.line(n)``) so tests can
check the lines run-time errors point at."""
from __future__ import annotations

from contextlib import contextmanager

from tilejit.errors import SourceLocation
from tilejit.ir import Builder, FilterSpec, KernelIR, verify
from tilejit.ir.types import BufferType, MemScope, f32, i32
from tilejit.targets import cpu

FILE = "/src/cpu_test_kernels.py"
GLOBAL, SHARED, LOCAL, FRAGMENT = (MemScope.GLOBAL, MemScope.SHARED, MemScope.LOCAL,
                                   MemScope.FRAGMENT)


def vector(dtype=f32) -> BufferType:
    return BufferType(dtype, (None,), GLOBAL, strides=(1,))


def matrix(dtype=f32) -> BufferType:
    return BufferType(dtype, (None, None), GLOBAL, strides=(None, 1))


class KernelBuilder:
    """``with KernelBuilder("k", x=vector(), n=i32) as kb: ...`` then ``kb.run(grid, args)``."""

    def __init__(self, name: str, num_warps: int = 4, cluster=(1, 1, 1), **params):
        self.b = Builder(SourceLocation(FILE, 1, 0))
        self.kernel = KernelIR.new(name, list(params), list(params.values()),
                                   {"num_warps": num_warps, "cluster": cluster}, self.b.loc)
        self.p = dict(zip(params, self.kernel.params))

    def __enter__(self):
        self._ctx = self.b.insert_into(self.kernel.body)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)

    def __getattr__(self, name):  # b.load(...), b.store(...) ... straight through
        return getattr(self.b, name)

    def line(self, number: int) -> None:
        self.b.loc = SourceLocation(FILE, number, 4)

    def c(self, value, t=i32):
        return self.b.const(value, t)

    def tid(self, kind: str, dim: int = 0):
        return self.b.thread_index(kind, dim)

    def op(self, name: str, a, b):
        return self.b.binary(name, a, b)

    def global_thread_id(self):
        """cta_id * num_threads + thread_id"""
        per_cta = self.op("mul", self.tid("cta_id"), self.tid("num_threads"))
        return self.op("add", per_cta, self.tid("thread_id"))

    @contextmanager
    def loop(self, lb, ub, step=None, inits=()):
        """``for iv in range(lb, ub, step)``: yields (iv, *iter_args); the body ends with
        ``kb.yield_([...])`` when there are iter args. The op is ``kb.last_loop``."""
        step = self.c(1, lb.type) if step is None else step
        self.last_loop, body = self.b.for_(lb, ub, step, inits)
        with self.b.insert_into(body):
            yield body.args
            if body.terminator is None:
                self.b.yield_()

    @contextmanager
    def when(self, cond, axis: str | None = None, lo=None, hi=None):
        """An ``if`` without results (a thread filter when ``axis`` is given)."""
        spec = None if axis is None else FilterSpec(axis, lo, hi)
        _, then_block, else_block = self.b.if_(cond, (), spec)
        with self.b.insert_into(then_block):
            yield
            self.b.yield_()
        with self.b.insert_into(else_block):
            self.b.yield_()

    def if_filter(self, cond, axis: str, lo=None, hi=None, result_types=()):
        """An ``if`` whose condition is the thread filter ``lo <= axis < hi``."""
        return self.b.if_(cond, result_types, FilterSpec(axis, lo, hi))

    def filter(self, kind: str, lo: int, hi: int):
        """The condition value of ``lo <= <kind>() < hi`` for a filter ``if``."""
        index = self.tid(kind)
        if hi == lo + 1:
            return self.b.cmp("eq", index, self.c(lo))
        return self.b.binary("and", self.b.cmp("ge", index, self.c(lo)),
                             self.b.cmp("lt", index, self.c(hi)))

    @contextmanager
    def single(self, team):
        _, body = self.b.single(team)
        with self.b.insert_into(body):
            yield
            self.b.yield_()

    def compile(self, **options) -> cpu.CpuArtifact:
        verify(self.kernel)
        return cpu.compile(self.kernel, **options)

    def module(self, **options) -> cpu.CpuModule:
        return cpu.load(self.compile(**options))

    def run(self, grid, args, **options) -> cpu.CpuModule:
        module = self.module(**options)
        module.launch(grid, args)
        return module
