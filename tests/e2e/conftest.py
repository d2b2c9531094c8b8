"""End-to-end tests: kernels written with ``import tilejit as tj`` and launched on the CPU.

Every test compiles into a fresh on-disk cache (never ``~/.cache``); ``tests/e2e`` is put
on ``sys.path`` so the tests can share ``e2e_helpers``.
"""
import pathlib
import sys

import pytest

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session")
def _e2e_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tilejit-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(_e2e_cache_dir, monkeypatch):
    """TILEJIT_CACHE_DIR -> a pytest temporary folder; no dumps, no forced target."""
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(_e2e_cache_dir))
    for name in ("TILEJIT_DUMP", "TILEJIT_TARGET", "TILEJIT_DEBUG", "TILEJIT_ALWAYS_COMPILE"):
        monkeypatch.delenv(name, raising=False)
    yield
