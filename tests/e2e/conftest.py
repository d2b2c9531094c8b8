"""End-to-end tests: kernels written with ``import tilejit as tj`` and launched on the CPU.

``tests/e2e`` is put on ``sys.path`` so the tests can share ``e2e_helpers``.
"""
import pathlib
import sys

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


import pytest  # noqa: E402

LOWERINGS = ("team_once", "per_thread")


@pytest.fixture(params=LOWERINGS, autouse=True)
def lowering(request, simt_mode, monkeypatch):
    """Every e2e test runs in both CPU lowerings (issue 11): ``team_once`` (the CPU's own)
    and ``per_thread`` (SIMT mode: the IR a GPU target prints, one unit per thread).

    ``@pytest.mark.team_once_only(reason)``: the test checks the CPU's own lowering (its
    instruction families, or how the mode is chosen); skipped per thread.
    ``@pytest.mark.per_thread_limitation(reason)``: a known gap of the per-thread lowering,
    an expected failure there (strict: it is reported once it passes).
    ``pytest --simt`` runs the per-thread variants only."""
    if request.param == "team_once":
        if request.config.getoption("--simt"):
            pytest.skip("--simt runs the per_thread variant only")
        return request.param
    only = request.node.get_closest_marker("team_once_only")
    if only is not None:
        pytest.skip(f"team_once only: {only.args[0]}")
    gap = request.node.get_closest_marker("per_thread_limitation")
    if gap is not None:
        request.applymarker(pytest.mark.xfail(reason=gap.args[0], strict=True))
    monkeypatch.setenv("TILEJIT_SIMT", "1")
    return request.param
