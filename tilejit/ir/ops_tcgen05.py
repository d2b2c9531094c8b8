"""Catalogue entries: Blackwell's fifth-generation tensor-core ops (PTX ``tcgen05``) and the
tensor memory (TMEM) they accumulate in, per thread, for ``cta_group::1``.

TMEM is 128 lanes x 512 columns of 32-bit cells per CTA (``layout/hw_nvidia.TMEM_LANES`` /
``TMEM_COLS``); a TMEM address is a 32-bit value, the lane in bits 16-31 and the column in
bits 0-15 (PTX ISA 9.7.16, "Tensor Memory Addressing").

* ``tcgen05_alloc(slot) {cols}``: one whole warp allocates ``cols`` columns (a power of two
  in [32, 512]) and the address of the first is written to ``slot[0]``, a 32-bit shared
  buffer -- the other threads read it there after a barrier.
  ``tcgen05_relinquish_alloc_permit`` gives up the CTA's right to allocate again;
  ``tcgen05_dealloc(taddr) {cols}`` frees the columns (the same warp, before the CTA exits).
* ``tcgen05_desc(buf, offset)``: the 64-bit shared-memory descriptor of an operand
  (``MatrixDescriptor`` version 1: its typed fields as attributes), like ``wgmma_desc``.
* ``tcgen05_mma(taddr, a_desc, b_desc) {m, n, a_type, trans_a, trans_b, accumulate}``: one
  thread issues ``D[taddr] = A @ B (+ D when accumulate)`` of shape M x N x 16 (kind::f16:
  f16 / bf16 operands, f32 in TMEM); the instruction descriptor is the typed attributes
  (:class:`InstructionDescriptor`). It completes asynchronously: ``tcgen05_commit(bar,
  index)`` makes the barrier's phase see one arrive once every tcgen05 op the thread issued
  before it completed.
* ``tcgen05_ld(taddr) {shape = 32x32b, num}``: every thread of a warp reads ``num`` 32-bit
  columns of one lane (warp w of a warpgroup reaches lanes 32w..32w+31, thread l lane
  32w + l: ``layout/hw_nvidia.wg_local_layout``); the values are in flight until
  ``tcgen05_wait_ld`` hands them back (the verifier refuses other readers, as for wgmma).
* ``tcgen05_st(taddr, *values) {shape = 32x32b, num}``: the store direction, the same
  lanes and columns; ``tcgen05_wait_st`` waits until the thread's stores are done.
* ``tcgen05_fence {kind}``: ``before_thread_sync`` / ``after_thread_sync`` order tcgen05
  ops around a thread barrier.
* ``tmem_address(buf)``: the TMEM address of a tensor-memory buffer's first cell (lane 0,
  its first column), what the rules lowering tile primitives on ``tj.alloc_tmem`` buffers
  use; ``lower-tmem`` (``passes/tmem.py``) allocates the buffer and replaces it with the
  address the allocation wrote.
"""
from __future__ import annotations

from dataclasses import dataclass

from .attrs import BOOL, INT, SCALAR_TYPE, Attr, Choice
from .opdef import OpGroup
from .opdef import register as _register
from .ops_native import fixed, is_root_buffer
from .ops_wgmma import MatrixDescriptor
from .types import MemScope, ScalarType, bf16, f16, f32, i32, i64

__all__ = ["InstructionDescriptor", "LD_IN_FLIGHT", "TCGEN05_K", "TCGEN05_M",
           "TCGEN05_TYPES", "TMEM_ALLOC_COLUMNS", "TMEM_DESCRIPTOR_VERSION", "tmem_address"]

SYNC = OpGroup.SYNC
TCGEN05_M = (64, 128)                    # cta_group::1, dense
TCGEN05_K = 16                           # kind::f16: 32 bytes of K per instruction
TCGEN05_TYPES = (f16, bf16)              # kind::f16's A / B types this catalogue takes
TMEM_ALLOC_COLUMNS = (32, 64, 128, 256, 512)
TMEM_DESCRIPTOR_VERSION = 1              # MatrixDescriptor.version of tcgen05
LD_SHAPES = ("32x32b",)
LD_NUM = (1, 2, 4, 8, 16, 32, 64, 128)   # .x1 .. .x128 registers per thread (32x32b)
# tcgen05_ld's results are in flight until tcgen05_wait_ld (the verifier's check)
LD_IN_FLIGHT = {"tcgen05_ld": frozenset({"tcgen05_wait_ld"})}
# PTX ISA 9.7.16.4.2 "Instruction Descriptor" (Table 42), kind::f16: D type bits 4-5 (f32 = 1), A
# type 7-9 and B type 10-12 (f16 = 0, bf16 = 1)
_D_CODE = {f16: 0, f32: 1}
_AB_CODE = {f16: 0, bf16: 1}


def tmem_address(lane: int, column: int) -> int:
    """The 32-bit TMEM address of (lane, column): lane in bits 16-31, column in 0-15."""
    return lane << 16 | column


@dataclass(frozen=True)
class InstructionDescriptor:
    """The 32-bit instruction descriptor of ``tcgen05.mma ... .kind::f16`` (PTX ISA
    9.7.16.4.2 "Instruction Descriptor", Table 42, the .kind::f16 column): bits 0-1 sparsity
    selector, 2 sparsity, 3 saturate (all 0: dense, no saturation); 4-5 D type; 7-9 A type;
    10-12 B type; 13 / 14 negate A / B (0); 15 / 16 transpose A / B (1: MN-major); 17-22
    N >> 3; 24-28 M >> 4; 30-31 the .ws shift (0)."""

    m: int
    n: int
    a_type: ScalarType
    b_type: ScalarType
    d_type: ScalarType = f32
    trans_a: bool = False
    trans_b: bool = False

    def problem(self) -> str | None:
        """Why the fields are no kind::f16 cta_group::1 instruction (None: they are)."""
        if self.m not in TCGEN05_M:
            return f"tcgen05.mma cta_group::1 has M = 64 or 128, not {self.m}"
        step = 8 if self.m == 64 else 16
        if self.n % step or not step <= self.n <= 256:
            return (f"tcgen05.mma with M = {self.m} has N a multiple of {step} in "
                    f"[{step}, 256], not {self.n}")
        for side, dtype in (("A", self.a_type), ("B", self.b_type)):
            if dtype not in _AB_CODE:
                return f"tcgen05.mma kind::f16 multiplies f16 or bf16, not {side} {dtype}"
        if self.a_type != self.b_type:
            return f"tcgen05.mma kind::f16 multiplies {self.a_type} by {self.a_type}, not " \
                   f"{self.b_type}"
        if self.d_type not in _D_CODE:
            return f"tcgen05.mma kind::f16 accumulates in f32 or f16, not {self.d_type}"
        return None

    def encode(self) -> int:
        why = self.problem()
        if why:
            raise ValueError(why)
        return (_D_CODE[self.d_type] << 4 | _AB_CODE[self.a_type] << 7
                | _AB_CODE[self.b_type] << 10 | int(self.trans_a) << 15
                | int(self.trans_b) << 16 | (self.n >> 3) << 17 | (self.m >> 4) << 24)

    @staticmethod
    def decode(bits: int) -> InstructionDescriptor:
        d_types = {code: t for t, code in _D_CODE.items()}
        ab_types = {code: t for t, code in _AB_CODE.items()}
        return InstructionDescriptor((bits >> 24 & 0x1F) << 4, (bits >> 17 & 0x3F) << 3,
                                     ab_types[bits >> 7 & 7], ab_types[bits >> 10 & 7],
                                     d_types[bits >> 4 & 3], bool(bits >> 15 & 1),
                                     bool(bits >> 16 & 1))


def instruction_descriptor(attrs) -> InstructionDescriptor:
    """A ``tcgen05_mma``'s instruction descriptor, from its attributes."""
    return InstructionDescriptor(attrs["m"], attrs["n"], attrs["a_type"], attrs["a_type"],
                                 f32, attrs["trans_a"], attrs["trans_b"])


def _check_columns(op) -> str | None:
    cols = op.attrs["cols"]
    if cols not in TMEM_ALLOC_COLUMNS:
        return f"{op.name} takes a power of two of columns in [32, 512], not {cols}"
    return None


def _check_alloc(op) -> str | None:
    (slot,) = op.operands
    if slot.type.scope is not MemScope.SHARED or slot.type.dtype.itemsize != 4 \
            or not slot.type.dtype.is_int:
        return (f"tcgen05_alloc writes the TMEM address to a 32-bit integer shared buffer, "
                f"not {slot.type}")
    if not is_root_buffer(slot):
        return "tcgen05_alloc needs a root buffer (an alloc), not a view"
    return _check_columns(op)


def _check_desc(op) -> str | None:
    buf, _ = op.operands
    if buf.type.scope is not MemScope.SHARED:
        return f"a tcgen05 descriptor names shared memory, not {buf.type.scope}"
    if not is_root_buffer(buf):
        return "tcgen05_desc needs a root buffer (an alloc), not a view"
    return MatrixDescriptor(0, op.attrs["lbo"], op.attrs["sbo"], op.attrs["swizzle"],
                            version=TMEM_DESCRIPTOR_VERSION).problem()


def _check_mma(op) -> str | None:
    for name, value, typ in zip(("the TMEM address", "A's descriptor", "B's descriptor"),
                                op.operands, (i32, i64, i64)):
        if value.type != typ:
            return f"tcgen05_mma's {name} is {value.type}, not {typ}"
    return instruction_descriptor(op.attrs).problem()


def _check_ld(op) -> str | None:
    if op.attrs["num"] not in LD_NUM:
        return f"tcgen05_ld reads 1, 2, 4, ... 128 columns per thread, not {op.attrs['num']}"
    if op.operands[0].type != i32:
        return f"tcgen05_ld's TMEM address is {op.operands[0].type}, not i32"
    return None


def _check_st(op) -> str | None:
    taddr, *values = op.operands
    if op.attrs["num"] not in LD_NUM or len(values) != op.attrs["num"]:
        return (f"tcgen05_st writes 1, 2, 4, ... 128 columns per thread, num = "
                f"{op.attrs['num']} with {len(values)} values")
    if taddr.type != i32:
        return f"tcgen05_st's TMEM address is {taddr.type}, not i32"
    return _check_wait_ld(op, values)


def _check_wait_ld(op, values=None) -> str | None:
    for index, value in enumerate(op.operands if values is None else values):
        if value.type.itemsize != 4:
            return f"{op.name} takes 32-bit values, value {index} is {value.type}"
    return None


def _check_tmem_address(op) -> str | None:
    (buf,) = op.operands
    if buf.type.scope is not MemScope.TMEM or not is_root_buffer(buf):
        return f"tmem_address names a tensor-memory alloc, not {buf.type}"
    return None


def _loaded(types, attrs):
    return (f32,) * attrs["num"]


def _same_types(types, attrs):
    return tuple(types)


_register("tcgen05_alloc", SYNC, "slot:buffer", {"cols": Attr(INT)}, fixed(),
          check=_check_alloc,
          doc="one warp allocates `cols` TMEM columns; their address lands in slot[0]")
_register("tcgen05_relinquish_alloc_permit", SYNC, results=fixed(),
          doc="the CTA will allocate no more TMEM (lets another CTA's allocation proceed)")
_register("tcgen05_dealloc", SYNC, "taddr:int", {"cols": Attr(INT)}, fixed(),
          check=_check_columns, doc="one warp frees the `cols` TMEM columns at taddr")
_register("tcgen05_desc", SYNC, "buf:buffer offset:int",
          {"lbo": Attr(INT), "sbo": Attr(INT), "swizzle": Attr(INT)}, fixed(i64),
          check=_check_desc,
          doc="the 64-bit tcgen05 shared-memory descriptor of the matrix whose first element "
              "is buf[offset] (a flat element offset)")
_register("tcgen05_mma", SYNC, "taddr:int a_desc:int b_desc:int",
          {"m": Attr(INT), "n": Attr(INT), "a_type": Attr(SCALAR_TYPE),
           "trans_a": Attr(BOOL, False), "trans_b": Attr(BOOL, False),
           "accumulate": Attr(BOOL, True)}, fixed(), check=_check_mma,
          doc="one thread issues D[taddr] = A @ B (+ D when accumulate), M x N x 16, kind::f16 "
              "into f32 TMEM; completes at a later tcgen05_commit's arrive")
_register("tcgen05_commit", SYNC, "bar:barrier index:int", results=fixed(),
          doc="bar[index] sees one arrive once the thread's earlier tcgen05 ops completed")
_register("tcgen05_ld", SYNC, "taddr:int", {"shape": Attr(Choice(*LD_SHAPES), "32x32b"),
                                            "num": Attr(INT)}, _loaded, check=_check_ld,
          doc="a warp reads `num` 32-bit columns of its 32 lanes, one lane per thread; the "
              "values are ready after tcgen05_wait_ld")
_register("tcgen05_wait_ld", SYNC, "*values:scalar", results=_same_types,
          check=_check_wait_ld,
          doc="waits for the thread's tcgen05_ld; its results are the loaded values, readable")
_register("tcgen05_st", SYNC, "taddr:int *values:scalar",
          {"shape": Attr(Choice(*LD_SHAPES), "32x32b"), "num": Attr(INT)}, fixed(),
          check=_check_st,
          doc="a warp writes `num` 32-bit columns of its 32 lanes, one lane per thread; done "
              "after tcgen05_wait_st")
_register("tcgen05_wait_st", SYNC, results=fixed(),
          doc="waits until the thread's tcgen05_st are done")
_register("tcgen05_fence", SYNC, attrs={"kind": Attr(Choice("before_thread_sync",
                                                             "after_thread_sync"))},
          results=fixed(),
          doc="orders the thread's tcgen05 ops before (after) the next (last) thread barrier")
_register("tmem_address", SYNC, "buf:buffer", results=fixed(i32), check=_check_tmem_address,
          doc="the TMEM address (lane << 16 | column) of a tensor-memory buffer's first cell")
