"""``mma_sync`` on the CPU's per-thread (SIMT) units: a warp's tensor-core multiply-add.

Each lane widens its A, B and C fragment values to f32 and writes them into its warp's
exchange area (``emit_sync.warp_exchange``) at the matrix positions the PTX fragment
layouts give them (``layout/hw_nvidia.py``: the same layout objects the dispatch rule
reads, enumerated into one constant table of positions per (shape, lane, operand)). Once
the warp has met, the area holds the whole A (16xK), B (Kx8) and C (16x8) of the shape
(K = 16 for f16/bf16, 32 for e4m3/e5m2), and each lane computes its four D values
``C[r, c] + sum_k A[r, k] * B[k, c]`` in f32, k in order. An f16, bf16, e4m3 or e5m2
value is exact in f32 and so is the product of two of them (at most 2 x 11 significant
bits), so only the order of the additions can differ from a GPU's.

``ldmatrix_at`` meets the same way: each lane that supplies a row (``8 * num`` of them)
reads its row's 16 bytes (eight 16-bit or sixteen 8-bit elements) itself -- bounds,
16-byte alignment and the race detector see the read as that lane's -- and writes them
into the warp's area (matrix, row, column row-major); once the warp has met, each lane
takes its ``2 * num`` (16-bit) or ``4 * num`` (8-bit) values at the places
``layout/hw_nvidia.ldmatrix_layout`` gives it. ``stmatrix_at`` is its reverse: each lane
writes its ``2 * num`` values into the area at those places, and once the warp has met,
each lane that supplies a row stores the row's eight elements itself (the race detector
sees the writes as that lane's).
"""
from __future__ import annotations

from llvmlite import ir

from tilejit.errors import CompilationError
from tilejit.ir.ops_native import MMA_FRAGMENT_SIZES
from tilejit.ir.scope import LANES_PER_WARP
from tilejit.ir.ops_native import LDMATRIX_ROW, LDMATRIX_ROW_BYTES, ldmatrix_row, ldmatrix_values
from tilejit.layout import ldmatrix_layout
from tilejit.layout.fragments import MMA_SHAPES, lane_registers, mma_operand_layouts

from . import emit_memory, types
from .emit_sync import warp_exchange
from .types import F32, I32, I64, PTR

__all__ = ["HANDLERS", "constant_table", "table_entry"]


class _MmaArea:
    """A shape's exchange area, in f32 elements: A (M x K, row-major), then B (K x N),
    then C (M x N)."""

    def __init__(self, shape: str):
        self.shape = shape
        self.m, self.n, self.k = m, n, k = MMA_SHAPES[shape]
        self.a_at, self.b_at, self.c_at = 0, m * k, m * k + k * n
        self.elements = self.c_at + m * n
        self.operands_per_lane = sum(MMA_FRAGMENT_SIZES[shape])


def constant_table(mc, name: str, entries) -> ir.GlobalVariable:
    table = mc.module.globals.get(name)
    if table is None:
        entries = list(entries)
        table = ir.GlobalVariable(mc.module, ir.ArrayType(I32, len(entries)), name)
        table.initializer = ir.Constant(table.value_type, entries)
        table.linkage, table.global_constant = "internal", True
    return table


def _position_table(mc, area: _MmaArea, a_type, b_type) -> ir.GlobalVariable:
    """``table[lane * operands_per_lane + j]``: where operand ``j`` of ``lane`` goes in the
    area (the fragment layouts depend on the shape alone: e4m3 and e5m2 share theirs)."""
    m, n, k = area.m, area.n, area.k
    layouts = mma_operand_layouts(area.shape, a_type.name, b_type.name)
    per_operand = [(lane_registers(layout, shape), at) for layout, shape, at in
                   zip(layouts, ((m, k), (k, n), (m, n)), (area.a_at, area.b_at, area.c_at))]
    return constant_table(mc, f"tj.mma.{area.shape}.positions",
                           (at + index for lane in range(LANES_PER_WARP)
                            for registers, at in per_operand for index in registers[lane]))


def table_entry(em, table, index):
    b = em.b
    return b.load(b.gep(types.opaque(table), [b.zext(index, I64)], source_etype=I32), typ=I32)


def _require_whole_warp(em, what: str) -> None:
    active = em.state.active
    if active is None or active.elected or tuple(active.lanes) != (0, LANES_PER_WARP):
        where = "not known here" if active is None else active.describe()
        raise CompilationError(f"{what} needs all {LANES_PER_WARP} lanes of its warp; the "
                               f"active threads are {where}")


def _dot_function(mc, area: _MmaArea) -> ir.Function:
    """``tj.mma.<shape>.dot(area, c)``: ``C[c] + sum_k A[row, k] * B[k, col]`` for the
    C element ``c = row * N + col`` of a filled area, in f32."""
    name = f"tj.mma.{area.shape}.dot"
    N, K = area.n, area.k
    fn = mc.module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mc.module, ir.FunctionType(F32, [PTR, I32]), name)
    fn.linkage = "internal"
    values, c = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def element(index):
        return b.load(b.gep(values, [b.zext(index, I64)], source_etype=F32), typ=F32)

    row = b.udiv(c, ir.Constant(I32, N))
    col = b.urem(c, ir.Constant(I32, N))
    a_row = b.add(b.mul(row, ir.Constant(I32, K)), ir.Constant(I32, area.a_at))
    acc = element(b.add(c, ir.Constant(I32, area.c_at)))
    for k in range(K):
        a = element(b.add(a_row, ir.Constant(I32, k)))
        bk = element(b.add(col, ir.Constant(I32, area.b_at + k * N)))
        acc = b.fadd(acc, b.fmul(a, bk))
    b.ret(acc)
    return fn


def emit_mma_sync(em, op):
    _require_whole_warp(em, "mma_sync")
    units, b = em.mc.units, em.b   # thread units (units.py)
    lane = units.thread_index(b, "lane_id", em.frame.unit)
    places = _MmaArea(op.attrs["shape"])
    table = _position_table(em.mc, places, op.attrs["a_type"], op.attrs["b_type"])
    first = b.mul(lane, ir.Constant(I32, places.operands_per_lane))

    def position(j: int):
        return table_entry(em, table, b.add(first, ir.Constant(I32, j)))

    def deposit(area):
        for j, (value, value_type) in enumerate(zip(em.operands(op), op.operands)):
            slot = b.gep(area, [b.zext(position(j), I64)], source_etype=F32)
            b.store(types.widen(b, value, value_type.type), slot)

    area = warp_exchange(em, op, f"mma.{places.shape}", places.elements * 4, deposit,
                         "mma_sync")
    c_first = places.operands_per_lane - len(op.results)
    dot = _dot_function(em.mc, places)
    return [b.call(dot, [area, b.sub(position(c_first + i), ir.Constant(I32, places.c_at))])
            for i in range(len(op.results))]


class _MatrixArea:
    """An ldmatrix's or stmatrix's warp area (the ``num`` 8x8 matrices, row-major) as this
    lane sees it: its row, and the places of its ``2 * num`` values."""

    def __init__(self, em, op):
        _require_whole_warp(em, op.name.removesuffix("_at"))
        self.em, self.b, num, trans = em, em.b, op.attrs["num"], op.attrs["trans"]
        self.dtype = dtype = op.operands[0].type.dtype
        row_length, size = ldmatrix_row(dtype), dtype.itemsize
        self.lane = em.mc.units.thread_index(self.b, "lane_id", em.frame.unit)
        self.supplies = self.b.icmp_unsigned("<", self.lane, ir.Constant(I32, LDMATRIX_ROW * num))
        self.row = self.b.mul(self.lane, ir.Constant(I32, row_length))
        registers = lane_registers(ldmatrix_layout(num, trans, size),
                                   (num, LDMATRIX_ROW, row_length))
        self.table = constant_table(em.mc, f"tj.ldmatrix.x{num}{'.trans' if trans else ''}"
                                     f".b{8 * size}.places",
                                     (place for lane in registers for place in lane))
        self.first = self.b.mul(self.lane, ir.Constant(I32, ldmatrix_values(dtype, num)))
        self.nbytes = LANES_PER_WARP * LDMATRIX_ROW_BYTES

    def slot(self, area, index):
        return self.b.gep(area, [self.b.zext(index, I64)],
                          source_etype=types.storage_type(self.dtype))

    def row_slot(self, area, k: int):
        return self.slot(area, self.b.add(self.row, ir.Constant(I32, k)))

    def value_slot(self, area, i: int):
        b = self.b
        return self.slot(area, table_entry(self.em, self.table,
                                            b.add(self.first, ir.Constant(I32, i))))


def emit_ldmatrix_at(em, op):
    area_of = _MatrixArea(em, op)
    b, dtype = em.b, area_of.dtype

    def deposit(area):
        with b.if_then(area_of.supplies):
            _, ptrs = emit_memory.run(em, op)
            for k, ptr in enumerate(ptrs):
                types.store(b, types.load(b, ptr, dtype), area_of.row_slot(area, k), dtype)

    area = warp_exchange(em, op, "ldmatrix", area_of.nbytes, deposit, "ldmatrix")
    return [types.load(b, area_of.value_slot(area, i), dtype)
            for i in range(len(op.results))]


def emit_stmatrix_at(em, op):
    area_of = _MatrixArea(em, op)
    b, dtype = em.b, area_of.dtype

    def deposit(area):
        for i, value in enumerate(em.operands(op)[2:]):
            types.store(b, value, area_of.value_slot(area, i), dtype)

    area = warp_exchange(em, op, "stmatrix", area_of.nbytes, deposit, "stmatrix")
    with b.if_then(area_of.supplies):
        _, ptrs = emit_memory.run(em, op)
        for k, ptr in enumerate(ptrs):
            types.store(b, types.load(b, area_of.row_slot(area, k), dtype), ptr, dtype)
    return []


HANDLERS = {"mma_sync": emit_mma_sync, "ldmatrix_at": emit_ldmatrix_at,
            "stmatrix_at": emit_stmatrix_at}
