"""Approximate math (issue 13): ``config={"approx": True}`` on exp, exp2, log, log2, sin
and cos lets a target use its fast instruction (cuda: ``__expf``, ``ex2.approx``, ...;
accuracy in docs/language.md). The CPU computes the exact function, so results here
match torch at the usual tolerance; what the cuda target prints is checked line by line,
and the errors point at the user's line."""
import inspect

import pytest
import torch

import tilejit as tj
from support.gpu import needs_nvrtc

APPROX = ("exp", "exp2", "log", "log2", "sin", "cos")
TORCH = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2,
         "sin": torch.sin, "cos": torch.cos}


@tj.kernel
def approx_math(x, out, N: tj.constexpr, OP: tj.constexpr, APPROX: tj.constexpr):
    r = tj.program_id(0)
    t = tj.fragment((N,), x.dtype)
    tj.copy(t, x[r, 0:N])
    d = tj.fragment((N,), x.dtype)
    if OP == "exp":                 # the statement form ...
        tj.exp(d, t, config={"approx": APPROX})
    elif OP == "exp2":
        tj.exp2(d, t, config={"approx": APPROX})
    elif OP == "log":               # ... and the expression form
        d = tj.log(t, config={"approx": APPROX})
    elif OP == "log2":
        d = tj.log2(t, config={"approx": APPROX})
    elif OP == "sin":
        d = tj.sin(t, config={"approx": APPROX})
    else:
        d = tj.cos(t, config={"approx": APPROX})
    tj.copy(out[r, 0:N], d)


@tj.kernel
def approx_softmax(x, out, N: tj.constexpr):
    r = tj.program_id(0)
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[r, 0:N])
    e = tj.exp(t - tj.max(t), config={"approx": True})
    tj.copy(out[r, 0:N], e / tj.sum(e))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op", APPROX)
def test_approximate_math_on_the_cpu_is_the_exact_function(op, dtype):
    gen = torch.Generator().manual_seed(7)
    x = torch.rand(3, 37, generator=gen) * 4 + 0.25      # positive: log's domain
    x = x.to(dtype)
    out = torch.zeros_like(x)
    approx_math[(3,)](x, out, N=37, OP=op, APPROX=True)
    expected = TORCH[op](x.double()).to(dtype)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(out, expected, **tol)


def test_an_approximate_softmax_matches_torch():
    x = torch.randn(5, 131, generator=torch.Generator().manual_seed(3)) * 5
    out = torch.zeros_like(x)
    approx_softmax[(5,)](x, out, N=131)
    torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-7)


@tj.kernel
def approx_sqrt(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    tj.copy(out[0:N], tj.sqrt(t, config={"approx": True}))


@tj.kernel
def approx_f64(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float64)
    tj.copy(t, x[0:N])
    tj.copy(out[0:N], tj.exp(t, config={"approx": True}))


@tj.kernel
def approx_not_bool(x, out, N: tj.constexpr):
    t = tj.fragment((N,), tj.float32)
    tj.copy(t, x[0:N])
    tj.exp(t, t, config={"approx": "fast"})
    tj.copy(out[0:N], t)


def _line_of(kernel, text):
    lines, start = inspect.getsourcelines(kernel.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("kernel, dtype, text, message", [
    (approx_sqrt, torch.float32, "tj.sqrt(t", r"tj.sqrt has no approximate form: config=\{'approx': "
     r"True\} applies to tj.exp, tj.exp2, tj.log, tj.log2, tj.sin, tj.cos"),
    (approx_f64, torch.float64, "tj.exp(t", "approximate math computes in float32 or narrower, "
     "this computes in f64"),
    (approx_not_bool, torch.float32, "tj.exp(t", r"config\['approx'\] is True or False, got 'fast'"),
])
def test_what_has_no_approximate_form_is_a_located_error(kernel, dtype, text, message):
    x = torch.ones(8, dtype=dtype)
    with pytest.raises(tj.CompilationError, match=message) as err:
        kernel[(1,)](x, torch.zeros_like(x), N=8)
    assert err.value.line == _line_of(kernel, text)


@needs_nvrtc
@pytest.mark.team_once_only("compiles for cuda, whose lowering is per_thread")
def test_cuda_prints_the_fast_forms_only_when_asked():
    specs = [tj.TensorSpec((4, 64), tj.float32, device="cuda")] * 2

    def printed(op, approx):
        compiled = approx_math.compile(*specs, N=64, OP=op, APPROX=approx, target="cuda",
                                       arch="sm_90a")
        return compiled.asm["cuda"], compiled.asm["ptx"]

    fast = {"exp": "__expf(", "exp2": "tj_exp2_approx(", "log": "__logf(", "log2": "__log2f(",
            "sin": "__sinf(", "cos": "__cosf("}
    for op, call in fast.items():
        cuda, _ = printed(op, True)
        assert call in cuda.split("end of prelude", 1)[1], op
        exact, _ = printed(op, False)
        assert call not in exact.split("end of prelude", 1)[1], op
    # the exact logf has no lg2.approx; __logf is one
    assert "lg2.approx" in printed("log", True)[1] and "lg2.approx" not in printed("log", False)[1]
    # the softmax's exp stays fast where max and sum are fused around it
    compiled = approx_softmax.compile(*specs, N=64, target="cuda", arch="sm_90a")
    assert "__expf(" in compiled.asm["cuda"] and compiled.metadata["spill_bytes"] == 0
