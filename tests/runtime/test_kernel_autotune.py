"""``@tj.autotune`` and ``@tj.heuristics`` above real ``@tj.kernel`` kernels."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilejit as tj
from tilejit.runtime.cache_key import compiler_fingerprint
from tilejit.runtime.autotune import Autotuner

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [tj.Config({"BLOCK": 4}), tj.Config({"BLOCK": 8}), tj.Config({"BLOCK": 16}, num_warps=2),
           tj.Config({"BLOCK": 32})]   # BLOCK=32 fails to compile (static_assert)
OFFSET = 1.0


@tj.kernel
def fill(out, value, n, BLOCK: tj.constexpr):
    tj.static_assert(BLOCK <= 16)
    base = tj.cta_id(0) * BLOCK
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if base + i < n:
                    out[base + i] = value + OFFSET


def grid(meta):
    return (tj.cdiv(meta["n"], meta["BLOCK"]),)


class ScriptedBench:
    """A do_bench that launches once and reports the next scripted time (ms)."""

    def __init__(self, *times: float):
        self.times = list(times)
        self.calls = 0

    def __call__(self, launch) -> float:
        launch()
        self.calls += 1
        return self.times.pop(0)


pytestmark = pytest.mark.usefixtures("fresh_cache")


def tuned(bench) -> Autotuner:
    return tj.autotune(CONFIGS, key=["n"], do_bench=bench)(fill)


def test_fastest_config_runs_and_failures_are_skipped():
    bench = ScriptedBench(3.0, 1.0, 2.0)
    kernel = tuned(bench)
    out = torch.zeros(40)
    kernel[grid](out, 2.0, 40)
    assert bench.calls == 3   # the fourth config failed to compile: never timed
    assert kernel.best_config == tj.Config({"BLOCK": 8})
    assert out.eq(3.0).all()
    table = kernel.configs_timings          # the tuning's table, as data
    assert [table[c] for c in CONFIGS[:3]] == [3.0, 1.0, 2.0]
    assert table[CONFIGS[3]] == "failed: CompilationError: static assertion failed"
    kernel[grid](out, 5.0, 40)   # same key: no tuning
    assert bench.calls == 3 and out.eq(6.0).all()


def test_results_persist_for_a_new_autotuner():
    first = tuned(ScriptedBench(3.0, 1.0, 2.0))
    first[grid](torch.zeros(40), 2.0, 40)
    bench = ScriptedBench()
    second = tuned(bench)
    out = torch.zeros(40)
    second[grid](out, 2.0, 40)
    assert bench.calls == 0 and second.best_config == tj.Config({"BLOCK": 8})
    assert second.configs_timings[CONFIGS[1]] == 1.0     # loaded from disk
    assert out.eq(3.0).all()


def test_dtype_and_device_are_part_of_the_tuning_key():
    bench = ScriptedBench(3.0, 1.0, 2.0, 1.0, 3.0, 2.0)
    kernel = tuned(bench)
    kernel[grid](torch.zeros(40), 2.0, 40)
    kernel[grid](torch.zeros(40, dtype=torch.float64), 2.0, 40)
    assert bench.calls == 6 and kernel.best_config == tj.Config({"BLOCK": 4})


def test_default_do_bench_times_real_launches():
    kernel = tj.autotune(CONFIGS[:2], key=["n"], warmup=1, rep=2)(fill)
    out = torch.zeros(40)
    kernel[grid](out, 1.0, 40)
    assert kernel.best_config in CONFIGS[:2] and out.eq(2.0).all()


def test_heuristics_above_a_kernel():
    kernel = tj.heuristics({"BLOCK": lambda meta: 8 if meta["n"] % 8 == 0 else 4})(fill)
    out = torch.zeros(12)
    kernel[grid](out, 1.0, 12)
    assert out.eq(2.0).all()


def test_cache_identity_names_code_constants_compiler_and_machine(monkeypatch):
    identity = json.loads(fill.cache_identity())
    assert identity["kernel"] == "fill" and "cpu:" in identity["machine"]
    assert identity["compiler"] == compiler_fingerprint()
    assert ["OFFSET", 1.0] in identity["globals"]
    assert fill.cache_identity() == fill.cache_identity()
    monkeypatch.setattr(sys.modules[__name__], "OFFSET", 2.0)
    assert json.loads(fill.cache_identity())["globals"] != identity["globals"]


TUNE_SCRIPT = """
import json, numpy as np
import tilejit as tj
from test_kernel_autotune import CONFIGS, ScriptedBench, fill, grid
bench = ScriptedBench(3.0, 1.0, 2.0)
kernel = tj.autotune(CONFIGS, key=["n"], do_bench=bench)(fill)
out = np.zeros(40, np.float32)
kernel[grid](out, 2.0, 40)
info = fill.cache_info()
print(json.dumps({"timed": bench.calls, "best": kernel.best_config.kwargs,
                  "compiles": info.compiles, "disk_hits": info.disk_hits,
                  "ok": bool((out == 3.0).all())}))
"""


def test_second_process_neither_tunes_nor_compiles(tmp_path):
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(Path(__file__).parent)])}

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", TUNE_SCRIPT], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first == {"timed": 3, "best": {"BLOCK": 8}, "compiles": 3, "disk_hits": 0, "ok": True}
    assert second == {"timed": 0, "best": {"BLOCK": 8}, "compiles": 0, "disk_hits": 1, "ok": True}


def test_a_misspelt_config_key_names_the_kernel_parameters():
    with pytest.raises(tj.CompilationError, match=r"sets 'BLOK', not a parameter of "
                                                  r"fill\(out, value, n, BLOCK\)"):
        tj.autotune([*CONFIGS, tj.Config({"BLOK": 4})], key=["n"])(fill)


@tj.kernel
def fill_scaled(out, n, BLOCK: tj.constexpr, SCALE: tj.constexpr = 3):
    base = tj.cta_id(0) * BLOCK
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if base + i < n:
                    out[base + i] = 1.0 * SCALE


def test_a_key_may_name_a_parameter_left_at_its_default():
    kernel = tj.autotune(CONFIGS[:2], key=["SCALE"], do_bench=ScriptedBench(2.0, 1.0))(
        fill_scaled)
    out = torch.zeros(10)
    kernel[grid](out, 10)                       # SCALE not passed: its default is the key
    assert torch.all(out == 3.0)
    assert kernel.best_config.kwargs["BLOCK"] == 8
