"""Shared helpers: compile a function, verify it, and look at the lines that matter."""
from __future__ import annotations

import importlib.util
import inspect
import itertools
import re

import pytest

from tilejit.errors import CompilationError
from tilejit.frontend import ArgSpec, LaunchOptions, compile_to_ir
from tilejit.ir import parse_kernel, verify, walk
from tilejit.ir.types import f16, f32, i32, i64

T = ArgSpec.tensor
S = ArgSpec.scalar
_OP_NAME = re.compile(r"(?:%\w+(?:, %\w+)* = )?([\w.]+)")
__all__ = ["T", "S", "f16", "f32", "i32", "i64", "build", "ops", "op_lines", "line_of",
           "raises", "kernel_from_source"]


HEADER = "from tilejit.frontend import language as tj\n\n"
_modules = itertools.count()


def kernel_from_source(folder, source: str, name: str = "kernel"):
    """Write ``source`` (after a ``tj`` import) to a module file in ``folder``, import it
    and return its function ``name``: kernels need a real file for their source."""
    module_name = f"tilejit_test_kernel_{next(_modules)}"
    path = folder / f"{module_name}.py"
    path.write_text(HEADER + source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def build(fn, specs=None, constexprs=None, **options):
    """Compile ``fn``, verify it and check that its text reads back identically."""
    kernel = compile_to_ir(fn, specs or {}, constexprs or {}, LaunchOptions(**options))
    verify(kernel)
    text = str(kernel)
    assert str(parse_kernel(text)) == text
    return kernel


def ops(kernel, name=None):
    return [op for op in walk(kernel.body) if name is None or op.name == name]


def op_lines(kernel, name) -> list[str]:
    """The printed lines of every op called ``name`` (without their locations)."""
    lines = [line.strip() for line in str(kernel).splitlines()]
    return [line.rsplit(" loc(", 1)[0] for line in lines
            if _OP_NAME.match(line) and _OP_NAME.match(line).group(1) == name]


def line_of(fn, text: str) -> int:
    """The file line number of the first line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def raises(fn, message: str, at: str | None = None, specs=None, constexprs=None,
           error=CompilationError, **options):
    """Compile ``fn`` expecting ``error`` matching ``message``, located at the line holding
    ``at`` with that line quoted in the message; returns the error."""
    with pytest.raises(error, match=message) as info:
        compile_to_ir(fn, specs or {}, constexprs or {}, LaunchOptions(**options))
    err = info.value
    if at is not None:
        assert err.line == line_of(fn, at), str(err)
        assert at in str(err), str(err)
        assert err.file == inspect.getsourcefile(fn)
    assert err.__cause__ is None and err.__suppress_context__  # no chained internal errors
    return err
