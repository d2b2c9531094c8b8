import json
import logging
from collections import Counter

import numpy as np
import pytest

from tilejit.errors import CompilationError, LaunchError, TilejitError
from tilejit.knobs import knobs
from tilejit.runtime import cache, testing
from tilejit.runtime.autotune import Config, autotune, heuristics


@pytest.fixture(autouse=True)
def cache_dir(tmp_path):
    with knobs.scoped(cache_dir=str(tmp_path)):
        yield tmp_path


class FakeClock:
    """Stands in for the ``time`` module of ``tj.testing``: only modelled kernel time passes."""

    def __init__(self):
        self.ns = 0

    def perf_counter_ns(self) -> int:
        return self.ns


class FakeKernel:
    """Follows the kernel protocol; BLOCK=b costs b * 0.2 ms on ``self.clock``, BLOCK=-1
    fails to compile."""

    def __init__(self, fn=None, identity="fake-kernel"):
        self.fn = fn or self.add
        self.arg_names = ["x", "out", "n", "BLOCK", "SCALE"]
        self.identity = identity
        self.launches = []
        self.clock = FakeClock()

    @staticmethod
    def add(x, out, n, BLOCK=0, SCALE=1):
        pass

    def cache_identity(self):
        return self.identity

    def run(self, grid, args, kwargs):
        self.launches.append((grid, dict(kwargs)))
        block = kwargs.get("BLOCK", 0)
        if block < 0:
            raise CompilationError(f"BLOCK={block} needs too much shared memory\nsecond line")
        x, out, _ = args
        out += x * kwargs.get("SCALE", 1)
        self.clock.ns += block * 200_000
        return kwargs

    def bench(self, fn):
        """A do_bench that runs once and reports the modelled cost: deterministic."""
        fn()
        return self.launches[-1][1]["BLOCK"] * 0.2

    def configs_launched(self):
        return {kw["BLOCK"] for _, kw in self.launches}


CONFIGS = [Config({"BLOCK": 8}), Config({"BLOCK": 1}), Config({"BLOCK": 4}, num_warps=8)]


def tune(kernel, configs=CONFIGS, **options):
    return autotune(configs, key=["n"], do_bench=kernel.bench, **options)(kernel)


def arrays():
    return np.ones(4, dtype=np.float32), np.zeros(4, dtype=np.float32)


def test_fastest_config_wins_and_is_launched():
    kernel = FakeKernel()
    tuned = tune(kernel)
    x, out = arrays()
    result = tuned[(1,)](x, out, 4)
    assert result == {"BLOCK": 1, "num_warps": 4}
    assert tuned.best_config == Config({"BLOCK": 1})
    assert kernel.configs_launched() == {1, 4, 8}
    assert kernel.launches[-1][0] == (1,)            # the grid is passed through


def test_default_do_bench_with_tiny_budget(monkeypatch):
    kernel = FakeKernel()
    monkeypatch.setattr(testing, "time", kernel.clock)   # do_bench sees only modelled time
    tuned = autotune([Config({"BLOCK": 10}), Config({"BLOCK": 1})], key=["n"],
                     warmup=0.1, rep=1)(kernel)
    x, out = arrays()
    assert tuned[(1,)](x, out, 4)["BLOCK"] == 1
    # Per config: a first run, the estimate's runs, then runs filling each budget (at least
    # one): BLOCK=10 (2 ms a run) 1 warm-up and 1 timed, BLOCK=1 (0.2 ms) 1 and 5; then the
    # real launch with BLOCK=1.
    estimate = 1 + testing._ESTIMATE_RUNS
    assert Counter(kw["BLOCK"] for _, kw in kernel.launches) == {10: estimate + 1 + 1,
                                                                 1: estimate + 1 + 5 + 1}


def test_same_key_is_not_benchmarked_again_but_a_new_key_is():
    kernel = FakeKernel()
    tuned = tune(kernel)
    x, out = arrays()
    tuned[(1,)](x, out, 4)
    launches = len(kernel.launches)
    tuned[(1,)](x, out, 4)
    assert len(kernel.launches) == launches + 1      # only the real launch
    tuned[(1,)](x, out, 5)
    assert len(kernel.launches) == launches + 1 + len(CONFIGS) + 1
    tuned[(1,)](x.astype(np.float16), out, 5)        # dtypes are part of the key
    assert len(kernel.launches) == launches + 2 * (len(CONFIGS) + 1) + 1


def test_a_key_function_buckets_argument_values(cache_dir):
    """n = 5 and 7 fall in one bucket (the next power of two): one tuning; 9 in another.
    The timing file names the function."""
    def n_bucket(meta):
        return 1 << (meta["n"] - 1).bit_length()

    kernel = FakeKernel()
    tuned = autotune(CONFIGS, key=[n_bucket], do_bench=kernel.bench)(kernel)
    x, out = arrays()
    tuned[(1,)](x, out, 5)
    launches = len(kernel.launches)
    tuned[(1,)](x, out, 7)
    assert len(kernel.launches) == launches + 1      # the same bucket: only the launch
    tuned[(1,)](x, out, 9)
    assert len(kernel.launches) == launches + 1 + len(CONFIGS) + 1
    keys = [json.loads(p.read_text())["key"] for p in (cache_dir / "autotune").glob("*.json")]
    assert sorted(keys, key=str) == [{"n_bucket": 16}, {"n_bucket": 8}]


def test_results_persist_and_extra_config_is_the_only_one_timed(cache_dir):
    x, out = arrays()
    tune(FakeKernel())[(1,)](x, out, 4)
    [stored] = (cache_dir / "autotune").glob("*.json")
    assert len(json.loads(stored.read_text())["timings"]) == 3

    again = FakeKernel()
    tune(again)[(1,)](x, out, 4)
    assert len(again.launches) == 1                  # read from disk: no benchmarking

    extended = FakeKernel()
    tuned = tune(extended, [*CONFIGS, Config({"BLOCK": 2})])
    tuned[(1,)](x, out, 4)
    assert [kw["BLOCK"] for _, kw in extended.launches] == [2, 1]   # time the new one, launch
    assert len(json.loads(stored.read_text())["timings"]) == 4


def test_cache_results_false_and_other_kernels_do_not_share(cache_dir):
    x, out = arrays()
    tune(FakeKernel(), cache_results=False)[(1,)](x, out, 4)
    assert not (cache_dir / "autotune").exists()
    tune(FakeKernel())[(1,)](x, out, 4)
    other = FakeKernel(identity="another-kernel")
    tune(other)[(1,)](x, out, 4)
    assert other.configs_launched() == {1, 4, 8}


def test_tj_cache_clear_forgets_winners_and_results(cache_dir):
    kernel = FakeKernel()
    tuned = tune(kernel)
    x, out = arrays()
    tuned[(1,)](x, out, 4)
    cache.clear()
    kernel.launches.clear()
    tuned[(1,)](x, out, 4)
    assert len(kernel.launches) == len(CONFIGS) + 1


def test_failing_config_is_skipped_with_its_reason(caplog, capsys):
    kernel = FakeKernel()
    tuned = tune(kernel, [Config({"BLOCK": -1}), Config({"BLOCK": 2})])
    x, out = arrays()
    with caplog.at_level(logging.INFO, logger="tilejit.autotune"), \
            knobs.scoped(print_autotuning=True):
        assert tuned[(1,)](x, out, 4)["BLOCK"] == 2
    assert "BLOCK=-1" in caplog.text and "too much shared memory" in caplog.text
    table = capsys.readouterr().out
    assert "failed: CompilationError: BLOCK=-1 needs too much shared memory" in table
    assert "second line" not in table
    winner_line = next(line for line in table.splitlines() if "winner" in line)
    assert winner_line.startswith("*") and "BLOCK=2" in winner_line

    again = FakeKernel()
    tune(again, [Config({"BLOCK": -1}), Config({"BLOCK": 2})])[(1,)](x, out, 4)
    assert again.configs_launched() == {2}           # the stored failure is not retried


class OutOfMemoryKernel(FakeKernel):
    """BLOCK=1 fails to launch with ``error`` (as when memory runs short for a while)."""

    def __init__(self, error):
        super().__init__()
        self.error = error

    def run(self, grid, args, kwargs):
        if kwargs.get("BLOCK") == 1:
            raise self.error
        return super().run(grid, args, kwargs)


@pytest.mark.parametrize("error", [LaunchError("cannot allocate 4 GiB of frames"), MemoryError()],
                         ids=["LaunchError", "MemoryError"])
def test_a_launch_failure_is_skipped_but_not_stored(cache_dir, error, capsys):
    x, out = arrays()
    with knobs.scoped(print_autotuning=True):
        assert tune(OutOfMemoryKernel(error))[(1,)](x, out, 4)["BLOCK"] == 4
    assert f"failed for now: {type(error).__name__}" in capsys.readouterr().out
    [stored] = (cache_dir / "autotune").glob("*.json")
    assert len(json.loads(stored.read_text())["timings"]) == 2   # BLOCK=1 is not among them

    again = FakeKernel()
    assert tune(again)[(1,)](x, out, 4)["BLOCK"] == 1            # timed again, and it wins
    assert [kw["BLOCK"] for _, kw in again.launches] == [1, 1]
    assert len(json.loads(stored.read_text())["timings"]) == 3


def test_all_configs_failing_raises_with_reasons(cache_dir):
    tuned = tune(FakeKernel(), [Config({"BLOCK": -1}), Config({"BLOCK": -2})])
    x, out = arrays()
    with pytest.raises(LaunchError, match="every autotune config failed.*BLOCK=-2"):
        tuned[(1,)](x, out, 4)
    assert not (cache_dir / "autotune").exists()     # likely the call's fault: not stored


def test_reset_to_zero_and_restore_value():
    kernel = FakeKernel()
    seen = []

    def bench(fn):
        fn()
        seen.append(out.copy())
        return 1.0

    tuned = autotune(CONFIGS, key=["n"], do_bench=bench, reset_to_zero=["out"],
                     restore_value=["out"])(kernel)
    x, out = arrays()
    out[:] = 5
    tuned[(1,)](x, out, 4)
    assert all((s == 1).all() for s in seen)         # zeroed before each timed run
    assert (out == 6).all()                          # restored to 5, then the real launch


def test_without_restore_value_tuning_runs_accumulate():
    tuned = tune(FakeKernel())
    x, out = arrays()
    tuned[(1,)](x, out, 4)
    assert (out == len(CONFIGS) + 1).all()


def test_grid_callable_sees_the_chosen_config():
    class GridKernel(FakeKernel):
        def run(self, grid, args, kwargs):
            meta = {**dict(zip(self.arg_names, args)), **kwargs}
            return super().run(grid(meta), args, kwargs)

    kernel = GridKernel()
    tuned = tune(kernel)
    x, out = arrays()
    tuned[lambda meta: (meta["n"] // meta["BLOCK"],)](x, out, 4)
    assert kernel.launches[-1][0] == (4,)


def test_passing_a_tuned_parameter_is_an_error():
    tuned = tune(FakeKernel())
    x, out = arrays()
    with pytest.raises(LaunchError, match="BLOCK"):
        tuned[(1,)](x, out, 4, BLOCK=2)


@pytest.mark.parametrize("option", ["key", "reset_to_zero", "restore_value"])
def test_unknown_argument_name_is_an_error(option):
    options = {"key": ["n"], option: ["m"]}
    with pytest.raises(CompilationError, match=rf"{option} names 'm', which is not a parameter "
                                               r"of add\(x, out, n, BLOCK, SCALE\)"):
        autotune(CONFIGS, **options)(FakeKernel())


def test_empty_config_list_is_an_error():
    with pytest.raises(CompilationError, match="autotune of add: the config list is empty"):
        autotune([], key=["n"])(FakeKernel())


def test_a_config_setting_a_non_parameter_is_an_error():
    misspelt = Config({"BLOCK": 4, "SCALEE": 2})
    with pytest.raises(CompilationError, match=r"Config\(BLOCK=4, SCALEE=2, num_warps=4\) sets "
                                               r"'SCALEE', not a parameter of add\(x, out, n, "
                                               r"BLOCK, SCALE\)"):
        tune(FakeKernel(), [*CONFIGS, misspelt])
    pruned_to_it = {"early_config_prune": lambda configs, named, **kw: [misspelt]}
    tuned = tune(FakeKernel(), prune_configs_by=pruned_to_it)
    with pytest.raises(TilejitError, match="'SCALEE', not a parameter"):
        tuned[(1,)](*arrays(), 4)


def test_prune_configs_by():
    kernel = FakeKernel()
    prune = {"early_config_prune": lambda configs, named, **kw: [c for c in configs
                                                                 if c.kwargs["BLOCK"] > 1],
             "perf_model": lambda BLOCK, **kw: -BLOCK, "top_k": 1}
    tuned = tune(kernel, prune_configs_by=prune)
    x, out = arrays()
    assert tuned[(1,)](x, out, 4)["BLOCK"] == 8      # the only survivor
    assert kernel.configs_launched() == {8}


def test_progress_line_for_slow_tuning(capsys, monkeypatch):
    import tilejit.runtime.autotune as autotune_module
    monkeypatch.setattr(autotune_module, "_PROGRESS_AFTER_S", 0.0)
    tune(FakeKernel())[(1,)](*arrays(), 4)
    err = capsys.readouterr().err
    assert "autotuning add: 3/3 configs" in err and err.endswith("\n")


def test_no_progress_line_for_quick_tuning(capsys):
    autotune(CONFIGS, key=["n"], do_bench=lambda fn: 1.0)(FakeKernel())[(1,)](*arrays(), 4)
    assert capsys.readouterr().err == ""


def test_heuristics_compute_meta_parameters():
    kernel = FakeKernel()
    tuned = heuristics({"SCALE": lambda meta: meta["n"] * 10,
                        "EVEN": lambda meta: meta["SCALE"] % 20 == 0})(kernel)
    x, out = arrays()
    assert tuned[(1,)](x, out, 4) == {"SCALE": 40, "EVEN": True}
    assert (out == 40).all()
    with pytest.raises(LaunchError, match="computed by @heuristics"):
        tuned[(1,)](x, out, 4, SCALE=1)


def test_heuristics_stack_under_autotune():
    kernel = FakeKernel()
    tuned = autotune(CONFIGS, key=["n"], do_bench=kernel.bench)(
        heuristics({"SCALE": lambda meta: meta["BLOCK"] * 100})(kernel))
    assert tuned.fn is kernel.fn and tuned.cache_identity() == "fake-kernel"
    assert tuned[(1,)](*arrays(), 4) == {"BLOCK": 1, "num_warps": 4, "SCALE": 100}


def test_config_signature_and_text():
    config = Config({"BLOCK": 64}, num_warps=8, num_stages=3, cluster=[2, 1, 1])
    assert config == Config({"BLOCK": 64}, num_warps=8, num_stages=3, cluster=(2, 1, 1))
    assert config != Config({"BLOCK": 64}, num_warps=4, num_stages=3, cluster=(2, 1, 1))
    assert str(config) == "BLOCK=64, num_warps=8, num_stages=3, cluster=(2, 1, 1)"
    assert len({config, Config({"BLOCK": 64}, num_warps=8, num_stages=3,
                               cluster=(2, 1, 1))}) == 1


def test_damaged_results_file_is_ignored_and_rewritten(cache_dir):
    x, out = arrays()
    tune(FakeKernel())[(1,)](x, out, 4)
    [stored] = (cache_dir / "autotune").glob("*.json")
    signatures = list(json.loads(stored.read_text())["timings"])
    stored.write_text(json.dumps({"timings": {signatures[0]: "__import__('os')",
                                              signatures[1]: float("nan"),
                                              signatures[2]: True}}))
    again = FakeKernel()
    tune(again)[(1,)](x, out, 4)
    assert again.configs_launched() == {1, 4, 8}    # no stored value was usable
    stored.write_text("{truncated")
    tune(FakeKernel())[(1,)](x, out, 4)
    assert len(json.loads(stored.read_text())["timings"]) == 3
