"""A compiled CUDA kernel as the runtime holds it: the CUBIN, loaded lazily per device.

Creating a :class:`CudaKernelModule` touches no driver: a machine without a GPU loads
kernels from the disk cache to inspect them. The first launch on a device loads the CUBIN
there (``driver.load_module``, the device's primary context, which torch shares) and
looks the kernel up; later launches reuse that function. A launch flattens the launch
records (``(address, *shape, *strides)`` per tensor, the value per scalar) into the
kernel's parameters, which the printer declares in that order (emit.py).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field

from ...errors import LaunchError

__all__ = ["CudaKernelModule", "MAX_GRID"]

MAX_GRID = (2 ** 31 - 1, 65535, 65535)   # CUDA's limits on a grid's x, y and z extents


def _current_device() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


@dataclass
class CudaKernelModule:
    """One kernel's CUBIN with what a launch needs: entry name, threads, shared bytes."""

    cubin: bytes
    entry: str
    threads: int                      # 32 * num_warps, the block's x extent
    shared_bytes: int                 # dynamic shared memory per CTA (the planned bytes)
    arch: str
    location: object = None           # for errors of ``compiled[grid](...)``
    _functions: dict = field(default_factory=dict, repr=False)
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
                    if self.shared_bytes > 48 * 1024:
                        fn.set_max_dynamic_shared(self.shared_bytes)
                    self._functions[device] = fn
        return fn

    def launch_on_stream(self, grid, records, stream) -> None:
        """Queue the kernel on ``stream`` (None: torch's current stream). An empty grid
        launches nothing, as on the CPU; one past CUDA's limits is a LaunchError."""
        for axis, (extent, limit) in enumerate(zip(grid, MAX_GRID)):
            if extent > limit:
                raise LaunchError(f"grid {'xyz'[axis]} extent {extent} is above CUDA's limit "
                                  f"of {limit} CTAs in {'xyz'[axis]}", self.location)
        if 0 in grid:
            return
        args = []
        for record in records:
            if isinstance(record, tuple):
                args.extend(record)      # a tensor: address, shape, strides
            elif hasattr(record, "data_ptr"):   # a tensor itself (``compiled[grid](...)``)
                args += [record.data_ptr(), *record.shape, *record.stride()]
            else:
                args.append(record)      # a scalar
        fn = self.function(_current_device())
        fn(*args, grid=grid, block=(self.threads, 1, 1), shared_mem=self.shared_bytes,
           stream=stream)

    def launch(self, grid, records) -> None:
        self.launch_on_stream(grid, records, None)

    def unload(self) -> None:
        for fn in self._functions.values():
            try:
                fn.module.unload()
            except LaunchError:
                pass
        self._functions.clear()
