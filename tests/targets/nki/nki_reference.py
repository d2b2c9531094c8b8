"""A numpy reference of exactly the NKI subset tilejit emits, to run emitted modules here.

``neuronx-cc`` / ``nki`` are not installable here, so an emitted module (``asm["nki"]``) is
executed by :func:`run` with ``nki``, ``nki.language`` and ``nki.isa`` bound to this
reference for the duration of the call. The reference is pinned to the current NKI API
(NKI 0.6, Neuron 2.32: ``import nki``; every ``nisa.*`` takes its destination first; outputs
in ``nl.shared_hbm``) and checks the limits the NKI documentation states, raising
:class:`NkiReferenceError` that names the call, the kernel line and the limit.

Sources: the NKI API pages of the Neuron docs (awsdocs-neuron.readthedocs-hosted.com,
v2.30-v2.33: nki/api/generated/nki.isa.<name>.html for nc_matmul, nc_transpose, dma_copy,
tensor_copy, tensor_tensor, tensor_scalar, activation, tensor_reduce, iota, affine_select,
memset; nki.language.ndarray, affine_range, NkiTensor; nki/api/nki.errors.html), the
migration guides (v2.32.0 nki/migration/index.html: NKI 0.6 is Neuron 2.32) and "NKI
Loops" (nki/deep-dives/nki-loops.html). Read for their meaning only; the code is ours.

The contract (what the emitter writes; additions later, no changes)
=====================================================================
Module::

    import nki
    import nki.language as nl
    import nki.isa as nisa

    @nki.jit
    def kernel_name(a, b):          # inputs: HBM tensors, shapes fixed at specialization
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        ...
        return out                  # one tensor, or a tuple of them, all in nl.shared_hbm

Only ``import nki`` / ``import nki.language as nl`` / ``import nki.isa as nisa`` (and
``import math``) at module level; one or more ``@nki.jit`` functions (plain module-level
helper functions called from a kernel are fine).

Buffers and dtypes:

- ``nl.ndarray(shape, dtype=..., buffer=nl.sbuf | nl.psum | nl.shared_hbm)``; ``nl.hbm``
  and ``nl.private_hbm`` are HBM too. Axis 0 of an SBUF/PSUM tile is the partition axis.
- dtypes ``nl.float32``, ``nl.bfloat16``, ``nl.float16``, ``nl.int32`` (also ``nl.uint32``,
  ``nl.int8``, ``nl.uint8``). bfloat16 values are rounded to nearest even on every write.
- A tensor is indexed with static integers and slices only: ``t[0:128, k * 512:(k + 1) *
  512]`` (loop variables are plain ints), ``nl.ds(start, size)`` is ``slice(start,
  start + size)``. Out-of-bounds, negative, or stepped slices raise. An integer index drops
  that axis, except axis 0 of an SBUF/PSUM tile (the partition axis must stay a slice).
- ``t.shape``, ``t.dtype``, ``t.buffer`` read like NKI tensors; ``nl.tile_size.pmax``
  (128), ``.psum_fmax`` (512), ``.gemm_stationary_fmax`` (128), ``.gemm_moving_fmax`` (512).
- Instructions accept ``name=`` and ignore it; unknown keywords are a TypeError.

Loops: ``for i in range(n)`` and ``nl.sequential_range(n)`` run in order;
``nl.affine_range(start, stop, step)`` claims no loop-carried dependence other than
associative reductions (nc_matmul accumulating into PSUM; ``tensor_tensor`` with dst equal
to one of its inputs and op add/multiply/maximum/minimum). The reference runs its
iterations in a seeded, deterministic shuffled order that never starts with the first
iteration (when there are 2 or more), so a false claim gives a wrong result; and an
iteration that reads or writes elements of a tensor allocated outside the loop that another
iteration wrote (other than by such a reduction) raises. A tile used by each iteration on
its own is allocated inside the loop. ``nl.static_range`` runs in order.

Launch grid: ``nl.program_id(axis)`` / ``nl.num_programs(axis)`` are Python ints, the
program's index and the grid's extent on ``axis`` (``run(..., grid=(n, ...))`` runs one
program per point, in a shuffled order; without a grid, program 0 of 1). A shared_hbm
tensor is one tensor for all programs: programs write disjoint parts of it.

Instructions (keyword arguments as spelled here; ``dst`` first)::

    nisa.dma_copy(dst=, src=)
        HBM <-> SBUF (or HBM -> HBM, SBUF -> SBUF); never PSUM. Same element count; the
        data is copied in C order (so shapes may differ), cast src -> fp32 -> dst dtype.
    nisa.tensor_copy(dst=, src=)
        SBUF/PSUM -> SBUF/PSUM, same partition count and elements per partition.
    nisa.nc_matmul(dst=, stationary=, moving=, accumulate=None)
        dst[M, N] (+)= stationary[K, M].T @ moving[K, N]. stationary, moving in SBUF; dst in
        PSUM, float32. K equal on both, <= 128; M (stationary free size) <= 128; N (moving
        free size) <= 512 (one 2 KiB PSUM bank of fp32); inputs bfloat16/float16/float32
        (float32 only with float32); products summed in fp32.
        accumulate=False overwrites, True adds to dst, None (the default, and what the
        emitter should use) overwrites the PSUM locations no nc_matmul has written since
        the tile was allocated and adds to the others: allocate the PSUM accumulator where
        the output tile starts (inside its m/n loops), then loop k. A matmul that would
        accumulate onto a location last written by another instruction (memset,
        tensor_copy, ...) raises: the docs call that undefined.
    nisa.nc_transpose(dst=, data=)
        dst[F, P] = data[P, F]; on the Tensor Engine (data SBUF, dst PSUM, P, F <= 128) or,
        when dst is not in PSUM, the Vector Engine (P, F <= 32); engine=nisa.engine.tensor
        or .vector forces one. dst dtype == data dtype.
    nisa.tensor_tensor(dst=, data1=, data2=, op=)
        op in nl.add, subtract, multiply, divide, maximum, minimum, power, equal,
        not_equal, greater, greater_equal, less, less_equal (1.0 / 0.0). Inputs not both in
        PSUM (and neither in PSUM for power); same partition count and elements per
        partition. fp32 math (integer tiles natively), cast to dst.dtype.
    nisa.tensor_scalar(dst=, data=, op0=, operand0=, reverse0=False, op1=None,
                       operand1=None, reverse1=False)
        (data op0 operand0) op1 operand1 in fp32; each operand a Python number or a
        float32 [P, 1] tile in SBUF/PSUM broadcast along the free axes; reverse swaps its
        sides.
    nisa.activation(dst=, op=, data=, bias=None, scale=1.0, reduce_op=None,
                    reduce_res=None, reduce_cmd=nisa.reduce_cmd.idle)
        dst = op(data * scale + bias) in fp32; scale a number or a float32 [P, 1] tile,
        bias a number or a float32/float16/bfloat16 [P, 1] tile. op in nl.exp, log, copy,
        square, sqrt, rsqrt, reciprocal, tanh, sigmoid, relu, silu, abs. With
        reduce_op=nl.add: reduce_cmd reset/reduce/reset_reduce drive 128 per-partition
        fp32 registers (persisting across calls in a run) and reduce_res [P, 1] receives
        them.
    nisa.tensor_reduce(dst=, op=, data=, axis=, negate=False, keepdims=False)
        op in nl.add, maximum, minimum, multiply over axis (an int or tuple) = the last
        free axes, never 0; dst holds the remaining elements per partition.
    nisa.iota(dst=, pattern=[[step, num], ...], offset=0, channel_multiplier=0)
        dst[p, i...] = offset + p * channel_multiplier + sum(i_j * step_j); dst in SBUF.
    nisa.affine_select(dst=, pattern=, channel_multiplier=, on_true_tile=,
                       on_false_value=, cmp_op=nl.equal, offset=0)
        dst = on_true where cmp_op(affine value as in iota, 0) else on_false_value; SBUF.
    nisa.memset(dst=, value=)
        dst in SBUF or PSUM.

Every compute instruction (all but dma_copy) reads and writes SBUF/PSUM only.

What the reference enforces
===========================
- Partition axis <= 128 for every SBUF/PSUM tile (and every instruction operand).
- SBUF: 192 KiB per partition across live tiles (24 MiB in all). PSUM: tiles take whole
  2 KiB banks (a tile's free bytes per partition rounded up; [P, 512] fp32 is one bank,
  [P, 2, 512] or [P, 1024] two), at most 8 banks (16 KiB per partition) live; a matmul's
  dst lies inside one bank. A tile is live while the kernel references it.
- Fresh SBUF/PSUM/shared_hbm tensors are filled with NaN (integers: -0x5EED5EED) so a read
  of unwritten data shows; :func:`run` raises if an output has elements never written, and
  ``strict_reads=True`` makes any read of a never-written element raise.
- The placement and shape rules listed with each instruction above.
- The affine_range shuffle and carried-dependence check above.

Errors name tensors by the variable their ``nl.ndarray`` binds (inputs by parameter name).
"""
from __future__ import annotations

import inspect
import itertools
import random
import sys
import types
from contextlib import contextmanager

import numpy as np

import nki_ref_isa as isa
import nki_ref_memory as mem
from nki_ref_memory import NkiReferenceError

__all__ = ["run", "NkiReferenceError", "ReferenceRun"]


class ReferenceRun:
    """The state of one :func:`run`: the memory accountant, the loop shuffler and the
    Scalar Engine's reduce registers."""

    def __init__(self, filename: str, seed: int, strict_reads: bool):
        self.memory = mem.Memory(filename, strict_reads)
        self.rng = random.Random(seed)
        self.reduce_regs = np.zeros(128, dtype=np.float32)
        self.grid: tuple[int, ...] = (1,)
        self.program: tuple[int, ...] = (0,)
        self.affine_orders: list[list[int]] = []   # what each affine_range ran, for tests

    def affine_order(self, values: list[int]) -> list[int]:
        order = list(values)
        self.rng.shuffle(order)
        if len(order) > 1 and order[0] == values[0]:
            # Never start with the first iteration: "iteration 0 initializes" is the most
            # common false claim, and a shuffle that keeps it first would hide it.
            j = self.rng.randrange(1, len(order))
            order[0], order[j] = order[j], order[0]
        self.affine_orders.append(order)
        return order


def _range_values(start, stop, step, name) -> list[int]:
    if stop is None:
        start, stop = 0, start
    for v in (start, stop, step):
        if not isinstance(v, (int, np.integer)):
            raise NkiReferenceError(f"nl.{name}", f"bounds must be static integers, got {v!r}")
    return list(range(int(start), int(stop), int(step)))


def _affine_iterations(loops: list, loop, order: list[int], values: list):
    # The loop is "running" (its tensors' carried-dependence checks apply) while the
    # kernel iterates it.
    loops.append(loop)
    try:
        for i in order:
            loop.current = i
            yield values[i]
    finally:
        loops.remove(loop)


def _language_module(state: ReferenceRun) -> types.ModuleType:
    nl = types.ModuleType("nki.language")
    for name, dtype in mem.DTYPES.items():
        setattr(nl, name, dtype)
    for buffer in mem.BUFFERS.values():
        setattr(nl, buffer.name, buffer)
    for name, op in isa.OPS.items():
        setattr(nl, name, op)

    def ndarray(shape, dtype, buffer=mem.BUFFERS["sbuf"], name=""):
        return state.memory.allocate(tuple(shape), dtype, buffer, name)

    def affine_range(start, stop=None, step=1):
        values = _range_values(start, stop, step, "affine_range")
        loop = mem.AffineLoop(
            len(state.affine_orders), f"the nl.affine_range at kernel line {mem.kernel_line()}",
            [f"iteration {v}" for v in values],
            "allocate {name} inside the loop, or use nl.sequential_range")
        order = state.affine_order(list(range(len(values))))
        return _affine_iterations(state.memory.loops, loop, order, values)

    def sequential_range(start, stop=None, step=1):
        return iter(_range_values(start, stop, step, "sequential_range"))

    def static_range(start, stop=None, step=1):
        return iter(_range_values(start, stop, step, "static_range"))

    def ds(start, size):
        return slice(start, start + size)

    def _grid_axis(name, axis):
        if not isinstance(axis, int) or not 0 <= axis < len(state.grid):
            raise NkiReferenceError(f"nl.{name}", f"axis {axis!r} of a {len(state.grid)}-D "
                                                  f"launch grid {state.grid}")
        return axis

    def program_id(axis):
        return state.program[_grid_axis("program_id", axis)]

    def num_programs(axis):
        return state.grid[_grid_axis("num_programs", axis)]

    nl.ndarray, nl.ds, nl.program_id, nl.num_programs = ndarray, ds, program_id, num_programs
    nl.affine_range, nl.sequential_range, nl.static_range = (
        affine_range, sequential_range, static_range)
    nl.tile_size = types.SimpleNamespace(pmax=128, psum_fmax=512, gemm_stationary_fmax=128,
                                         gemm_moving_fmax=512)
    return nl


def _jit(fn=None, **_options):
    # @nki.jit and @nki.jit(...) both mark a kernel; the reference calls it directly.
    if fn is None:
        return lambda f: _jit(f)
    fn.__nki_kernel__ = True
    return fn


@contextmanager
def _bound_modules(state: ReferenceRun):
    nl = _language_module(state)
    nisa = isa.isa_module(state)
    nki = types.ModuleType("nki")
    nki.jit, nki.language, nki.isa = _jit, nl, nisa
    names = ("nki", "nki.language", "nki.isa")
    saved = {n: sys.modules.get(n) for n in names}
    sys.modules.update({"nki": nki, "nki.language": nl, "nki.isa": nisa})
    try:
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def _launch(state: ReferenceRun, kernel, args: list, grid: tuple[int, ...]):
    """The kernel's result, once per program of ``grid`` (the programs' results name the
    same shared tensors)."""
    if not grid:
        return kernel(*args)
    if not all(isinstance(n, int) and n > 0 for n in grid):
        raise NkiReferenceError("run", f"grid {grid} must be positive ints")
    points = list(itertools.product(*(range(n) for n in grid)))
    loop = mem.AffineLoop(-1, "the launch grid", [f"program {p}" for p in points],
                          "programs write disjoint parts of a shared tensor", is_grid=True)
    state.grid = grid
    result = None
    for i in _affine_iterations(state.memory.loops, loop,
                                state.affine_order(list(range(len(points)))), points):
        state.program = i
        result = kernel(*args)
    return result


def run(module_source: str, kernel_name: str, *inputs, grid: tuple[int, ...] = (),
        seed: int = 0, strict_reads: bool = False, state: ReferenceRun | None = None):
    """Exec ``module_source`` against the reference and call ``kernel_name(*inputs)``.

    Inputs are numpy arrays or CPU torch tensors (copied into HBM tensors of the matching
    NKI dtype; float64 is taken as float32). Returns the kernel's output(s) as numpy arrays
    (bfloat16 values in float32).
    ``grid``: run the kernel once per program of this launch grid (``nl.program_id(axis)``,
    ``nl.num_programs(axis)``), in a shuffled order like affine_range's; its shared_hbm
    tensors are one per allocation site for all programs, and two programs touching the
    same elements of one is an error. Without a grid there is one program, id 0 of 1.
    ``seed`` picks the shuffled orders; ``state`` lets a test inspect the run."""
    filename = f"<nki:{kernel_name}>"
    state = state or ReferenceRun(filename, seed, strict_reads)
    state.memory.filename = filename
    state.memory.source_lines = module_source.splitlines()
    with _bound_modules(state):
        namespace: dict = {"__name__": f"nki_kernel_{kernel_name}"}
        exec(compile(module_source, filename, "exec"), namespace)
        kernel = namespace.get(kernel_name)
        if kernel is None or not getattr(kernel, "__nki_kernel__", False):
            raise NkiReferenceError("run", f"no @nki.jit function {kernel_name!r} in the module")
        params = list(inspect.signature(kernel).parameters)
        if len(params) != len(inputs):
            raise NkiReferenceError("run", f"{kernel_name} takes {len(params)} inputs "
                                           f"({', '.join(params)}), {len(inputs)} given")
        args = [state.memory.from_host(x, p) for p, x in zip(params, inputs)]
        result = _launch(state, kernel, args, tuple(grid))
    outputs = result if isinstance(result, tuple) else (result,)
    arrays = []
    for i, out in enumerate(outputs):
        if not isinstance(out, mem.Tensor) or out.buffer is not mem.BUFFERS["shared_hbm"]:
            where = getattr(getattr(out, "buffer", None), "name", type(out).__name__)
            raise NkiReferenceError(
                "return", f"output {i} must be an nl.shared_hbm tensor, got {where}")
        unwritten = int(np.count_nonzero(~out.written()))
        if unwritten:
            raise NkiReferenceError(
                "return", f"output {i} {out.shape}: {unwritten} element(s) never written")
        arrays.append(out.to_numpy())
    return tuple(arrays) if isinstance(result, tuple) else arrays[0]
