"""Ctrl-C stops a long launch: the launch ends at the next CTA boundary and raises
KeyboardInterrupt (issue 11)."""
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

import tilejit as tj

CHILD = textwrap.dedent("""
    import torch
    import tilejit as tj

    @tj.kernel
    def churn(out, n):
        acc = tj.cta_id(0)
        for i in range(n):   # a chain of dependent multiplies: about 1 ms per CTA
            acc = acc * 3 + i
        out[tj.cta_id(0) % 4] = acc

    @tj.kernel
    def spin(out, n):
        while out[0] == 0:   # waits for a write that never comes
            out[1] = out[1] + 1

    @tj.kernel
    def spin_threads(out, n):   # the same in per-thread units (coroutines)
        while out[0] == 0:
            out[1 + tj.thread_id() % 2] = 1

    out = torch.zeros(4, dtype=torch.int32)
    kernel, grid = {{"churn": (churn, 1_000_000), "spin": (spin, 4),
                    "spin_threads": (spin_threads, 4)}}["{kernel}"]
    compiled = kernel.compile(out, 1_000_000)
    print("launching", flush=True)
    if {one_worker}:   # the calling thread alone
        compiled.module.launch(grid, [out, 1_000_000], workers=1)
    else:
        kernel[(grid,)](out, 1_000_000)   # churn: about 1000 s of work on one core
    print("finished", flush=True)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("kernel, one_worker", [("churn", False), ("churn", True),
                                                ("spin", False), ("spin_threads", False)])
def test_ctrl_c_stops_a_long_launch(tmp_path, kernel, one_worker):
    """``churn`` stops between CTAs, the ``spin`` kernels (CTAs that wait forever) where
    they spin."""
    script = tmp_path / "child.py"   # kernels need a source file
    script.write_text(CHILD.format(kernel=kernel, one_worker=one_worker))
    checkout = str(pathlib.Path(tj.__file__).resolve().parents[1])   # this tilejit, not another
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([checkout, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "launching"
        try:   # the launch is running once the child's pool has work
            child.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode != 0
    assert "KeyboardInterrupt" in stderr.splitlines()[-1], stderr
