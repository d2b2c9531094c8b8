"""A compiled CUDA kernel as the runtime holds it: the CUBIN, loaded lazily per device.

Creating a :class:`CudaKernelModule` touches no driver: a machine without a GPU loads
kernels from the disk cache to inspect them. The first launch on a device loads the CUBIN
there (``driver.load_module``, the device's primary context, which torch shares) and
looks the kernel up; later launches reuse that function. A launch runs on the device its
tensors sit on (:func:`launch_device`), not on torch's current one, and queues on that
device's stream. It flattens the launch records (``(address, *shape, *strides)`` per
tensor, the value per scalar) into the kernel's parameters, which the printer declares in
that order (emit.py), then appends the kernel's TMA tensor maps, each encoded from its
tensor's record (``tensor_map.encode``) once per (map, address, shape, strides): a
repeated launch looks it up. The values are packed by one ``driver.ParamStruct`` built
from the struct formats the printer recorded (``param_formats``), and the launch runs in
the kernel's clusters (``cluster``, compiled in as ``__cluster_dims__``); a cluster of
more than 8 CTAs gets the function's non-portable opt-in when the CUBIN is loaded.
"""
from __future__ import annotations

import functools
import struct
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import LaunchError
from ...ir.types import SCALAR_TYPES
from . import tensor_map

__all__ = ["CudaKernelModule", "MAX_GRID", "launch_device"]

MAX_GRID = (2 ** 31 - 1, 65535, 65535)   # CUDA's limits on a grid's x, y and z extents
MAX_ENCODED_MAPS = 4096   # tensor maps a kernel keeps encoded (then it starts over)


def _current_device() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


def launch_device(arguments: Mapping[str, Any]) -> int | None:
    """The CUDA device a launch with these arguments (name -> value) runs on: the one its
    tensors (values with ``is_cuda`` and ``device``) sit on; None where no argument is a
    tensor (the launch takes torch's current device). A tensor off CUDA, or tensors on two
    devices, is a LaunchError naming them: a kernel given another device's address faults
    or reads that device's memory through peer access."""
    tensors = {name: value for name, value in arguments.items() if hasattr(value, "is_cuda")}
    for name, tensor in tensors.items():
        if not tensor.is_cuda:
            raise LaunchError(f"argument {name!r} is a tensor on {tensor.device}; the cuda "
                              "target launches on CUDA tensors")
    devices = {tensor.device.index for tensor in tensors.values()}
    if len(devices) > 1:
        listing = ", ".join(f"{name!r} on {tensor.device}" for name, tensor in tensors.items())
        raise LaunchError(f"the tensors of one launch must sit on one device: {listing}")
    return next(iter(devices), None)


@dataclass
class CudaKernelModule:
    """One kernel's CUBIN with what a launch needs: entry name, threads, shared bytes."""

    cubin: bytes
    entry: str
    threads: int                      # 32 * num_warps, the block's x extent
    shared_bytes: int                 # dynamic shared memory per CTA (the planned bytes)
    arch: str
    params: tuple[str, ...]           # the runtime parameters' names, for errors
    location: object = None           # for errors of ``compiled[grid](...)``
    tensor_maps: tuple = ()           # per TMA tensor map: {"param", "box", "swizzle", "dtype"}
    cluster: tuple = (1, 1, 1)        # CTAs per cluster (the kernel's __cluster_dims__)
    param_formats: list | None = None  # each parameter's struct format (None: packed one by one)
    _functions: dict = field(default_factory=dict, repr=False)
    _encoded: dict = field(default_factory=dict, repr=False)   # (map, record) -> 128 bytes
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def function(self, device: int):
        """The kernel loaded on ``device`` (the CUBIN is loaded once per device)."""
        fn = self._functions.get(device)
        if fn is None:
            from .driver import load_module
            with self._lock:
                fn = self._functions.get(device)
                if fn is None:
                    fn = load_module(self.cubin, device).get_function(self.entry)
                    packs = self._param_struct and self._param_struct.sizes
                    if packs and fn.param_sizes and packs != fn.param_sizes:
                        raise LaunchError(f"internal: {self.entry}'s CUBIN takes parameters of "
                                          f"{fn.param_sizes} bytes, the launch packs {packs}")
                    if self.shared_bytes > 48 * 1024:
                        fn.set_max_dynamic_shared(self.shared_bytes)
                    fn.allow_cluster(self.cluster)   # the opt-in above 8 CTAs
                    self._functions[device] = fn
        return fn

    def launch_records(self, grid, records, stream, device: int | None) -> None:
        """Queue the kernel on ``device`` (None: torch's current one) and ``stream`` (None:
        torch's current stream of that device). The caller vouches for the records and the
        device (the runtime took both from arguments of the signature it compiled for). An
        empty grid launches nothing, as on the CPU; one past CUDA's limits, or not a
        multiple of the cluster (checked by the driver's launch), is a LaunchError."""
        if grid[0] > MAX_GRID[0] or grid[1] > MAX_GRID[1] or grid[2] > MAX_GRID[2]:
            raise self._grid_error(grid)
        if 0 in grid:
            return
        args = []
        for record in records:
            if isinstance(record, tuple):
                args.extend(record)      # a tensor: address, shape, strides
            else:
                args.append(record)      # a scalar
        if self.tensor_maps:
            args += self.encoded_maps(records)
        fn = self.function(_current_device() if device is None else device)
        block = (self.threads, 1, 1)
        try:
            if self._param_struct is None:   # a bf16 or fp8 scalar parameter: one by one
                fn(*args, grid=grid, block=block, shared_mem=self.shared_bytes, stream=stream,
                   cluster=self.cluster)
            else:
                fn.launch_struct(self._param_struct, args, grid=grid, block=block,
                                 shared_mem=self.shared_bytes, stream=stream,
                                 cluster=self.cluster)
        except (struct.error, OverflowError) as error:   # e.g. a float beyond the f32 range
            raise LaunchError(f"kernel {self.entry!r}: cannot pass the launch's values "
                              f"{args!r}: {error}", self.location) from None
        except LaunchError as error:   # the driver's (a grid the clusters do not split)
            raise error.with_location(self.location) from None

    def _grid_error(self, grid) -> LaunchError:
        axis = next(axis for axis in range(3) if grid[axis] > MAX_GRID[axis])
        return LaunchError(f"grid {'xyz'[axis]} extent {grid[axis]} is above CUDA's limit of "
                           f"{MAX_GRID[axis]} CTAs in {'xyz'[axis]}", self.location)

    @functools.cached_property
    def _param_struct(self):
        """What packs a launch's parameters: one struct per kernel (None: one parameter has
        no struct format)."""
        from .driver import ParamStruct
        return None if self.param_formats is None else ParamStruct(self.param_formats)

    def encoded_maps(self, records) -> list[bytes]:
        """The kernel's tensor maps, from the launch records of their tensors: encoded once
        per (map, address, shape, strides) -- the map fixes box, swizzle and dtype -- so a
        launch that hits the cache costs a dictionary lookup per map."""
        maps = []
        for k, position in enumerate(self._map_params):
            record = records[position]
            found = self._encoded.get((k, record))
            if found is None:
                if len(self._encoded) >= MAX_ENCODED_MAPS:
                    self._encoded.clear()
                found = self._encoded[k, record] = self._encode(k, record)
            maps.append(found)
        return maps

    def _encode(self, k: int, record: tuple) -> bytes:
        spec = self.tensor_maps[k]
        address, *sizes = record
        rank = len(sizes) // 2
        return tensor_map.encode(tensor_map.TensorMap(
            SCALAR_TYPES[spec["dtype"]], address, tuple(sizes[:rank]), tuple(sizes[rank:]),
            tuple(spec["box"]), spec["swizzle"]))

    @functools.cached_property
    def _map_params(self) -> tuple[int, ...]:
        """The launch record index of each tensor map's tensor."""
        return tuple(self.params.index(spec["param"]) for spec in self.tensor_maps)

    def launch(self, grid, args) -> None:
        """Run on the arguments as given (``compiled[grid](*args)``): each tensor becomes its
        launch record, on the device the tensors sit on."""
        device = launch_device(dict(zip(self.params, args)))
        records = [(arg.data_ptr(), *arg.shape, *arg.stride()) if hasattr(arg, "is_cuda")
                   else arg for arg in args]
        self.launch_records(grid, records, None, device)

    def unload(self) -> None:
        for fn in self._functions.values():
            try:
                fn.module.unload()
            except LaunchError:
                pass
        self._functions.clear()
