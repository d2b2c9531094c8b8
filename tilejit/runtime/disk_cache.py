"""Compiled artifacts on disk, one folder per cache key.

Layout under the root (``knobs.cache_dir``, default ``~/.cache/tilejit``)::

    <key[:2]>/<key>/<artifact name>   raw bytes, one file per artifact (kernel.ptx, ...)
    <key[:2]>/<key>/metadata.json     JSON object
    <key[:2]>/<key>/COMPLETE          JSON {"key": key, "files": {name: sha256}}, written last

An entry is built in a temporary sibling folder and renamed into place, so readers see all
of it or none of it; when two processes race, the first rename wins and the loser discards
its copy (both built the same bytes). A staging folder that a killed process left behind
is removed by a later ``put`` into the same ``<key[:2]>`` folder once it is old.

``COMPLETE`` binds the entry to its key, and its checksums catch entries damaged after the
fact (a truncated file, a flipped byte). An entry that is damaged, holds another key, or
has anything but a regular file where a file should be (a FIFO would block the reader)
reads as a miss and is removed so the next ``put`` rebuilds it. Metadata is parsed as JSON
and artifacts are returned as bytes: nothing read from disk is unpickled or evaluated. The
object code in them does run, though: write access to the root means code execution in
every process that uses it.

A root that cannot be written (read-only, not a folder, no permission) degrades to an
in-memory store with one warning per process.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..knobs import knobs

__all__ = ["CacheEntry", "DiskCache", "warn_cache_unwritable"]

METADATA = "metadata.json"
MARKER = "COMPLETE"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_ABANDONED_AFTER_S = 10 * 60   # a put fills and renames its staging folder within seconds
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


def _remove_abandoned(folder: Path) -> None:
    """Remove the staging folders (and trash) that killed processes left in ``folder``."""
    try:
        children = list(os.scandir(folder))
    except OSError:
        return
    now = time.time()
    for child in children:
        if not child.name.startswith((".tmp.", ".trash.")):
            continue
        try:
            abandoned = now - child.stat(follow_symlinks=False).st_mtime > _ABANDONED_AFTER_S
        except OSError:   # removed by another process meanwhile
            continue
        if abandoned:
            shutil.rmtree(child.path, ignore_errors=True)


def _read_regular_file(path: Path) -> bytes:
    """The bytes of ``path``; raises ValueError unless it is a regular file. Opened without
    blocking and checked before reading: reading a FIFO would wait for a writer forever."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{path}: not a regular file")
        return f.read()


def _read_entry(path: Path, key: str) -> CacheEntry:
    """Read and verify the entry for ``key``; raises OSError/ValueError/RecursionError if it
    is damaged or not ``key``'s."""
    marker = json.loads(_read_regular_file(path / MARKER))
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict) \
            or METADATA not in marker["files"]:
        raise ValueError(f"{path / MARKER}: malformed marker")
    if marker.get("key") != key:
        raise ValueError(f"{path}: holds the entry for key {marker.get('key')!r}")
    files = {}
    for name, digest in marker["files"].items():
        if not _SAFE_NAME.fullmatch(name):
            raise ValueError(f"{path / MARKER}: bad file name {name!r}")
        data = _read_regular_file(path / name)
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
            return _read_entry(path, key)
        except (OSError, ValueError, RecursionError):   # RecursionError: JSON nested too deep
            _remove_tree(path)   # so that the next put() rebuilds it
            return None

    def remove(self, key: str) -> None:
        """Forget the entry for ``key`` (one that could not be used), so that it is rebuilt."""
        if self._memory is not None:
            self._memory.pop(key, None)
        else:
            _remove_tree(self._entry_dir(key))

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
        _remove_abandoned(path.parent)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp.{path.name}.", dir=path.parent))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            marker = {"key": path.name,
                      "files": {name: _sha256(data) for name, data in files.items()}}
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
