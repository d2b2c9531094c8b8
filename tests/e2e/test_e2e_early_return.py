"""``return`` under run-time control flow (docs/language.md "Returning early"): each kernel
body below is also run as plain Python on the same tensors, and both must write the same."""
import inspect

import pytest
import torch

import tilejit as tj


@tj.func
def mark(out, i):
    if out[i] != 0:
        return               # ends the device function only
    out[i] = 7


def top_level(x, out, n):
    if n < 3:
        return
    out[0] = n
    if x[0] > 0:
        return
    out[1] = x[0]


def in_a_loop(x, out, n):
    for i in range(n):
        if x[i] < 0:
            out[n] = i
            return
        out[i] = x[i] * 2
    out[n] = -1


def nested_ifs(x, out, n):
    for i in range(n):
        if x[i] > 0:
            if x[i] > 5:
                out[i] = 100
                return
            else:
                out[i] = 1
        elif x[i] < -5:
            out[i] = -100
        else:
            out[i] = 0
    out[n] = 9


def nested_loops(x, out, n):
    total = 0
    for i in range(n):
        for j in range(n):
            total = total + x[j]
            if total > 20:
                out[n] = i * 100 + j
                return
        out[i] = total
    out[n] = -1


def while_loop(x, out, n):
    i = 0
    while i < n:
        if x[i] == 0:
            return
        out[i] = x[i] + 1
        i = i + 1
    out[n] = i


def unrolled(x, out, n):
    for i in tj.static_range(4):
        if x[i] < 0:
            return
        out[i] = x[i]
    out[n] = 4


def calls_a_function_that_returns(x, out, n):
    for i in range(n):
        out[i] = x[i]
        mark(out, i)
    out[n] = 1


BODIES = [top_level, in_a_loop, nested_ifs, nested_loops, while_loop, unrolled,
          calls_a_function_that_returns]
INPUTS = [[1, 2, 3, 4, 5, 6], [-1, 2, 3, 4, 5, 6], [3, 4, -9, 0, 8, 1], [0, 0, 0, 0, 0, 0],
          [2, 7, 1, 1, 1, 1], [5, 5, 5, 5, 5, -5], [1, 1, 1, 1, 1, 1]]


class _PythonTj:
    """``tj`` for running a body as Python: static_range is range."""
    static_range = range


@pytest.mark.parametrize("body", BODIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("values", INPUTS, ids=str)
@pytest.mark.parametrize("n", [0, 2, 6])
def test_early_returns_follow_python(body, values, n, monkeypatch):
    x = torch.tensor(values, dtype=torch.int32)
    out = torch.zeros(8, dtype=torch.int32)
    tj.kernel(body)[(1,)](x, out, n, num_warps=1)
    expected = torch.zeros(8, dtype=torch.int32)
    monkeypatch.setitem(body.__globals__, "tj", _PythonTj)
    monkeypatch.setitem(body.__globals__, "mark", mark.fn)
    body(x, expected, n)
    assert out.tolist() == expected.tolist()


@tj.kernel
def add_one(x, out, n, BLOCK: tj.constexpr):
    pid = tj.program_id(0)
    if pid * BLOCK >= n:        # the Triton idiom: CTAs past the end do nothing
        return
    a = tj.fragment((BLOCK,), x.dtype)
    tj.copy(a, x[pid * BLOCK:pid * BLOCK + BLOCK])
    tj.copy(out[pid * BLOCK:pid * BLOCK + BLOCK], a + 1)


def test_ctas_past_the_end_return_before_their_tiles():
    x = torch.randn(100)
    out = torch.full((100,), -5.0)
    add_one[(12,)](x, out, 60, BLOCK=16)
    torch.testing.assert_close(out[:64], x[:64] + 1)    # the last CTA's tile is whole
    assert torch.all(out[64:] == -5.0)


def returns_per_thread(x, out):
    if tj.thread_id() > 3:
        return
    a = tj.fragment((16,), x.dtype)
    tj.copy(a, x[0:16])


def returns_a_value(x, out):
    out[0] = half_or_zero(x[0])


@tj.func
def half_or_zero(v):
    if v > 0:
        return v // 2
    return 0


def _line(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_a_return_that_differs_between_threads_before_a_tile_primitive_is_a_scope_error():
    with pytest.raises(tj.ScopeError) as info:
        tj.kernel(returns_per_thread)[(1,)](torch.zeros(16), torch.zeros(16))
    err = info.value
    assert err.line == _line(returns_per_thread, "tj.copy(a, x[0:16])")
    assert f"the `if` at line {_line(returns_per_thread, 'thread_id() > 3')}" in str(err)
    assert "^" in str(err) and err.file == inspect.getsourcefile(returns_per_thread)


def test_returning_a_value_under_a_run_time_if_is_an_error():
    with pytest.raises(tj.CompilationError, match="returning a value inside run-time control "
                                                  "flow") as info:
        tj.kernel(returns_a_value)[(1,)](torch.ones(4, dtype=torch.int32),
                                         torch.zeros(4, dtype=torch.int32))
    assert info.value.line == _line(half_or_zero, "return v // 2")


def defined_where_it_did_not_return(x, out, n):
    if n < 2:
        out[0] = -1
        return
    else:
        k = n * 2
        v = x[1]
    out[0] = k + v
    for i in range(n):
        if x[i] < 0:
            return
        else:
            last = x[i]
        out[1] = last


@pytest.mark.parametrize("values", INPUTS, ids=str)
@pytest.mark.parametrize("n", [0, 1, 2, 6])
def test_a_name_defined_only_where_the_code_did_not_return_is_defined_after(values, n):
    x = torch.tensor(values, dtype=torch.int32)
    out = torch.zeros(8, dtype=torch.int32)
    tj.kernel(defined_where_it_did_not_return)[(1,)](x, out, n, num_warps=1)
    expected = torch.zeros(8, dtype=torch.int32)
    defined_where_it_did_not_return(x, expected, n)
    assert out.tolist() == expected.tolist()


@tj.kernel
def tile_defined_where_it_did_not_return(x, out, n):
    if n < 4:
        return
    else:
        t = tj.fragment((4,), tj.float32)
        tj.copy(t, x[0:4])
    tj.copy(out[0:4], t * 2)


def test_a_tile_defined_only_where_the_code_did_not_return():
    x, out = torch.arange(4.0), torch.zeros(4)
    tile_defined_where_it_did_not_return[(1,)](x, out, 3)
    assert out.tolist() == [0.0] * 4
    tile_defined_where_it_did_not_return[(1,)](x, out, 4)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
