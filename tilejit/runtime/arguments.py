"""Launch arguments: their cheap signatures, which target they ask for, what is wrong with them.

A launch summarizes each argument in a *signature* (:func:`facts_of`): a small hashable
value holding exactly what the compiled code may depend on (dtype, rank, device, 16-byte
alignment, unit innermost stride and whether it holds :data:`INDEX64_ELEMENTS` elements or
more for arrays; i32/i64/f32/i1 and divisibility by 16 for scalars; type and value for
compile-time values). Two calls with equal signatures can run the same binary, so
``Kernel`` finds its binary with one dict lookup, and hands the backend the argument's
*record* made at the same time (pointer, shape and strides of an array).
Everything else here runs only when that lookup misses, and raises ``LaunchError`` naming
the argument before anything runs.

So a tensor the compiled code cannot take *recompiles* when it differs in what the code
assumed (dtype, rank, device, alignment, a unit innermost stride), and is a ``LaunchError``
only where no binary could take it: negative strides, strides that are not whole elements,
torch's negative bit, an unsupported dtype or argument type. The signature also says
whether an array can take writes (:func:`check_written`): a read-only numpy array, or one
whose elements may share addresses, is refused for a parameter the kernel writes.
"""
from __future__ import annotations

import math
import operator
import sys
import textwrap
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import LaunchError, SourceLocation
from ..frontend.dependencies import is_layout
from ..frontend.language import constexpr
from ..frontend.signature import ArgSpec
from ..ir import types
from ..targets.backend import get_backend, target_for_devices

_GRID_CACHE_LIMIT = 1024
MAX_GRID_DIM = 2**31 - 1   # CTA ids are 32-bit in kernels (CUDA's limit for x, too)
# A tensor of this many elements or more makes the kernel compute CTA ids, and the index
# math built on them, in 64 bits (``ArgSpec.index64``). It is 2^30, not 2^31, so that
# 32-bit math stays exact for indices up to 2^30 past a tensor's end (``base + BLOCK`` of
# the last tile; a loop bound a tile beyond).
INDEX64_ELEMENTS = 2**30


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument for ``kernel.compile`` without data: shape, dtype, strides."""

    shape: tuple
    dtype: Any
    strides: tuple | None = None
    device: str = "cpu"
    aligned16: bool = True

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.strides is None:
            strides, step = [], 1
            for dim in reversed(self.shape):
                strides.append(step)
                step *= dim
            object.__setattr__(self, "strides", tuple(reversed(strides)))
        object.__setattr__(self, "strides", tuple(self.strides))


# -- facts: signature and launch record (the per-launch hot path) ---------------------------
# ``facts(type(value), facts_of)(value) -> (signature, record)``. The record is what the
# backend's ``launch(grid, records)`` takes for the argument: ``(data address, *shape,
# *strides in elements)`` for an array, the value itself for a scalar. Both come from one
# function so that a launch asks a tensor for its pointer, shape and strides once.

# A torch tensor's facts as statements: the generated launcher inlines them for plain
# torch.Tensor arguments (a function call would cost a fifth more), ``_torch_facts`` runs
# the same text for every other route. get_device() is -1 on the CPU and the index on CUDA:
# it tells apart both the target and the GPU, at a fifth of the cost of t.device. The last
# two facts are for refusals on the miss: torch's negative bit (``z.conj().imag`` stands for
# the negated values in its memory, which a kernel would read as they are), and whether
# the tensor is *writable*: no two elements may share an address, which only a
# non-contiguous tensor can break (CTAs writing them race; reading them is fine). The common
# 1-D tensor is told contiguous by its strides, without a call.
_TORCH_FACTS = """\
{strides} = {t}.stride()
{address} = {t}.data_ptr()
{signature} = ({t}.dtype, {t}.get_device(), not {address} & 15, len({strides}),
               {strides}[-1:] == (1,), {t}.numel() >= {index64_elements}, {t}.is_neg(),
               {strides} == (1,) or {t}.is_contiguous()
               or not _tj_may_overlap({t}.shape, {strides}))
{record} = ({address}, *{t}.shape, *{strides})"""


def torch_facts_code(tensor: str, signature: str, record: str, indent: str) -> str:
    """The statements setting ``signature`` and ``record`` for the tensor named ``tensor``
    (temporaries are named after ``record``)."""
    text = _TORCH_FACTS.format(t=tensor, signature=signature, record=record,
                               strides=f"{record}_strides", address=f"{record}_address",
                               index64_elements=INDEX64_ELEMENTS)
    return textwrap.indent(text, indent)


def may_self_overlap(shape, strides) -> bool:
    """Whether two elements of an array of this shape and these strides may share an
    address. Exact for a zero stride (over two or more elements) and for the layouts that
    slicing, transposing and padding make, in which each stride clears the span of the
    smaller ones; any other layout (``unfold`` windows) counts as overlapping. Remembered
    per (shape, strides): only non-contiguous arrays ask, but they ask on every launch."""
    key = (shape, strides)
    known = _OVERLAPS.get(key)
    if known is None:
        known = _interleaved(shape, strides)
        if len(_OVERLAPS) < _FACTS_CACHE_LIMIT:
            _OVERLAPS[key] = known
    return known


def _interleaved(shape, strides) -> bool:
    """The test of ``may_self_overlap`` (strides taken by size: a reversed dimension
    addresses the same elements)."""
    if 0 in shape:
        return False
    span = 0   # the largest offset the dimensions of smaller strides reach
    for stride, size in sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1):
        if stride <= span:
            return True
        span += stride * (size - 1)
    return False


_OVERLAPS: dict[tuple, bool] = {}
# The globals the torch facts statements read (the launcher is given them too).
TORCH_FACTS_GLOBALS = {"_tj_may_overlap": may_self_overlap}


def _make_torch_facts() -> Callable[[Any], tuple]:
    source = "def _torch_facts(t):\n" + torch_facts_code("t", "signature", "record", "    ") + \
        "\n    return signature, record\n"
    namespace: dict[str, Any] = dict(TORCH_FACTS_GLOBALS)
    exec(compile(source, "<tilejit torch facts>", "exec"), namespace)
    return namespace["_torch_facts"]


_torch_facts = _make_torch_facts()


_NUMPY_LAYOUTS: dict[tuple, tuple | None] = {}
_UNSEEN = object()


def _numpy_layout(strides: tuple, dtype) -> tuple | None:
    """(signatures[16-byte aligned][writable][index64], strides in elements) of an ndarray
    with these byte strides and dtype; None unless all strides are whole, non-negative
    elements. Remembered per (strides, dtype). (Whether the array can take writes -- it is writable
    and no two of its elements may share an address -- is in the signature so that one
    that cannot takes the slow path, which refuses it for a parameter the kernel writes.)"""
    layout, itemsize = None, dtype.itemsize
    if all(s >= 0 and s % itemsize == 0 for s in strides):
        elements = tuple(s // itemsize for s in strides)
        signatures = tuple(tuple(tuple(("ndarray", dtype, aligned, len(strides),
                                        elements[-1:] == (1,), writable, index64)
                                       for index64 in (False, True))
                                 for writable in (False, True))
                           for aligned in (False, True))
        layout = signatures, elements
    if len(_NUMPY_LAYOUTS) < _FACTS_CACHE_LIMIT:
        _NUMPY_LAYOUTS[strides, dtype] = layout
    return layout


def _numpy_facts(a) -> tuple:
    strides, dtype, address = a.strides, a.dtype, _numpy_address(a)
    layout = _NUMPY_LAYOUTS.get((strides, dtype), _UNSEEN)
    if layout is _UNSEEN:
        layout = _numpy_layout(strides, dtype)
    if layout is None:   # arg_spec_of names what is wrong
        return ("ndarray", "unusable strides", strides), None
    signatures, elements = layout
    flags = a.flags
    writable = flags.writeable and (flags.c_contiguous or not may_self_overlap(a.shape, elements))
    signature = signatures[not address & 15][writable][a.size >= INDEX64_ELEMENTS]
    return signature, (address, *a.shape, *elements)


def _spec_facts(spec: TensorSpec) -> tuple:
    return ("spec", spec), None   # TensorSpecs compile; they never launch


def _int_facts(value: int) -> tuple:
    # The "/16" signatures tell the compiler the value is a multiple of 16.
    if -2147483648 <= value <= 2147483647:
        return ("i32" if value & 15 else "i32/16"), value
    if -9223372036854775808 <= value <= 9223372036854775807:
        return ("i64" if value & 15 else "i64/16"), value
    return ("int beyond 64 bits", value), None   # arg_spec_of names the argument


def _bool_facts(value: bool) -> tuple:
    return "i1", value


def _float_facts(value: float) -> tuple:
    return "f32", value


def _constexpr_facts(value: constexpr) -> tuple:
    return ("constexpr", exact(value.value)), None


def _unsupported_facts(value: Any) -> tuple:
    return ("unsupported", type(value)), None   # arg_spec_of rejects it with the argument's name


_FACTS_CACHE_LIMIT = 1024
_FACTS: dict[type, Callable[[Any], tuple]] = {
    bool: _bool_facts, int: _int_facts, float: _float_facts,
    constexpr: _constexpr_facts, TensorSpec: _spec_facts,
}


def facts_of(value: Any) -> tuple:
    """The facts of an argument of a type not seen yet; its type is remembered."""
    if _is_tensor(value):
        facts = _torch_facts
    elif is_ndarray(value):
        _use_fast_numpy_address()
        facts = _numpy_facts
    elif isinstance(value, bool) or _is_numpy_scalar(value, "bool_"):
        facts = _bool_facts
    elif isinstance(value, int) or _is_numpy_scalar(value, "integer"):
        facts = _int_facts
    elif isinstance(value, float) or _is_numpy_scalar(value, "floating"):
        facts = _float_facts
    else:
        facts = _unsupported_facts
    _FACTS[type(value)] = facts
    return facts(value)


facts = _FACTS.get   # facts(type(v), facts_of)(v): the launch's dispatch


def exact(value: Any) -> Any:
    """``value`` as a dict-key part that also tells apart values Python calls equal
    (``1``, ``1.0``, ``True``; ``(1,)`` and ``(True,)``)."""
    cls = type(value)
    if cls is tuple or cls is list:
        return (cls, *(exact(v) for v in value))
    if cls is constexpr:
        return (cls, exact(value.value))
    return (cls, value)


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")   # a tensor means torch is loaded: never imported here
    return torch is not None and isinstance(value, torch.Tensor)


def is_ndarray(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def _is_numpy_scalar(value: Any, kind: str) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, getattr(numpy, kind))


def _numpy_address(a) -> int:
    return a.__array_interface__["data"][0]


def _use_fast_numpy_address() -> None:
    """The CPU backend (which every numpy argument is launched on) reads an ndarray's data
    pointer five times faster than ``__array_interface__``."""
    global _numpy_address
    from ..targets.cpu.launch import numpy_data_pointer
    _numpy_address = numpy_data_pointer


# -- checks made when the signature lookup misses -----------------------------------------
def device_of(value: Any) -> str | None:
    """'cpu' / 'cuda' / ... for array-like arguments, None for scalars."""
    if _is_tensor(value):
        return value.device.type
    if is_ndarray(value):
        return "cpu"
    if isinstance(value, TensorSpec):
        return value.device
    return None


def choose_target(bound: dict, explicit: str | None, default: str | None, kernel: str) -> str:
    """``target=`` beats ``TILEJIT_TARGET`` (``default``) beats the tensors' device."""
    target = explicit or default
    if target is None:
        return target_for_devices({device_of(v) for v in bound.values()} - {None})
    try:
        get_backend(target)
    except LaunchError as err:
        raise LaunchError(f"{kernel}: {err.message}") from None
    return target


def check_devices(bound: dict, target: str, kernel: str) -> None:
    """Tensors must all sit on one device, and it must be the target's."""
    placed = {name: _device_name(v) for name, v in bound.items() if device_of(v) is not None}
    if len(set(placed.values())) > 1:
        listing = ", ".join(f"{n!r} on {d}" for n, d in placed.items())
        raise LaunchError(f"{kernel}: tensors are on different devices ({listing})")
    wanted = get_backend(target).device
    for name, value in bound.items():
        device = device_of(value)
        if wanted is not None and device is not None and device != wanted:
            raise LaunchError(f"{kernel}: argument {name!r} is on {device} but the kernel "
                              f"is compiled for target {target!r} (needs {wanted} tensors)")


def _device_name(value: Any) -> str:
    return str(value.device) if _is_tensor(value) else device_of(value)


def arg_spec_of(value: Any, name: str, kernel: str, specialize: bool = True,
                static_shape: bool = False) -> ArgSpec:
    """What the compiler may assume about ``value``: read off its signature, so it is
    exactly what the launch's lookup key holds. (Sizes and strides divisible by 16 are not
    in it: testing every one on every launch would cost a microsecond.) ``static_shape``:
    a tensor's sizes too, for a target that compiles per shape (its kernels launch
    nothing here, so no launch's lookup key needs them)."""
    signature = facts(type(value), facts_of)(value)[0]
    if signature in _SCALAR_SIGNATURES:
        dtype, div16 = _SCALAR_SIGNATURES[signature]
        return ArgSpec.scalar(dtype, div16=div16 and specialize)
    if _is_tensor(value):
        dtype, _, aligned, rank, unit_stride, index64, negative, _ = signature
        if negative:
            raise LaunchError(f"{kernel}: argument {name!r} has torch's negative bit set (a "
                              "lazily negated view, as z.conj().imag makes); kernels read its "
                              f"memory as it is, with the wrong sign: pass {name}.resolve_neg()")
    elif is_ndarray(value):
        if signature[1] == "unusable strides":
            raise _unusable_strides(value, name, kernel)
        _, dtype, aligned, rank, unit_stride, _, index64 = signature
    elif isinstance(value, TensorSpec):
        if any(s < 0 for s in value.strides):
            raise LaunchError(f"{kernel}: argument {name!r} has negative strides "
                              f"{value.strides}, which kernels cannot take")
        dtype, aligned, rank = value.dtype, value.aligned16, len(value.shape)
        unit_stride = value.strides[-1:] == (1,)
        index64 = math.prod(value.shape) >= INDEX64_ELEMENTS
    elif signature[0] == "int beyond 64 bits":
        raise LaunchError(f"{kernel}: argument {name!r} = {value} does not fit in 64 bits")
    else:
        raise LaunchError(f"{kernel}: argument {name!r} has type {type(value).__name__}; "
                          "expected a torch tensor, numpy array, tj.TensorSpec, int, float, "
                          "bool or tj.constexpr")
    scalar = types.scalar_type_of(dtype)
    if scalar is None:
        raise LaunchError(f"{kernel}: argument {name!r} has dtype {dtype}, which tilejit "
                          "does not support")
    shape = tuple(int(n) for n in value.shape) if static_shape else None
    if not specialize:   # index64 is no specialization: 32-bit index math would be wrong
        return ArgSpec.tensor(scalar, rank, shape, index64=index64)
    return ArgSpec.tensor(scalar, rank, shape, aligned16=aligned, unit_stride=unit_stride,
                          index64=index64)


def check_written(bound: dict, written: Iterable[str], kernel: str,
                  loc: SourceLocation | None = None) -> None:
    """A LaunchError if an array bound to a parameter the kernel writes cannot take the
    writes: a read-only numpy array (writing through it could corrupt immutable data or
    fault), or an array two of whose elements may share an address (a zero stride, as
    ``expand`` makes; overlapping ``as_strided`` or ``unfold`` windows): CTAs writing them
    would race. Reading such arrays is fine."""
    for name in written:
        value = bound.get(name)
        if is_ndarray(value):
            if not value.flags.writeable:
                raise LaunchError(f"{kernel}: argument {name!r} is a read-only array, and the "
                                  "kernel writes to it; pass a writable copy", loc)
            shape, strides = value.shape, value.strides
        elif _is_tensor(value):
            shape, strides = value.shape, value.stride()
        else:
            continue
        if may_self_overlap(shape, strides):
            raise LaunchError(f"{kernel}: argument {name!r} is written by the kernel, but its "
                              f"elements may share addresses (shape {tuple(shape)}, strides "
                              f"{tuple(strides)}), so writes to them would race; pass an "
                              "array with distinct elements (e.g. a .contiguous() copy)", loc)


def _unusable_strides(a, name: str, kernel: str) -> LaunchError:
    if any(s % a.itemsize for s in a.strides):
        return LaunchError(f"{kernel}: argument {name!r} has strides {a.strides} bytes, "
                           f"not whole {a.itemsize}-byte elements")
    return LaunchError(f"{kernel}: argument {name!r} has negative strides {a.strides} bytes, "
                       "which kernels cannot take; pass a copy (numpy.ascontiguousarray)")


_SCALAR_SIGNATURES = {"i1": (types.i1, False), "f32": (types.f32, False),
                      "i32": (types.i32, False), "i32/16": (types.i32, True),
                      "i64": (types.i64, False), "i64/16": (types.i64, True)}


def spec_key(spec: ArgSpec) -> list:
    """The JSON-safe part of an ArgSpec that goes into the cache key."""
    shape = [] if spec.shape is None else [list(spec.shape)]
    return [spec.kind, str(spec.dtype), spec.rank, *spec.specialization, *shape]


def json_safe(value: Any) -> Any:
    """Constexpr and global values as cache-key material: dtypes and layouts by their text."""
    if isinstance(value, constexpr):
        return json_safe(value.value)
    if isinstance(value, types.ScalarType):
        return f"dtype:{value}"
    if isinstance(value, (tuple, list)):
        return [json_safe(v) for v in value]
    if is_layout(value):
        return f"layout:{value}"
    return value


# -- the grid ------------------------------------------------------------------------------
_GRIDS: dict[tuple, tuple[int, int, int]] = {}
grids = _GRIDS.get   # grids(grid) -> (x, y, z) for a grid already checked, else None


def resolve_grid(grid: Any, meta: dict, kernel: str) -> tuple[int, int, int]:
    """The launch grid as three positive ints (a callable grid gets the call's meta).

    Checked tuples are remembered, so a launch with a known grid costs one dict lookup.
    That lookup compares by value, so a grid equal to a checked one (``(2.0,)`` after
    ``(2,)``) is taken as it; anything else must hold ints (``operator.index``).
    """
    given = grid
    if callable(grid):
        grid = grid(meta)
    try:
        dims = tuple(operator.index(g) for g in (grid if isinstance(grid, (tuple, list))
                                                 else (grid,)))
    except TypeError:
        dims = ()
    if not 1 <= len(dims) <= 3 or min(dims) < 1 or max(dims) > MAX_GRID_DIM:
        made_by = f" from the grid function {given!r}" if callable(given) else ""
        raise LaunchError(f"{kernel}: the grid must be 1 to 3 positive ints up to "
                          f"{MAX_GRID_DIM}, got {grid!r}{made_by}")
    grid3 = dims + (1,) * (3 - len(dims))
    if isinstance(given, tuple) and len(_GRIDS) < _GRID_CACHE_LIMIT:
        _GRIDS[given] = grid3
    return grid3
