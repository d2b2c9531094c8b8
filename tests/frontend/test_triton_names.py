"""Errors for Triton habits name the tilejit spelling (tilejit/frontend/triton_names.py),
located at the user's line with a caret."""
import re
import types

import pytest

import tilejit
from tilejit.frontend import language as tj
from tilejit.frontend.triton_names import TRITON_NAMES

from .helpers import S, T, f32, i32, kernel_from_source, raises

tl = types.ModuleType("triton.language")   # what `import triton.language as tl` gives


def uses_load(x, out):
    a = tj.load(x)


def uses_store(x, out):
    tj.store(out, 1.0)


def uses_dot(x, out):
    c = tj.dot(x, x)


def uses_zeros_like(x, out):
    z = tj.zeros_like(x)


def uses_a_misspelling(x, out):
    tj.atomik_add(x[0], 1.0)


def uses_tl(x, out):
    a = tl.load(x)


def uses_undefined_tl(x, out):
    a = tl_missing.load(x)  # noqa: F821


def pointer_plus_int(x_ptr, out, n):
    p = x_ptr + n


def int_plus_pointer(x_ptr, out, n):
    p = 4 + x_ptr


def pointer_plus_offsets(x_ptr, out, n):
    offs = tj.program_id(0) * 16 + tj.arange(0, 16)
    p = x_ptr + offs


SPECS = {"x": T(f32, 1), "out": T(f32, 1), "x_ptr": T(f32, 1), "n": S(i32)}


def _specs(fn):
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    return {name: SPECS[name] for name in names}


@pytest.mark.parametrize("fn,message,at", [
    (uses_load, r"tj\.load does not exist; in tilejit: slice the tensor and copy into a tile: "
                r".*tj\.copy\(a, x\[base:base \+ BLOCK\], mask=", "tj.load(x)"),
    (uses_store, r"tj\.store does not exist; in tilejit: tj\.copy\(out\[base:base \+ BLOCK\], a, "
                 "mask=", "tj.store(out, 1.0)"),
    (uses_dot, r"tj\.dot does not exist; in tilejit: tj\.gemm\(acc, a, b\)", "tj.dot(x, x)"),
    (uses_zeros_like, r"tj\.zeros_like does not exist; in tilejit: ", "tj.zeros_like(x)"),
    (uses_a_misspelling, r"tj\.atomik_add does not exist; did you mean tj\.atomic_add",
     "tj.atomik_add(x[0], 1.0)"),
    (uses_tl, r"tl\.load is Triton's, which a tilejit kernel does not run; in tilejit: slice",
     "tl.load(x)"),
    (pointer_plus_int, "tensors are not pointers: x_ptr \\+ offset has no meaning in tilejit; "
                       r"slice the tensor instead, x_ptr\[base:base \+ BLOCK\]", "x_ptr + n"),
    (int_plus_pointer, "tensors are not pointers", "4 + x_ptr"),
    (pointer_plus_offsets, "tensors are not pointers", "x_ptr + offs"),
])
def test_triton_habits_get_the_tilejit_spelling(fn, message, at):
    err = raises(fn, message, at, _specs(fn))
    assert "^" in str(err)


def test_an_undefined_tl_points_to_tj(tmp_path):
    kernel = kernel_from_source(tmp_path, "def kernel(x, out):\n    a = tl.load(x)\n")
    err = raises(kernel, "name 'tl' is not defined; tilejit kernels use `import tilejit as tj`",
                 "tl.load(x)", _specs(kernel))
    assert "^" in str(err)
    other = raises(uses_undefined_tl, "name 'tl_missing' is not defined", "tl_missing.load(x)",
                   _specs(uses_undefined_tl))
    assert "import tilejit" not in str(other)


def test_the_table_names_only_what_exists():
    """Every tj name a spelling uses exists; an entry waiting for a name gives another."""
    for triton_name, entry in TRITON_NAMES.items():
        spelling = entry.use if entry.needs is None or hasattr(tj, entry.needs) else \
            entry.otherwise
        for name in re.findall(r"\btj\.(\w+)", spelling):
            assert hasattr(tilejit, name), f"{triton_name}: tj.{name} does not exist"
        assert not hasattr(tj, triton_name) or triton_name in (
            "program_id", "arange", "where", "sum", "max", "min", "argmax", "cumsum", "exp",
            "rand", "randn", "cdiv", "static_range", "device_print", "constexpr",
            "atomic_add", "atomic_max", "atomic_cas", "atomic_xchg", "zeros", "full", "trans",
            "reshape", "broadcast_to", "expand_dims")
