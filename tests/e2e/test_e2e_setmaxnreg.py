"""tj.setmaxnreg: a warp-specialized kernel moving registers between its warpgroups runs on
the CPU (a no-op there, after its checks) in both lowerings; the checks -- the count, a
whole warpgroup at team warpgroup, uniform control flow -- are errors at the call's line;
the cuda target prints setmaxnreg.{inc,dec}.sync.aligned.u32 and NVRTC compiles it."""
import pytest
import torch
from support.gpu import needs_nvrtc

import tilejit as tj
from tilejit.errors import CompilationError


@tj.kernel
def rebalanced(x, out, DOWN: tj.constexpr, UP: tj.constexpr):
    """Warpgroup 0 gives registers back, warpgroup 1 takes them and doubles x."""
    if tj.warpgroup_id() == 0:
        with tj.warpgroup():
            tj.setmaxnreg(DOWN, "dec")
    else:
        with tj.warpgroup():
            tj.setmaxnreg(UP, "inc")
            t = tj.fragment((128,), x.dtype)
            tj.copy(t, x[0:128])
            tj.mul(t, t, 2.0)
            tj.copy(out[0:128], t)


def test_a_kernel_moving_registers_runs_on_the_cpu():
    x, out = torch.arange(128.0), torch.zeros(128)
    rebalanced[(1,)](x, out, DOWN=40, UP=232, num_warps=8)
    torch.testing.assert_close(out, 2 * x)


@pytest.mark.parametrize("count", [16, 100, 264])
def test_a_count_outside_the_range_or_off_the_step_is_refused_at_its_line(count):
    line = rebalanced.fn.__code__.co_firstlineno + 5
    with pytest.raises(CompilationError, match=rf"multiple of 8 registers in \[24, 256\] per "
                                               rf"thread, not {count}") as info:
        rebalanced[(1,)](torch.zeros(128), torch.zeros(128), DOWN=count, UP=232, num_warps=8)
    assert info.value.line == line


@tj.kernel
def misplaced(x, WHERE: tj.constexpr):
    if WHERE == "cta":
        tj.setmaxnreg(40, "dec")
    if WHERE == "one warp":
        with tj.warpgroup():
            if tj.warp_id() == 0:
                tj.setmaxnreg(40, "dec")
    if WHERE == "divergent":
        with tj.warpgroup():
            if x[tj.thread_id()] > 0.0:
                tj.setmaxnreg(40, "dec")
    if WHERE == "no action":
        with tj.warpgroup():
            tj.setmaxnreg(40, "less")


@pytest.mark.parametrize("where, offset, message", [
    ("cta", 3, r"setmaxnreg is run by a whole warpgroup at once, but here the team is cta: "
               r"put it under `with tj.warpgroup\(\):`"),
    ("one warp", 7, r"setmaxnreg needs every thread of each warpgroup it runs in, but the "
                    r"active threads are warp 0"),
    ("divergent", 11, r"setmaxnreg needs every thread of its warpgroup, but the condition of "
                      r"the `if` at line \d+ can differ between them"),
    ("no action", 14, r"tj.setmaxnreg\(action\) is \"inc\" or \"dec\", got 'less'"),
])
def test_misplaced_calls_are_errors_at_their_line(where, offset, message):
    with pytest.raises(CompilationError, match=message) as info:
        misplaced[(1,)](torch.ones(128), WHERE=where)
    assert info.value.line == misplaced.fn.__code__.co_firstlineno + offset


@needs_nvrtc
@pytest.mark.team_once_only("compiles for the cuda target; the CPU lowering plays no part")
def test_the_sm90a_build_holds_both_and_other_archs_refuse():
    specs = [tj.TensorSpec((128,), tj.float32, device="cuda") for _ in range(2)]
    compiled = rebalanced.compile(*specs, DOWN=40, UP=232, num_warps=8, target="cuda",
                                  arch="sm_90a")
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 232;") == 1
    assert 'asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");' in compiled.asm["cuda"]
    with pytest.raises(CompilationError, match="setmaxnreg needs sm_90a; compiling for sm_90"):
        rebalanced.compile(*specs, DOWN=40, UP=232, num_warps=8, target="cuda", arch="sm_90")
