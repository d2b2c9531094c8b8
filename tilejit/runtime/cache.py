"""``tj.cache``: the compiled-kernel caches of this process and of the disk.

:class:`KernelCache` is what a kernel object holds: a lookup goes to memory, then to the
disk cache, then to the compiler, and ``TILEJIT_ALWAYS_COMPILE`` skips both caches.
Threads that miss on one key at once wait for a single compile (one per key per process).
An entry on disk that does not load (damaged, or built for another CPU) is rebuilt.
:func:`clear` empties the disk cache and the memory of every live kernel (anything that
called :func:`register_kernel`, which a ``KernelCache`` does for itself).
"""
from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ..knobs import knobs
from .disk_cache import CacheEntry, DiskCache

__all__ = ["CacheInfo", "KernelCache", "clear", "default_disk_cache", "register_kernel"]

T = TypeVar("T")


class HasMemoryCache(Protocol):
    def clear_memory_cache(self) -> None: ...


_live: weakref.WeakSet[HasMemoryCache] = weakref.WeakSet()
_disk_caches: dict[str, DiskCache] = {}
_compile_locks: dict[str, threading.Lock] = {}   # cache key -> held while it is looked up
_compile_locks_guard = threading.Lock()


def register_kernel(obj: HasMemoryCache) -> None:
    """Have :func:`clear` call ``obj.clear_memory_cache()``; held weakly."""
    _live.add(obj)


def default_disk_cache() -> DiskCache:
    """The disk cache at the current ``knobs.cache_dir`` (one object per folder, so that a
    folder found unwritable stays memory-only for the rest of the process)."""
    root = os.path.abspath(knobs.cache_dir)
    if root not in _disk_caches:
        _disk_caches[root] = DiskCache(root)
    return _disk_caches[root]


def _compile_lock(key: str) -> threading.Lock:
    """The lock that threads missing on ``key`` queue on: the first compiles, the others
    then find its binary. (One per key looked up in this process: far smaller than the
    binaries themselves.)"""
    with _compile_locks_guard:
        return _compile_locks.setdefault(key, threading.Lock())


def _forget_compile_locks() -> None:
    """A forked child has none of the parent's other threads: locks they held would stay
    held."""
    global _compile_locks, _compile_locks_guard
    _compile_locks, _compile_locks_guard = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_compile_locks)


def clear() -> None:
    """Forget every compiled kernel and autotuning result, on disk and in memory."""
    default_disk_cache().clear()
    for obj in list(_live):
        obj.clear_memory_cache()


@dataclass(frozen=True)
class CacheInfo:
    memory_hits: int    # launches served by an already loaded binary
    disk_hits: int      # binaries loaded from the disk cache instead of compiling
    compiles: int       # binaries compiled in this process
    size: int           # binaries held in memory now


class KernelCache(Generic[T]):
    """One kernel's loaded binaries, keyed by :func:`cache_key.make_key`.

    ``compile()`` returns ``(artifacts, metadata)`` for the disk cache; ``load(entry)``
    turns an entry (fresh or read back from disk) into the launchable object kept in memory.
    """

    def __init__(self, disk: DiskCache | None = None):
        self._disk = disk
        self._memory: dict[str, T] = {}
        self._memory_hits = self._disk_hits = self._compiles = 0
        register_kernel(self)

    def get_or_compile(self, key: str,
                       compile: Callable[[], tuple[dict[str, bytes], dict]],
                       load: Callable[[CacheEntry], T]) -> T:
        disk = self._disk if self._disk is not None else default_disk_cache()
        with _compile_lock(key):
            if not knobs.always_compile:
                if key in self._memory:   # perhaps compiled by the thread this one waited for
                    self._memory_hits += 1
                    return self._memory[key]
                entry = disk.get(key)
                if entry is not None:
                    try:
                        self._memory[key] = load(entry)
                    except Exception:   # noqa: BLE001  (whatever an unusable entry raises)
                        # A field missing, code for another CPU: rebuild it. A fresh build
                        # that cannot load either raises below, from load(fresh).
                        disk.remove(key)
                    else:
                        self._disk_hits += 1
                        return self._memory[key]
            artifacts, metadata = compile()
            self._compiles += 1
            disk.put(key, artifacts, metadata)
            # Round-trip the metadata through JSON so that load() sees exactly what a later
            # process reading the disk will see (tuples become lists, keys become strings).
            fresh = CacheEntry(dict(artifacts), json.loads(json.dumps(metadata)))
            self._memory[key] = load(fresh)
            return self._memory[key]

    def clear_memory_cache(self) -> None:
        self._memory.clear()

    def info(self) -> CacheInfo:
        return CacheInfo(self._memory_hits, self._disk_hits, self._compiles, len(self._memory))
