import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tilejit.runtime import testing
from tilejit.runtime.testing import Timing, assert_close, do_bench


def sleep_half_ms():
    time.sleep(5e-4)


class HalfMillisecondClock:
    """Stands in for ``tj.testing``'s ``time``: each call of ``run`` takes exactly 0.5 ms."""

    def __init__(self):
        self.ns = 0

    def perf_counter_ns(self) -> int:
        return self.ns

    def run(self) -> None:
        self.ns += 500_000


def test_do_bench_returns_the_median(monkeypatch):
    from tilejit.runtime import testing
    clock = HalfMillisecondClock()
    monkeypatch.setattr(testing, "time", clock)   # no wall clock: the result is exact
    result = do_bench(clock.run, warmup=1, rep=10)
    assert isinstance(result, float) and isinstance(result, Timing)
    assert result == 0.5
    assert result.stat == "median" and result.runs >= 1
    assert "median of" in repr(result)


def test_do_bench_quantiles_and_modes():
    low, mid, high = do_bench(sleep_half_ms, warmup=1, rep=10, quantiles=[0.1, 0.5, 0.9])
    assert 0 < low <= mid <= high
    everything = do_bench(sleep_half_ms, warmup=1, rep=10, return_mode="all")
    assert isinstance(everything, list) and all(t > 0 for t in everything)
    assert do_bench(sleep_half_ms, warmup=1, rep=5, return_mode="min").stat == "min"
    with pytest.raises(ValueError, match="return_mode"):
        do_bench(sleep_half_ms, return_mode="best")


def test_do_bench_flushes_the_cache_between_runs(monkeypatch):
    flushes, runs = [], []
    monkeypatch.setattr(testing._CpuTimer, "_flush", lambda self: flushes.append(1))
    do_bench(lambda: runs.append(1), warmup=0, rep=0)
    assert len(flushes) >= 1 + testing._ESTIMATE_RUNS   # estimate runs plus the timed one
    assert testing._CpuTimer._flush_buffer.nbytes > (testing._last_level_cache_bytes() or 0)


def test_cpu_timing_does_not_touch_cuda():
    do_bench(lambda: None, warmup=0, rep=0)
    assert not torch.cuda.is_initialized()


def test_assert_close_passes_within_tolerance():
    a = np.linspace(0, 1, 100, dtype=np.float32)
    assert_close(a, a + 1e-6)
    assert_close(torch.from_numpy(a), a)
    assert_close(torch.from_numpy(a).to(torch.bfloat16), a)    # bfloat16 tolerance
    assert_close(np.array([np.inf, 1.0]), np.array([np.inf, 1.0]))
    assert_close(np.arange(5), torch.arange(5))
    assert_close(1.0, 1.0 + 1e-9)


def test_assert_close_reports_the_worst_element():
    expected = np.zeros((3, 4), dtype=np.float32)
    actual = expected.copy()
    actual[1, 2] = 0.5
    actual[2, 3] = 0.25
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected)
    message = str(info.value)
    assert "2 of 12 elements" in message
    assert "index (1, 2)" in message and "actual=0.5" in message and "expected=0.0" in message


def test_assert_close_dtype_defaults_and_overrides():
    half = torch.tensor([1.0], dtype=torch.float16)
    assert_close(half, torch.tensor([1.0009]))        # float16's rtol 1e-3 applies
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([1.0]), torch.tensor([1.0009]))
    assert_close(torch.tensor([1.0]), torch.tensor([1.0009]), rtol=1e-3, atol=0)
    with pytest.raises(AssertionError, match=r"actual=3, expected=4"):
        assert_close(np.array([1, 3]), np.array([1, 4]))


def test_assert_close_nan_and_shape():
    with pytest.raises(AssertionError, match="index \\(0,\\)"):
        assert_close(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_close(np.zeros((2, 3)), np.zeros((3, 2)))


def test_cpu_benchmarking_never_imports_torch():
    script = ("import sys, numpy; from tilejit.runtime.testing import do_bench, assert_close;"
              "do_bench(lambda: None, warmup=0, rep=0);"
              "assert_close(numpy.ones(2), numpy.ones(2));"
              "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", script], check=True,
                   cwd=Path(__file__).resolve().parents[2])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_do_bench_times_cuda_work_with_events():
    a = torch.randn(2048, 2048, device="cuda")
    fast = do_bench(lambda: a.add_(1), warmup=5, rep=20, device="cuda")
    slow = do_bench(lambda: a @ a, warmup=5, rep=20, device=a.device)
    assert 0 < fast < slow and slow.stat == "median"
    assert_close(a.cpu(), a)
