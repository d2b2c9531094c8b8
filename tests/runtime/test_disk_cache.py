import json
import multiprocessing
import os
import subprocess
import shutil
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

import tilejit.runtime.disk_cache as disk_cache
from tilejit.knobs import knobs
from tilejit.runtime import cache
from tilejit.runtime.disk_cache import MARKER, METADATA, DiskCache

KEY = "ab" + "0" * 62
OTHER_KEY = "ab" + "1" * 62
ARTIFACTS = {"kernel.ptx": b".version 8.0\n", "kernel.cubin": bytes(range(256)) * 64}
METADATA_VALUE = {"name": "add", "num_warps": 4, "shared": 0}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def warn_again():
    disk_cache._warned_unwritable = False
    yield
    disk_cache._warned_unwritable = False


def entry_dir(root: Path) -> Path:
    return root / KEY[:2] / KEY


def test_round_trip(tmp_path):
    DiskCache(tmp_path).put(KEY, ARTIFACTS, METADATA_VALUE)
    entry = DiskCache(tmp_path).get(KEY)
    assert entry.artifacts == ARTIFACTS
    assert entry.metadata == METADATA_VALUE
    names = sorted(p.name for p in entry_dir(tmp_path).iterdir())
    assert names == sorted([*ARTIFACTS, METADATA, MARKER])
    assert set(json.loads((entry_dir(tmp_path) / MARKER).read_text())["files"]) == {
        *ARTIFACTS, METADATA}


def test_missing_entry_is_a_miss(tmp_path):
    assert DiskCache(tmp_path / "nowhere").get(KEY) is None


def test_root_defaults_to_the_knob(tmp_path):
    with knobs.scoped(cache_dir=str(tmp_path)):
        assert DiskCache().root == tmp_path


def test_bad_key_and_artifact_names_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        DiskCache(tmp_path).get("../etc")
    with pytest.raises(ValueError):
        DiskCache(tmp_path).put(KEY, {"../x": b""}, {})
    with pytest.raises(ValueError):
        DiskCache(tmp_path).put(KEY, {MARKER: b""}, {})


def test_round_trip_in_a_subprocess(tmp_path):
    DiskCache(tmp_path).put(KEY, ARTIFACTS, METADATA_VALUE)
    script = textwrap.dedent(f"""
        from tilejit.runtime.disk_cache import DiskCache
        entry = DiskCache({str(tmp_path)!r}).get({KEY!r})
        assert entry.artifacts == {ARTIFACTS!r}, entry
        assert entry.metadata == {METADATA_VALUE!r}, entry
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO)


def test_second_process_compiles_nothing(tmp_path):
    """A KernelCache in a fresh process loads from disk instead of calling compile()."""
    script = textwrap.dedent(f"""
        import json, sys
        from tilejit.knobs import knobs
        from tilejit.runtime.cache import KernelCache
        knobs.cache_dir = {str(tmp_path)!r}
        compiled = []
        def compile():
            compiled.append(1)
            return {{"kernel.o": b"object code"}}, {{"entry": "add"}}
        value = KernelCache().get_or_compile({KEY!r}, compile,
                                             lambda e: (e.artifacts["kernel.o"], e.metadata))
        assert value == (b"object code", {{"entry": "add"}}), value
        print(len(compiled))
    """)
    runs = [subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO,
                           capture_output=True, text=True).stdout.strip() for _ in range(2)]
    assert runs == ["1", "0"]


def corrupt_truncate(path: Path) -> None:
    cubin = path / "kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[:100])


def corrupt_flip_byte(path: Path) -> None:
    cubin = path / "kernel.cubin"
    data = bytearray(cubin.read_bytes())
    data[1000] ^= 0x01
    cubin.write_bytes(bytes(data))


def corrupt_drop_marker(path: Path) -> None:
    (path / MARKER).unlink()


def corrupt_metadata(path: Path) -> None:
    (path / METADATA).write_text("{not json")


def corrupt_marker(path: Path) -> None:
    (path / MARKER).write_text(json.dumps({"key": KEY, "files": {"../../escape": "0",
                                                                 METADATA: "0"}}))


def corrupt_marker_without_key(path: Path) -> None:
    marker = json.loads((path / MARKER).read_text())
    del marker["key"]
    (path / MARKER).write_text(json.dumps(marker))


def corrupt_marker_fifo(path: Path) -> None:
    (path / MARKER).unlink()
    os.mkfifo(path / MARKER)


def corrupt_artifact_fifo(path: Path) -> None:
    (path / "kernel.cubin").unlink()
    os.mkfifo(path / "kernel.cubin")


def corrupt_artifact_symlink(path: Path) -> None:
    (path / "copy").write_bytes((path / "kernel.cubin").read_bytes())
    (path / "kernel.cubin").unlink()
    (path / "kernel.cubin").symlink_to(path / "copy")


def corrupt_entry_of_another_key(path: Path) -> None:
    """A valid entry, but made for another key (copied or renamed into this place)."""
    shutil.rmtree(path)
    DiskCache(path.parents[1]).put(OTHER_KEY, ARTIFACTS, {"name": "another kernel"})
    os.rename(path.with_name(OTHER_KEY), path)


def get_without_blocking(store: DiskCache, key: str):
    """``store.get(key)``, failing the test (not hanging it) if the read blocks."""
    result = []
    reader = threading.Thread(target=lambda: result.append(store.get(key)), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():   # blocked opening a FIFO: a writer lets it go
        for fifo in entry_dir(store.root).iterdir():
            if fifo.is_fifo():
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
        pytest.fail(f"get({key!r}) blocked")
    return result[0]


@pytest.mark.parametrize("corrupt", [corrupt_truncate, corrupt_flip_byte, corrupt_drop_marker,
                                     corrupt_metadata, corrupt_marker, corrupt_marker_without_key,
                                     corrupt_marker_fifo, corrupt_artifact_fifo,
                                     corrupt_artifact_symlink, corrupt_entry_of_another_key])
def test_damaged_entry_is_a_miss_and_rebuilt(tmp_path, corrupt):
    store = DiskCache(tmp_path)
    store.put(KEY, ARTIFACTS, METADATA_VALUE)
    corrupt(entry_dir(tmp_path))
    assert get_without_blocking(store, KEY) is None
    assert not entry_dir(tmp_path).exists()     # removed so that it gets rebuilt
    store.put(KEY, ARTIFACTS, METADATA_VALUE)
    assert store.get(KEY).artifacts == ARTIFACTS


def test_put_replaces_a_damaged_entry_in_place(tmp_path):
    store = DiskCache(tmp_path)
    store.put(KEY, ARTIFACTS, METADATA_VALUE)
    corrupt_flip_byte(entry_dir(tmp_path))
    store.put(KEY, ARTIFACTS, METADATA_VALUE)    # without a get() in between
    assert store.get(KEY).artifacts == ARTIFACTS


def test_put_removes_staging_folders_that_killed_processes_left(tmp_path):
    shard = tmp_path / KEY[:2]
    abandoned = [shard / f".tmp.{OTHER_KEY}.killed", shard / f".trash.{OTHER_KEY}.killed"]
    in_progress = shard / f".tmp.{OTHER_KEY}.writing"
    for folder in [*abandoned, in_progress]:
        folder.mkdir(parents=True)
        (folder / "kernel.cubin").write_bytes(b"partial")
    an_hour_ago = time.time() - 3600
    for folder in abandoned:
        os.utime(folder, (an_hour_ago, an_hour_ago))
    DiskCache(tmp_path).put(KEY, ARTIFACTS, METADATA_VALUE)
    assert sorted(p.name for p in shard.iterdir()) == [in_progress.name, KEY]


def test_remove_forgets_an_entry(tmp_path):
    store = DiskCache(tmp_path)
    store.put(KEY, ARTIFACTS, METADATA_VALUE)
    store.remove(KEY)
    assert store.get(KEY) is None and not entry_dir(tmp_path).exists()


def test_root_that_is_a_file_degrades_to_memory_with_one_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(RuntimeWarning, match="not writable") as caught:
        store = DiskCache(blocker / "cache")
        store.put(KEY, ARTIFACTS, METADATA_VALUE)
        store.put("cd" + KEY[2:], ARTIFACTS, METADATA_VALUE)
        DiskCache(blocker / "other").put(KEY, ARTIFACTS, METADATA_VALUE)
    assert len(caught) == 1
    assert store.get(KEY).artifacts == ARTIFACTS    # served from memory
    assert blocker.read_text() == "not a folder"
    store.remove(KEY)
    assert store.get(KEY) is None


def test_permission_denied_degrades_to_memory_with_one_warning(tmp_path, monkeypatch):
    # Tests run as root, which ignores chmod; make the OS refuse the way it would a user.
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(disk_cache.tempfile, "mkdtemp", refuse)
    store = DiskCache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            store.put(KEY, ARTIFACTS, METADATA_VALUE)
    assert [str(w.message).count("Permission denied") for w in caught] == [1]
    assert store.get(KEY).metadata == METADATA_VALUE
    assert not any(tmp_path.rglob("*.cubin"))


def test_clear_removes_everything(tmp_path):
    store = DiskCache(tmp_path)
    store.put(KEY, ARTIFACTS, METADATA_VALUE)
    (tmp_path / "autotune").mkdir()
    (tmp_path / "autotune" / "x.json").write_text("{}")
    store.clear()
    assert list(tmp_path.iterdir()) == []
    assert store.get(KEY) is None


class FakeKernel:
    def __init__(self):
        self.cleared = 0
        cache.register_kernel(self)

    def clear_memory_cache(self):
        self.cleared += 1


def test_tj_cache_clear_empties_disk_and_live_kernels(tmp_path):
    with knobs.scoped(cache_dir=str(tmp_path)):
        kernel = FakeKernel()
        kernel_cache = cache.KernelCache()
        kernel_cache.get_or_compile(KEY, lambda: (ARTIFACTS, {}), lambda e: e.artifacts)
        assert entry_dir(tmp_path).is_dir() and kernel_cache.info().size == 1
        cache.clear()
        assert kernel.cleared == 1
        assert kernel_cache.info().size == 0
        assert not entry_dir(tmp_path).exists()


def test_kernel_cache_counts_and_always_compile(tmp_path):
    compiled = []

    def compile():
        compiled.append(1)
        return ARTIFACTS, {"t": (1, 2)}

    first = cache.KernelCache(DiskCache(tmp_path))
    fresh = first.get_or_compile(KEY, compile, lambda e: e.metadata)
    assert fresh == {"t": [1, 2]}                    # same shape as read back from disk
    assert first.get_or_compile(KEY, compile, lambda e: e.metadata) == fresh
    second = cache.KernelCache(DiskCache(tmp_path))
    assert second.get_or_compile(KEY, compile, lambda e: e.metadata) == fresh
    assert (first.info().compiles, first.info().memory_hits) == (1, 1)
    assert (second.info().compiles, second.info().disk_hits) == (0, 1)
    with knobs.scoped(always_compile=True):
        second.get_or_compile(KEY, compile, lambda e: e.metadata)
    assert len(compiled) == 2


def test_kernel_cache_rebuilds_an_entry_that_does_not_load(tmp_path):
    DiskCache(tmp_path).put(KEY, ARTIFACTS, {"name": "add"})   # no "entry": load() fails
    compiled = []

    def compile():
        compiled.append(1)
        return ARTIFACTS, {"name": "add", "entry": "run"}

    kernel_cache = cache.KernelCache(DiskCache(tmp_path))
    assert kernel_cache.get_or_compile(KEY, compile, lambda e: e.metadata["entry"]) == "run"
    assert compiled == [1] and kernel_cache.info().disk_hits == 0
    assert DiskCache(tmp_path).get(KEY).metadata["entry"] == "run"   # replaced on disk


def put_concurrently(root: str, barrier) -> None:
    barrier.wait()
    store = DiskCache(root)
    store.put(KEY, ARTIFACTS, METADATA_VALUE)
    entry = store.get(KEY)
    assert entry is not None and entry.artifacts == ARTIFACTS


def test_eight_processes_putting_one_key_leave_one_valid_entry(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(8)
    workers = [context.Process(target=put_concurrently, args=(str(tmp_path), barrier))
               for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0] * 8
    assert os.listdir(tmp_path / KEY[:2]) == [KEY]    # no staging or trash left behind
    assert DiskCache(tmp_path).get(KEY).artifacts == ARTIFACTS
