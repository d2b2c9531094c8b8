"""A reference executor for native tilejit IR, for tests.

CTAs run one after another; the threads of a CTA run in lockstep, SIMT style: every scalar
SSA value is a numpy vector with one entry per thread and control flow runs under an
active mask (a ``for`` whose bounds differ per thread iterates until every thread is done;
an ``if`` runs both branches under complementary masks). That makes per-thread code,
``warp_shuffle``, ``mma_sync``, ``ldmatrix``, ``stmatrix`` and ``sync`` exact, and
``single {team}`` runs its region on the first active thread of each team instance.

Storage: global buffers are the numpy arrays passed in (indexed logically; every access is
bounds-checked, which is how tests catch missing masks); shared buffers are flat memory
addressed through their layout's ``m`` coordinate (swizzles and replicas included, a store
writes every copy); fragment and local buffers are logical, one copy per instance of the
team kind in force where they are allocated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilejit.ir.core import Block, KernelIR, Operation
from tilejit.ir.scope import LANES_PER_WARP, WARPS_PER_WARPGROUP
from tilejit.ir.types import BufferType, MemScope, RegionType, ScalarType, TeamKind
from tilejit.layout.fragments import MMA_SHAPES, lane_registers, mma_operand_layouts

__all__ = ["ExecError", "numpy_dtype", "run_kernel"]

_NUMPY = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
          "f16": np.float16, "f32": np.float32, "f64": np.float64,
          "f8e4m3": np.float32, "f8e5m2": np.float32}   # 8-bit floats: exact in f32
_FP8_TORCH = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


class ExecError(RuntimeError):
    """The IR did something undefined (out-of-bounds access, divergent sync...)."""


def numpy_dtype(t: ScalarType):
    return np.dtype(_NUMPY[t.name])


def as_type(values, t: ScalarType) -> np.ndarray:
    """``values`` as numpy holds a ``t``: 8-bit floats are f32 arrays of values rounded to
    the type (by torch's conversion, the CPU target's and the GPU's)."""
    converted = np.asarray(values).astype(numpy_dtype(t))
    if t.name not in _FP8_TORCH:
        return converted
    import torch
    rounded = torch.from_numpy(converted).to(getattr(torch, _FP8_TORCH[t.name]))
    return rounded.float().numpy()


@dataclass
class _Buffer:
    data: np.ndarray  # flat storage
    shape: tuple  # logical shape
    dtype: np.dtype
    tables: list | None = None  # per replica: logical flat index -> storage position
    instance: np.ndarray | None = None  # thread -> copy, for team-scoped storage
    size: int = 0  # elements per copy

    def positions(self, flat: np.ndarray, all_copies: bool = False) -> list[np.ndarray]:
        if self.tables is None:
            base = [flat]
        else:
            base = [t[flat] for t in (self.tables if all_copies else self.tables[:1])]
        if self.instance is not None:
            base = [p + self.instance * self.size for p in base]
        return base


@dataclass
class _Region:
    buffer: _Buffer
    starts: list
    sizes: tuple
    keep: tuple


def _layout_tables(layout, shape) -> list[np.ndarray] | None:
    if layout is None:
        return None
    n = math.prod(shape)
    copies = [layout.locations(i) for i in range(n)]
    width = max(len(c) for c in copies)
    return [np.array([c[min(k, len(c) - 1)].get("m", 0) for c in copies], dtype=np.int64)
            for k in range(width)]


class _CTA:
    def __init__(self, kernel: KernelIR, cta: tuple, grid: tuple):
        self.kernel = kernel
        self.threads = kernel.attrs["num_warps"] * LANES_PER_WARP
        self.tid = np.arange(self.threads)
        self.cta, self.grid = cta, grid
        self.env: dict = {}
        self.team = [TeamKind.CTA]

    # ------------------------------------------------------------------ helpers
    def full(self, value, t) -> np.ndarray:
        return np.full(self.threads, value, dtype=numpy_dtype(t))

    def instance_ids(self, kind: TeamKind) -> np.ndarray:
        return {TeamKind.THREAD: self.tid, TeamKind.WARP: self.tid // LANES_PER_WARP,
                TeamKind.WARPGROUP: self.tid // (LANES_PER_WARP * WARPS_PER_WARPGROUP)
                }.get(kind, np.zeros(self.threads, dtype=np.int64))

    def run_block(self, block: Block, args, mask) -> list:
        for value, arg in zip(block.args, args):
            self.env[value] = arg
        for op in block.ops:
            if op.opdef.terminator:  # yield(values) / condition(cond, values): cond last
                values = [self.env[v] for v in op.operands]
                return values[1:] + values[:1] if op.name == "condition" else values
            results = getattr(self, "op_" + op.name.replace(".", "_"), self.unknown)(op, mask)
            for value, result in zip(op.results, results or ()):
                self.env[value] = result
        return []

    def unknown(self, op: Operation, mask):
        raise ExecError(f"the executor does not run {op.name} (at {op.loc})")

    def args(self, op):
        return [self.env[v] for v in op.operands]

    # ------------------------------------------------------------------ scalars
    def op_const(self, op, mask):
        return [self.full(op.attrs["value"], op.result.type)]

    def op_binary(self, op, mask):
        a, b = self.args(op)
        name, t = op.attrs["op"], op.result.type
        with np.errstate(all="ignore"):
            if name in ("div", "floordiv", "mod") and t.is_int:
                safe = np.where(b == 0, 1, b)
                if name == "div":  # C semantics: truncate toward zero
                    q = np.abs(a) // np.abs(safe)
                    r = np.where((a < 0) != (safe < 0), -q, q)
                else:
                    r = a // safe if name == "floordiv" else np.mod(a, safe)
                r = np.where(b == 0, 0, r)  # an integer division by zero gives 0
            elif name == "floordiv":
                r = np.floor_divide(a, b)
            elif name == "pow":
                r = np.power(a, b)
            else:
                r = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                     "div": np.divide, "mod": np.mod, "max": np.maximum, "min": np.minimum,
                     "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                     "shl": np.left_shift, "shr": np.right_shift}[name](a, b)
        return [as_type(r, t)]

    def op_packed_binary(self, op, mask):
        """Each lane of the pair as ``binary`` computes it (numpy's maximum/minimum
        propagate NaN, as the op's do)."""
        a0, a1, b0, b1 = self.args(op)
        binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
                  "min": np.minimum}[op.attrs["op"]]
        with np.errstate(all="ignore"):
            return [as_type(binary(a, b), op.results[0].type) for a, b in ((a0, b0), (a1, b1))]

    def op_packed_unary(self, op, mask):
        unary = {"neg": np.negative, "abs": np.abs}[op.attrs["op"]]
        return [as_type(unary(a), op.results[0].type) for a in self.args(op)]

    def op_packed_cast(self, op, mask):
        with np.errstate(all="ignore"):
            return [as_type(x, op.attrs["to"]) for x in self.args(op)]

    def op_unary(self, op, mask):
        (x,), name = self.args(op), op.attrs["op"]
        with np.errstate(all="ignore"):
            r = {"neg": np.negative, "not": np.invert, "abs": np.abs, "exp": np.exp,
                 "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
                 "rsqrt": lambda v: 1 / np.sqrt(v), "sin": np.sin, "cos": np.cos,
                 "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil,
                 "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
                 "erf": np.vectorize(math.erf, otypes=[np.float64])}[name](x)
        return [as_type(r, op.result.type)]

    def op_cmp(self, op, mask):
        a, b = self.args(op)
        fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
              "gt": np.greater, "ge": np.greater_equal}[op.attrs["pred"]]
        return [fn(a, b)]

    def op_select(self, op, mask):
        c, a, b = self.args(op)
        return [np.where(c, a, b)]

    def op_cast(self, op, mask):
        (x,), to = self.args(op), op.attrs["to"]
        with np.errstate(all="ignore"):
            return [x != 0 if to.is_bool else as_type(x, to)]

    def op_thread_index(self, op, mask):
        kind, dim = op.attrs["kind"], op.attrs["dim"]
        values = {"cta_id": self.cta[dim] if dim < len(self.cta) else 0,
                  "num_ctas": self.grid[dim] if dim < len(self.grid) else 1,
                  "warpgroup_id": self.tid // (LANES_PER_WARP * WARPS_PER_WARPGROUP),
                  "warp_id": self.tid // LANES_PER_WARP,
                  "warp_id_in_wg": (self.tid // LANES_PER_WARP) % WARPS_PER_WARPGROUP,
                  "lane_id": self.tid % LANES_PER_WARP, "thread_id": self.tid,
                  "cta_id_in_cluster": 0, "num_threads": self.threads}[kind]
        return [np.broadcast_to(np.asarray(values, dtype=np.int32), (self.threads,)).copy()]

    # ------------------------------------------------------------------ memory
    def op_alloc(self, op, mask):
        t: BufferType = op.result.type
        size = math.prod(t.shape)
        dtype = numpy_dtype(t.dtype)
        if t.scope is MemScope.SHARED:
            tables = _layout_tables(t.layout, t.shape)
            span = size if tables is None else int(max(tab.max() for tab in tables)) + 1
            return [_Buffer(np.zeros(span, dtype), t.shape, dtype, tables)]
        kind = TeamKind.THREAD if t.scope is MemScope.LOCAL else self.team[-1]
        ids = self.instance_ids(kind)
        data = np.zeros((int(ids.max()) + 1) * size, dtype)
        return [_Buffer(data, t.shape, dtype, None, ids, size)]

    def op_view(self, op, mask):
        (buf,), t = self.args(op), op.result.type
        # Team-scoped copies are logical (a view reshapes them); memory goes through the
        # view's own layout.
        tables = None if buf.instance is not None else _layout_tables(t.layout, t.shape)
        return [_Buffer(buf.data, t.shape, buf.dtype, tables, buf.instance, buf.size)]

    def op_region(self, op, mask):
        buf, *starts = self.args(op)
        return [_Region(buf, starts, op.attrs["sizes"], op.attrs["keep"])]

    def op_buffer_dim(self, op, mask):
        (ref,) = self.args(op)
        dim = op.attrs["dim"]
        if isinstance(ref, _Region):
            dims = [n for n, k in zip(ref.sizes, ref.keep) if k]
            return [self.full(dims[dim], op.result.type)]
        return [self.full(ref.shape[dim], op.result.type)]

    def _locate(self, op, ref, indices, mask):
        """(buffer, flat logical index per thread) with every active access checked."""
        indices = [np.asarray(i, dtype=np.int64) for i in indices]
        if isinstance(ref, _Region):
            kept = iter(indices)
            full = []
            for start, size, keep in zip(ref.starts, ref.sizes, ref.keep):
                i = next(kept) if keep else np.zeros(self.threads, dtype=np.int64)
                bad = mask & ((i < 0) | (i >= size))
                if bad.any():
                    raise ExecError(f"{op.name} at {op.loc}: index {i[bad][0]} outside the "
                                    f"region size {size}")
                full.append(start.astype(np.int64) + i)
            ref, indices = ref.buffer, full
        for d, (i, n) in enumerate(zip(indices, ref.shape)):
            bad = mask & ((i < 0) | (i >= n))
            if bad.any():
                raise ExecError(f"{op.name} at {op.loc}: index {i[bad][0]} out of bounds for "
                                f"dim {d} of extent {n} (thread {np.flatnonzero(bad)[0]})")
        flat = np.zeros(self.threads, dtype=np.int64)
        for i, n in zip(indices, ref.shape):
            flat = flat * n + np.where(mask, i, 0)
        return ref, flat

    def op_load(self, op, mask):
        ref, *indices = self.args(op)
        buf, flat = self._locate(op, ref, indices, mask)
        (pos,) = buf.positions(flat)
        out = np.zeros(self.threads, dtype=buf.dtype)
        out[mask] = buf.data[pos[mask]]
        return [out]

    def op_store(self, op, mask):
        ref, value, *indices = self.args(op)
        buf, flat = self._locate(op, ref, indices, mask)
        for pos in buf.positions(flat, all_copies=True):
            buf.data[pos[mask]] = value[mask]

    def op_atomic(self, op, mask):
        ref, value, *indices = self.args(op)
        buf, flat = self._locate(op, ref, indices, mask)
        (pos,) = buf.positions(flat)
        old = np.zeros(self.threads, dtype=buf.dtype)
        fn = {"add": lambda a, b: a + b, "max": max, "min": min, "xchg": lambda a, b: b}
        for t in np.flatnonzero(mask):
            old[t] = buf.data[pos[t]]
            buf.data[pos[t]] = fn[op.attrs["op"]](buf.data[pos[t]], value[t])
        return [old]

    # ------------------------------------------------------------------ sync
    def op_sync(self, op, mask):
        if not mask.all():
            raise ExecError(f"sync at {op.loc} reached by {mask.sum()} of {self.threads} "
                            "threads: the others would deadlock")

    def op_warp_shuffle(self, op, mask):
        value, lane = self.args(op)
        mine, warp = self.tid % LANES_PER_WARP, self.tid - self.tid % LANES_PER_WARP
        src = {"xor": mine ^ lane, "down": mine + lane, "up": mine - lane,
               "idx": lane}[op.attrs["mode"]]
        src = np.where((src >= 0) & (src < LANES_PER_WARP), src, mine) + warp
        if not mask[src[mask]].all():
            raise ExecError(f"warp_shuffle at {op.loc} reads an inactive lane")
        return [value[src]]

    def op_mma_sync(self, op, mask):
        """Each warp's ``D = A @ B + C``, its lanes' values placed by the PTX fragment
        layouts; every lane of a warp takes part."""
        rows, cols, depth = MMA_SHAPES[op.attrs["shape"]]
        shapes = ((rows, depth), (depth, cols), (rows, cols))
        layouts = mma_operand_layouts(op.attrs["shape"], op.attrs["a_type"].name,
                                      op.attrs["b_type"].name)
        places = [lane_registers(layout, shape) for layout, shape in zip(layouts, shapes)]
        values, results = self.args(op), [self.full(0.0, t) for t in op.result_types]
        for first in range(0, self.threads, LANES_PER_WARP):
            lanes = slice(first, first + LANES_PER_WARP)
            if not mask[lanes].all():
                raise ExecError(f"mma_sync at {op.loc} with inactive lanes in its warp")
            matrices, given = [], iter(values)
            for shape, place in zip(shapes, places):
                flat = np.zeros(shape[0] * shape[1])
                for i in range(len(place[0])):
                    flat[[regs[i] for regs in place]] = next(given)[lanes]
                matrices.append(flat.reshape(shape))
            a, b, c = matrices
            d = (a @ b + c).reshape(-1)
            for i, result in enumerate(results):
                result[lanes] = d[[regs[i] for regs in places[2]]]
        return results

    def op_ldmatrix(self, op, mask):
        """Each warp's matrices of 8 rows of 16 bytes (PTX ISA "ldmatrix", restated apart
        from the layout object): lane ``8j + r`` names row ``r`` of matrix ``j``, ``w``
        elements along the last dim from its indices (8 of 16 bits, 16 of 8 bits); with
        ``p = w // 4`` elements to a 32-bit register, lane ``4g + q`` gets elements ``pq ..
        pq + p - 1`` of row ``g`` of each matrix -- of column ``g``, rows ``2q`` and
        ``2q + 1``, with ``.trans`` (16-bit only)."""
        ref, *indices = self.args(op)
        num, trans = op.attrs["num"], op.attrs["trans"]
        width = 16 // op.operands[0].type.dtype.itemsize
        per = width // 4
        lane = self.tid % LANES_PER_WARP
        supplies = mask & (lane < 8 * num)
        row = np.zeros((width, self.threads))
        for e in range(width):
            buf, flat = self._locate(op, ref, [*indices[:-1], indices[-1] + e], supplies)
            (pos,) = buf.positions(flat)
            row[e, supplies] = buf.data[pos[supplies]]
        results = [self.full(0, t) for t in op.result_types]
        for first in range(0, self.threads, LANES_PER_WARP):
            if not mask[first:first + LANES_PER_WARP].all():
                raise ExecError(f"ldmatrix at {op.loc} with inactive lanes in its warp")
            matrices = row[:, first:first + 8 * num].T.reshape(num, 8, width)   # [j, r, e]
            for t in range(first, first + LANES_PER_WARP):
                g, q = (t - first) // 4, (t - first) % 4
                for i, result in enumerate(results):
                    j, part = divmod(i, per)
                    result[t] = matrices[j, per * q + part, g] if trans \
                        else matrices[j, g, per * q + part]
        return results

    def op_stmatrix(self, op, mask):
        """op_ldmatrix's store (PTX ISA "stmatrix", restated apart from the layout object):
        lane ``4g + q`` passes elements ``2q`` and ``2q + 1`` of row ``g`` of each matrix
        (of column ``g``, rows ``2q`` and ``2q + 1``, with ``.trans``); lane ``8j + r``
        stores row ``r`` of matrix ``j``, eight elements along the last dim from its
        indices."""
        num, trans = op.attrs["num"], op.attrs["trans"]
        ref, *rest = self.args(op)
        values, indices = rest[:2 * num], rest[2 * num:]
        lane = self.tid % LANES_PER_WARP
        supplies = mask & (lane < 8 * num)
        row = np.zeros((8, self.threads))
        for first in range(0, self.threads, LANES_PER_WARP):
            if not mask[first:first + LANES_PER_WARP].all():
                raise ExecError(f"stmatrix at {op.loc} with inactive lanes in its warp")
            matrices = np.zeros((num, 8, 8))   # [j, r, e]
            for t in range(first, first + LANES_PER_WARP):
                g, q = (t - first) // 4, (t - first) % 4
                for i, value in enumerate(values):
                    j, half = divmod(i, 2)
                    if trans:
                        matrices[j, 2 * q + half, g] = value[t]
                    else:
                        matrices[j, g, 2 * q + half] = value[t]
            row[:, first:first + 8 * num] = matrices.reshape(8 * num, 8).T
        for e in range(8):
            buf, flat = self._locate(op, ref, [*indices[:-1], indices[-1] + e], supplies)
            for pos in buf.positions(flat, all_copies=True):
                buf.data[pos[supplies]] = row[e, supplies]

    def op_device_print(self, op, mask):
        return None

    # ------------------------------------------------------------------ control flow
    def op_for(self, op, mask):
        lb, ub, step, *carried = self.args(op)
        iv = lb.copy()
        while True:
            live = mask & (iv < ub)
            if not live.any():
                return carried
            new = self.run_block(op.regions[0], [iv, *carried], live)
            carried = [np.where(live, n, c) for n, c in zip(new, carried)]
            iv = np.where(live, iv + step, iv)

    def op_if(self, op, mask):
        (cond,) = self.args(op)
        results = [np.zeros(self.threads, dtype=numpy_dtype(t)) for t in op.result_types]
        for region, branch in ((op.regions[0], mask & cond), (op.regions[1], mask & ~cond)):
            if branch.any():
                values = self.run_block(region, [], branch)
                results = [np.where(branch, v, r) for v, r in zip(values, results)]
        return results

    def op_while(self, op, mask):
        carried, live = self.args(op), mask.copy()
        while True:
            *values, cond = self.run_block(op.regions[0], carried, live)
            carried = [np.where(live, v, c) for v, c in zip(values, carried)]
            live = live & cond
            if not live.any():
                return carried
            new = self.run_block(op.regions[1], carried, live)
            carried = [np.where(live, n, c) for n, c in zip(new, carried)]

    def op_team(self, op, mask):
        self.team.append(op.attrs["kind"])
        try:
            return self.run_block(op.regions[0], [], mask)
        finally:
            self.team.pop()

    def op_single(self, op, mask):
        ids = self.instance_ids(op.attrs["team"])
        active = np.flatnonzero(mask)
        _, first = np.unique(ids[active], return_index=True)
        leaders = np.zeros(self.threads, dtype=bool)
        leaders[active[first]] = True
        self.team.append(op.attrs["team"])
        try:
            self.run_block(op.regions[0], [], leaders)
        finally:
            self.team.pop()


def run_kernel(kernel: KernelIR, args: dict, grid=(1,)) -> None:
    """Run ``kernel`` over ``grid``; global buffer arguments (numpy arrays) are updated."""
    grid = tuple(grid)
    for cta in np.ndindex(*grid):
        state = _CTA(kernel, cta, grid)
        values = []
        for param, name in zip(kernel.params, kernel.param_names):
            arg = args[name]
            if isinstance(param.type, BufferType):
                if arg.dtype != numpy_dtype(param.type.dtype) or not arg.flags.c_contiguous:
                    raise ExecError(f"argument {name} must be a C-contiguous "
                                    f"{param.type.dtype} array")
                values.append(_Buffer(arg.reshape(-1), arg.shape, arg.dtype))
            elif isinstance(param.type, RegionType):
                raise ExecError("region parameters are not supported")
            else:
                values.append(state.full(arg, param.type))
        state.run_block(kernel.body, values, np.ones(state.threads, dtype=bool))
