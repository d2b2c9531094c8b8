"""The error contract (SPEC §7) through ``kernel[grid](...)``: user mistakes raise the
right ``tj.*Error`` carrying the kernel's file, line, column and a caret excerpt; bad
launches raise LaunchError before anything runs."""
import inspect

import pytest
import torch

import tilejit as tj
from tilejit.layout import TileLayout


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _check_located(err, fn, text: str) -> None:
    assert err.file == inspect.getsourcefile(fn)
    assert err.line == _line_of(fn, text), str(err)
    assert err.col is not None
    rendered = str(err)
    assert text in rendered and "^" in rendered          # the excerpt with its caret


def shape_mismatch(x, out):
    a = tj.fragment((16,), x.dtype)
    tj.copy(a, x[0:32])
    tj.copy(out[0:16], a)


def unknown_name(x, out):
    a = tj.fragment((16,), x.dtype)
    tj.copy(a, x[0:16])
    tj.copy(out[0:16], a * undefined_scale)  # noqa: F821


def unknown_builtin(x, out):
    a = tj.fragment((16,), x.dtype)
    tj.copy_everything(a, x[0:16])


def runtime_tile_shape(x, out, n):
    a = tj.fragment((n,), x.dtype)
    tj.copy(a, x[0:16])


def unknown_family(x, out):
    a = tj.fragment((16,), x.dtype)
    tj.copy(a, x[0:16], dispatch="warp_magic")
    tj.copy(out[0:16], a)


def tile_op_under_unrepresentable_filter(x, out):
    a = tj.fragment((16,), x.dtype)
    if tj.thread_id() < 40:
        tj.copy(a, x[0:16])


def tile_op_under_divergent_condition(x, out):
    a = tj.fragment((16,), x.dtype)
    if tj.warp_id() == 0 and tj.lane_id() < 4:
        tj.copy(a, x[0:16])
    else:
        tj.fill(a, 1.0)


def gemm_k_mismatch(x, out):
    a = tj.alloc_shared((16, 8), x.dtype)
    b = tj.alloc_shared((4, 16), x.dtype)
    c = tj.fragment((16, 16), tj.float32)
    tj.gemm(c, a, b)


def bad_reduce_axis(x, out):
    a = tj.fragment((16, 8), x.dtype)
    d = tj.fragment((16,), x.dtype)
    tj.reduce(d, a, "sum", axis=2)


def huge_shared_buffer(x, out):
    s = tj.alloc_shared((1 << 34,), tj.float32)
    s[0] = 1.0
    out[0] = s[0]


def huge_local_buffer(x, out):
    with tj.thread():
        scratch = tj.alloc_local((1 << 33,), tj.float32)
        scratch[0] = 1.0
        out[0] = scratch[0]


def region_rebound_in_a_loop(x, out, n):
    r = x[0:16]
    for i in tj.range(1, n):
        r = x[i:i + 16]
    tj.copy(out[0:16], r)


def tile_at_a_per_warp_position(x, out):
    o = tj.warp_id() * 16
    tj.copy(out[o:o + 16], x[o:o + 16])     # team cta: which warp's o would it use?


def scalar_that_differs_per_lane(x, out):
    a = tj.fragment((16,), x.dtype)
    tj.copy(a, x[0:16])
    tj.add(a, a, tj.lane_id())              # team cta: which lane's id would it add?
    tj.copy(out[0:16], a)


def layout_on_a_warp_the_kernel_lacks(x, out):
    a = tj.fragment((8, 8), x.dtype, TileLayout.parse("(8,8):(1@warpid,1@m)"))
    tj.fill(a, 0.0)


@pytest.mark.parametrize("fn,error,text,words", [
    (tile_at_a_per_warp_position, tj.ScopeError, "tj.copy(out[o:o + 16], x[o:o + 16])",
     "differs between the threads of one cta"),
    (scalar_that_differs_per_lane, tj.ScopeError, "tj.add(a, a, tj.lane_id())",
     "tj.add runs at team cta, but its scalar operand b is a value that differs"),
    (layout_on_a_warp_the_kernel_lacks, tj.ScopeError, "tj.fragment((8, 8)",
     "warpid 0..7, but the kernel has warpid 0..3"),
    (huge_shared_buffer, tj.CompilationError, "tj.alloc_shared((1 << 34,)", "64 GiB"),
    (huge_local_buffer, tj.CompilationError, "tj.alloc_local((1 << 33,)",
     "GiB: the CPU target gives a CTA at most 2 GiB"),
    (region_rebound_in_a_loop, tj.CompilationError, "for i in tj.range(1, n)",
     "carry its start index"),
    (shape_mismatch, tj.CompilationError, "tj.copy(a, x[0:32])", "does not fit"),
    (unknown_name, tj.CompilationError, "undefined_scale", "undefined_scale"),
    (unknown_builtin, tj.CompilationError, "tj.copy_everything", "copy_everything"),
    (runtime_tile_shape, tj.CompilationError, "tj.fragment((n,)", ""),
    (unknown_family, tj.DispatchError, 'dispatch="warp_magic"', "warp_magic"),
    (tile_op_under_unrepresentable_filter, tj.ScopeError, "tj.copy(a, x[0:16])",
     "thread_id() < 40"),
    (tile_op_under_divergent_condition, tj.ScopeError, "tj.copy(a, x[0:16])",
     "part of the team would reach the primitive"),
    (gemm_k_mismatch, tj.CompilationError, "tj.gemm(c, a, b)", "K"),
    (bad_reduce_axis, tj.CompilationError, 'tj.reduce(d, a, "sum", axis=2)', "axis"),
])
def test_user_mistakes_point_at_the_kernel_line(fn, error, text, words):
    kernel = tj.kernel(fn)
    args = [torch.zeros(64), torch.zeros(64)]
    if "n" in inspect.signature(fn).parameters:
        args.append(16)
    with pytest.raises(error) as info:
        kernel[(1,)](*args)
    assert isinstance(info.value, tj.TilejitError)
    assert words in info.value.message
    _check_located(info.value, fn, text)


def test_dispatch_error_lists_each_rule_and_reason():
    def int_exp(x, out):
        a = tj.fragment((16,), tj.int32)
        tj.copy(a, x[0:16])
        tj.exp(a, a)

    with pytest.raises(tj.CompilationError) as info:
        tj.kernel(int_exp)[(1,)](torch.zeros(16, dtype=torch.int32), torch.zeros(16))
    assert "exp" in info.value.message
    _check_located(info.value, int_exp, "tj.exp(a, a)")


@tj.kernel
def plain(x, out, n, BLOCK: tj.constexpr = 16):
    a = tj.fragment((BLOCK,), x.dtype)
    tj.copy(a, x[0:BLOCK])
    tj.copy(out[0:BLOCK], a)


@pytest.mark.parametrize("call,words", [
    (lambda: plain[(1,)](torch.zeros(16), torch.zeros(16)), "missing argument 'n'"),
    (lambda: plain[(1,)](torch.zeros(16), torch.zeros(16), 3, 4, 5), "arguments"),
    (lambda: plain[(1,)](torch.zeros(16), "out", 3), "'out'"),
    (lambda: plain[(0,)](torch.zeros(16), torch.zeros(16), 3), "grid"),
    (lambda: plain[(1,)](torch.zeros(16), torch.zeros(16), 3, bogus=1), "bogus"),
    (lambda: plain[(1,)](torch.zeros(16, dtype=torch.complex64), torch.zeros(16), 3),
     "complex"),
])
def test_bad_launches_raise_launch_error_before_running(call, words):
    with pytest.raises(tj.LaunchError, match=words):
        call()


def test_builtins_outside_a_kernel():
    with pytest.raises(tj.CompilationError, match="inside a @tj.kernel"):
        tj.copy(None, None)
    assert tj.cdiv(10, 3) == 4


def _internal_bug(*args, **kwargs):
    raise ZeroDivisionError("a compiler bug")


def test_an_internal_error_in_the_backend_names_the_kernel_line(monkeypatch, fresh_cache):
    from tilejit.targets.cpu import codegen

    def copy_through_shared(x, out):
        s = tj.alloc_shared((16,), x.dtype)
        tj.copy(s, x[0:16])
        tj.copy(out[0:16], s)
    monkeypatch.setitem(codegen.HANDLERS, "alloc", _internal_bug)
    with pytest.raises(tj.CompilationError, match="internal compiler error.*ZeroDivisionError") \
            as info:
        tj.kernel(copy_through_shared)[(1,)](torch.zeros(16), torch.zeros(16))
    _check_located(info.value, copy_through_shared, "tj.alloc_shared((16,), x.dtype)")


def test_an_internal_error_in_a_pass_names_the_kernel_line(monkeypatch, fresh_cache):
    from tilejit.passes.dispatch import lower

    def copy_through_shared(x, out):
        s = tj.alloc_shared((16,), x.dtype)
        tj.copy(s, x[0:16])
        tj.copy(out[0:16], s)
    monkeypatch.setattr(lower, "lower_op", _internal_bug)
    with pytest.raises(tj.CompilationError, match="internal compiler error.*ZeroDivisionError") \
            as info:
        tj.kernel(copy_through_shared)[(1,)](torch.zeros(16), torch.zeros(16))
    _check_located(info.value, copy_through_shared, "tj.copy(s, x[0:16])")


def test_a_per_warp_tile_runs_at_team_warp():
    @tj.kernel
    def per_warp(x, out):
        o = tj.warp_id() * 16
        tj.warp.copy(out[o:o + 16], x[o:o + 16])

    x, out = torch.arange(64.0), torch.zeros(64)
    per_warp[(1,)](x, out)
    assert torch.equal(out, x)
