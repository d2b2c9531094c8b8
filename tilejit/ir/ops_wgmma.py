"""Catalogue entries: Hopper's warpgroup ops -- the tensor-core ops (PTX ``wgmma``) with the
shared-memory matrix descriptor they read their operands through, and ``setmaxnreg``.

``wgmma_desc`` makes the 64-bit descriptor of a matrix in shared memory: the byte address
of element ``offset`` of a root buffer plus the typed fields of :class:`MatrixDescriptor`.
``wgmma_mma_async`` is one warpgroup's ``D = A @ B (+ D)`` into f32, A and B read through
descriptors, of shape m64nNk16 for f16 / bf16 and m64nNk32 for fp8 (e4m3 / e5m2, A and B
each either: ``b_type`` names B's when it differs from ``a_type``) -- a k-step is 32 bytes
of K either way, two core matrices. fp8 operands are read K-major only (the PTX ISA
transposes f16 / bf16 operands only: the fp8 form has no transpose immediates). Each of
the 128 threads passes its N / 2
accumulator values in the fragment order of ``layout/hw_nvidia.wgmma_acc_layout`` and
gets the new ones. The values are not ready when the op returns: ``wgmma_commit_group``
closes the thread's group of issued multiplies and ``wgmma_wait_group {pending = N}``
returns once all but the N most recent groups completed. ``wgmma_fence`` orders the
thread's earlier register writes of the accumulators before the multiply reads them.
Fence, commit and wait take the accumulators and give them back (the same types), so SSA
orders them with the multiplies; only the results of a wait that keeps no group pending
may be read as numbers: the verifier refuses any other op reading a multiply's, a
commit's or a ``pending > 0`` wait's results (:func:`in_flight`) -- or what a fence, a
loop's carried values or a region op's results pass them on to -- except a store into
private or fragment memory -- the accumulator registers themselves, which hold a group in
flight from one K step to the next. Whether those registers are read before the wait that
retires their group is ``passes/wgmma_groups.py``'s check, on the tile IR.

``wgmma_mma_async_reg_a`` is the same multiply with A from registers (f16 / bf16 only
here): its first :data:`WGMMA_A_VALUES` operands are the thread's eight A elements of the
64 x 16 block (``layout/hw_nvidia.wgmma_a_register_layout``, four 32-bit registers a0..a3),
then its accumulators; B by descriptor, no transpose of A. The PTX ISA makes reading or
writing those A registers before the wait that retires the multiply undefined: in SSA the
values cannot change, and at the tile level ``passes/wgmma_groups.py`` refuses any op on
the A fragment while its group may be pending.

``wgmma_wait {pending = N}`` is that wait in the tile IR (``tj.wgmma_wait(n)``): its
operands are the accumulator fragments whose groups may be pending there (the
``wgmma-groups`` pass names them); per thread it becomes ``wgmma_wait_group`` on their
values (``carry-wgmma-accumulators``), so a GPU compiler orders every later read of them
after it.

``setmaxnreg {count = N, action = inc|dec}`` moves the warpgroup's per-thread register
limit to N, taking registers from the CTA's pool or giving them back (a warp-specialized
producer releases what its consumers claim). N is a multiple of 8 in [24, 256] (checked
here); every thread of whole warpgroups runs it, under control flow uniform over each
(``passes/scope_analysis``, which knows the team).
"""
from __future__ import annotations

from dataclasses import dataclass

from .attrs import BOOL, INT, SCALAR_TYPE, Attr, Choice, Optional
from .opdef import OpGroup
from .opdef import register as _register
from .ops_native import fixed, is_root_buffer
from .types import MemScope, ScalarType, bf16, f8e4m3, f8e5m2, f16, f32, i64

__all__ = ["CORE_BYTES", "CORE_ROWS", "DESCRIPTOR_SWIZZLE", "IN_FLIGHT_READERS",
           "MatrixDescriptor",
           "SETMAXNREG_RANGE", "SETMAXNREG_STEP", "SWIZZLE_BYTES", "WGMMA_A_REGISTER_TYPES",
           "WGMMA_A_VALUES", "WGMMA_FP8_TYPES",
           "WGMMA_INPUT_TYPES", "WGMMA_K_BYTES", "WGMMA_M", "describe_operand",
           "in_flight", "takes_in_flight", "wgmma_accumulators", "wgmma_k"]

SYNC = OpGroup.SYNC
WGMMA_M = 64                        # m64nNkK: N a multiple of 8 in [8, 256]
WGMMA_K_BYTES = 32                  # K of one instruction: k16 for 16-bit types, k32 for fp8
WGMMA_FP8_TYPES = (f8e4m3, f8e5m2)
WGMMA_INPUT_TYPES = (f16, bf16, *WGMMA_FP8_TYPES)
WGMMA_A_REGISTER_TYPES = (f16, bf16)   # A from registers: the 16-bit types (k16)
WGMMA_A_VALUES = 8                  # per thread, A's 64 x 16 block: four 32-bit registers
SWIZZLE_BYTES = (0, 32, 64, 128)    # 0: no swizzle (the 8-row x 16-byte core matrices)
# per descriptor version, where the swizzle field starts and its code per swizzle: wgmma's
# two bits at 62 (0 none, 1 128B, 2 64B, 3 32B); tcgen05's three at 61 (0 none, 2 128B,
# 4 64B, 6 32B; 1 is 128B with 32-byte atoms, which no layout here makes)
DESCRIPTOR_SWIZZLE = {0: (62, {0: 0, 128: 1, 64: 2, 32: 3}), 1: (61, {0: 0, 128: 2, 64: 4, 32: 6})}
_FIELD = 0x3FFF                     # start address, LBO and SBO: 14 bits of (bytes >> 4)
CORE_ROWS, CORE_BYTES = 8, 16       # a core matrix: 8 rows of 16 bytes
# The ops that may take results the tensor cores still write (the verifier's check, with
# terminators and stores into the accumulator registers: :func:`takes_in_flight`)
IN_FLIGHT_READERS = frozenset({"wgmma_fence", "wgmma_mma_async", "wgmma_mma_async_reg_a",
                               "wgmma_commit_group", "wgmma_wait_group"})
_REGISTERS = (MemScope.LOCAL, MemScope.FRAGMENT)
SETMAXNREG_RANGE, SETMAXNREG_STEP = (24, 256), 8   # per-thread registers (PTX ISA setmaxnreg)


def in_flight(op) -> bool:
    """Whether the tensor cores may still write ``op``'s results after it returns: a
    multiply's and a commit's, and a wait's that leaves groups pending (the newest may be
    the one that writes them)."""
    name = getattr(op, "name", None)
    return name in ("wgmma_mma_async", "wgmma_mma_async_reg_a", "wgmma_commit_group") or \
        (name == "wgmma_wait_group" and op.attrs["pending"] > 0)


def takes_in_flight(op, index: int) -> bool:
    """Whether operand ``index`` of ``op`` may be a value still in flight: the wgmma ops
    that hand accumulators on, a terminator (a loop carries them), and the stored value of
    a store into private or fragment memory (the accumulator registers; the stores the
    wgmma rule makes)."""
    if op.name in IN_FLIGHT_READERS or op.opdef.terminator:
        return True
    return op.name in ("store", "store_at") and index == 1 \
        and op.operands[0].type.scope in _REGISTERS


def wgmma_accumulators(n: int) -> int:
    """How many f32 accumulator values each thread of the warpgroup holds for m64nNkK."""
    return WGMMA_M * n // 128


def wgmma_k(dtype: ScalarType) -> int:
    """K of one wgmma on ``dtype`` operands: 16 for f16 / bf16, 32 for fp8."""
    return WGMMA_K_BYTES // dtype.itemsize


@dataclass(frozen=True)
class MatrixDescriptor:
    """The fields of a shared-memory matrix descriptor, in bytes. ``version`` 0 is wgmma's
    (PTX ISA 9.7.15.5.1.2 "Matrix Descriptor Format": start address bits 0-13, leading
    byte offset 16-29, stride byte offset 32-45, each stored >> 4; base offset 49-51;
    swizzle 62-63); version 1 is tcgen05's (PTX ISA 9.7.16.4.1 "Shared Memory Descriptor",
    Table 40: the same address fields and base offset, bits 46-48 the fixed constant 0b001
    and the swizzle three bits at 61-63, coded 0 none, 2 128B, 4 64B, 6 32B). Both read the
    same canonical layouts (:meth:`element_address`)."""

    start: int
    lbo: int
    sbo: int
    swizzle: int = 0
    base_offset: int = 0
    version: int = 0

    def problem(self) -> str | None:
        """Why the fields do not fit the descriptor (None: they do)."""
        if self.swizzle not in SWIZZLE_BYTES:
            return f"swizzle is 0, 32, 64 or 128 bytes, not {self.swizzle}"
        if self.version not in DESCRIPTOR_SWIZZLE:
            return f"the descriptor version is 0 (wgmma) or 1 (tcgen05), not {self.version}"
        for name in ("start", "lbo", "sbo"):
            value = getattr(self, name)
            if value < 0 or value % 16 or value >> 4 > _FIELD:
                return (f"{name} = {value} bytes: the descriptor holds multiples of 16 below "
                        f"{(_FIELD + 1) << 4}")
        if not 0 <= self.base_offset < 8:
            return f"base offset is 3 bits, not {self.base_offset}"
        return None

    def encode(self) -> int:
        why = self.problem()
        if why:
            raise ValueError(why)
        shift, codes = DESCRIPTOR_SWIZZLE[self.version]
        return ((self.start >> 4) | (self.lbo >> 4) << 16 | (self.sbo >> 4) << 32
                | self.version << 46 | self.base_offset << 49 | codes[self.swizzle] << shift)

    @staticmethod
    def decode(bits: int) -> MatrixDescriptor:
        """The fields of a descriptor of either version (bit 46 tells them apart: wgmma
        leaves bits 46-48 zero)."""
        version = bits >> 46 & 1
        shift, codes = DESCRIPTOR_SWIZZLE[version]
        swizzle = {code: nbytes for nbytes, code in codes.items()}[bits >> shift & 7]
        return MatrixDescriptor((bits & _FIELD) << 4, (bits >> 16 & _FIELD) << 4,
                                (bits >> 32 & _FIELD) << 4, swizzle, bits >> 49 & 7, version)

    def element_address(self, mn: int, k: int, itemsize: int, k_major: bool) -> int:
        """The shared byte address wgmma reads for element (mn, k) of the operand: ``mn`` a
        row of A or column of B, ``k`` along the reduction. The canonical layouts (PTX ISA
        "Shared Memory Matrix Layout"; T = 16 / itemsize elements, W = swizzle bytes):
        K-major, no swizzle: core matrices of 8 mn-rows x T k's, 16 bytes a row; LBO steps
        along k, SBO along mn. K-major swizzled: rows of W bytes, 8 rows an atom, SBO
        between atoms along mn. MN-major, no swizzle: core matrices of T mn's x 8 k-rows;
        SBO steps along mn, LBO along k. MN-major swizzled: rows of W bytes along mn, 8
        k-rows an atom; LBO between atoms along mn, SBO along k. The swizzle XORs the
        16-byte chunk (address bits 4..) with the 128-byte row (bits 7..), on the address."""
        per_chunk = CORE_BYTES // itemsize
        if k_major and not self.swizzle:
            offset = ((mn // CORE_ROWS) * self.sbo + (mn % CORE_ROWS) * CORE_BYTES
                      + (k // per_chunk) * self.lbo + (k % per_chunk) * itemsize)
        elif k_major:
            offset = (mn // CORE_ROWS) * self.sbo + (mn % CORE_ROWS) * self.swizzle + k * itemsize
        elif not self.swizzle:
            offset = ((mn // per_chunk) * self.sbo + (mn % per_chunk) * itemsize
                      + (k // CORE_ROWS) * self.lbo + (k % CORE_ROWS) * CORE_BYTES)
        else:
            across = self.swizzle // itemsize
            offset = ((mn // across) * self.lbo + (mn % across) * itemsize
                      + (k // CORE_ROWS) * self.sbo + (k % CORE_ROWS) * self.swizzle)
        # the pattern repeats every 8 rows of the swizzle: buffers are aligned to it
        return _swizzled(self.start + offset, self.swizzle)


def _swizzled(address, swizzle: int):
    """``address`` with its 16-byte chunk XORed with its 128-byte row, as ``swizzle`` bytes
    of chunks allow; its own inverse (bits 7 and up stay), so it also unswizzles."""
    if not swizzle:
        return address
    return address ^ ((address >> 7) & (swizzle // CORE_BYTES - 1)) << 4


def describe_operand(addresses, itemsize: int) -> tuple[MatrixDescriptor, bool] | None:
    """The descriptor (and whether it reads K-major) under which wgmma reads element
    ``(mn, k)`` of an operand at byte ``addresses[mn][k]`` (an MN x K block, addresses
    from a base aligned to 1024 bytes), when there is one: each swizzle is tried, widest
    first, K-major then MN-major; its LBO and SBO are read off the unswizzled addresses at
    the steps that define them, then every element is checked against
    :meth:`MatrixDescriptor.element_address`. None: no canonical layout places them so."""
    rows, depth = len(addresses), len(addresses[0])
    per_chunk = CORE_BYTES // itemsize

    def step(swizzle, at, start) -> int:   # unused offsets read 16 (PTX: "assumed 1")
        inside = at[0] < rows and at[1] < depth
        return _swizzled(addresses[at[0]][at[1]], swizzle) - start if inside else CORE_BYTES
    for swizzle in (128, 64, 32, 0):
        start = _swizzled(addresses[0][0], swizzle)
        for k_major in (True, False):
            if k_major:
                sbo = step(swizzle, (CORE_ROWS, 0), start)
                lbo = CORE_BYTES if swizzle else step(swizzle, (0, per_chunk), start)
            else:
                across = (swizzle or CORE_BYTES) // itemsize
                lbo, sbo = (step(swizzle, (across, 0), start),
                            step(swizzle, (0, CORE_ROWS), start))
                if not swizzle:
                    lbo, sbo = sbo, lbo
            fields = MatrixDescriptor(start, lbo, sbo, swizzle)
            if fields.problem() is None and all(
                    fields.element_address(mn, k, itemsize, k_major) == addresses[mn][k]
                    for mn in range(rows) for k in range(depth)):
                return fields, k_major
    return None


def _check_desc(op):
    buf, _ = op.operands
    if buf.type.scope is not MemScope.SHARED:
        return f"a wgmma descriptor names shared memory, not {buf.type.scope}"
    if not is_root_buffer(buf):
        return "wgmma_desc needs a root buffer (an alloc), not a view"
    fields = MatrixDescriptor(0, op.attrs["lbo"], op.attrs["sbo"], op.attrs["swizzle"],
                              op.attrs["base_offset"])
    if fields.base_offset:
        return ("wgmma_desc's base offset is 0: swizzled shared buffers are aligned to their "
                "pattern (1024, 512 or 256 bytes)")
    return fields.problem()


def _check_accumulators(op, values) -> str | None:
    count = wgmma_accumulators(op.attrs["n"]) if "n" in op.attrs else None
    if count is not None and len(values) != count:
        return (f"{op.name} m64n{op.attrs['n']}k{wgmma_k(op.attrs['a_type'])} takes {count} "
                f"f32 accumulators per thread, got {len(values)}")
    for index, value in enumerate(values):
        if value.type != f32:
            return f"{op.name} accumulator {index} is {value.type}, not f32"
    return None


def _check_mma_async(op):
    n, a_type = op.attrs["n"], op.attrs["a_type"]
    b_type = op.attrs["b_type"] or a_type
    if n % 8 or not 8 <= n <= 256:
        return f"wgmma m64nNkK has N a multiple of 8 in [8, 256], not {n}"
    if a_type not in WGMMA_INPUT_TYPES:
        return f"wgmma_mma_async multiplies f16, bf16, f8e4m3 or f8e5m2 here, not {a_type}"
    fp8 = a_type in WGMMA_FP8_TYPES
    if b_type != a_type and not (fp8 and b_type in WGMMA_FP8_TYPES):
        return f"wgmma_mma_async multiplies {a_type} by {a_type}, not by {b_type}"
    if fp8 and (op.attrs["trans_a"] or op.attrs["trans_b"]):
        return ("wgmma reads fp8 operands K-major only: the PTX ISA transposes f16 / bf16 "
                "operands only (trans_a and trans_b are false)")
    for side, desc in zip("AB", op.operands[:2]):
        if desc.type != i64:
            return f"{side}'s descriptor is {desc.type}, not i64"
    return _check_accumulators(op, op.operands[2:])


def _check_mma_async_reg_a(op):
    a_type, values = op.attrs["a_type"], op.operands[1:]
    if a_type not in WGMMA_A_REGISTER_TYPES:
        return (f"wgmma_mma_async_reg_a reads A from registers as f16 or bf16 here, not "
                f"{a_type}")
    n = op.attrs["n"]
    if n % 8 or not 8 <= n <= 256:
        return f"wgmma m64nNkK has N a multiple of 8 in [8, 256], not {n}"
    if op.operands[0].type != i64:
        return f"B's descriptor is {op.operands[0].type}, not i64"
    if len(values) < WGMMA_A_VALUES:
        return (f"wgmma_mma_async_reg_a takes {WGMMA_A_VALUES} {a_type} A values per thread "
                f"before the accumulators, got {len(values)} operands")
    for index, value in enumerate(values[:WGMMA_A_VALUES]):
        if value.type != a_type:
            return f"wgmma_mma_async_reg_a's A value {index} is {value.type}, not {a_type}"
    return _check_accumulators(op, values[WGMMA_A_VALUES:])


def _check_passthrough(op):
    if op.name == "wgmma_wait_group" and op.attrs["pending"] < 0:
        return f"wgmma_wait_group keeps a non-negative number of groups pending, not " \
               f"{op.attrs['pending']}"
    return _check_accumulators(op, op.operands)


def _check_wait(op):
    if op.attrs["pending"] < 0:
        return f"wgmma_wait keeps a non-negative number of groups pending, not " \
               f"{op.attrs['pending']}"
    for index, acc in enumerate(op.operands):
        if acc.type.scope not in _REGISTERS or acc.type.dtype != f32:
            return (f"wgmma_wait's accumulator {index} is {acc.type.dtype} in "
                    f"{acc.type.scope} memory, not an f32 fragment")
    return None


def _check_setmaxnreg(op):
    count, (low, high) = op.attrs["count"], SETMAXNREG_RANGE
    if count % SETMAXNREG_STEP or not low <= count <= high:
        return (f"setmaxnreg sets a multiple of {SETMAXNREG_STEP} registers in [{low}, {high}] "
                f"per thread, not {count}")
    return None


def _accumulator_results(types, attrs):
    return tuple(types[2:])   # D in C's registers; the check counts them against N


def _reg_a_accumulator_results(types, attrs):
    return tuple(types[1 + WGMMA_A_VALUES:])   # D in C's registers, after B and A's values


def _same_types(types, attrs):
    return tuple(types)


_register("wgmma_desc", SYNC, "buf:buffer offset:int",
          {"lbo": Attr(INT), "sbo": Attr(INT), "swizzle": Attr(INT),
           "base_offset": Attr(INT, 0)}, fixed(i64), check=_check_desc,
          doc="the 64-bit wgmma matrix descriptor of the shared matrix whose first element is "
              "buf[offset] (a flat element offset): its byte address and the fields")
_register("wgmma_mma_async", SYNC, "a_desc:int b_desc:int *acc:scalar",
          {"n": Attr(INT), "a_type": Attr(SCALAR_TYPE),
           "b_type": Attr(Optional(SCALAR_TYPE), None), "trans_a": Attr(BOOL, False),
           "trans_b": Attr(BOOL, False), "scale_d": Attr(BOOL, True)},
          _accumulator_results, check=_check_mma_async,
          doc="a warpgroup's D = A @ B (+ D when scale_d) of m64nNk16 (m64nNk32 for fp8) from "
              "two descriptors; b_type: B's type when not a_type (fp8 mixes e4m3 and e5m2); "
              "trans_a / trans_b read A / B MN-major (else K-major); every thread of the "
              "warpgroup passes its N / 2 accumulators; the results are ready after a wait")
_register("wgmma_mma_async_reg_a", SYNC, "b_desc:int *values:scalar",
          {"n": Attr(INT), "a_type": Attr(SCALAR_TYPE), "trans_b": Attr(BOOL, False),
           "scale_d": Attr(BOOL, True)},
          _reg_a_accumulator_results, check=_check_mma_async_reg_a,
          doc="a warpgroup's D = A @ B (+ D when scale_d) of m64nNk16, A from registers: "
              "values are the thread's 8 A elements (f16 / bf16, wgmma_a_register_layout) "
              "then its N / 2 accumulators; B from a descriptor (trans_b: MN-major); the "
              "results are ready after a wait, and A's registers must stay unread and "
              "unwritten until then")
_register("wgmma_fence", SYNC, "*acc:scalar", results=_same_types, check=_check_passthrough,
          doc="orders the thread's earlier accumulator writes before later wgmma reads")
_register("wgmma_commit_group", SYNC, "*acc:scalar", results=_same_types,
          check=_check_passthrough,
          doc="closes the thread's group of wgmma_mma_async issued since the last commit")
_register("wgmma_wait_group", SYNC, "*acc:scalar", {"pending": Attr(INT)}, _same_types,
          check=_check_passthrough,
          doc="waits until at most `pending` committed wgmma groups are in flight; its "
              "results are the accumulators, readable")
_register("wgmma_wait", SYNC, "*acc:buffer", {"pending": Attr(INT)}, fixed(), check=_check_wait,
          doc="tj.wgmma_wait(n): waits until at most `pending` committed wgmma groups are in "
              "flight; acc: the accumulator fragments whose groups may be pending, readable "
              "after it when it retires them")
_register("setmaxnreg", SYNC, attrs={"count": Attr(INT), "action": Attr(Choice("inc", "dec"))},
          results=fixed(), check=_check_setmaxnreg,
          doc="moves the warpgroup's per-thread register limit to `count`: `inc` takes "
              "registers from the CTA's pool (waiting until it has them), `dec` gives them back")
