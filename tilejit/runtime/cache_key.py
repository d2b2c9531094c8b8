"""The one place a compiled kernel's cache key is made.

Everything that can change the generated code goes into :class:`CacheKeyParts`; the key is
the sha256 of a canonical JSON encoding of those parts (:func:`make_key`). Values must be
JSON-safe (None, bool, int, finite float, str, and lists/tuples/str-keyed dicts of those):
anything else is rejected with :class:`CacheKeyError` instead of hashing its ``repr``,
because a ``repr`` can hide state (and so reuse a stale binary) or embed an address (and so
never hit).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import pathlib
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .. import __version__
from ..errors import TilejitError

__all__ = [
    "CacheKeyError",
    "CacheKeyParts",
    "compiler_fingerprint",
    "canonical_json",
    "make_key",
    "source_hash",
]

# Bump when the meaning of a field changes, so keys made by older code never match.
_KEY_SCHEMA = 1

Pairs = tuple[tuple[str, Any], ...]


class CacheKeyError(TilejitError, TypeError):
    """A value that cannot take part in a cache key (not JSON-safe)."""


def _check_json_safe(value: Any, where: str) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):   # inf, -inf and nan too (other=-inf is a common constexpr)
        return
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _check_json_safe(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise CacheKeyError(f"{where}: dict key {k!r} is not a str")
            _check_json_safe(item, f"{where}[{k!r}]")
        return
    raise CacheKeyError(
        f"{where}: a value of type {type(value).__qualname__} cannot be part of a cache key; "
        "use None, bool, int, float, str or lists/tuples/dicts of those")


def canonical_json(value: Any, where: str = "value") -> str:
    """The canonical JSON text of a JSON-safe value: sorted keys, no spaces, ASCII only.

    ``True`` and ``1`` (and ``1`` and ``1.0``) encode differently, so they key differently.
    Non-finite floats take JSON's common extension (``Infinity``, ``-Infinity``, ``NaN``).
    """
    _check_json_safe(value, where)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True)


def _freeze(value: Any) -> Any:
    """Lists become tuples (recursively) so that key parts stay hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _sorted_pairs(value: Mapping[str, Any] | Iterable[tuple[str, Any]], where: str) -> Pairs:
    items = value.items() if isinstance(value, Mapping) else value
    pairs = tuple((str(name), _freeze(v)) for name, v in items)
    for name, v in pairs:
        _check_json_safe(v, f"{where}[{name!r}]")
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise CacheKeyError(f"{where}: duplicate names in {names}")
    return tuple(sorted(pairs))


@dataclass(frozen=True)
class CacheKeyParts:
    """Every ingredient of a compiled kernel's identity.

    Name/value collections may be given as dicts or pairs; they are stored as tuples sorted
    by name so that order never changes the key.
    """

    kernel_source_hash: str
    called_function_hashes: Pairs = ()   # (qualname, source hash) of every @tj.func reached
    constexprs: Pairs = ()               # (name, value)
    globals_read: Pairs = ()             # (name, value) of module-level constants read
    arg_specs: tuple = ()                # per runtime argument: arguments.spec_key(spec)
    options: Pairs = ()                  # launch options: num_warps, num_stages, cluster, ...
    target: str = ""
    arch: str = ""
    debug: bool = False
    version: str = field(default=__version__)
    compiler: str = field(default_factory=lambda: compiler_fingerprint())

    def __post_init__(self) -> None:
        for name in ("called_function_hashes", "constexprs", "globals_read", "options"):
            object.__setattr__(self, name, _sorted_pairs(getattr(self, name), name))
        object.__setattr__(self, "arg_specs", _freeze(self.arg_specs))
        _check_json_safe(self.arg_specs, "arg_specs")
        for name in ("kernel_source_hash", "target", "arch", "version", "compiler"):
            if not isinstance(getattr(self, name), str):
                raise CacheKeyError(f"{name} must be a str, got {getattr(self, name)!r}")
        if not isinstance(self.debug, bool):
            raise CacheKeyError(f"debug must be a bool, got {self.debug!r}")


def make_key(parts: CacheKeyParts) -> str:
    """The cache key of a compiled kernel: sha256 hex of the canonical JSON of ``parts``."""
    document = {f.name: getattr(parts, f.name) for f in fields(parts)}
    document["schema"] = _KEY_SCHEMA
    text = canonical_json(document, "cache key")
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@functools.cache
def compiler_fingerprint() -> str:
    """sha256 hex of the path, size and modification time of each of tilejit's own source
    files, read once per process: a binary made by other compiler code -- an edited
    checkout, another install of the same version -- is never reused. (Python's bytecode
    cache trusts the same two facts; hashing the contents would cost ten times more.)"""
    root = pathlib.Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root).as_posix()}:{stat.st_size}:"
                      f"{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def source_hash(fn: Any) -> str:
    """sha256 hex of ``fn``'s dedented source text (so re-indenting a nested def is a no-op)."""
    source = textwrap.dedent(inspect.getsource(fn))
    return hashlib.sha256(source.encode("utf-8")).hexdigest()
