"""Shared helpers of the end-to-end tests: dtypes, inputs, guarded outputs, comparisons."""
from __future__ import annotations

import torch

FLOATS = ["float32", "float64", "float16", "bfloat16", "float8_e4m3", "float8_e5m2"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
ALL = FLOATS + INTS + ["bool"]

_TORCH = {"float8_e4m3": torch.float8_e4m3fn}


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH.get(name) or getattr(torch, name)


def is_float(name: str) -> bool:
    return name in FLOATS


def make(shape, name: str, gen: torch.Generator, low=-8, high=8, nonzero=False) -> torch.Tensor:
    """Random values representable in ``name`` (small integers scaled for floats)."""
    dtype = torch_dtype(name)
    if name == "bool":
        return torch.randint(0, 2, shape, generator=gen).bool()
    if name == "uint8":
        low = max(low, 0)
    if is_float(name):
        values = torch.randint(low * 4, high * 4, shape, generator=gen).double() / 4
    else:
        values = torch.randint(low, high, shape, generator=gen).double()
    if nonzero:
        values[values == 0] = 1
    return values.to(dtype)


SENTINEL = {"bool": True}


def guarded(shape, name: str, pad: int = 3):
    """(out, whole): ``out`` is a ``shape`` view inside ``whole``, a larger tensor filled
    with a sentinel, so a test can check that nothing past ``out``'s end was written."""
    dtype = torch_dtype(name)
    big = tuple(n + pad for n in shape)
    fill = SENTINEL.get(name, 7)
    whole = torch.full(big, fill, dtype=torch.float64).to(dtype)
    out = whole[tuple(slice(0, n) for n in shape)]
    return out, whole


def assert_guard_intact(whole: torch.Tensor, shape, name: str) -> None:
    """Everything in ``whole`` outside the leading ``shape`` box still holds the sentinel."""
    mask = torch.ones(whole.shape, dtype=torch.bool)
    mask[tuple(slice(0, n) for n in shape)] = False
    outside = whole.double()[mask]
    fill = float(SENTINEL.get(name, 7))
    assert torch.all(outside == fill), f"wrote past the end: {outside[outside != fill][:8]}"


def as_f64(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64)


TOLERANCES = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-3, "bfloat16": 8e-3,
              "float8_e4m3": 0.07, "float8_e5m2": 0.13}


def tolerance(name: str) -> dict:
    """rtol/atol for comparing a ``name`` result (integers and bool: exact)."""
    rtol = TOLERANCES.get(name, 0)
    return {"rtol": rtol, "atol": min(rtol, 0.02)}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    torch.testing.assert_close(as_f64(actual), as_f64(expected), equal_nan=True,
                               **tolerance(name))


def launched_or_refused(lowering: str, kernel_file, launch) -> bool:
    """Run ``launch()``. Per thread, a tile placement may have no per-thread rule (a
    replicated tile's copy) or give one thread two elements at one place: a
    ``DispatchError`` or ``CompilationError`` located in ``kernel_file`` is then a right
    answer, and the result is not compared (False). Anything else is raised: a refusal in
    the CPU's own lowering, an unlocated one, or a wrong answer after a launch."""
    import tilejit as tj
    try:
        launch()
    except (tj.DispatchError, tj.CompilationError) as err:
        if lowering != "per_thread" or str(kernel_file) not in str(err):
            raise
        return False
    return True


def in_a_loop(ptx: list[str], index: int) -> bool:
    """Whether PTX line ``index`` (stripped lines) lies between a label and a branch back
    to it."""
    labels = {line[:-1]: n for n, line in enumerate(ptx[:index]) if line.endswith(":")}
    return any(line.startswith(("bra", "@")) and line.split()[-1].rstrip(";") in labels
               for line in ptx[index:])


def wgmma_groups_in_flight(compiled) -> list[str]:
    """The checks that a build keeps one wgmma group in flight across its K loop: the
    failures, as text (empty when it does). ``wgmma.wait_group 1`` inside a loop, and
    ptxas compiling the CUDA source without a wgmma note (C7515: multiplies serialized,
    C7517: a wait it had to inject, when registers of a pending wgmma are touched)."""
    from tilejit.targets.cuda.nvrtc import compile_cuda
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    wait = "wgmma.wait_group.sync.aligned 1;"
    failures = []
    if wait not in ptx or not in_a_loop(ptx, ptx.index(wait)):
        failures.append(f"no {wait!r} inside a loop")
    log = compile_cuda(compiled.asm["cuda"], "sm_90a").log
    if "wgmma" in log:
        failures.append(f"ptxas: {log}")
    return failures
