"""User-facing errors.

Every error a user can see derives from :class:`TilejitError`. An error may carry a
:class:`SourceLocation`; its message then ends with ``file:line:col``, the source line and
a caret under the column, the way a C compiler reports. Compiler-internal frames are
dropped from the traceback (see :func:`reraise_located`), so the user sees their own line.
"""
from __future__ import annotations

import linecache
from dataclasses import dataclass

__all__ = [
    "SourceLocation", "TilejitError", "CompilationError", "DispatchError", "ScopeError",
    "LayoutError", "LaunchError", "UNKNOWN_LOCATION",
]


@dataclass(frozen=True)
class SourceLocation:
    """A position in the user's Python source (1-based line, 0-based column)."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def excerpt(self) -> str:
        """The source line with a caret under the column, or '' when the file is gone."""
        text = linecache.getline(self.file, self.line)
        if not text:
            return ""
        text = text.rstrip("\n")
        return f"    {text}\n    {' ' * self.col}^"


UNKNOWN_LOCATION = SourceLocation("<unknown>", 0, 0)


class TilejitError(Exception):
    """Base class of every error tilejit raises on bad input."""

    def __init__(self, message: str, loc: SourceLocation | None = None):
        self.message = message
        self.loc = loc if loc is not None and loc != UNKNOWN_LOCATION else None
        super().__init__(self._render())

    @property
    def file(self) -> str | None:
        return self.loc.file if self.loc else None

    @property
    def line(self) -> int | None:
        return self.loc.line if self.loc else None

    @property
    def col(self) -> int | None:
        return self.loc.col if self.loc else None

    def _render(self) -> str:
        if self.loc is None:
            return self.message
        excerpt = self.loc.excerpt()
        # The "at" line repeats only the message's first line: a multi-line message (a
        # dispatch table) is printed once, above it.
        headline = self.message.split("\n", 1)[0]
        where = f"{self.loc}: {type(self).__name__}: {headline}"
        return f"{self.message}\n  at {where}" + (f"\n{excerpt}" if excerpt else "")

    def with_location(self, loc: SourceLocation | None) -> "TilejitError":
        """Return this error located at ``loc`` unless it already has a location."""
        if self.loc is not None or loc is None or loc == UNKNOWN_LOCATION:
            return self
        located = type(self).__new__(type(self))
        TilejitError.__init__(located, self.message, loc)
        located.__dict__.update({k: v for k, v in self.__dict__.items()
                                 if k not in ("message", "loc")})
        return located


class CompilationError(TilejitError):
    """Unsupported syntax, unknown names, type mismatches, non-static tile shapes."""


class DispatchError(CompilationError):
    """No registered rule can implement a tile-primitive call."""


class ScopeError(CompilationError):
    """An illegal execution-scope construct (empty filter, non-uniform team switch...)."""


class LayoutError(TilejitError):
    """A malformed layout or an impossible layout operation."""


class LaunchError(TilejitError):
    """A bad launch (arguments, grid, device) or a run-time failure inside a kernel."""


def reraise_located(err: TilejitError, loc: SourceLocation | None):
    """Raise ``err`` located at ``loc`` with compiler-internal frames hidden."""
    raise err.with_location(loc).with_traceback(None) from None
