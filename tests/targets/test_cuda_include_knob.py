"""TILEJIT_CUDA_INCLUDE is a declared knob, and NVRTC's header search reads it through
``knobs`` (so ``knobs.scoped`` and the knob table see it, not only the environment)."""
import os

import pytest

from tilejit.errors import CompilationError
from tilejit.knobs import KNOBS, knobs
from tilejit.targets.cuda.nvrtc import cuda_include_dirs, nvrtc_version


@pytest.fixture
def fresh_include_search():
    cuda_include_dirs.cache_clear()
    yield
    cuda_include_dirs.cache_clear()


def test_the_knob_splits_folders_like_path(monkeypatch):
    assert KNOBS["cuda_include"].env == "TILEJIT_CUDA_INCLUDE"
    monkeypatch.setenv("TILEJIT_CUDA_INCLUDE", f"/a{os.pathsep}{os.pathsep}/b")
    assert knobs.cuda_include == ("/a", "/b")
    monkeypatch.delenv("TILEJIT_CUDA_INCLUDE")
    assert knobs.cuda_include == ()


def test_header_search_tries_the_knob_first(tmp_path, fresh_include_search):
    try:
        major = nvrtc_version()[0]
    except CompilationError:   # no NVRTC: the search does not rank by version
        major = 13
    (tmp_path / "cuda_fp16.h").write_text("")
    (tmp_path / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {major * 1000}\n")
    with knobs.scoped(cuda_include=(str(tmp_path),)):
        assert cuda_include_dirs()[0] == os.path.realpath(tmp_path)
