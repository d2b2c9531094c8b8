"""Compiled artifacts on disk, one folder per cache key.

Layout under the root (``knobs.cache_dir``, default ``~/.cache/tilejit``)::

    <key[:2]>/<key>/<artifact name>   raw bytes, one file per artifact (kernel.ptx, ...)
    <key[:2]>/<key>/metadata.json     JSON object
    <key[:2]>/<key>/COMPLETE          JSON {"files": {name: sha256}}, written last

An entry is built in a temporary sibling folder and renamed into place, so readers see all
of it or none of it; when two processes race, the first rename wins and the loser discards
its copy (both built the same bytes). The checksums in ``COMPLETE`` catch entries damaged
after the fact (a truncated file, a flipped byte): such an entry reads as a miss and is
removed so the next ``put`` rebuilds it. Metadata is parsed as JSON and artifacts are
returned as bytes: nothing read from disk is unpickled or evaluated.

A root that cannot be written (read-only, not a folder, no permission) degrades to an
in-memory store with one warning per process.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..knobs import knobs

__all__ = ["CacheEntry", "DiskCache", "warn_cache_unwritable"]

METADATA = "metadata.json"
MARKER = "COMPLETE"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_warned_unwritable = False


def warn_cache_unwritable(path: Path, err: OSError) -> None:
    """Warn, once per process, that the cache cannot be written and memory is used instead."""
    global _warned_unwritable
    if _warned_unwritable:
        return
    _warned_unwritable = True
    warnings.warn(f"tilejit cache folder {path} is not writable ({err}); caching in memory "
                  "only for this process (set TILEJIT_CACHE_DIR to a writable folder)",
                  RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class CacheEntry:
    artifacts: dict[str, bytes]
    metadata: dict


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _remove_tree(path: Path) -> None:
    """Best-effort removal that never leaves a half-deleted entry visible under its name."""
    trash = path.with_name(f".trash.{path.name}.{uuid.uuid4().hex}")
    try:
        os.rename(path, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _read_entry(path: Path) -> CacheEntry:
    """Read and verify an entry; raises OSError/ValueError/KeyError/TypeError if damaged."""
    checksums = json.loads((path / MARKER).read_bytes())["files"]
    if not isinstance(checksums, dict) or METADATA not in checksums:
        raise ValueError(f"{path / MARKER}: malformed marker")
    files = {}
    for name, digest in checksums.items():
        if not _SAFE_NAME.fullmatch(name):
            raise ValueError(f"{path / MARKER}: bad file name {name!r}")
        data = (path / name).read_bytes()
        if _sha256(data) != digest:
            raise ValueError(f"{path / name}: checksum mismatch")
        files[name] = data
    metadata = json.loads(files.pop(METADATA))
    if not isinstance(metadata, dict):
        raise ValueError(f"{path / METADATA}: not a JSON object")
    return CacheEntry(files, metadata)


class DiskCache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root if root is not None else knobs.cache_dir)
        self._memory: dict[str, CacheEntry] | None = None   # set once the root proves unwritable

    def _entry_dir(self, key: str) -> Path:
        if not _SAFE_NAME.fullmatch(key) or len(key) < 2:
            raise ValueError(f"invalid cache key {key!r}")
        return self.root / key[:2] / key

    def get(self, key: str) -> CacheEntry | None:
        """The entry stored under ``key``, or None when absent, incomplete or corrupted."""
        path = self._entry_dir(key)
        if self._memory is not None:
            return self._memory.get(key)
        if not path.is_dir():
            return None
        try:
            return _read_entry(path)
        except (OSError, ValueError, KeyError, TypeError):
            _remove_tree(path)   # so that the next put() rebuilds it
            return None

    def put(self, key: str, artifacts: dict[str, bytes], metadata: dict) -> None:
        """Store an entry; keeps the existing one if another writer got there first."""
        path = self._entry_dir(key)
        for name in artifacts:
            if not _SAFE_NAME.fullmatch(name) or name in (METADATA, MARKER):
                raise ValueError(f"invalid artifact name {name!r}")
        files = {**{name: bytes(data) for name, data in artifacts.items()},
                 METADATA: json.dumps(metadata, sort_keys=True, indent=1).encode("utf-8")}
        if self._memory is None:
            try:
                self._write(path, files)
                return
            except OSError as err:   # read-only, not a folder, no permission, disk full
                warn_cache_unwritable(self.root, err)
                self._memory = {}
        self._memory[key] = CacheEntry({n: files[n] for n in artifacts},
                                       json.loads(files[METADATA]))

    def _write(self, path: Path, files: dict[str, bytes]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp.{path.name}.", dir=path.parent))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            marker = {"files": {name: _sha256(data) for name, data in files.items()}}
            (staging / MARKER).write_text(json.dumps(marker, sort_keys=True, indent=1))
            self._publish(staging, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _publish(self, staging: Path, path: Path) -> None:
        try:
            os.rename(staging, path)
            return
        except OSError:
            if self.get(path.name) is not None:   # another process published a valid entry
                return
        # The existing entry was broken and get() removed it; one more try. Losing this
        # race too means another writer's valid entry is now in place.
        try:
            os.rename(staging, path)
        except OSError:
            pass

    def clear(self) -> None:
        """Remove every entry (and the autotuning results) under the root."""
        if self._memory is not None:
            self._memory.clear()
        if not self.root.is_dir():
            return
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                try:
                    child.unlink()
                except OSError:
                    pass
