"""A compile pauses Python's cyclic garbage collector and leaves it as it found it."""
import gc
import os
import threading

import numpy as np
import pytest

import tilejit as tj
from tilejit.knobs import knobs
from tilejit.runtime import compiler

pytestmark = pytest.mark.usefixtures("fresh_cache")


def fill(out, n, BLOCK: tj.constexpr = 8):
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if i < n:
                    out[i] = 2.0


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_a_compile_runs_without_the_collector_and_restores_it(enabled, collector_enabled,
                                                              monkeypatch):
    seen = []
    real = compiler.compile_to_ir
    monkeypatch.setattr(compiler, "compile_to_ir",
                        lambda *args: seen.append(gc.isenabled()) or real(*args))
    if not enabled:
        gc.disable()
    out = np.zeros(8, np.float32)
    with knobs.scoped(always_compile=True):
        tj.kernel(fill)[(1,)](out, 8)
    assert seen == [False] and (out == 2.0).all()
    assert gc.isenabled() == enabled


def test_the_collector_returns_when_the_last_compile_in_flight_ends(collector_enabled):
    first_in, second_out = threading.Event(), threading.Event()

    def first():
        with compiler.collector_paused():
            first_in.set()
            second_out.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with compiler.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()   # the first compile is still running
    second_out.set()
    thread.join(10)
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_compile_collects(collector_enabled):
    with compiler.collector_paused():
        pid = os.fork()
        if pid == 0:   # the child: no compile of its own runs
            os._exit(0 if gc.isenabled() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert gc.isenabled()
