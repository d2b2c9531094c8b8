"""The ``tj.*`` names used inside kernels (SPEC §3-§5).

Each builtin is a plain function marked with :func:`builtin`. The AST walker calls it with
``_sem=`` (the kernel's semantics object), and the function forwards to ``tilejit.frontend
.semantics`` -- this module holds the *surface* (names, signatures, argument checks), the
semantics modules hold the meaning. Called anywhere else (``_sem`` missing), a builtin
raises ``CompilationError("tj.copy can only be used inside a @tj.kernel function")``;
``cdiv`` alone also works in plain Python.

Scope objects (``tj.warp``, ``tj.wg``, ...) open a team switch in ``with tj.warp():`` and
are namespaces of scoped primitives (``tj.wg.copy``). ``tj.ptx.<name>(...)`` and
``tj.nki.<name>(...)`` emit raw target intrinsics.
"""
from __future__ import annotations

import builtins
import functools
import inspect
from dataclasses import dataclass
from typing import Any

from tilejit.errors import CompilationError
from tilejit.ir import types as _types
from tilejit.ir.types import MemScope, TeamKind

__all__ = [
    "constexpr", "cdiv", "func", "DeviceFunction",
    "cta_id", "program_id", "num_ctas", "warpgroup_id", "warp_id", "warp_id_in_wg", "lane_id",
    "thread_id", "cta_id_in_cluster", "cta_rank_in_cluster", "cluster_sync", "remote",
    "alloc_shared", "alloc_local", "fragment", "alloc_tmem", "alloc_psum", "alloc_barriers",
    "range", "static_range", "sync", "static_assert", "device_print", "elect_sync",
    "mbarrier_init", "mbarrier_arrive", "mbarrier_expect_tx", "mbarrier_arrive_expect_tx",
    "mbarrier_wait", "cp_async_commit", "cp_async_wait", "bulk_wait", "fence_proxy_async",
    "wgmma_wait",
    "setmaxnreg", "tfilter", "thread", "warp", "warpgroup", "wg", "cta", "cluster",
    "copy", "copy_async", "gemm", "gemm_async", "reduce", "arange",
    "zeros", "full", "trans", "permute", "broadcast_to", "expand_dims", "reshape", "gather",
    "scatter",
    "add", "sub", "mul", "div", "maximum", "minimum", "exp", "exp2", "log", "sqrt", "rsqrt",
    "neg", "abs", "fma", "cast", "fill", "select", "ptx", "nki",
    "tanh", "sigmoid", "erf", "sin", "cos", "floor", "ceil", "log2", "pow", "where",
    "rand", "randn", "randint",
    "sum", "max", "min", "argmax", "argmin", "cumsum", "cumprod", "associative_scan",
    "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "shuffle",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e5m2",
    "int8", "int16", "int32", "int64", "uint8", "bool",
]


# ----------------------------------------------------------------------------- markers
class constexpr:
    """Annotation for compile-time parameters (``BLOCK: tj.constexpr``); ``tj.constexpr(v)``
    wraps a value that must be folded at compile time (as an argument or a global)."""

    def __init__(self, value: Any):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"tj.constexpr({self.value!r})"

    def __eq__(self, other):
        return isinstance(other, constexpr) and self.value == other.value

    def __hash__(self):
        return hash(("constexpr", self.value))


def _outside_kernel(name: str):
    return CompilationError(f"{name} can only be used inside a @tj.kernel function")


def builtin(public_name: str):
    """Mark ``fn`` as the kernel builtin ``tj.<public_name>``.

    The walker calls it as ``fn(*args, _sem=semantics, **kwargs)``; the arguments are
    checked against ``fn``'s signature first so that a wrong call is a CompilationError
    naming the builtin, not a Python TypeError.
    """
    def decorate(fn):
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "_sem"]
        user_signature = inspect.Signature(params)

        @functools.wraps(fn)
        def wrapper(*args, _sem=None, **kwargs):
            if _sem is None:
                raise _outside_kernel(f"tj.{public_name}")
            try:
                bound = user_signature.bind(*args, **kwargs)
            except TypeError as err:
                raise CompilationError(f"tj.{public_name}(): {err}") from None
            return fn(*bound.args, _sem=_sem, **bound.kwargs)

        wrapper.__tj_builtin__ = public_name
        wrapper.__signature__ = user_signature
        return wrapper
    return decorate


class BoundBuiltin:
    """A builtin with its first argument bound: the method ``buf.view`` of a buffer."""

    def __init__(self, fn, first):
        self.__tj_builtin__ = fn.__tj_builtin__
        self.fn = fn
        self.first = first

    def __call__(self, *args, _sem=None, **kwargs):
        return self.fn(self.first, *args, _sem=_sem, **kwargs)


def is_builtin(obj) -> builtins.bool:
    return getattr(obj, "__tj_builtin__", None) is not None


# ------------------------------------------------------------------------ pure helpers
def cdiv(a, b, _sem=None):
    """Ceiling division ``(a + b - 1) // b``; works in plain Python and inside kernels."""
    if _sem is None:
        return -(-a // b)
    return _sem.cdiv(a, b)


cdiv.__tj_builtin__ = "cdiv"


class DeviceFunction:
    """A ``@tj.func`` device function: inlined at every call inside a kernel."""

    def __init__(self, fn):
        if not inspect.isfunction(fn):
            raise TypeError(f"@tj.func decorates a Python function, got {fn!r}")
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        raise CompilationError(f"device function {self.fn.__name__} can only be called "
                               "inside a @tj.kernel function")

    def __repr__(self) -> str:
        return f"<tj.func {self.fn.__module__}.{self.fn.__qualname__}>"


def func(fn) -> DeviceFunction:
    """Decorator for device functions (inlined into the calling kernel)."""
    return DeviceFunction(fn)


# ------------------------------------------------------------------ ids and natives
def _id_builtin(name: str, kind: str, has_dim: builtins.bool):
    if has_dim:
        def fn(dim=0, *, _sem):
            return _sem.thread_index(kind, dim)
    else:
        def fn(*, _sem):
            return _sem.thread_index(kind, 0)
    fn.__name__ = name
    return builtin(name)(fn)


cta_id = _id_builtin("cta_id", "cta_id", True)
program_id = _id_builtin("program_id", "cta_id", True)
num_ctas = _id_builtin("num_ctas", "num_ctas", True)
cta_id_in_cluster = _id_builtin("cta_id_in_cluster", "cta_id_in_cluster", True)
cta_rank_in_cluster = _id_builtin("cta_rank_in_cluster", "cta_rank_in_cluster", False)
warpgroup_id = _id_builtin("warpgroup_id", "warpgroup_id", False)
warp_id = _id_builtin("warp_id", "warp_id", False)
warp_id_in_wg = _id_builtin("warp_id_in_wg", "warp_id_in_wg", False)
lane_id = _id_builtin("lane_id", "lane_id", False)
thread_id = _id_builtin("thread_id", "thread_id", False)


@dataclass(frozen=True)
class RangeSpec:
    """What ``range``/``tj.range``/``tj.static_range`` evaluate to; only ``for`` consumes it."""

    start: Any
    stop: Any
    step: Any
    unroll: int | None = None
    pipeline: int | None = None
    static: builtins.bool = False


def _range_args(args):
    if not 1 <= len(args) <= 3:
        raise CompilationError(f"range expects 1 to 3 arguments, got {len(args)}")
    if len(args) == 1:
        return 0, args[0], 1
    return args[0], args[1], args[2] if len(args) == 3 else 1


@builtin("range")
def range(*args, unroll=None, pipeline=None, _sem):
    """``tj.range(start, stop, step, unroll=None, pipeline=None)``: a run-time ``for`` loop."""
    for name, value in (("unroll", unroll), ("pipeline", pipeline)):
        if value is not None and (type(value) is not int or value < 1):
            raise CompilationError(f"{name}= must be a positive compile-time int, got {value!r}")
    return RangeSpec(*_range_args(args), unroll, pipeline)


@builtin("static_range")
def static_range(*args, _sem):
    """A loop unrolled at compile time; the bounds must be compile-time ints."""
    return RangeSpec(*_range_args(args), static=True)


@builtin("sync")
def sync(*, _sem):
    return _sem.b.sync()


@builtin("cluster_sync")
def cluster_sync(*, _sem):
    """Barrier of every thread of every CTA in the cluster (and so of the CTA)."""
    return _sem.b.create("cluster_sync")


@builtin("remote")
def remote(x, cta_rank, *, _sem):
    """``x`` (a shared buffer from alloc_shared, or mbarriers) as it lies in the shared memory
    of the cluster's CTA of rank ``cta_rank``: distributed shared memory."""
    return _sem.memory.remote(x, cta_rank)


@builtin("static_assert")
def static_assert(cond, msg="", *, _sem):
    return _sem.static_assert(cond, msg)


@builtin("device_print")
def device_print(fmt, *args, _sem):
    return _sem.device_print(fmt, args)


@builtin("elect_sync")
def elect_sync(*, _sem):
    return _sem.b.elect_sync()


# -------------------------------------------------------------------------- buffers
@builtin("alloc_shared")
def alloc_shared(shape, dtype, layout=None, *, _sem):
    return _sem.memory.alloc(MemScope.SHARED, shape, dtype, layout)


@builtin("alloc_local")
def alloc_local(shape, dtype, layout=None, *, _sem):
    return _sem.memory.alloc(MemScope.LOCAL, shape, dtype, layout)


@builtin("fragment")
def fragment(shape, dtype, layout=None, *, _sem):
    return _sem.memory.alloc(MemScope.FRAGMENT, shape, dtype, layout)


@builtin("alloc_tmem")
def alloc_tmem(shape, dtype, layout=None, *, _sem):
    return _sem.memory.alloc(MemScope.TMEM, shape, dtype, layout)


@builtin("alloc_psum")
def alloc_psum(shape, dtype, layout=None, *, _sem):
    """A tile in Trainium's PSUM, the Tensor Engine's accumulator memory (docs/language.md,
    "Trainium buffers"); only the nki target has it."""
    return _sem.memory.alloc(MemScope.PSUM, shape, dtype, layout)


@builtin("alloc_barriers")
def alloc_barriers(count, *, _sem):
    """``count`` mbarriers in shared memory; ``bars[i]`` names one of them."""
    return _sem.memory.alloc_barriers(count)


@builtin("mbarrier_init")
def mbarrier_init(barrier, count, *, _sem):
    return _sem.memory.mbarrier("init", barrier, count)


@builtin("mbarrier_arrive")
def mbarrier_arrive(barrier, *, _sem):
    return _sem.memory.mbarrier("arrive", barrier)


@builtin("mbarrier_expect_tx")
def mbarrier_expect_tx(barrier, nbytes, *, _sem):
    return _sem.memory.mbarrier("expect_tx", barrier, nbytes)


@builtin("mbarrier_arrive_expect_tx")
def mbarrier_arrive_expect_tx(barrier, nbytes, *, _sem):
    return _sem.memory.mbarrier("arrive_expect_tx", barrier, nbytes)


@builtin("mbarrier_wait")
def mbarrier_wait(barrier, phase, *, _sem):
    return _sem.memory.mbarrier("wait", barrier, phase)


@builtin("cp_async_commit")
def cp_async_commit(*, _sem):
    """Close this thread's group of cp.async copies issued since its last commit."""
    return _sem.b.cp_async_commit()


def _pending_groups(name: str, pending) -> None:
    """A group wait's count: a compile-time int >= 0, else a CompilationError."""
    if isinstance(pending, builtins.bool) or not isinstance(pending, builtins.int) or pending < 0:
        raise CompilationError(f"tj.{name}(pending) needs a compile-time int >= 0 (the groups "
                               f"left in flight), got {pending!r}")


@builtin("cp_async_wait")
def cp_async_wait(pending=0, *, _sem):
    """Wait until at most ``pending`` (a compile-time int) of this thread's committed
    cp.async groups are still in flight; the others' copies have landed."""
    _pending_groups("cp_async_wait", pending)
    return _sem.b.cp_async_wait(pending)


@builtin("bulk_wait")
def bulk_wait(pending=0, read=False, *, _sem):
    """Wait until at most ``pending`` (a compile-time int) of this thread's bulk groups (each
    ``copy_async`` store of family ``tma`` is one) are still in flight: the others have
    written global memory, or with ``read=True`` read their shared tile (it may be reused)."""
    _pending_groups("bulk_wait", pending)
    if not isinstance(read, builtins.bool):
        raise CompilationError(f"tj.bulk_wait(read=) needs a compile-time bool, got {read!r}")
    return _sem.b.create("bulk_wait", attrs={"pending": pending, "read": read})


@builtin("fence_proxy_async")
def fence_proxy_async(*, _sem):
    """Order this thread's earlier shared-memory accesses before later asynchronous-proxy
    ones: threads that wrote a tile call it before the barrier after which one thread
    stores the tile with a tma ``copy_async``."""
    return _sem.b.create("fence_proxy_async")


@builtin("setmaxnreg")
def setmaxnreg(count, action, *, _sem):
    """Move this warpgroup's per-thread register limit to ``count`` (a compile-time multiple
    of 8 in [24, 256]): ``action="dec"`` gives registers back to the CTA's pool (a producer
    that only issues copies), ``"inc"`` claims them (consumers holding large accumulators;
    it waits until the pool has them). Run by whole warpgroups, under ``tj.warpgroup()``."""
    if isinstance(count, builtins.bool) or not isinstance(count, builtins.int):
        raise CompilationError(f"tj.setmaxnreg(count) needs a compile-time int, got {count!r}")
    if action not in ("inc", "dec"):
        raise CompilationError(f"tj.setmaxnreg(action) is \"inc\" or \"dec\", got {action!r}")
    return _sem.b.create("setmaxnreg", attrs={"count": count, "action": action})


# -------------------------------------------------------------------- execution scope
@dataclass(frozen=True)
class TeamSwitch:
    """``tj.warp()`` etc. inside a kernel; the ``with`` statement turns it into a ``team``."""

    kind: TeamKind


@dataclass(frozen=True)
class ThreadFilter:
    """``tj.tfilter(warp=(2, 4))``: keep threads whose ``axis`` id is in ``[lo, hi)``."""

    axis: str
    lo: int
    hi: int


_TFILTER_AXES = ("lane", "warp", "warp_in_wg", "warpgroup", "thread", "cta")


@builtin("tfilter")
def tfilter(*, _sem, **axis_range):
    """``with tj.tfilter(warp=(2, 4)):`` keeps warps 2 and 3; ``warp=2`` keeps warp 2."""
    if len(axis_range) != 1 or next(iter(axis_range)) not in _TFILTER_AXES:
        raise CompilationError("tj.tfilter takes exactly one keyword among "
                               f"{', '.join(_TFILTER_AXES)}, got {sorted(axis_range)}")
    (axis, bounds), = axis_range.items()
    if type(bounds) is int:
        bounds = (bounds, bounds + 1)
    if not (isinstance(bounds, tuple) and len(bounds) == 2
            and all(type(v) is int for v in bounds)):
        raise CompilationError(f"tj.tfilter({axis}=...) takes an int or a (lo, hi) pair of "
                               f"compile-time ints, got {bounds!r}")
    return ThreadFilter(axis, *bounds)

# Primitives reachable through a scope namespace (tj.wg.copy, tj.warp.reduce).
SCOPED_PRIMITIVES = ("copy", "copy_async", "gemm", "gemm_async", "reduce", "add", "sub", "mul",
                     "div", "maximum", "minimum", "exp", "exp2", "log", "sqrt", "rsqrt",
                     "neg", "abs", "fma", "cast", "fill", "select", "tanh", "sigmoid", "erf",
                     "sin", "cos", "floor", "ceil", "log2", "pow", "where", "rand", "randn",
                     "randint")


class TeamScope:
    """``tj.warp`` etc.: ``with tj.warp():`` switches the team kind; ``tj.warp.copy(...)``
    runs one primitive with that team kind."""

    __tj_builtin__ = "team"

    def __init__(self, name: str, kind: TeamKind):
        self.name = name
        self.kind = kind

    def __call__(self, _sem=None):
        if _sem is None:
            raise _outside_kernel(f"tj.{self.name}")
        return TeamSwitch(self.kind)

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in SCOPED_PRIMITIVES:
            raise AttributeError(f"tj.{self.name} has no primitive {name!r} "
                                 f"(scoped primitives: {', '.join(SCOPED_PRIMITIVES)})")
        return ScopedPrimitive(f"{self.name}.{name}", globals()[name], self.kind)

    def __repr__(self) -> str:
        return f"tj.{self.name}"


class ScopedPrimitive:
    """``tj.wg.copy``: the primitive ``copy`` with its ``team`` attribute set."""

    def __init__(self, name: str, primitive, kind: TeamKind):
        self.__tj_builtin__ = name
        self.primitive = primitive
        self.kind = kind

    def __call__(self, *args, _sem=None, **kwargs):
        if _sem is None:
            raise _outside_kernel(f"tj.{self.__tj_builtin__}")
        return self.primitive(*args, _sem=_sem.with_team(self.kind), **kwargs)


thread = TeamScope("thread", TeamKind.THREAD)
warp = TeamScope("warp", TeamKind.WARP)
warpgroup = TeamScope("warpgroup", TeamKind.WARPGROUP)
wg = TeamScope("wg", TeamKind.WARPGROUP)
cta = TeamScope("cta", TeamKind.CTA)
cluster = TeamScope("cluster", TeamKind.CLUSTER)


# --------------------------------------------------------------------- tile primitives
@builtin("copy")
def copy(dst, src, *, mask=None, other=None, dispatch=None, config=None, _sem):
    """``dst <- src``. Where ``mask`` (a bool tile broadcasting to dst, or a bool scalar) is
    False, a tile on chip takes ``other`` (default 0) and a tensor is not written; ``other``
    is also what source elements past the end of their tensor read as."""
    return _sem.tile.copy(dst, src, None, dispatch, config, mask=mask, other=other)


@builtin("arange")
def arange(start, end, *, _sem):
    """A new 1-D int32 fragment holding ``start .. end - 1`` (compile-time bounds, any
    length), like Triton's ``tl.arange``."""
    return _sem.tile.arange(start, end)


# ------------------------------------------------ building, converting and indexing tiles
@builtin("zeros")
def zeros(shape, dtype, *, _sem):
    """A new fragment of ``shape`` (compile-time sizes, any) holding 0, like ``tl.zeros``."""
    return _sem.tile.full(shape, 0, dtype, "zeros")


@builtin("full")
def full(shape, value, dtype, *, _sem):
    """A new fragment of ``shape`` holding ``value`` (a scalar), like ``tl.full``."""
    return _sem.tile.full(shape, value, dtype, "full")


@builtin("trans")
def trans(x, *dims, _sem):
    """``x`` transposed (2-D), or its dims in the order ``dims``, as a new fragment."""
    return _sem.tile.permute(x, dims, "trans")


@builtin("permute")
def permute(x, *dims, _sem):
    """``x`` with its dims in the order ``dims`` (``numpy.transpose``), as a new fragment."""
    return _sem.tile.permute(x, dims, "permute")


@builtin("broadcast_to")
def broadcast_to(x, shape, *, _sem):
    """A new fragment of ``shape`` holding ``x`` broadcast like numpy."""
    return _sem.tile.broadcast_to(x, shape)


@builtin("expand_dims")
def expand_dims(x, axis, *, _sem):
    """``x`` with a size-1 dim inserted at ``axis`` (an int or a tuple): ``x[:, None]``."""
    return _sem.tile.expand_dims(x, axis)


@builtin("reshape")
def reshape(x, shape, *, _sem):
    """``x``'s elements, in row-major order, with the shape ``shape``."""
    return _sem.tile.reshape(x, shape)


@builtin("gather")
def gather(*args, axis=None, other=None, dispatch=None, config=None, _sem):
    """``tj.gather(src, index, axis)`` returns a new fragment, ``tj.gather(dst, src, index,
    axis)`` writes dst: ``torch.gather`` along ``axis``; ``other`` (default 0) where an
    index is outside ``src``."""
    return _sem.tile.gather(args, axis, other, dispatch, config)


@builtin("scatter")
def scatter(dst, index, src, axis, *, dispatch=None, config=None, _sem):
    """``dst[... index[j] ...] = src[j]`` along ``axis`` (``torch.Tensor.scatter_``), in
    row-major order (the last of duplicate indices wins); out-of-range indices are skipped."""
    return _sem.tile.scatter(dst, index, src, axis, dispatch, config)


@builtin("copy_async")
def copy_async(dst, src, barrier=None, *, dispatch=None, config=None, multicast=None, _sem):
    """``multicast=mask`` (a TMA load): the tile lands in every CTA of the cluster whose
    rank's bit is set, at dst's offset, and completes on each one's barrier."""
    return _sem.tile.copy(dst, src, barrier, dispatch, config, is_async=True,
                          multicast=multicast)


@builtin("gemm")
def gemm(C, A, B, transpose_a=False, transpose_b=False, accum=True, *, dispatch=None,
         config=None, _sem):
    return _sem.tile.gemm(C, A, B, transpose_a, transpose_b, accum, dispatch, config)


@builtin("gemm_async")
def gemm_async(C, A, B, transpose_a=False, transpose_b=False, accum=True, *, barrier=None,
               dispatch=None, config=None, wait=True, _sem):
    return _sem.tile.gemm(C, A, B, transpose_a, transpose_b, accum, dispatch, config,
                          is_async=True, wait=wait, barrier=barrier)


@builtin("wgmma_wait")
def wgmma_wait(pending=0, *, _sem):
    """Wait until at most ``pending`` (a compile-time int) of the wgmma groups that
    ``tj.gemm_async(..., dispatch="wgmma", wait=False)`` left in flight are still pending:
    the older groups' accumulators are written and their shared operands free."""
    _pending_groups("wgmma_wait", pending)
    return _sem.b.create("wgmma_wait", (), {"pending": pending})


@builtin("reduce")
def reduce(dst, src, op=None, axis=None, *, dispatch=None, config=None, _sem):
    # op and axis default to None only so that a forgotten dst (tj.reduce(a, "max", axis=1))
    # gets the semantics' explanation instead of "missing a required argument".
    return _sem.tile.reduce(dst, src, op, axis, dispatch, config)


def _pointwise_builtin(op: str, name: str | None = None):
    """``tj.<name>(dst, *srcs)`` writes ``dst``; ``tj.<name>(*srcs)`` returns a new fragment
    (or, on scalars, a scalar); ``name`` is ``op`` unless it is an alias."""
    def fn(*args, dispatch=None, config=None, _sem):
        return _sem.tile.pointwise_call(op, args, dispatch, config)
    fn.__name__ = name or op
    return builtin(name or op)(fn)


add, sub, mul, div = (_pointwise_builtin(op) for op in ("add", "sub", "mul", "div"))
maximum, minimum = _pointwise_builtin("maximum"), _pointwise_builtin("minimum")
exp, exp2, log = _pointwise_builtin("exp"), _pointwise_builtin("exp2"), _pointwise_builtin("log")
sqrt, rsqrt = _pointwise_builtin("sqrt"), _pointwise_builtin("rsqrt")
neg, abs = _pointwise_builtin("neg"), _pointwise_builtin("abs")
fma, cast, fill = _pointwise_builtin("fma"), _pointwise_builtin("cast"), _pointwise_builtin("fill")
select = _pointwise_builtin("select")
where = _pointwise_builtin("select", "where")    # Triton's spelling of select
tanh, sigmoid, erf = (_pointwise_builtin(op) for op in ("tanh", "sigmoid", "erf"))
sin, cos, log2 = (_pointwise_builtin(op) for op in ("sin", "cos", "log2"))
floor, ceil, pow = (_pointwise_builtin(op) for op in ("floor", "ceil", "pow"))
# Philox 4x32-10 counter-based random numbers (docs/language.md): tj.rand(seed, offsets)
rand, randn = _pointwise_builtin("rand"), _pointwise_builtin("randn")
randint = _pointwise_builtin("randint")


# ------------------------------------------------------ reductions and scans (expressions)
# These shadow Python's sum/max/min in this module: code here must call builtins.max etc.
@builtin("sum")
def sum(x, axis=None, keep_dims=False, *, dtype=None, dispatch=None, config=None, _sem):
    """``tj.sum(x, axis=None, keep_dims=False, dtype=None)``: a new fragment (docs/language.md)."""
    return _sem.tile.reduction("sum", x, axis, keep_dims, dtype, dispatch, config)


@builtin("max")
def max(x, axis=None, keep_dims=False, *, dispatch=None, config=None, _sem):
    """``tj.max(x, axis)`` reduces ``x``; ``tj.maximum(a, b)`` is the elementwise one."""
    return _sem.tile.reduction("max", x, axis, keep_dims, None, dispatch, config)


@builtin("min")
def min(x, axis=None, keep_dims=False, *, dispatch=None, config=None, _sem):
    """``tj.min(x, axis)`` reduces ``x``; ``tj.minimum(a, b)`` is the elementwise one."""
    return _sem.tile.reduction("min", x, axis, keep_dims, None, dispatch, config)


@builtin("argmax")
def argmax(x, axis, keep_dims=False, *, dispatch=None, config=None, _sem):
    """i32 index of the largest element along ``axis`` (the lowest on ties; NaN is largest)."""
    return _sem.tile.reduction("argmax", x, axis, keep_dims, None, dispatch, config)


@builtin("argmin")
def argmin(x, axis, keep_dims=False, *, dispatch=None, config=None, _sem):
    """i32 index of the smallest element along ``axis`` (the lowest on ties; NaN is smallest)."""
    return _sem.tile.reduction("argmin", x, axis, keep_dims, None, dispatch, config)


@builtin("cumsum")
def cumsum(x, axis=0, *, dtype=None, dispatch=None, config=None, _sem):
    """Inclusive prefix sums along ``axis``: a new fragment of ``x``'s shape."""
    return _sem.tile.scan("cumsum", "sum", x, axis, dtype, dispatch, config)


@builtin("cumprod")
def cumprod(x, axis=0, *, dtype=None, dispatch=None, config=None, _sem):
    """Inclusive prefix products along ``axis``: a new fragment of ``x``'s shape."""
    return _sem.tile.scan("cumprod", "prod", x, axis, dtype, dispatch, config)


# A combine function given as a builtin -> the scan op it is.
_SCAN_COMBINES = {"add": "sum", "mul": "prod", "maximum": "max", "minimum": "min"}


@builtin("associative_scan")
def associative_scan(x, axis, combine, *, dispatch=None, config=None, _sem):
    """Inclusive scan along ``axis`` with ``combine``: ``tj.add``, ``tj.mul``,
    ``tj.maximum``, ``tj.minimum`` (or their names ``"sum"``, ``"prod"``, ``"max"``,
    ``"min"``), which are one ``tile.scan``, or an associative ``@tj.func`` of two tiles."""
    if isinstance(combine, DeviceFunction):
        return _sem.tile.custom_scan(x, axis, combine, dispatch, config)
    op = _SCAN_COMBINES.get(getattr(combine, "__tj_builtin__", None), combine)
    return _sem.tile.scan("associative_scan", op, x, axis, None, dispatch, config)


# ------------------------------------------------------- atomics and warp shuffles
def _atomic_builtin(op: str):
    """``tj.atomic_<op>(buf[i, j], val)`` updates one element and returns its old value;
    ``tj.atomic_<op>(out[r:r + BM, c:c + BN], tile)`` updates each element of a tile (docs/
    language.md). ``sem=`` is the memory order, ``scope=`` who must see it, as in Triton."""
    def fn(place, val, *, sem="acq_rel", scope="gpu", _sem):
        return _sem.memory.atomic(op, place, val, sem=sem, scope=scope)
    fn.__name__ = f"atomic_{op}"
    atomic = builtin(fn.__name__)(fn)
    atomic.__tj_place__ = True  # the walker passes `buf[i]` as the element, not its value
    return atomic


atomic_add, atomic_max = _atomic_builtin("add"), _atomic_builtin("max")
atomic_min, atomic_xchg = _atomic_builtin("min"), _atomic_builtin("xchg")


@builtin("atomic_cas")
def atomic_cas(place, cmp, val, *, sem="acq_rel", scope="gpu", _sem):
    """Stores ``val`` into the element ``buf[i, j]`` if it equals ``cmp``; the old value."""
    return _sem.memory.atomic("cas", place, val, cmp, sem=sem, scope=scope)


atomic_cas.__tj_place__ = True


@builtin("shuffle")
def shuffle(value, lane, mode="idx", *, _sem):
    """The ``value`` of another lane of the warp: lane ``lane`` (``"idx"``), ``lane_id ^
    lane`` (``"xor"``), ``lane_id + lane`` (``"down"``) or ``lane_id - lane`` (``"up"``);
    a source outside the warp reads the lane's own value, as CUDA's ``__shfl_*_sync``."""
    return _sem.shuffle(value, lane, mode)


# ------------------------------------------------------------------- raw intrinsics
class Intrinsic:
    """``tj.ptx.<name>(*args, dtype=None)``: an ``intrinsic`` op; ``dtype`` is its result."""

    def __init__(self, namespace: str, target: str, name: str):
        self.__tj_builtin__ = f"{namespace}.{name}"
        self.target = target
        self.name = name

    def __call__(self, *args, dtype=None, _sem=None):
        if _sem is None:
            raise _outside_kernel(f"tj.{self.__tj_builtin__}")
        return _sem.intrinsic(self.target, self.name, args, dtype)


class IntrinsicNamespace:
    def __init__(self, namespace: str, target: str):
        self._namespace = namespace
        self._target = target

    def __getattr__(self, name: str) -> Intrinsic:
        if name.startswith("__"):
            raise AttributeError(name)
        return Intrinsic(self._namespace, self._target, name)

    def __repr__(self) -> str:
        return f"tj.{self._namespace}"


ptx = IntrinsicNamespace("ptx", "cuda")
nki = IntrinsicNamespace("nki", "nki")


# ----------------------------------------------------------------------------- dtypes
# Assigned last: `bool` shadows the Python builtin from here on.
float16, bfloat16, float32, float64 = _types.f16, _types.bf16, _types.f32, _types.f64
float8_e4m3, float8_e5m2 = _types.f8e4m3, _types.f8e5m2
int8, int16, int32, int64, uint8 = _types.i8, _types.i16, _types.i32, _types.i64, _types.u8
bool = _types.i1
