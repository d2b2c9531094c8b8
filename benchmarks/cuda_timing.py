"""How the GPU benchmarks time a call: CUDA events around each run, the median in ms."""
from __future__ import annotations

import statistics

import torch


def median_ms(fn, repeat: int) -> float:
    """The median of ``repeat`` timed runs of ``fn`` (after one untimed run that compiles,
    autotunes and warms the caches), each between two CUDA events on the current stream."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
