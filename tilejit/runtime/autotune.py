"""``@tj.autotune`` and ``@tj.heuristics``: choosing meta-parameters at launch time.

Both wrap anything that follows the kernel protocol — ``.fn``, ``.arg_names``,
``.cache_identity()`` and ``.run(grid, args, kwargs)`` — and follow it themselves, so they
stack in any order above ``@tj.kernel``.

Autotuning results are kept per config, not per config list: a JSON file per (kernel,
key values) under ``<cache_dir>/autotune/`` maps each config's signature to its time in
ms or to ``"failed: <reason>"``. A later config list reuses every stored result and times
only the configs it has not seen (Triton re-times the whole list, triton#9822). Only
failures that recur are stored (the config does not compile); a config whose launch failed
(out of memory) is skipped for now and timed again by the next tuning.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import CompilationError, LaunchError, LayoutError, TilejitError
from ..knobs import knobs
from .cache import register_kernel
from .cache_key import canonical_json
from .disk_cache import warn_cache_unwritable
from .jit import definition_location
from .testing import do_bench as default_do_bench

__all__ = ["Autotuner", "Config", "Heuristics", "autotune", "heuristics"]

logger = logging.getLogger("tilejit.autotune")

_PROGRESS_AFTER_S = 1.0
# Milliseconds, "failed: <reason>" (stored: it recurs) or "failed for now: <reason>" (not).
Outcome = float | str
_RECURRING_FAILURES = (CompilationError, LayoutError)   # the config itself cannot be built


class Config:
    """One point of the search space: constexpr values plus launch options.

    ``pre_hook(meta)`` runs before every launch with this config (meta: the named
    arguments merged with the launch kwargs); it is not part of the config's signature.
    """

    def __init__(self, kwargs: dict[str, Any], num_warps: int = 4, num_stages: int | None = None,
                 cluster: Sequence[int] | None = None, pre_hook: Callable | None = None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.cluster = tuple(cluster) if cluster is not None else None
        self.pre_hook = pre_hook
        self.signature = canonical_json(self.launch_kwargs(), "Config")

    def launch_kwargs(self) -> dict[str, Any]:
        """The kwargs this config adds to a launch (options left as None are omitted)."""
        options = {"num_warps": self.num_warps, "num_stages": self.num_stages,
                   "cluster": self.cluster}
        return {**self.kwargs, **{k: v for k, v in options.items() if v is not None}}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other.signature == self.signature

    def __hash__(self) -> int:
        return hash(self.signature)

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.launch_kwargs().items())

    def __repr__(self) -> str:
        return f"Config({self})"


class _KernelWrapper:
    """Forwards the kernel protocol to the wrapped object."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.fn = kernel.fn
        self.arg_names = list(kernel.arg_names)
        # A key or heuristic may read a parameter the call leaves at its default.
        self._defaults = {name: p.default for name, p in inspect.signature(self.fn).parameters
                          .items() if p.default is not inspect.Parameter.empty}

    def cache_identity(self) -> str:
        return self.kernel.cache_identity()

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def _launch(self, grid: Any, args: tuple, kwargs: dict) -> Any:
        try:
            return self.run(grid, args, kwargs)
        except TilejitError as err:   # shown at the kernel's definition, as a Kernel's are
            raise err.with_location(definition_location(self.fn)).with_traceback(None) from None

    def _named_args(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        return {**self._defaults, **dict(zip(self.arg_names, args)), **kwargs}


class Heuristics(_KernelWrapper):
    """Computes meta-parameters from the other arguments: ``values[name](meta) -> value``."""

    def __init__(self, kernel: Any, values: dict[str, Callable[[dict], Any]]):
        super().__init__(kernel)
        self.values = dict(values)

    def run(self, grid: Any, args: tuple, kwargs: dict) -> Any:
        kwargs = dict(kwargs)
        for name, rule in self.values.items():
            if name in kwargs:
                raise LaunchError(f"{self.fn.__name__}: {name!r} is computed by @heuristics; "
                                  "do not pass it")
            kwargs[name] = rule(self._named_args(args, kwargs))
        return self.kernel.run(grid, args, kwargs)


def heuristics(values: dict[str, Callable[[dict], Any]]) -> Callable[[Any], Heuristics]:
    """Decorator: ``@tj.heuristics({"EVEN": lambda meta: meta["n"] % 128 == 0})``."""
    return lambda kernel: Heuristics(kernel, values)


class Autotuner(_KernelWrapper):
    def __init__(self, kernel: Any, configs: Sequence[Config],
                 key: Sequence[str | Callable[[dict], Any]],
                 prune_configs_by: dict | None = None, reset_to_zero: Sequence[str] | None = None,
                 restore_value: Sequence[str] | None = None, warmup: float = 25,
                 rep: float = 100, do_bench: Callable[[Callable], float] | None = None,
                 cache_results: bool = True):
        super().__init__(kernel)
        if not configs:
            raise CompilationError(f"autotune of {self.fn.__name__}: the config list is empty; "
                                   "give at least one tj.Config")
        self.configs = list(configs)
        self.key = list(key)
        self.prune_configs_by = prune_configs_by or {}
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        named_key = [name for name in self.key if not callable(name)]
        for option, names in (("key", named_key), ("reset_to_zero", self.reset_to_zero),
                              ("restore_value", self.restore_value)):
            for name in names:
                if name not in self.arg_names:
                    raise CompilationError(f"autotune of {self.fn.__name__}: {option} names "
                                           f"{name!r}, which is not a parameter of "
                                           f"{self._signature()}")
        self._check_configs(self.configs)
        self.do_bench = do_bench
        self.warmup, self.rep = warmup, rep
        self.cache_results = cache_results
        self.best_config: Config | None = None
        # The last tuning's table, as Triton's Autotuner keeps it: config -> milliseconds,
        # or the text of its failure (timings loaded from disk included).
        self.configs_timings: dict[Config, float | str] = {}
        self._winners: dict[tuple, Config] = {}
        register_kernel(self)

    def clear_memory_cache(self) -> None:
        self._winners.clear()

    def _signature(self) -> str:
        return f"{self.fn.__name__}({', '.join(self.arg_names)})"

    def _check_configs(self, configs: Iterable[Config]) -> None:
        """A config setting a name the kernel does not take (a typo) would fail every
        launch and be skipped like a config that does not compile: refuse it."""
        for config in configs:
            unknown = [name for name in config.kwargs if name not in self.arg_names]
            if unknown:
                raise CompilationError(f"autotune of {self.fn.__name__}: Config({config}) sets "
                                       f"{', '.join(map(repr, unknown))}, not a parameter of "
                                       f"{self._signature()}")

    def run(self, grid: Any, args: tuple, kwargs: dict) -> Any:
        named = self._named_args(args, kwargs)
        key = self._key_values(named)
        if key not in self._winners:
            self._winners[key] = self._tune(key, grid, args, kwargs, named)
        self.best_config = config = self._winners[key]
        launch_kwargs = self._launch_kwargs(config, kwargs)
        if config.pre_hook is not None:
            config.pre_hook({**named, **launch_kwargs})
        return self.kernel.run(grid, args, launch_kwargs)

    def _key_values(self, named: dict[str, Any]) -> tuple:
        """The tuning key: the ``key`` arguments' values plus every array argument's dtype
        and device (numpy arrays are on the CPU)."""
        values = []
        for name in self.key:
            value = name(named) if callable(name) else named[name]
            if value is not None and not isinstance(value, (bool, int, float, str)):
                raise LaunchError(f"{self.fn.__name__}: autotune key {_key_name(name)!r} "
                                  f"must be a scalar, got {type(value).__qualname__}")
            values.append(value)
        arrays = [f"{v.dtype}@{getattr(v, 'device', 'cpu')}" for v in named.values()
                  if hasattr(v, "dtype")]
        return tuple(values) + tuple(arrays)

    def _launch_kwargs(self, config: Config, kwargs: dict) -> dict[str, Any]:
        tuned = config.launch_kwargs()
        clash = sorted(set(tuned) & set(kwargs))
        if clash:
            raise LaunchError(f"{self.fn.__name__}: {clash} are chosen by @autotune; "
                              "do not pass them")
        return {**kwargs, **tuned}

    def _prune(self, named: dict[str, Any], kwargs: dict) -> list[Config]:
        """Triton's ``prune_configs_by``: early_config_prune, then perf_model's top_k."""
        configs = self.configs
        early = self.prune_configs_by.get("early_config_prune")
        if early is not None:
            configs = list(early(configs, named, **kwargs))
        perf_model = self.prune_configs_by.get("perf_model")
        top_k = self.prune_configs_by.get("top_k")
        if perf_model is not None and top_k is not None:
            k = int(len(configs) * top_k) if isinstance(top_k, float) else top_k
            configs = sorted(configs, key=lambda c: perf_model(**{**named, **kwargs,
                                                                  **c.launch_kwargs()}))
            configs = configs[:max(1, k)]
        self._check_configs(configs)   # early_config_prune may make configs of its own
        return configs

    def _tune(self, key: tuple, grid: Any, args: tuple, kwargs: dict,
              named: dict[str, Any]) -> Config:
        configs = self._prune(named, kwargs)
        store = (_TimingStore(self.cache_identity(), [_key_name(k) for k in self.key], key)
                 if self.cache_results else None)
        stored = store.load() if store else {}
        todo = [c for c in configs if c.signature not in stored]
        fresh = self._time_configs(todo, grid, args, kwargs, named) if todo else {}
        results = {**stored, **fresh}
        self.configs_timings = {c: results[c.signature] for c in configs}
        timed = [c for c in configs if isinstance(results[c.signature], float)]
        winner = min(timed, key=lambda c: results[c.signature]) if timed else None
        # When every config fails the cause is more likely the call than the configs (bad
        # arguments, no device), so nothing is stored that would fail later calls unseen.
        # Otherwise what a later load accepts is stored: timings and recurring failures.
        lasting = {sig: result for sig, result in fresh.items() if _outcome(result) is not None}
        if store and lasting and winner is not None:
            store.save(lasting)
        if knobs.print_autotuning:
            _print_table(self.fn.__name__, key, configs, results, set(fresh), winner)
        if winner is None:
            reasons = "; ".join(f"[{c}] {results[c.signature]}" for c in configs)
            raise LaunchError(f"{self.fn.__name__}: every autotune config failed: {reasons}")
        return winner

    def _time_configs(self, configs: list[Config], grid: Any, args: tuple, kwargs: dict,
                      named: dict[str, Any]) -> dict[str, Outcome]:
        saved = {name: _copy_array(named[name]) for name in self.restore_value}
        progress = _Progress(self.fn.__name__, len(configs))
        fresh: dict[str, Outcome] = {}
        try:
            for config in configs:
                fresh[config.signature] = self._bench(config, grid, args, kwargs, named)
                progress.update(len(fresh))
        finally:
            progress.finish()
            for name, value in saved.items():
                _restore_array(named[name], value)
        return fresh

    def _bench(self, config: Config, grid: Any, args: tuple, kwargs: dict,
               named: dict[str, Any]) -> Outcome:
        launch_kwargs = self._launch_kwargs(config, kwargs)

        def launch() -> None:
            for name in self.reset_to_zero:
                _zero_array(named[name])
            if config.pre_hook is not None:
                config.pre_hook({**named, **launch_kwargs})
            self.kernel.run(grid, args, launch_kwargs)

        try:
            if self.do_bench is not None:
                return float(self.do_bench(launch))
            return float(default_do_bench(launch, warmup=self.warmup, rep=self.rep,
                                          device=_device_of(named.values())))
        except (TilejitError, MemoryError) as err:
            # A compile error recurs; a launch error (out of memory, a resource another
            # process held) may not, so only the first is stored as the config's result.
            failed = "failed" if isinstance(err, _RECURRING_FAILURES) else "failed for now"
            first_line = str(err).partition("\n")[0]
            reason = f"{type(err).__name__}: {first_line}"
            logger.info("%s: skipping autotune config %s: %s", self.fn.__name__, config, reason)
            return f"{failed}: {reason}"


def autotune(configs: Sequence[Config], key: Sequence[str | Callable[[dict], Any]],
             prune_configs_by: dict | None = None, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, warmup: float = 25, rep: float = 100,
             do_bench: Callable[[Callable], float] | None = None,
             cache_results: bool = True) -> Callable[[Any], Autotuner]:
    """Decorator above ``@tj.kernel``: time every config on the first launch per key.

    ``key``: argument names whose values select a tuning result (each array argument's
    dtype is added automatically), or functions of the named arguments returning a
    scalar (e.g. a bucket of a tensor's size: shapes in one bucket share a result). ``reset_to_zero``: arrays zeroed before every timed run
    (for kernels that accumulate). ``restore_value``: arrays copied before tuning and
    restored after it, so the launch that triggered tuning sees its inputs unchanged.
    ``warmup``/``rep``: ms budgets handed to ``tj.testing.do_bench`` unless ``do_bench``
    (a callable timing a no-argument function, returning ms) is given. ``cache_results``:
    keep per-config timings on disk under ``<cache_dir>/autotune/``.
    """
    return lambda kernel: Autotuner(kernel, configs, key, prune_configs_by, reset_to_zero,
                                    restore_value, warmup, rep, do_bench, cache_results)


class _TimingStore:
    """The per-config timings of one (kernel, key values) pair, as a JSON file."""

    def __init__(self, identity: str, key_names: list[str], key_values: tuple):
        document = canonical_json([identity, key_names, list(key_values), __version__],
                                  "autotune key")
        digest = hashlib.sha256(document.encode("ascii")).hexdigest()
        self.path = Path(knobs.cache_dir) / "autotune" / f"{digest}.json"
        self.description = {"key": dict(zip(key_names, key_values)),
                            "extra_key": list(key_values[len(key_names):])}

    def load(self) -> dict[str, Outcome]:
        """Stored timings; a missing or damaged file (never evaluated) reads as empty."""
        try:
            timings = json.loads(self.path.read_bytes())["timings"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        if not isinstance(timings, dict):
            return {}
        return {sig: _outcome(t) for sig, t in timings.items() if _outcome(t) is not None}

    def save(self, fresh: dict[str, Outcome]) -> None:
        """Merge ``fresh`` into the file (re-read first: another process may have added)."""
        document = {**self.description, "timings": {**self.load(), **fresh}}
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(document, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as err:
            warn_cache_unwritable(self.path.parent, err)
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)


def _key_name(key: str | Callable[[dict], Any]) -> str:
    """A key entry as the timing file and messages name it: the argument, or the function."""
    return key if isinstance(key, str) else key.__name__


def _outcome(stored: Any) -> Outcome | None:
    """A stored timing if it is one (finite ms or "failed: ..."), else None."""
    if isinstance(stored, (int, float)) and not isinstance(stored, bool):
        return float(stored) if math.isfinite(stored) else None
    if isinstance(stored, str) and stored.startswith("failed: "):
        return stored
    return None


class _Progress:
    """A progress line on stderr, shown only once tuning has taken over a second."""

    def __init__(self, name: str, total: int):
        self.name, self.total = name, total
        self.start = time.perf_counter()
        self.shown = False

    def update(self, done: int) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed > _PROGRESS_AFTER_S:
            sys.stderr.write(f"\rtilejit: autotuning {self.name}: {done}/{self.total} configs "
                             f"({elapsed:.1f}s)")
            sys.stderr.flush()
            self.shown = True

    def finish(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def _print_table(name: str, key: tuple, configs: Iterable[Config], results: dict[str, Outcome],
                 fresh: set[str], winner: Config | None) -> None:
    rows = [(str(c), results[c.signature], "timed" if c.signature in fresh else "cached",
             c == winner) for c in configs]
    width = max(len("config"), *(len(r[0]) for r in rows))
    print(f"tilejit autotune {name} key={key}")
    print(f"  {'config':<{width}}  {'time (ms)':>10}  status")
    for text, timing, source, is_winner in rows:
        ms, status = (f"{timing:.4f}", source) if isinstance(timing, float) else ("-", timing)
        print(f"{'*' if is_winner else ' '} {text:<{width}}  {ms:>10}  "
              f"{status}{'  <- winner' if is_winner else ''}")


def _device_of(values: Iterable[Any]) -> str | None:
    """"cuda" when a CUDA tensor is among the arguments, else None (do_bench decides)."""
    cuda = any(getattr(getattr(v, "device", None), "type", None) == "cuda" for v in values)
    return "cuda" if cuda else None


def _copy_array(value: Any) -> Any:
    return value.clone() if hasattr(value, "clone") else value.copy()


def _restore_array(target: Any, saved: Any) -> None:
    if hasattr(target, "copy_"):
        target.copy_(saved)
    else:
        target[...] = saved


def _zero_array(value: Any) -> None:
    if hasattr(value, "zero_"):
        value.zero_()
    else:
        value[...] = 0
