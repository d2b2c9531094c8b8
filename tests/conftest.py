"""Every test runs against a temporary on-disk cache (never ``~/.cache/tilejit``) with the
knobs that change compilation unset; tests that need their own cache set it on top.

Property tests are derandomized: the profile below is every ``@settings``' parent, so a
test that sets only ``max_examples`` still draws the same examples on every run (a
random draw that fails once in a while would fail a landing)."""
import pytest
from hypothesis import settings

settings.register_profile("tilejit", derandomize=True, database=None, deadline=None)
settings.load_profile("tilejit")


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
    parser.addoption("--cuda-compile", action="store_true",
                     help="also compile every kernel for cuda sm_80 and sm_90a "
                          "(tests/support/cuda_survey.py)")
    parser.addoption("--cuda-run", action="store_true",
                     help="on a GPU: run every launch on CPU tensors again on the GPU and "
                          "compare what it wrote (tests/support/cuda_run.py)")
    parser.addoption("--cuda-compile-report", default=None, metavar="FILE",
                     help="with --cuda-compile: write the survey as JSON to FILE")


def pytest_configure(config):
    if config.getoption("--cuda-compile"):
        from tilejit.targets.cuda.nvrtc import nvrtc_unavailable_reason
        reason = nvrtc_unavailable_reason()
        if reason is not None:
            raise pytest.UsageError(f"--cuda-compile needs NVRTC: {reason}")
        from support import cuda_survey
        config._cuda_survey = cuda_survey.install(config)
        config.pluginmanager.register(cuda_survey, "cuda_survey")
    if config.getoption("--cuda-run"):
        from support import cuda_run
        from support.gpu import cuda_available
        if not cuda_available():
            raise pytest.UsageError("--cuda-run needs an NVIDIA GPU (torch.cuda.is_available() "
                                    "is False)")
        config._mirror = cuda_run.install(config, cuda_run.cuda_mirror())
        config.pluginmanager.register(cuda_run, "cuda_run")


def pytest_terminal_summary(terminalreporter, config):
    survey = getattr(config, "_cuda_survey", None)
    if survey is not None:
        terminalreporter.write_line(survey.summary())
        survey.write()
    mirror = getattr(config, "_mirror", None)
    if mirror is not None:
        terminalreporter.write_line(mirror.summary())


@pytest.fixture(autouse=True)
def simt_mode(request, isolated_tilejit_env, monkeypatch):
    """``pytest --simt``: every test's kernels run the per-thread lowering on the CPU."""
    if request.config.getoption("--simt"):
        monkeypatch.setenv("TILEJIT_SIMT", "1")
