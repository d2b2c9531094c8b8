"""``tj.testing``: timing (:func:`do_bench`) and comparing results (:func:`assert_close`).

torch is imported only when a CUDA device is involved or a torch tensor is compared.
"""
from __future__ import annotations

import glob
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Timing", "assert_close", "do_bench"]

_DEFAULT_FLUSH_BYTES = 32 << 20
_CUDA_L2_FLUSH_BYTES = 256 << 20
_ESTIMATE_RUNS = 5
_STATS = ("median", "mean", "min", "max", "all")


class Timing(float):
    """A time in milliseconds that says which statistic it is (``repr`` shows it)."""

    def __new__(cls, ms: float, stat: str, runs: int) -> Timing:
        timing = super().__new__(cls, ms)
        timing.stat, timing.runs = stat, runs
        return timing

    def __repr__(self) -> str:
        return f"{float(self):.6g} ms ({self.stat} of {self.runs} runs)"


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
             quantiles: Sequence[float] | None = None, return_mode: str = "median",
             device: Any = None):
    """Time ``fn()`` in milliseconds and return the **median** run time by default.

    ``warmup`` and ``rep`` are budgets in milliseconds of total time, as in Triton: a few
    runs estimate the cost of one, then ``fn`` runs for about ``warmup`` ms untimed and
    about ``rep`` ms timed (at least once each). Caches are flushed before every timed run
    so each run starts cold: on the CPU by writing a buffer larger than the last-level
    cache, on CUDA by zeroing a 256 MiB buffer (bigger than any L2). CPU runs are timed
    with ``time.perf_counter_ns``, CUDA runs with CUDA events.

    ``device``: "cpu", "cuda" or a torch device; when None, CUDA is used only if torch is
    already imported and has initialised CUDA (pass ``device="cuda"`` to be explicit).

    Returns a :class:`Timing` (a float, median ms) by default; ``return_mode`` picks
    "mean", "min", "max" or "all" (the list of run times) instead; ``quantiles`` returns
    a list with those quantiles of the run times.
    """
    if return_mode not in _STATS:
        raise ValueError(f"return_mode must be one of {_STATS}, got {return_mode!r}")
    timer = _CudaTimer() if _uses_cuda(device) else _CpuTimer()
    estimate = max(timer.estimate(fn, _ESTIMATE_RUNS), 1e-6)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    times = timer.time_runs(fn, max(1, int(rep / estimate)))
    if quantiles is not None:
        return [float(q) for q in np.quantile(times, list(quantiles))]
    if return_mode == "all":
        return times
    value = {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max}[return_mode]
    return Timing(float(value(times)), return_mode, len(times))


def _uses_cuda(device: Any) -> bool:
    if device is not None:
        return str(device).startswith("cuda")
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()


def _last_level_cache_bytes() -> int | None:
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


class _CpuTimer:
    _flush_buffer: np.ndarray | None = None   # kept across calls: allocating is slow

    def __init__(self):
        if _CpuTimer._flush_buffer is None:
            llc = _last_level_cache_bytes()
            # Twice the LLC: caches are not strictly LRU, so one pass of exactly its size
            # leaves some of the timed function's lines behind.
            size = 2 * llc if llc else _DEFAULT_FLUSH_BYTES
            _CpuTimer._flush_buffer = np.empty(size, dtype=np.uint8)
            self._flush()   # touch every page now so that the first timed flush is typical

    def _flush(self) -> None:
        _CpuTimer._flush_buffer.fill(0)

    def estimate(self, fn: Callable[[], Any], runs: int) -> float:
        """Milliseconds one flush-and-run takes (the flush counts: it bounds the budget)."""
        fn()   # the first run may compile; keep it out of the estimate
        start = time.perf_counter_ns()
        for _ in range(runs):
            self._flush()
            fn()
        return (time.perf_counter_ns() - start) / 1e6 / runs

    def time_runs(self, fn: Callable[[], Any], runs: int) -> list[float]:
        times = []
        for _ in range(runs):
            self._flush()
            start = time.perf_counter_ns()
            fn()
            times.append((time.perf_counter_ns() - start) / 1e6)
        return times


class _CudaTimer:
    def __init__(self):
        import torch
        self.torch = torch
        self.flush_buffer = torch.empty(_CUDA_L2_FLUSH_BYTES // 4, dtype=torch.int32,
                                        device="cuda")

    def estimate(self, fn: Callable[[], Any], runs: int) -> float:
        cuda = self.torch.cuda
        fn()
        cuda.synchronize()
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        for _ in range(runs):
            self.flush_buffer.zero_()
            fn()
        end.record()
        cuda.synchronize()
        return start.elapsed_time(end) / runs

    def time_runs(self, fn: Callable[[], Any], runs: int) -> list[float]:
        cuda = self.torch.cuda
        starts = [cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [cuda.Event(enable_timing=True) for _ in range(runs)]
        for start, end in zip(starts, ends):
            self.flush_buffer.zero_()
            start.record()
            fn()
            end.record()
        cuda.synchronize()
        return [start.elapsed_time(end) for start, end in zip(starts, ends)]


# dtype name -> (rtol, atol); torch.testing's defaults.
_TOLERANCES = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
}


def _to_numpy(value: Any) -> tuple[np.ndarray, str]:
    """The values as a numpy array and the name of their original dtype."""
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        name = str(value.dtype).removeprefix("torch.")
        tensor = value.detach().cpu()
        if name == "bfloat16" or name.startswith("float8"):
            tensor = tensor.float()   # no numpy dtype; float32 holds every value exactly
        return tensor.numpy(), name
    array = np.asarray(value)
    return array, str(array.dtype)


def _default_tolerance(dtype_name: str, array: np.ndarray) -> tuple[float, float]:
    if dtype_name in _TOLERANCES:
        return _TOLERANCES[dtype_name]
    if array.dtype.kind in "biu":
        return 0.0, 0.0
    raise ValueError(f"no default tolerance for dtype {dtype_name}; pass rtol and atol")


def assert_close(actual: Any, expected: Any, rtol: float | None = None,
                 atol: float | None = None) -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise.

    Accepts torch tensors (any device), numpy arrays and scalars. Shapes must match
    exactly. Default tolerances follow the less precise of the two dtypes (torch.testing's
    table; integers and bools must be equal). NaNs never match; equal infinities do. On
    failure the message gives the number of mismatches and the worst element's index and
    values.
    """
    a, a_dtype = _to_numpy(actual)
    e, e_dtype = _to_numpy(expected)
    if a.shape != e.shape:
        raise AssertionError(f"shape mismatch: actual {a.shape}, expected {e.shape}")
    defaults = [_default_tolerance(a_dtype, a), _default_tolerance(e_dtype, e)]
    rtol = max(t[0] for t in defaults) if rtol is None else rtol
    atol = max(t[1] for t in defaults) if atol is None else atol
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(e) else np.float64
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a.astype(wide) - e.astype(wide))
        allowed = atol + rtol * np.abs(e.astype(wide))
        close = (a == e) | (diff <= allowed)
    if close.all():
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = diff / allowed
        excess = np.where(close, 0.0, np.where(np.isnan(ratio), np.inf, ratio))
    worst = np.unravel_index(int(np.argmax(excess)), a.shape) if a.ndim else ()
    bad = int((~close).sum())
    where = f"index {tuple(int(i) for i in worst)}" if a.ndim else "the scalar"
    raise AssertionError(
        f"not close: {bad} of {close.size} elements ({100 * bad / close.size:.3g}%) differ "
        f"beyond rtol={rtol:g}, atol={atol:g} ({a_dtype} vs {e_dtype}).\n"
        f"Worst at {where}: actual={a[worst].item()!r}, expected={e[worst].item()!r} "
        f"(abs diff {diff[worst]:.6g}, allowed {allowed[worst]:.6g})")
