"""``pytest --cuda-run`` (on a GPU machine): every launch a test makes on CPU tensors is run
again on the GPU, and what the GPU wrote must match what the CPU wrote.

The tests check the CPU's results against torch; this plugin makes each of those launches a
differential test of the cuda target: the CPU tensors are copied before the launch, the
copies go to the GPU, ``kernel[grid]`` runs on them (the target follows the tensors'
device), and after the CPU's launch every tensor argument is compared with its GPU copy --
integers and bools bit for bit, floats within a tolerance for the order of additions and
the math library (``TOLERANCES``). A launch the CPU refuses or fails is not mirrored (the
test expects it). A kernel the cuda target refuses with a located error is counted, not
failed; an internal compiler error, a GPU fault or a mismatch fails the test that launched
it. The session ends with a table, as ``--cuda-compile``'s.

:class:`Mirror` takes the device and the launch options as parameters, so the same
machinery is tested on the CPU (tests/runtime/test_mirror_launches.py mirrors to the CPU's
per-thread lowering).
"""
from __future__ import annotations

import collections
import functools
from collections.abc import Callable

import pytest

# (rtol, atol) per float dtype name: the CPU and a GPU differ in the order of a reduction's
# additions and in the last bits of exp/log; a real mistake is far outside these.
TOLERANCES = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3),
              "bfloat16": (2e-2, 1e-2)}
_NOT_MIRRORED = ("target", "arch", "simt")   # launch options that choose the CPU's lowering


class Mirror:
    """Runs a launch again on ``device`` with the launch options ``options`` and compares."""

    def __init__(self, device: str, options: dict, synchronize: Callable[[], None]):
        self.device, self.options, self.synchronize = device, options, synchronize
        self.compared = 0
        self.refused: collections.Counter = collections.Counter()
        self.failures: list[str] = []          # of the current test

    def launch(self, kernel, grid, launch, *args, **kwargs):
        import torch

        def is_cpu_tensor(value) -> bool:
            return isinstance(value, torch.Tensor) and value.device.type == "cpu"

        if kwargs.get("target") not in (None, "cpu") or not any(
                is_cpu_tensor(v) for v in (*args, *kwargs.values())):
            return launch(*args, **kwargs)
        before = [a.clone() if is_cpu_tensor(a) else a for a in args]
        before_kw = {k: v.clone() if is_cpu_tensor(v) else v for k, v in kwargs.items()}
        result = launch(*args, **kwargs)       # the test's own launch: its errors are its own
        moved = [a.to(self.device) if is_cpu_tensor(a) else a for a in before]
        moved_kw = {k: v.to(self.device) if is_cpu_tensor(v) else v
                    for k, v in before_kw.items() if k not in _NOT_MIRRORED}
        name = f"{kernel.__qualname__}[{grid}]"
        if not self._mirrored(name, launch, moved, {**moved_kw, **self.options}):
            return result
        pairs = [*zip(args, moved), *((kwargs[k], moved_kw[k]) for k in moved_kw)]
        for position, (cpu, other) in enumerate(pairs):
            if is_cpu_tensor(cpu):
                why = mismatch(cpu, other.cpu())
                if why:
                    self.failures.append(f"{name}: tensor argument {position}: {why}")
        self.compared += 1
        return result

    def _mirrored(self, name: str, launch, args, kwargs) -> bool:
        from tilejit.errors import CompilationError, LaunchError, TilejitError
        try:
            launch(*args, **kwargs)
            self.synchronize()
        except TilejitError as err:
            message = err.message if hasattr(err, "message") else str(err)
            if isinstance(err, CompilationError) and ("internal compiler error" in message
                                                      or "NVRTC" in message):
                self.failures.append(f"{name}: {message}")
            elif isinstance(err, LaunchError):
                self.failures.append(f"{name}: the mirrored launch failed: {message}")
            else:
                self.refused[message.splitlines()[0][:160]] += 1
            return False
        except Exception as err:   # a crash of the mirrored path: the test fails
            self.failures.append(f"{name}: {type(err).__name__}: {err}")
            return False
        return True

    def summary(self) -> str:
        lines = [f"mirrored launches on {self.device}: {self.compared} compared, "
                 f"{sum(self.refused.values())} refused"]
        lines += [f"  refused x{n}: {why}" for why, n in self.refused.most_common(15)]
        return "\n".join(lines)


def mismatch(expected, got) -> str | None:
    """Why ``got`` (the mirrored launch's tensor) differs from ``expected`` (the CPU's)."""
    import torch
    if expected.shape != got.shape or expected.dtype != got.dtype:
        return f"shape/dtype {tuple(got.shape)} {got.dtype}, expected {tuple(expected.shape)} " \
               f"{expected.dtype}"
    name = str(expected.dtype).removeprefix("torch.")
    if name not in TOLERANCES:
        differ = (expected != got).nonzero()
        return None if not len(differ) else \
            f"{len(differ)} elements differ, first at {tuple(differ[0].tolist())}"
    rtol, atol = TOLERANCES[name]
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as err:
        return str(err).splitlines()[0] + " " + " ".join(str(err).splitlines()[1:4])
    return None


def mirrored_getitem(mirror: Mirror, original):
    """``Kernel.__getitem__`` routing every ``kernel[grid](...)`` through ``mirror``."""
    def getitem(self, grid):
        return functools.partial(mirror.launch, self, grid, original(self, grid))
    return getitem


def install(config, mirror: Mirror) -> Mirror:
    from tilejit.runtime.jit import Kernel
    Kernel.__getitem__ = mirrored_getitem(mirror, Kernel.__getitem__)
    return mirror


def cuda_mirror() -> Mirror:
    import torch
    return Mirror("cuda", {}, torch.cuda.synchronize)


@pytest.fixture(autouse=True)
def _mismatches_fail_the_test(request):
    mirror = getattr(request.config, "_mirror", None)
    if mirror is None:
        yield
        return
    mirror.failures = []
    yield
    if mirror.failures:
        pytest.fail("the mirrored launch disagreed:\n" + "\n".join(mirror.failures),
                    pytrace=False)
