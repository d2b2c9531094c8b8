"""The binary interface between the JIT'd code and the launcher.

``run_ctas(args) -> i32`` runs CTAs (linear ids, x fastest) below ``last`` that it claims
``chunk`` at a time from a counter of the next unclaimed CTA, at most ``max_claims`` claims
per call, each chunk in order; it returns 0, or an error code after filling the error
record ``err``, or :data:`INTERRUPTED` when it found the ``stop`` word set before a CTA (the
launcher sets it to end a launch early: Ctrl-C). The counter is the i64 at ``claim``,
shared by the workers of a parallel launch (an atomic add claims a chunk: a worker that
starts late, or shares its core with another process, takes fewer chunks); when ``claim``
is 0 it is private to the call and starts at ``first`` (one claim of ``[first, last)`` is
a static range). Everything travels in ``args`` because every argument of a ctypes call
costs about 100 ns.

``args`` is a flat array of 8-byte slots: ``first``, ``last``, the address of ``err``, the
address of ``stop`` (an i32), the address of ``claim``, ``chunk``, ``max_claims``
(:data:`HEADER_SLOTS`), the grid (x, y, z), then per kernel parameter

* a global buffer: data pointer, its ``rank`` dims, its ``rank`` strides (in elements);
* a scalar: its value in the low bytes of the slot (floats narrower than f64 as an f32;
  the kernel rounds them to the parameter's type).

The error record is :data:`ERR_SLOTS` i64 values: code, site (an index into the kernel's
site table), CTA, unit, then up to :data:`MAX_REPORTED_DIMS` values and as many dims
(for an out-of-bounds access: the indices and the buffer's shape; for a deadlock: the
barrier index and the phase waited for).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit.errors import CompilationError
from tilejit.ir.core import KernelIR
from tilejit.ir.types import BufferType, MemScope, ScalarType, f64

FIRST_CTA, LAST_CTA, ERR_ADDRESS, STOP_ADDRESS = 0, 1, 2, 3
CLAIM_ADDRESS, CHUNK, MAX_CLAIMS = 4, 5, 6
HEADER_SLOTS = 7
GRID_SLOTS = 3
MAX_REPORTED_DIMS = 6
ERR_CODE, ERR_SITE, ERR_CTA, ERR_UNIT, ERR_VALUES = 0, 1, 2, 3, 4
ERR_DIMS = ERR_VALUES + MAX_REPORTED_DIMS
ERR_SLOTS = ERR_DIMS + MAX_REPORTED_DIMS

OUT_OF_BOUNDS, DEADLOCK, OUT_OF_MEMORY = 1, 2, 3  # error codes; 0 is success
INTERRUPTED = 4   # the stop word was set: no error record
RACE = 5   # SIMT mode's race detector (``race``): values are the other unit, its site, what
           # it did (``race.PRIOR_*``) and the element's storage offset
MISALIGNED = 6   # a vector access off its size's alignment (a GPU faults): values are the
                 # address and the size in bytes
TENSOR_MAP = 7   # a TMA copy's tensor no tensor map can describe: values are the dim whose
                 # stride breaks the rule and that stride in bytes
TMEM = 8   # tensor memory misused (``emit_tcgen05``): the site's ``what`` says how, its
           # fields filled from the values

# struct format of one scalar slot, by IR type name (8 bytes each, little-endian).
_SCALAR_FORMATS = {"i1": "?7x", "i8": "b7x", "i16": "h6x", "i32": "i4x", "i64": "q",
                   "u8": "B7x", "u16": "H6x", "u32": "I4x", "u64": "Q", "f64": "d"}
_FLOAT_AS_F32 = "f4x"


def scalar_format(t: ScalarType) -> str:
    """The struct format of a scalar parameter's slot."""
    if t.is_float and t != f64:
        return _FLOAT_AS_F32
    return _SCALAR_FORMATS[t.name]


@dataclass(frozen=True)
class ParamSlots:
    """Where one kernel parameter lives in the argument array."""

    name: str
    first_slot: int
    type: BufferType | ScalarType

    @property
    def is_buffer(self) -> bool:
        return isinstance(self.type, BufferType)

    @property
    def count(self) -> int:
        return 1 + 2 * self.type.rank if self.is_buffer else 1

    @property
    def struct_format(self) -> str:
        if self.is_buffer:
            return "Q" + "q" * (2 * self.type.rank)
        return scalar_format(self.type)

    def describe(self) -> dict:
        """JSON-able description for the artifact's meta."""
        t = self.type
        if self.is_buffer:
            return {"name": self.name, "kind": "buffer", "dtype": t.dtype.name,
                    "shape": list(t.shape),
                    "strides": None if t.strides is None else list(t.strides)}
        return {"name": self.name, "kind": "scalar", "dtype": t.name}


def param_slots(kernel: KernelIR) -> list[ParamSlots]:
    slots, next_slot = [], HEADER_SLOTS + GRID_SLOTS
    for name, value in zip(kernel.param_names, kernel.params):
        t = value.type
        if isinstance(t, BufferType) and t.scope is not MemScope.GLOBAL:
            raise CompilationError(f"kernel parameter {name!r} is a {t.scope} buffer; "
                                   "only global buffers can be passed in", kernel.loc)
        if not isinstance(t, (BufferType, ScalarType)):
            raise CompilationError(f"kernel parameter {name!r} of type {t} cannot be passed "
                                   "to a CPU kernel", kernel.loc)
        param = ParamSlots(name, next_slot, t)
        slots.append(param)
        next_slot += param.count
    return slots


def struct_format(params: list[ParamSlots]) -> str:
    return "<qqQQQqq" + "q" * GRID_SLOTS + "".join(p.struct_format for p in params)
