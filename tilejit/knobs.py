"""Every environment variable tilejit reads, declared once, typed, settable from Python.

``knobs.dump`` reads ``TILEJIT_DUMP`` on each access unless a value was set from Python;
``with knobs.scoped(debug=True): ...`` overrides a knob for a block (tests use this).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Knob:
    env: str
    parse: Callable[[str], Any]
    default: Any
    doc: str


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _stages(text: str) -> frozenset[str]:
    return frozenset(s.strip() for s in text.split(",") if s.strip())


def _folders(text: str) -> tuple[str, ...]:
    return tuple(folder for folder in text.split(os.pathsep) if folder)


KNOBS: dict[str, Knob] = {
    "dump": Knob("TILEJIT_DUMP", _stages, frozenset(),
                 "comma-separated stages to print: ir,lowered,dispatch,llir,cuda,ptx,nki"),
    "debug": Knob("TILEJIT_DEBUG", _flag, False,
                  "compile bounds checks on every access and NaN-fill fresh memory"),
    "bounds_check": Knob("TILEJIT_BOUNDS_CHECK", _flag, True,
                         "check native element accesses (buf[i]) against the buffer's shape "
                         "on the CPU target; 0 drops the check for speed (an access out of "
                         "bounds may then crash the process)"),
    "simt": Knob("TILEJIT_SIMT", _flag, False,
                 "run the per-thread (SIMT) lowering on the CPU: tile primitives split over "
                 "threads as a GPU target gets them, one simulated unit per thread "
                 "(docs/lowering.md); part of the cache key"),
    "verify": Knob("TILEJIT_VERIFY", _flag, False, "run the IR verifier after every pass"),
    "target": Knob("TILEJIT_TARGET", str, None, "default target: cpu, cuda or nki"),
    "cache_dir": Knob("TILEJIT_CACHE_DIR", os.path.expanduser,
                      os.path.expanduser("~/.cache/tilejit"), "on-disk cache folder"),
    "always_compile": Knob("TILEJIT_ALWAYS_COMPILE", _flag, False, "ignore every cache"),
    "cuda_include": Knob("TILEJIT_CUDA_INCLUDE", _folders, (),
                         "folders holding CUDA's headers (cuda_fp16.h, ...) for NVRTC, "
                         "separated like PATH; tried before the installed ones"),
    "print_autotuning": Knob("TILEJIT_PRINT_AUTOTUNING", _flag, False,
                             "print the autotuning table"),
}


class _Knobs:
    def __init__(self) -> None:
        object.__setattr__(self, "_overrides", {})

    def __getattr__(self, name: str) -> Any:
        knob = KNOBS.get(name)
        if knob is None:
            raise AttributeError(f"no knob named {name!r}; known: {sorted(KNOBS)}")
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        text = os.environ.get(knob.env)
        return knob.default if text is None or text == "" else knob.parse(text)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in KNOBS:
            raise AttributeError(f"no knob named {name!r}; known: {sorted(KNOBS)}")
        self._overrides[name] = value

    def raw_lookup(self, name: str) -> tuple[Callable[[Any], Any], Any]:
        """``(get, key)``: ``get(key)`` reads knob ``name``'s raw environment text, for hot
        paths (the launcher). CPython's ``os.environ`` keeps its values in ``_data`` under
        encoded keys; reading that dict directly is ~20x cheaper than ``os.environ.get``."""
        env = KNOBS[name].env
        data = getattr(os.environ, "_data", None)
        if not isinstance(data, dict):
            return os.environ.get, env
        return data.get, os.environ.encodekey(env)

    @property
    def overrides(self) -> dict[str, Any]:
        """The live dict of values set from Python (read it, never write it)."""
        return object.__getattribute__(self, "_overrides")

    def reset(self, name: str) -> None:
        self._overrides.pop(name, None)

    @contextlib.contextmanager
    def scoped(self, **values: Any) -> Iterator[None]:
        saved = {n: self._overrides[n] for n in values if n in self._overrides}
        for name, value in values.items():
            setattr(self, name, value)
        try:
            yield
        finally:
            for name in values:
                self._overrides.pop(name, None)
            self._overrides.update(saved)


knobs = _Knobs()
