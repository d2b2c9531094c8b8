"""Launch arguments: what each one is, which target it asks for, and what is wrong with it.

Everything a launch checks happens here, before anything runs, and raises ``LaunchError``
naming the argument.
"""
from __future__ import annotations

from typing import Any

from ..errors import LaunchError
from ..frontend.signature import ArgSpec
from ..ir import types
from ..knobs import knobs

TARGETS = ("cpu", "cuda", "nki")

def _is_tensor(value: Any) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "stride")


def _is_ndarray(value: Any) -> bool:
    return hasattr(value, "__array_interface__") and hasattr(value, "strides")


def device_of(value: Any) -> str | None:
    """'cpu' / 'cuda' for array-like arguments, None for scalars."""
    if _is_tensor(value):
        return value.device.type
    if _is_ndarray(value):
        return "cpu"
    return getattr(value, "device", None) if hasattr(value, "shape") else None


def choose_target(bound: dict, explicit: str | None, kernel: str) -> str:
    """``target=`` beats ``TILEJIT_TARGET`` beats the tensors' device (CUDA → cuda)."""
    target = explicit or knobs.target
    if target is None:
        devices = {device_of(v) for v in bound.values()} - {None}
        target = "cuda" if "cuda" in devices else "cpu"
    if target not in TARGETS:
        raise LaunchError(f"{kernel}: unknown target {target!r}; expected one of {TARGETS}")
    return target


def check_devices(bound: dict, target: str, kernel: str) -> None:
    """Tensors must all sit on one device, and it must be the target's."""
    placed = {name: device_of(v) for name, v in bound.items() if device_of(v) is not None}
    if len(set(placed.values())) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in placed.items())
        raise LaunchError(f"{kernel}: tensors are on different devices ({listing})")
    wanted = {"cpu": "cpu", "cuda": "cuda"}.get(target)
    for name, device in placed.items():
        if wanted is not None and device != wanted:
            raise LaunchError(f"{kernel}: argument {name!r} is on {device} but the kernel "
                              f"is compiled for target {target!r} (needs {wanted} tensors)")


def fast_signature(value: Any, is_constexpr: bool) -> tuple:
    """A cheap, hashable summary of what the compiled code depends on in ``value``."""
    if is_constexpr:
        return ("c", value)
    if _is_tensor(value):
        return ("t", value.dtype, value.dim(), value.data_ptr() % 16 == 0,
                value.dim() == 0 or value.stride(-1) == 1, value.device.type)
    if _is_ndarray(value):
        return ("a", value.dtype.str, value.ndim, value.__array_interface__["data"][0] % 16 == 0,
                value.ndim == 0 or value.strides[-1] == value.itemsize)
    if isinstance(value, bool):
        return ("b",)
    if isinstance(value, int):
        return ("i", -2**31 <= value < 2**31)
    if isinstance(value, float):
        return ("f",)
    return ("?", type(value))   # rejected by arg_spec_of with a clear message


def _tensor_facts(value: Any) -> tuple[Any, tuple, tuple, bool] | None:
    """(dtype, shape, strides in elements, 16-byte aligned) of an array-like argument."""
    from .jit import TensorSpec
    if isinstance(value, TensorSpec):
        return value.dtype, value.shape, value.strides, value.aligned16
    if _is_tensor(value):
        return value.dtype, tuple(value.shape), tuple(value.stride()), value.data_ptr() % 16 == 0
    if _is_ndarray(value):
        strides = tuple(s // value.itemsize for s in value.strides)
        return (value.dtype, tuple(value.shape), strides,
                value.__array_interface__["data"][0] % 16 == 0)
    return None


def arg_spec_of(value: Any, name: str, kernel: str, specialize: bool = True) -> ArgSpec:
    facts = _tensor_facts(value)
    if facts is not None:
        dtype, shape, strides, aligned = facts
        scalar = types.scalar_type_of(dtype)
        if scalar is None:
            raise LaunchError(f"{kernel}: argument {name!r} has dtype {dtype}, which tilejit "
                              "does not support")
        if any(s < 0 for s in strides):
            raise LaunchError(f"{kernel}: argument {name!r} has negative strides {strides}; "
                              "pass a contiguous copy")
        if not specialize:
            return ArgSpec.tensor(scalar, len(shape))
        div16 = all(d % 16 == 0 for d in shape) and all(s % 16 == 0 for s in strides if s != 1)
        return ArgSpec.tensor(scalar, len(shape), aligned16=aligned, div16=div16,
                              unit_stride=not strides or strides[-1] == 1)
    if isinstance(value, (bool, int, float)):
        return ArgSpec.of_python_scalar(value)
    raise LaunchError(f"{kernel}: argument {name!r} has type {type(value).__name__}; expected a "
                      "torch tensor, numpy array, tj.TensorSpec, int, float or bool")


def spec_key(spec: ArgSpec) -> list:
    """The JSON-safe part of an ArgSpec that goes into the cache key."""
    return [spec.kind, str(spec.dtype), spec.rank, *spec.specialization]


def json_safe(value: Any) -> Any:
    """Constexpr and global values as cache-key material: dtypes and layouts by their text."""
    if isinstance(value, types.ScalarType):
        return f"dtype:{value}"
    if isinstance(value, (tuple, list)):
        return [json_safe(v) for v in value]
    if type(value).__module__.startswith("tilejit.layout"):
        return f"layout:{value}"
    return value


def resolve_grid(grid: Any, meta: dict, kernel: str) -> tuple[int, int, int]:
    """The launch grid as three positive ints (a callable grid gets the call's meta)."""
    if callable(grid):
        grid = grid(meta)
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or any(
            isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid):
        raise LaunchError(f"{kernel}: the grid must be 1 to 3 positive ints, got {grid!r}")
    return tuple(grid) + (1,) * (3 - len(grid))
