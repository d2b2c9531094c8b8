"""Launching: argument packing, the worker pool, and run-time errors.

``CpuModule.launch(grid, args)`` checks the arguments and makes their launch records;
``launch_records`` (the runtime's hot path, which made the records itself) packs them into
the flat slot array of ``abi`` (one generated ``struct.pack`` call into a ``bytes`` object,
passed to ctypes without a copy) and calls the JIT'd ``run_ctas`` on the calling thread and
on pool threads (one per core, started once per process); ctypes releases the GIL for the
call. The workers claim chunks of about ``1 / _CLAIMS_PER_WORKER`` of a worker's share
from one shared counter, so that a worker woken late or sharing its core with another
process takes fewer chunks instead of holding up the launch. A launch of one CTA, or whose
previous run showed less work than a pool handoff is worth, stays on the calling thread.
Each CTA always runs on one thread, in order, so deterministic kernels give the same
results for any worker count; the CTAs of a cluster run together on one thread (the
claimed ids count clusters). A failed worker turns its error record (one per calling
thread, or per worker) into a :class:`~tilejit.errors.LaunchError` naming the kernel, the
site (buffer and index, or the barrier waited on) and the kernel's source line.

Ctrl-C: the calling thread runs its CTAs in calls of about ``_SIGNAL_CHECK_SECONDS``,
between which Python delivers KeyboardInterrupt (a single CTA runs to its end), or, for a
kernel with loops that spin on memory (which may never end), only waits. It sets the
launch's stop word, which ``run_ctas`` reads before each CTA and spinning loops every 64
passes, waits for the pool's ranges to end (they use the arguments' memory; a second
Ctrl-C is raised at once), and re-raises.

Per-parameter converters are chosen on first use of each argument type and cached; the
ctypes function object is built once per module.
"""
from __future__ import annotations

import ctypes
import math
import os
import queue
import struct
import threading
import time
from collections.abc import Callable, Sequence

from tilejit.errors import LaunchError, SourceLocation
from tilejit.ir.types import SCALAR_TYPES
from tilejit.targets.backend import cluster_grid_error

from . import abi
from .jit import CpuArtifact, load_object

_CORES = os.cpu_count() or 1  # os.cpu_count() costs microseconds: ask once
_CACHE_LIMIT = 256
_MAX_GRID_DIM = 2**31 - 1
_PARALLEL_MIN_SECONDS = 100e-6  # below this much work a launch stays on the calling thread
_SIGNAL_CHECK_SECONDS = 10e-3   # the calling thread returns to Python this often (Ctrl-C)
_CLAIMS_PER_WORKER = 16   # chunks per worker's share: finer balances load, coarser claims less
_UNLIMITED_CLAIMS = 2**62
_GRIDS: dict = {}
_RUN_CTAS = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p)
_ERR_BYTES = abi.ERR_SLOTS * 8


class _ErrorRecord:
    """A buffer the JIT'd code fills when a CTA fails, and its address for the args."""

    __slots__ = ("buffer", "address")

    def __init__(self):
        self.buffer = ctypes.create_string_buffer(_ERR_BYTES)
        self.address = ctypes.addressof(self.buffer)


# The stop word of launches on the calling thread alone: Python interrupts them between calls.
_NEVER_STOPPED = ctypes.c_int32(0)
_NEVER_STOPPED_ADDRESS = ctypes.addressof(_NEVER_STOPPED)


class _Pool:
    """Persistent worker threads, each fed through its own queue."""

    def __init__(self, size: int):
        self.queues = [queue.SimpleQueue() for _ in range(size)]
        for q in self.queues:
            threading.Thread(target=self._work, args=(q,), daemon=True,
                             name="tilejit-cpu-worker").start()

    @staticmethod
    def _work(jobs: queue.SimpleQueue) -> None:
        while True:
            fn, packed, results, index = jobs.get()
            results.put((index, fn(packed)))


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()
_LOCAL = threading.local()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _Pool(_CORES)
    return _POOL


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts its own pool."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _thread_error_record() -> _ErrorRecord:
    """The calling thread's error record (launches from several threads never share one)."""
    try:
        return _LOCAL.err
    except AttributeError:
        record = _LOCAL.err = _ErrorRecord()
        return record


class CpuModule:
    """A loaded kernel. ``launch(grid, args)`` runs it; ``args`` follow the kernel's
    parameters: numpy arrays or CPU torch tensors for global buffers, Python (or numpy)
    numbers for scalars."""

    def __init__(self, artifact: CpuArtifact):
        self.artifact = artifact
        self.meta = artifact.meta
        self._engine, address = load_object(artifact.obj, artifact.entry)
        self._run_ctas = _RUN_CTAS(address)
        # Where the kernel is defined: argument and grid errors point there.
        self.location = SourceLocation(self.meta["file"], self.meta["line"])
        self._params = [_Param(self.name, p, self.location) for p in self.meta["params"]]
        self._pack_records = _records_packer(struct.Struct(self.meta["struct_format"]).pack,
                                             self._params)
        self._seconds_per_cta = math.inf  # single-thread cost estimate from the last launch
        cluster = tuple(self.meta.get("cluster", (1, 1, 1)))
        self._cluster = cluster if cluster != (1, 1, 1) else None   # launches check the grid

    @property
    def name(self) -> str:
        return self.meta["name"]

    def launch(self, grid, args: Sequence, workers: int | None = None) -> None:
        """Run the kernel on ``grid`` (an int or a 1-3 tuple of CTA counts), checking every
        argument against the compiled parameters.

        ``workers`` caps the OS threads used (default: one per core).
        """
        try:
            grid = _GRIDS[grid]
        except (KeyError, TypeError):  # not seen yet, or a list
            grid = _grid3(grid, self.location)
        if len(args) != len(self._params):
            raise LaunchError(f"kernel {self.name!r} takes {len(self._params)} arguments, "
                              f"got {len(args)}", self.location)
        self.launch_records(grid, [param.record(arg) for param, arg in zip(self._params, args)],
                            workers)

    def launch_records(self, grid: tuple[int, int, int], records: Sequence,
                       workers: int | None = None) -> None:
        """Run the kernel on a checked 3-int grid with one launch record per parameter:
        ``(data address, *shape, *strides in elements)`` for a buffer, the value for a
        scalar. The caller vouches for the records (the runtime made them from arguments
        whose signature this binary was compiled for); this is the launch's hot path."""
        total = grid[0] * grid[1] * grid[2]
        if not total:
            return
        if self._cluster:
            split = cluster_grid_error(grid, self._cluster)
            if split:
                raise LaunchError(f"kernel {self.name!r}: {split}", self.location)
            total //= math.prod(self._cluster)   # run_ctas runs whole clusters
        if not (total == 1 or workers == 1 or (
                workers is None and total * self._seconds_per_cta < _PARALLEL_MIN_SECONDS)):
            self._launch_parallel(grid, records, total, min(total, _CORES, workers or total))
            return
        err = _thread_error_record()
        if total == 1:   # nothing to time: one CTA never goes to the pool
            status = self._run_ctas(self._pack(err, _NEVER_STOPPED_ADDRESS, grid, records,
                                               0, 1))
        else:
            start = time.perf_counter()
            status = self._run_here(_Claims(0, total), err, _NEVER_STOPPED_ADDRESS, grid,
                                    records)
            self._seconds_per_cta = (time.perf_counter() - start) / total
        if status:
            self._raise(status, err.buffer.raw)

    def _pack(self, err: _ErrorRecord, stop: int, grid, records, first: int, last: int,
              claims: _Claims | None = None, max_claims: int = 1) -> bytes:
        """The argument slots of a call that runs ``[first, last)``, or claims at most
        ``max_claims`` chunks of ``claims`` (then ``first`` is unused)."""
        claim, chunk = (claims.address, claims.chunk) if claims else (0, last - first)
        try:
            return self._pack_records(first, last, err.address, stop, claim, chunk,
                                      max_claims, grid, records)
        except (struct.error, OverflowError):  # e.g. a float beyond the f32 range
            raise self._unpackable(records) from None

    def _unpackable(self, records) -> LaunchError:
        """The error naming the argument whose value does not fit its parameter's slot."""
        for param, record in zip(self._params, records):
            if not param.is_buffer:
                try:
                    struct.pack("<" + abi.scalar_format(param.dtype), record)
                except (struct.error, OverflowError) as error:
                    return param.fail(f"= {record!r} cannot be passed as {param.dtype}: {error}")
        return LaunchError(f"kernel {self.name!r}: cannot pass the arguments {records!r}",
                           self.location)

    def _run_here(self, claims: _Claims, err: _ErrorRecord, stop: int, grid, records) -> int:
        """Run CTAs of ``claims`` on the calling thread in calls of about
        ``_SIGNAL_CHECK_SECONDS`` (sized by the last launch, else doubling from one chunk),
        so that Python can deliver Ctrl-C between them, until every CTA is claimed; the
        status of the first call that fails, else 0. Claims nobody shares are made here:
        each call runs the next range of about that size."""
        estimate = self._seconds_per_cta
        count = max(1, int(_SIGNAL_CHECK_SECONDS / estimate)) if estimate \
            else claims.last - claims.first
        while not claims.done():
            start = time.perf_counter()
            status = self._run_ctas(claims.pack(self, err, stop, grid, records, count))
            if status:
                return status
            if time.perf_counter() - start < _SIGNAL_CHECK_SECONDS / 2:
                count *= 2
        return 0

    def _launch_parallel(self, grid, records, total: int, workers: int) -> None:
        # The calling thread returns to Python between its chunks (Ctrl-C): none may take
        # much longer than that, by the last launch's cost per CTA (unknown: one CTA).
        estimate = self._seconds_per_cta
        longest = int(_SIGNAL_CHECK_SECONDS / 2 / estimate) if estimate else total
        claims = _Claims(0, total, shared_by=workers, longest=max(1, longest))
        errs = [_ErrorRecord() for _ in range(workers)]
        stop = ctypes.c_int32(0)
        stop_address = ctypes.addressof(stop)
        # A CTA spinning on memory may never end, and the calling thread must stay free to
        # take Ctrl-C: all of such a kernel's chunks go to the pool.
        here = 0 if self.meta["spin_loops"] else 1
        packed = [self._pack(errs[i], stop_address, grid, records, 0, total, claims,
                             _UNLIMITED_CLAIMS) for i in range(here, workers)]
        results: queue.SimpleQueue = queue.SimpleQueue()
        pool = _pool()
        start = time.perf_counter()
        for index in range(here, workers):
            pool.queues[index - here].put((self._run_ctas, packed[index - here], results,
                                           index))
        statuses, waiting = [0] * workers, workers - here
        try:
            if here:
                statuses[0] = self._run_here(claims, errs[0], stop_address, grid, records)
            while waiting:
                index, status = results.get()
                statuses[index], waiting = status, waiting - 1
        except KeyboardInterrupt:
            stop.value = 1
            for _ in range(waiting):   # the workers still use the arguments' memory
                results.get()
            raise
        self._seconds_per_cta = (time.perf_counter() - start) * workers / total
        # Workers claim CTAs in no fixed order: of those that failed, the lowest CTA is
        # reported, so that a kernel failing in every CTA names the same one each time.
        failed = [(status, err.buffer.raw) for status, err in zip(statuses, errs) if status]
        if failed:
            self._raise(*min(failed, key=lambda f: _failed_cta(f[1])))

    def _raise(self, status: int, record: bytes) -> None:
        raise run_time_error(self.meta, status, record)


class _Claims:
    """The CTAs ``[first, last)`` of a launch as the chunks ``run_ctas`` claims: through a
    counter that ``shared_by`` workers claim from together (chunks of about
    ``1 / _CLAIMS_PER_WORKER`` of a worker's share, at most ``longest`` CTAs), or, for one
    worker, ranges that the calling thread hands out itself (no shared counter)."""

    __slots__ = ("first", "last", "chunk", "counter", "address")

    def __init__(self, first: int, last: int, shared_by: int = 1, longest: int | None = None):
        self.first, self.last = first, last
        share = (last - first) // (shared_by * _CLAIMS_PER_WORKER)
        self.chunk = max(1, min(share, longest or share))
        self.counter = ctypes.c_int64(first) if shared_by > 1 else None
        self.address = ctypes.addressof(self.counter) if self.counter is not None else 0

    def done(self) -> bool:
        """Is every CTA claimed (the shared counter past ``last``, or no range left)?"""
        return (self.counter.value if self.counter is not None else self.first) >= self.last

    def pack(self, module: CpuModule, err: _ErrorRecord, stop: int, grid, records,
             count: int) -> bytes:
        """The slots of a call that runs about ``count`` more CTAs."""
        if self.counter is not None:
            return module._pack(err, stop, grid, records, self.first, self.last, self,
                                max(1, count // self.chunk))
        first, self.first = self.first, min(self.last, self.first + count)
        return module._pack(err, stop, grid, records, first, self.first)


def _records_packer(pack: Callable, params: list[_Param]) -> Callable:
    """``pack_records(first, last, err, stop, claim, chunk, max_claims, grid, records)``:
    the ``abi`` slots in one ``struct.pack`` call, written out for these parameters (buffer
    records spread). The evaluated text holds nothing but record indices, whatever the
    metadata says."""
    header = "first, last, err, stop, claim, chunk, max_claims"
    values = [f"{header}, *grid"] + [
        f"*records[{i}]" if p.is_buffer else f"records[{i}]" for i, p in enumerate(params)]
    return eval(f"lambda {header}, grid, records: pack({', '.join(values)})", {"pack": pack})


def _failed_cta(record: bytes) -> int:
    return struct.unpack(f"<{abi.ERR_SLOTS}q", record)[abi.ERR_CTA]


def run_time_error(meta: dict, status: int, record: bytes) -> LaunchError:
    """The LaunchError for an error record filled by the JIT'd code."""
    fields = struct.unpack(f"<{abi.ERR_SLOTS}q", record)
    site = meta["sites"][fields[abi.ERR_SITE]] if 0 <= fields[abi.ERR_SITE] < len(meta["sites"]) \
        else {"kind": "unknown", "file": meta["file"], "line": meta["line"], "col": 0}
    loc = SourceLocation(site["file"], site["line"], site["col"])
    where = f"in CTA {fields[abi.ERR_CTA]} ({meta['granularity']} unit {fields[abi.ERR_UNIT]})"
    values = fields[abi.ERR_VALUES:abi.ERR_VALUES + abi.MAX_REPORTED_DIMS]
    if status == abi.OUT_OF_BOUNDS:
        rank = site["rank"]
        index = list(values[:rank])
        dims = list(fields[abi.ERR_DIMS:abi.ERR_DIMS + rank])
        access = site.get("access", site["op"])   # a bounds_check names what it guards
        message = (f"kernel {meta['name']!r}: out-of-bounds {access} of {site['scope']} "
                   f"buffer {site['buffer']!r}: index {index} outside shape {dims} {where}")
    elif status == abi.DEADLOCK:
        message = (f"kernel {meta['name']!r}: deadlock {where}: every unit is waiting and none "
                   f"can make progress; the first waits at {site.get('what', site['op'])}")
        if site["op"] == "mbarrier_wait":
            message += f" index {values[0]} for phase parity {values[1] & 1}"
        message += f" (line {site['line']})"
    elif status == abi.RACE:
        message = _race_message(meta, site, fields)
    elif status == abi.MISALIGNED:
        message = (f"kernel {meta['name']!r}: misaligned {site['op']} of {values[1]} bytes at "
                   f"address {values[0]:#x} {where}: a GPU faults on it")
    elif status == abi.TENSOR_MAP:
        message = (f"kernel {meta['name']!r}: no tensor map describes {site['buffer']!r} for "
                   f"{site['op']} {where}: its stride in dim {values[0]} is {values[1]} bytes, "
                   "not a multiple of 16 (cuTensorMapEncodeTiled refuses it)")
    elif status == abi.TMEM:
        message = f"kernel {meta['name']!r}: {site['what'].format(*values)} {where}"
    elif status == abi.OUT_OF_MEMORY:
        message = (f"kernel {meta['name']!r}: cannot allocate {values[0]} bytes of memory "
                   f"(shared, or a unit's private arrays) {where}; use smaller tiles")
    else:
        message = f"kernel {meta['name']!r} failed with error code {status} {where}"
    return LaunchError(message, loc)


# What the two accesses of a race did: by ``race.READ/WRITE/ATOMIC`` (in the site) and
# ``race.PRIOR_*`` (in the record); the launcher does not import the emitters.
_RACE_ACCESS = {0: "read", 1: "wrote", 2: "updated (atomically)"}
_RACE_PRIOR = {1: "wrote", 2: "updated (atomically)", 3: "read"}
_PRIOR_WRITE_IN_FLIGHT = 4   # race.PRIOR_WRITE_IN_FLIGHT
# An asynchronous read a write raced with (by the op of its site): what issued it, and the
# wait before which its operand must not be written.
_IN_FLIGHT = {"wgmma_mma_async": ("wgmma", "the tj.wgmma_wait that retires its group"),
              "wgmma_mma_async_reg_a": ("wgmma", "the tj.wgmma_wait that retires its group"),
              "tcgen05_mma": ("tcgen05 multiply", "the wait on its tcgen05_commit's mbarrier"),
              "tma_store_at": ("TMA store", "the tj.bulk_wait that retires its bulk group")}


def _race_message(meta: dict, site: dict, fields) -> str:
    """SIMT mode's race detector found two unordered accesses of a shared element."""
    other, other_site, prior, element = fields[abi.ERR_VALUES:abi.ERR_VALUES + 4]
    sites = meta["sites"]
    before = sites[other_site] if 0 <= other_site < len(sites) else {"line": "?", "file": None}
    where = f"line {before['line']}"
    if before.get("file") and before["file"] != site["file"]:
        where += f" of {before['file']}"
    shape = site.get("shape")
    if shape and 0 <= element < math.prod(shape):
        indices, rest = [], element
        for extent in reversed(shape):
            indices.append(rest % extent)
            rest //= extent
        what = f"element {indices[::-1] if len(shape) > 1 else indices[0]}"
    else:
        what = f"element {element} (storage offset)"
    lines = sorted({before["line"], site["line"]}, key=lambda line: (str(line) == "?", line))
    fix = (f"between lines {lines[0]} and {lines[1]}" if len(lines) == 2
           else f"between two runs of line {lines[0]}")
    unit, barrier = fields[abi.ERR_UNIT], "tj.sync()"
    head = (f"kernel {meta['name']!r}: data race on shared buffer {site['buffer']!r} {what} "
            f"in CTA {fields[abi.ERR_CTA]}: ")
    per_cta, ctas = meta["units_per_cta"], meta.get("cluster_ctas", 1)
    if prior == _PRIOR_WRITE_IN_FLIGHT:
        issued, wait = _IN_FLIGHT.get(site["op"], (site["op"], "the wait that retires it"))
        return (f"{head}{_thread(other, per_cta, ctas)} wrote it at {where} while the "
                f"{issued} that {_thread(unit, per_cta, ctas)} issued at line {site['line']} could "
                f"still read it (the write came after the {issued} was issued and before "
                f"{wait}, so the hardware may read either value; write after that wait)")
    # In a cluster the detector counts the threads of all its CTAs, those of rank 0 first.
    if ctas > 1 and other // per_cta != unit // per_cta:
        barrier = "tj.cluster_sync()"
    return (f"{head}{_thread(other, per_cta, ctas)} "
            f"{_RACE_PRIOR.get(prior, '?')} it at {where} and {_thread(unit, per_cta, ctas)} "
            f"{_RACE_ACCESS.get(site['access'], '?')} it at line {site['line']} with no "
            f"barrier between (add {barrier}, or a barrier that orders these threads, {fix})")


def _thread(unit: int, per_cta: int, ctas: int) -> str:
    if ctas == 1:
        return f"thread {unit}"
    return f"thread {unit % per_cta} of the cluster's CTA of rank {unit // per_cta}"


def _grid3(grid, location: SourceLocation) -> tuple[int, int, int]:
    key = grid
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(grid) <= 3 or any(not isinstance(g, int) or not 0 <= g <= _MAX_GRID_DIM
                                      for g in grid):
        raise LaunchError(f"grid must be 1 to 3 ints in [0, {_MAX_GRID_DIM}] (CTA ids are "
                          f"32-bit), got {grid!r}", location)
    grid = grid + (1,) * (3 - len(grid))
    if isinstance(key, (int, tuple)) and len(_GRIDS) < _CACHE_LIMIT:
        _GRIDS[key] = grid
    return grid


class _Param:
    """Checks and packs one kernel argument. A converter is made per argument type, and the
    checked (shape, strides) of each tensor layout seen are cached: launching again with
    the same kind of arguments costs a few dictionary lookups."""

    def __init__(self, kernel: str, desc: dict, location: SourceLocation):
        self.kernel, self.desc, self.name, self.location = kernel, desc, desc["name"], location
        self.dtype = SCALAR_TYPES[desc["dtype"]]
        self.is_buffer = desc["kind"] == "buffer"
        self._converters: dict[type, object] = {}
        self._layouts: dict[tuple, tuple] = {}

    def record(self, arg):
        """The checked launch record of ``arg``."""
        if not self.is_buffer:
            return self._scalar(arg)
        convert = self._converters.get(type(arg))
        if convert is None:
            convert = self._converters[type(arg)] = self._buffer_converter(arg)
        return convert(arg)

    def fail(self, what: str) -> LaunchError:
        return LaunchError(f"kernel {self.kernel!r}: argument {self.name!r} {what}",
                           self.location)

    def _scalar(self, arg):
        t = self.dtype
        array = getattr(arg, "ndim", 0)   # a tensor or array (not 0-d): a buffer, no scalar
        if t.is_float:
            if isinstance(arg, (bool, str)) or not hasattr(arg, "__float__") or array:
                raise self.fail(f"must be a float, got {type(arg).__name__}")
            return float(arg)
        if not hasattr(arg, "__index__") or array:
            raise self.fail(f"must be an integer, got {type(arg).__name__}")
        value = int(arg)
        if t.is_bool:
            return bool(value)
        signed = t.kind == "int"
        low, high = (-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if signed else (0, 1 << t.bits)
        if not low <= value < high:
            raise self.fail(f"= {value} does not fit in {t}")
        return value

    def _buffer_converter(self, arg):
        module = type(arg).__module__
        if module.startswith("torch"):
            return self._torch_converter()
        if module == "numpy":
            return self._numpy_converter()
        raise self.fail(f"must be a numpy array or a CPU torch tensor, got {type(arg).__name__}")

    def _torch_converter(self):
        wanted, layouts = self.dtype.torch_dtype(), self._layouts

        def convert(t):
            if t.dtype != wanted:
                raise self.fail(f"has dtype {t.dtype}, the kernel was compiled for {wanted}")
            if not t.is_cpu:
                raise self.fail(f"is on {t.device}; the CPU target needs CPU tensors")
            if t.is_neg():   # a lazily negated view: its memory holds -values
                raise self.fail("has torch's negative bit set, so kernels would read it with "
                                "the wrong sign; pass .resolve_neg()")
            shape, strides = t.shape, t.stride()
            return (t.data_ptr(), *(layouts.get((shape, strides))
                                    or self._layout(shape, strides, 1)))
        return convert

    def _numpy_converter(self):
        try:
            wanted = self.dtype.numpy_dtype()
        except TypeError:
            raise self.fail(f"is {self.dtype}, which numpy cannot hold; pass a torch "
                             "tensor") from None
        itemsize, layouts, data = wanted.itemsize, self._layouts, numpy_data_pointer

        def convert(a):
            if a.dtype != wanted:
                raise self.fail(f"has dtype {a.dtype}, the kernel was compiled for {wanted}")
            shape, strides = a.shape, a.strides
            return (data(a), *(layouts.get((shape, strides))
                               or self._layout(shape, strides, itemsize)))
        return convert

    def _layout(self, shape, strides, stride_unit: int) -> tuple:
        """Check a tensor layout against the compiled one; return its slot values."""
        if any(s % stride_unit for s in strides):
            raise self.fail(f"has strides {tuple(strides)} bytes, not whole elements")
        elements = tuple(s // stride_unit for s in strides)
        desc = self.desc
        expected_strides = desc["strides"] or [None] * len(desc["shape"])
        if len(shape) != len(desc["shape"]) or any(
                e is not None and a != e
                for a, e in zip((*shape, *elements), (*desc["shape"], *expected_strides))):
            raise self.fail(f"has shape {list(shape)} and strides {list(elements)}; the kernel "
                             f"was compiled for shape {_dims(desc['shape'])} and strides "
                             f"{_dims(expected_strides)}")
        fields = (*shape, *elements)
        if len(self._layouts) < _CACHE_LIMIT:
            self._layouts[(shape, strides)] = fields
        return fields


def _dims(values) -> str:
    return "[" + ", ".join("?" if v is None else str(v) for v in values) + "]"


def _numpy_data_pointer_from_header(a) -> int:
    """``PyArray_DATA(a)``: the first field after the object header of an ndarray (numpy's
    stable C layout) -- ten times cheaper than ``a.__array_interface__``."""
    return _VOID_P.from_address(id(a) + _OBJECT_HEADER).value


def _numpy_data_pointer_slow(a) -> int:
    return a.__array_interface__["data"][0]


def _choose_numpy_data_pointer():
    import numpy
    probe = numpy.arange(6.0)[1::2]
    if _numpy_data_pointer_from_header(probe) == _numpy_data_pointer_slow(probe):
        return _numpy_data_pointer_from_header
    return _numpy_data_pointer_slow


_VOID_P = ctypes.c_void_p
_OBJECT_HEADER = object.__basicsize__
numpy_data_pointer = _choose_numpy_data_pointer()
