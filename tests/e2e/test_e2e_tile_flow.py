"""Register tiles through run-time control flow (carried by value, as Triton's tensors
are) and shared buffers through it (carried by reference), against torch."""
import pytest
import torch

import tilejit as tj


@tj.kernel
def running_sum(x, out, n):
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    for i in tj.range(0, n):
        t = tj.fragment((8,), tj.float32)
        tj.copy(t, x[i, 0:8])
        acc = acc + t
    tj.copy(out[0:8], acc)


@tj.kernel
def sum_of_squares(x, out, n):
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    for i in tj.range(0, n):
        t = tj.fragment((8,), tj.float32)
        tj.copy(t, x[i, 0:8])
        acc += t * t
    tj.copy(out[0:8], acc)


@tj.kernel
def alternating(x, out, n, parity):
    acc = tj.fragment((8,), tj.float32)
    tj.copy(acc, x[0, 0:8])
    for i in tj.range(1, n):
        t = tj.fragment((8,), tj.float32)
        tj.copy(t, x[i, 0:8])
        if i % 2 == parity:
            acc = acc + t
        else:
            acc = acc - t
    tj.copy(out[0:8], acc)


@tj.kernel
def previous_product(x, out, n):
    """A value kept from the previous iteration must not see the next one's writes."""
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 1.0)
    prev = acc
    i = 0
    while i < n:
        t = tj.fragment((8,), tj.float32)
        tj.copy(t, x[i, 0:8])
        prev = acc
        acc = acc * t
        if i == 2:
            break
        i += 1
    tj.copy(out[0:8], prev)


@tj.kernel
def ping_pong(x, out, n):
    a = tj.alloc_shared((8,), tj.float32)
    b = tj.alloc_shared((8,), tj.float32)
    tj.fill(a, 0.0)
    tj.fill(b, 0.0)
    for i in tj.range(0, n):
        tj.copy(a, x[i, 0:8])
        a, b = b, a
    tj.copy(out[0:8], b)


@tj.kernel
def changes_shape(x, out, n):
    acc = tj.fragment((8,), tj.float32)
    tj.fill(acc, 0.0)
    for i in tj.range(0, n):
        acc = tj.fragment((4,), tj.float32)
    tj.copy(out[0:4], acc)


X = torch.arange(40, dtype=torch.float32).reshape(5, 8) / 7 - 2


def _alternating(parity):
    acc = X[0].clone()
    for i in range(1, 5):
        acc = acc + X[i] if i % 2 == parity else acc - X[i]
    return acc


def _previous_product():
    acc, prev = torch.ones(8), None
    for i in range(3):
        prev, acc = acc, acc * X[i]
    return prev


@pytest.mark.parametrize("kernel, extra, expected", [
    (running_sum, (), X.sum(0)),
    (sum_of_squares, (), (X * X).sum(0)),
    (alternating, (0,), _alternating(0)),
    (alternating, (1,), _alternating(1)),
    (previous_product, (), _previous_product()),
    (ping_pong, (), X[4]),
])
def test_tiles_through_loops_and_ifs(kernel, extra, expected):
    out = torch.zeros(8)
    kernel[(1,)](X, out, 5, *extra)
    torch.testing.assert_close(out, expected)


def test_a_loop_carried_tile_keeps_its_shape():
    with pytest.raises(tj.CompilationError, match="loop-carried variable 'acc'") as info:
        changes_shape[(1,)](X, torch.zeros(8), 5)
    assert info.value.line is not None
