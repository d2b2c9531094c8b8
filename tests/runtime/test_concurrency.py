"""Compiling while other threads compile, launch or fork."""
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tilejit as tj
from tilejit.knobs import knobs
from tilejit.runtime import jit as runtime_jit
from tilejit.runtime.compiler import compile_kernel
from tilejit.targets.cpu import jit as cpu_jit

pytestmark = pytest.mark.usefixtures("fresh_cache")

CHILD_DEADLINE_S = 60   # a compile takes about a second; a deadlock never ends


def add_one(x, out, n, BLOCK: tj.constexpr = 8):
    base = tj.cta_id(0) * BLOCK
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if base + i < n:
                    out[base + i] = x[base + i] + 1.0


def compile_and_check() -> bool:
    """A cold compile and a launch of a kernel this process has never seen."""
    x = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    with knobs.scoped(always_compile=True):
        tj.kernel(add_one)[(2,)](x, out, 16)
    return bool((out == x + 1).all())


def wait_for_child(pid: int) -> int:
    """The child's exit code; kills it and fails once ``CHILD_DEADLINE_S`` has passed."""
    deadline = time.monotonic() + CHILD_DEADLINE_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not finish within {CHILD_DEADLINE_S} s (deadlocked)")


def test_a_child_forked_while_another_thread_compiles_can_compile():
    held, release = threading.Event(), threading.Event()

    def compile_in_thread():   # holds the compile lock the way a compile does, briefly
        with cpu_jit._LOCK:
            held.set()
            release.wait(0.5)

    thread = threading.Thread(target=compile_in_thread)
    thread.start()
    held.wait()
    pid = os.fork()
    if pid == 0:   # the child: never return into pytest
        code = 1
        try:
            code = 0 if compile_and_check() else 2
        finally:
            os._exit(code)
    release.set()
    thread.join()
    assert wait_for_child(pid) == 0


def test_eight_threads_launching_one_cold_kernel_compile_it_once(monkeypatch):
    compiles = []

    def counting_compile(*args, **kwargs):
        compiles.append(threading.get_ident())
        time.sleep(0.2)   # every other thread misses while this compile runs
        return compile_kernel(*args, **kwargs)

    monkeypatch.setattr(runtime_jit, "compile_kernel", counting_compile)
    kernel = tj.kernel(add_one)
    x = np.arange(16, dtype=np.float32)
    outs = [np.zeros(16, np.float32) for _ in range(8)]
    start = threading.Barrier(len(outs))

    def launch(out):
        start.wait()
        kernel[(2,)](x, out, 16)

    with ThreadPoolExecutor(len(outs)) as pool:
        list(pool.map(launch, outs))   # re-raises any thread's error
    assert len(compiles) == 1 and kernel.cache_info().compiles == 1
    assert all((out == x + 1).all() for out in outs)
