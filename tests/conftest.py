"""Every test runs against a temporary on-disk cache (never ``~/.cache/tilejit``) with the
knobs that change compilation unset; tests that need their own cache set it on top."""
import pytest


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tilejit-cache")


@pytest.fixture(autouse=True)
def isolated_tilejit_env(session_cache_dir, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(session_cache_dir))
    for name in ("TILEJIT_DUMP", "TILEJIT_TARGET", "TILEJIT_DEBUG", "TILEJIT_ALWAYS_COMPILE",
                 "TILEJIT_BOUNDS_CHECK", "TILEJIT_SIMT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A disk cache of the test's own and no binary in memory: cache counts start at zero."""
    import tilejit as tj
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    tj.cache.clear()


def pytest_addoption(parser):
    parser.addoption("--simt", action="store_true",
                     help="run every kernel in per-thread (SIMT) mode (TILEJIT_SIMT=1)")


@pytest.fixture(autouse=True)
def simt_mode(request, isolated_tilejit_env, monkeypatch):
    """``pytest --simt``: every test's kernels run the per-thread lowering on the CPU."""
    if request.config.getoption("--simt"):
        monkeypatch.setenv("TILEJIT_SIMT", "1")
