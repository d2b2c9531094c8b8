"""``pytest --cuda-compile``: every kernel a test compiles for the CPU is also compiled for
the cuda target, for each arch we claim, with the same specialization (no GPU needed:
NVRTC compiles here).

A kernel the cuda target cannot compile yet must say so as a located CompilationError
(or DispatchError); anything else -- an internal compiler error, an NVRTC failure on
printed code, a Python exception -- fails the test that compiled it. The session ends with
a table: kernels compiled, refused (grouped by the first line of the message), failed;
``--cuda-compile-report=FILE`` also writes it as JSON, naming the kernels behind each refusal
(and one full message) so that a category can be traced to its test.

Comparing two surveys: run both from the same checkout path. The random-layout probes of
``test_e2e_layouts`` / ``test_e2e_construct`` come from derandomized Hypothesis, whose
examples differed between two worktrees of one commit (so do the numbers).
"""
from __future__ import annotations

import collections
import dataclasses
import json

import pytest

ARCHS = ("sm_80", "sm_90a")


class CudaSurvey:
    def __init__(self, report_path: str | None):
        self.report_path = report_path
        self.compiled: set[tuple[str, str]] = set()   # (module.qualname: generated probes differ, arch)
        self.refused: collections.Counter = collections.Counter()
        self.refused_kernels: dict[str, list[str]] = collections.defaultdict(list)
        self.refused_example: dict[str, str] = {}   # one full message per category
        self.failed: list[tuple[str, str, str]] = []
        self.seen: set = set()
        self.current_failures: list[str] = []

    def after_cpu_compile(self, original, fn, specs, constexprs, options, debug) -> None:
        from tilejit.errors import CompilationError, TilejitError
        if options.target not in (None, "cpu"):
            return
        for arch in ARCHS:
            key = (fn, tuple(sorted((k, repr(v)) for k, v in specs.items())),
                   tuple(sorted((k, repr(v)) for k, v in constexprs.items())),
                   options.num_warps, options.auto_sync, arch)
            if key in self.seen:
                continue
            self.seen.add(key)
            name = f"{fn.__module__}.{fn.__qualname__}@{arch}"
            cuda = dataclasses.replace(options, target="cuda", arch=arch, simt=False)
            try:
                original(fn, specs, constexprs, cuda, debug)
            except CompilationError as err:
                message = err.message if hasattr(err, "message") else str(err)
                if "internal compiler error" in message or "NVRTC" in message:
                    self._fail(name, message)
                else:
                    self._refuse(name, message)
                continue
            except TilejitError as err:
                self._refuse(name, str(err))
                continue
            except Exception as err:  # a crash of the cuda path: the test fails
                self._fail(name, f"{type(err).__name__}: {err}")
                continue
            self.compiled.add((f"{fn.__module__}.{fn.__qualname__}", arch))

    def _refuse(self, name: str, message: str) -> None:
        why = message.splitlines()[0][:160]
        self.refused[why] += 1
        self.refused_kernels[why].append(name)
        self.refused_example.setdefault(why, message)

    def _fail(self, name: str, message: str) -> None:
        self.failed.append((name, message.splitlines()[0][:300], message))
        self.current_failures.append(f"{name}: {message}")

    def summary(self) -> str:
        lines = [f"cuda-compile: {len(self.compiled)} kernel/arch pairs compiled, "
                 f"{sum(self.refused.values())} refused, {len(self.failed)} failed"]
        lines += [f"  refused x{n}: {why}" for why, n in self.refused.most_common(15)]
        lines += [f"  FAILED {name}: {why}" for name, why, _ in self.failed[:30]]
        return "\n".join(lines)

    def write(self) -> None:
        if self.report_path:
            with open(self.report_path, "w") as f:
                json.dump({"compiled": sorted(self.compiled),
                           "refused": dict(self.refused.most_common()),
                           "refused_kernels": self.refused_kernels,
                           "refused_example": self.refused_example,
                           "failed": [{"kernel": n, "error": full} for n, _, full in self.failed]},
                          f, indent=1)


def install(config) -> CudaSurvey:
    """Wrap the compiler the runtime calls so that CPU compiles also compile for cuda."""
    import tilejit.runtime.jit as jit

    survey = CudaSurvey(config.getoption("--cuda-compile-report"))
    original = jit.compile_kernel

    def compile_kernel(fn, specs, constexprs, options, debug):
        result = original(fn, specs, constexprs, options, debug)
        survey.after_cpu_compile(original, fn, specs, constexprs, options, debug)
        return result
    jit.compile_kernel = compile_kernel
    return survey


@pytest.fixture(autouse=True)
def _cuda_failures_fail_the_test(request):
    survey = getattr(request.config, "_cuda_survey", None)
    if survey is None:
        yield
        return
    survey.current_failures = []
    yield
    if survey.current_failures:
        pytest.fail("compiling for cuda failed:\n" + "\n".join(survey.current_failures),
                    pytrace=False)
