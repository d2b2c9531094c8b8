"""A function's AST together with what maps it back to the user's file.

``inspect.getsource`` + ``textwrap.dedent`` give parseable text; its line 1 is the
function's first line in the file (``line_offset`` adds the rest) and dedenting removed
``col_offset`` columns. Locations built with :meth:`FunctionSource.loc` are therefore the
real file, line and column, which the error excerpts (``linecache``) read back.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from dataclasses import dataclass

from tilejit.errors import CompilationError, SourceLocation

__all__ = ["FunctionSource", "function_source"]


@dataclass(frozen=True)
class FunctionSource:
    fn: object
    node: ast.FunctionDef
    file: str
    line_offset: int
    col_offset: int

    @property
    def globals(self) -> dict:
        return self.fn.__globals__

    @property
    def closure(self) -> dict:
        """Variables of enclosing functions that the function reads (read at each call:
        cells can be rebound)."""
        cells = zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ())
        return {name: cell.cell_contents for name, cell in cells if _is_set(cell)}

    @property
    def name(self) -> str:
        return self.fn.__name__

    def loc(self, node: ast.AST) -> SourceLocation:
        return SourceLocation(self.file, node.lineno + self.line_offset,
                              node.col_offset + self.col_offset)


def _is_set(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # the enclosing function has not assigned it yet
        return False
    return True


_CACHE: weakref.WeakKeyDictionary[object, tuple] = weakref.WeakKeyDictionary()


def function_source(fn) -> FunctionSource:
    """Parse ``fn`` (cached while its code object is unchanged)."""
    if not inspect.isfunction(fn):
        raise CompilationError(f"a kernel must be a Python function, got {fn!r}")
    cached = _CACHE.get(fn)
    if cached is not None and cached[0] is fn.__code__:
        return cached[1]
    source = _parse(fn)
    _CACHE[fn] = (fn.__code__, source)
    return source


def _parse(fn) -> FunctionSource:
    name = fn.__qualname__
    try:
        lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError) as err:
        raise CompilationError(f"cannot read the source of {name} ({err}); kernels must be "
                               "defined in a file") from None
    file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    text = textwrap.dedent("".join(lines))
    col_offset = len(lines[0]) - len(text.splitlines(keepends=True)[0])
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise CompilationError(f"cannot parse the source of {name}: {err.msg}",
                               SourceLocation(file, (err.lineno or 1) + first_line - 1,
                                              (err.offset or 1) - 1 + col_offset)) from None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef):
        raise CompilationError(f"{name} is not a plain 'def' function (async functions and "
                               "lambdas cannot be kernels)", SourceLocation(file, first_line, 0))
    return FunctionSource(fn, node, file, first_line - 1, col_offset)
