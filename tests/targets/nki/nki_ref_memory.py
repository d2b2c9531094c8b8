"""Memory of the NKI reference (see nki_reference.py for the contract): dtypes, buffers,
tensors and views with static indexing, and the SBUF/PSUM capacity accountant.

A tensor is an :class:`Allocation` (one numpy array in storage dtype, plus masks of which
elements were written and, in PSUM, by whom) seen through a :class:`Tensor` view (one int or
slice per allocation axis). Views are what instructions read and write.
"""
from __future__ import annotations

import re
import sys
import weakref
from dataclasses import dataclass
from math import prod

import numpy as np

PARTITIONS = 128
SBUF_BYTES_PER_PARTITION = 192 * 1024        # trn1/trn2: 24 MiB over 128 partitions
PSUM_BANK_BYTES = 2 * 1024                   # one bank: 512 fp32 per partition
PSUM_BANKS = 8                               # 16 KiB per partition
INT_FILL = -0x5EED5EED                       # integers cannot hold NaN: a loud sentinel


class NkiReferenceError(Exception):
    """A violated NKI rule: names the call, the emitted kernel's line and the limit."""

    def __init__(self, call: str, message: str):
        self.call, self.line = call, kernel_line()
        where = f" (kernel line {self.line})" if self.line is not None else ""
        super().__init__(f"{call}{where}: {message}")


def kernel_line() -> int | None:
    """The emitted module's line now executing: the module is compiled under a
    "<nki:NAME>" filename, and its innermost frame on the stack made the call."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<nki:"):
            return frame.f_lineno
        frame = frame.f_back
    return None


# ---------------------------------------------------------------- dtypes

def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest-even bfloat16, kept in float32 storage (no numpy bf16 here)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), rounded)


@dataclass(frozen=True, eq=False)
class DType:
    name: str
    storage: type          # numpy dtype that holds the values
    itemsize: int          # bytes on the device
    is_float: bool

    def cast(self, values) -> np.ndarray:
        """Values (computed in fp32 or integers) -> this dtype's representable values."""
        v = np.asarray(values)
        if self.name == "bfloat16":
            return _round_bf16(v.astype(np.float32))
        if self.is_float:
            return v.astype(self.storage)
        if v.dtype.kind == "f":
            # Unsure what the engines do float -> int; round to nearest and saturate.
            info = np.iinfo(self.storage)
            v = np.clip(np.rint(np.nan_to_num(v)), info.min, info.max)
        return v.astype(self.storage)

    def __repr__(self):
        return f"nl.{self.name}"


DTYPES = {d.name: d for d in (
    DType("float32", np.float32, 4, True),
    DType("bfloat16", np.float32, 2, True),
    DType("float16", np.float16, 2, True),
    DType("int32", np.int32, 4, False),
    DType("uint32", np.uint32, 4, False),
    DType("int8", np.int8, 1, False),
    DType("uint8", np.uint8, 1, False),
)}

_FROM_NUMPY = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float32",
               np.dtype(np.float16): "float16", np.dtype(np.int32): "int32",
               np.dtype(np.int64): "int32", np.dtype(np.uint32): "uint32",
               np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8"}


# ---------------------------------------------------------------- buffers

@dataclass(frozen=True, eq=False)
class Buffer:
    name: str
    kind: str              # "sbuf", "psum" or "hbm"

    @property
    def on_chip(self) -> bool:
        return self.kind != "hbm"

    def __repr__(self):
        return f"nl.{self.name}"


BUFFERS = {b.name: b for b in (
    Buffer("sbuf", "sbuf"), Buffer("psum", "psum"), Buffer("hbm", "hbm"),
    Buffer("shared_hbm", "hbm"), Buffer("private_hbm", "hbm"),
)}

# PSUM location states, for nc_matmul's accumulate=None (see nki_ref_isa.nc_matmul).
PSUM_FRESH, PSUM_BY_MATMUL, PSUM_BY_OTHER = 0, 1, 2


class AffineLoop:
    """Running iterations claimed independent: an ``nl.affine_range`` loop, or the programs
    of the launch grid. ``current`` indexes ``labels`` (how errors name an iteration)."""

    def __init__(self, ident: int, what: str, labels: list[str], advice: str,
                 is_grid: bool = False):
        self.ident, self.what, self.labels, self.advice = ident, what, labels, advice
        self.is_grid, self.current = is_grid, None


class Allocation:
    def __init__(self, shape, dtype: DType, buffer: Buffer, name: str, memory: "Memory"):
        self.shape, self.dtype, self.buffer, self.name = shape, dtype, buffer, name
        fill = np.nan if dtype.is_float else INT_FILL
        self.array = np.full(shape, fill, dtype=dtype.storage)
        self.written = np.zeros(shape, dtype=bool)
        self.psum_state = (np.zeros(shape, dtype=np.uint8) if buffer.kind == "psum" else None)
        self.memory = memory
        # Affine loops this tensor lives inside: each of their iterations has its own copy.
        # For the loops around its uses but not around its allocation, which iteration
        # last wrote each element (-1: before the loop), to find carried dependences.
        # A shared_hbm tensor is one for all programs of the grid, the others per program.
        shared = buffer.name == "shared_hbm"
        self.inner_to = frozenset(loop.ident for loop in memory.loops
                                  if not (shared and loop.is_grid))
        self.writer: dict[int, np.ndarray] = {}

    def carried(self, call: str, role: str, key: tuple, writing: bool) -> None:
        """A read or write of ``key`` from an affine iteration other than the one that
        wrote it is a loop-carried dependence the loop claimed not to have."""
        for loop in self.memory.loops:
            if loop.ident in self.inner_to:
                continue
            tags = self.writer.get(loop.ident)
            if tags is None:
                if not writing:
                    continue
                tags = self.writer[loop.ident] = np.full(self.shape, -1, dtype=np.int64)
            seen = tags[key]
            other = (seen != -1) & (seen != loop.current)
            if other.any():
                first = loop.labels[int(seen[other].flat[0])]
                raise NkiReferenceError(
                    call, f"{role} {self.name}: {loop.labels[loop.current]} of {loop.what} "
                          f"{'writes' if writing else 'reads'} elements written by its "
                          f"{first}: a loop-carried dependence "
                          f"({loop.advice.format(name=self.name)})")
            if writing:
                tags[key] = loop.current


class Tensor:
    """A view of an allocation: ``key`` holds one int or unit-step slice per allocation
    axis; the view's axes are the sliced ones, in order."""

    def __init__(self, alloc: Allocation, key: tuple):
        self.alloc, self.key = alloc, key

    @property
    def shape(self) -> tuple:
        return tuple(k.stop - k.start for k in self.key if isinstance(k, slice))

    @property
    def dtype(self) -> DType:
        return self.alloc.dtype

    @property
    def buffer(self) -> Buffer:
        return self.alloc.buffer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"<{self.buffer.name} {self.alloc.name} {self.shape} {self.dtype.name}>"

    def __getitem__(self, index) -> "Tensor":
        index = index if isinstance(index, tuple) else (index,)
        axes = [a for a, k in enumerate(self.key) if isinstance(k, slice)]
        if len(index) > len(axes):
            raise NkiReferenceError(
                "index", f"{len(index)} indices into {self!r} of rank {len(axes)}")
        key = list(self.key)
        for axis, ix in zip(axes, index):
            base = self.key[axis]
            extent = base.stop - base.start
            if isinstance(ix, (int, np.integer)) and not isinstance(ix, bool):
                if not 0 <= ix < extent:
                    raise NkiReferenceError(
                        "index", f"index {ix} out of bounds [0, {extent}) on {self!r}")
                if axis == 0 and self.buffer.on_chip:
                    raise NkiReferenceError(
                        "index", f"an integer index on the partition axis of {self!r}; "
                                 "slice it (p:p+1) instead")
                key[axis] = base.start + int(ix)
            elif isinstance(ix, slice):
                start = 0 if ix.start is None else ix.start
                stop = extent if ix.stop is None else ix.stop
                ok = all(isinstance(v, (int, np.integer)) for v in (start, stop))
                if not ok or ix.step not in (None, 1):
                    raise NkiReferenceError(
                        "index", f"slice {ix} on {self!r}: static int bounds, step 1 only")
                if not 0 <= start < stop <= extent:
                    raise NkiReferenceError(
                        "index", f"slice [{start}:{stop}] out of bounds [0, {extent}] "
                                 f"on {self!r}")
                key[axis] = slice(base.start + int(start), base.start + int(stop))
            else:
                raise NkiReferenceError(
                    "index", f"{ix!r} into {self!r}: only static ints and slices")
        return Tensor(self.alloc, tuple(key))

    # -- data access, used by instructions

    def banks(self) -> set[int]:
        """The PSUM banks this view touches (an allocation starts at a bank boundary)."""
        offsets = np.arange(prod(self.alloc.shape[1:])).reshape(self.alloc.shape[1:])
        touched = offsets[self.key[1:]] * self.dtype.itemsize // PSUM_BANK_BYTES
        return {int(b) for b in np.unique(touched)}

    def written(self) -> np.ndarray:
        return self.alloc.written[self.key]

    def read(self, call: str, role: str, reduction: bool = False) -> np.ndarray:
        """The view's values: floats as float32 (fp32 math), integers as stored.
        ``reduction``: the read of an associative accumulation into this view (exempt from
        the carried-dependence check, as the NKI docs exempt reductions)."""
        if not reduction:
            self.alloc.carried(call, role, self.key, writing=False)
        if self.alloc.memory.strict_reads and not self.written().all():
            n = int(np.count_nonzero(~self.written()))
            raise NkiReferenceError(
                call, f"{role} {self!r}: reads {n} element(s) never written")
        values = self.alloc.array[self.key]
        return values.astype(np.float32) if self.dtype.is_float else values.copy()

    def write(self, call: str, values, by_matmul: bool = False,
              reduction: bool = False) -> None:
        if not reduction:
            self.alloc.carried(call, "dst", self.key, writing=True)
        self.alloc.array[self.key] = self.dtype.cast(np.reshape(values, self.shape))
        self.alloc.written[self.key] = True
        if self.alloc.psum_state is not None:
            self.alloc.psum_state[self.key] = PSUM_BY_MATMUL if by_matmul else PSUM_BY_OTHER

    def to_numpy(self) -> np.ndarray:
        return self.alloc.array[self.key].copy()


# ---------------------------------------------------------------- the accountant

class Memory:
    """Allocates tensors and keeps the SBUF bytes and PSUM banks of live tiles within the
    NeuronCore's capacity. A tile is live while anything references it: CPython frees it
    when the kernel drops its last name for it (e.g. rebinding in the next iteration)."""

    def __init__(self, filename: str, strict_reads: bool):
        self.filename, self.strict_reads = filename, strict_reads
        self.sbuf_live = 0      # bytes per partition
        self.psum_live = 0      # banks
        self.sbuf_peak = self.psum_peak = 0
        self.count = 0
        self.loops: list[AffineLoop] = []      # the running affine loops, outermost first
        self.source_lines: list[str] = []      # the emitted module, for tensor names
        self.shared: dict[tuple, Tensor] = {}  # shared_hbm tensors of a grid, by site

    def allocate(self, shape: tuple, dtype, buffer, name: str = "") -> Tensor:
        call = "nl.ndarray"
        if not isinstance(dtype, DType):
            raise NkiReferenceError(call, f"dtype must be an nl dtype, got {dtype!r}")
        if not isinstance(buffer, Buffer):
            raise NkiReferenceError(call, f"buffer must be nl.sbuf/psum/shared_hbm, "
                                          f"got {buffer!r}")
        if not shape or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
            raise NkiReferenceError(call, f"shape must be static positive ints, got {shape}")
        shape = tuple(int(d) for d in shape)
        grid = any(loop.is_grid for loop in self.loops)
        site = (kernel_line(), shape, dtype.name)
        if grid and buffer.name == "shared_hbm" and site in self.shared:
            return self.shared[site]        # every program gets the same tensor
        self.count += 1
        alloc = Allocation(shape, dtype, buffer, name or self._name_at(kernel_line()), self)
        if buffer.on_chip:
            self._reserve(call, alloc)
        tensor = Tensor(alloc, tuple(slice(0, d) for d in shape))
        if grid and buffer.name == "shared_hbm":
            self.shared[site] = tensor
        return tensor

    def _name_at(self, line: int | None) -> str:
        # Errors name a tensor as the kernel does: the variable its allocation binds.
        text = self.source_lines[line - 1] if line and line <= len(self.source_lines) else ""
        match = re.match(r"\s*(\w+)\s*=", text)
        return match.group(1) if match else f"t{self.count}"

    def _reserve(self, call: str, alloc: Allocation) -> None:
        shape, itemsize = alloc.shape, alloc.dtype.itemsize
        if shape[0] > PARTITIONS:
            raise NkiReferenceError(
                call, f"{alloc.buffer.name} tile {shape}: partition axis {shape[0]} > "
                      f"{PARTITIONS}")
        if alloc.buffer.kind == "sbuf":
            need = prod(shape[1:]) * itemsize
            if self.sbuf_live + need > SBUF_BYTES_PER_PARTITION:
                raise NkiReferenceError(
                    call, f"SBUF tile {shape} {alloc.dtype.name} needs {need} B per "
                          f"partition; {self.sbuf_live} B live, capacity "
                          f"{SBUF_BYTES_PER_PARTITION} B")
            self.sbuf_live += need
            self.sbuf_peak = max(self.sbuf_peak, self.sbuf_live)
            weakref.finalize(alloc, self._release_sbuf, need)
            return
        # PSUM is allocated by whole 2 KiB banks, 8 per partition; an instruction's PSUM
        # access (a matmul's dst) must stay inside one bank (Tensor.banks).
        free_bytes = prod(shape[1:]) * itemsize
        banks = -(-free_bytes // PSUM_BANK_BYTES)
        if self.psum_live + banks > PSUM_BANKS:
            raise NkiReferenceError(
                call, f"PSUM tile {shape} {alloc.dtype.name} needs {banks} bank(s) "
                      f"({free_bytes} B per partition); {self.psum_live} of {PSUM_BANKS} "
                      f"banks live (2 KiB each, 16 KiB per partition)")
        self.psum_live += banks
        self.psum_peak = max(self.psum_peak, self.psum_live)
        weakref.finalize(alloc, self._release_psum, banks)

    def _release_sbuf(self, need: int) -> None:
        self.sbuf_live -= need

    def _release_psum(self, banks: int) -> None:
        self.psum_live -= banks

    def from_host(self, x, name: str) -> Tensor:
        """A kernel input: an HBM tensor holding ``x``, a numpy array or a CPU torch
        tensor (a torch bfloat16 tensor stays bfloat16; float64 becomes float32)."""
        kind = None
        if hasattr(x, "detach"):
            x = x.detach().cpu()
            if str(x.dtype) == "torch.bfloat16":
                kind, x = "bfloat16", x.float()
            x = x.numpy()
        x = np.asarray(x)
        kind = kind or _FROM_NUMPY.get(x.dtype)
        if kind is None:
            raise NkiReferenceError("run", f"input {name}: unsupported dtype {x.dtype}")
        t = self.allocate(x.shape, DTYPES[kind], BUFFERS["hbm"], name)
        t.write("run", x)
        return t
