"""tilejit: a Python compiler for ML kernels.

``import tilejit as tj``; decorate a function with ``@tj.kernel`` and launch it with
``kernel[grid](*args)``. The names below are the public contract of ``shared/SPEC.md``.
"""
__version__ = "0.1.0"  # before the imports: the cache key reads it

from . import layout
from .errors import (CompilationError, DispatchError, LaunchError, LayoutError, ScopeError,
                     TilejitError)
from .frontend.language import *  # noqa: F401,F403  (the tj.* kernel language)
from .frontend.language import __all__ as _language_names
from .knobs import knobs  # tj.knobs is the settings object (tj.knobs.debug = True), as in Triton
from .runtime import cache, testing
from .runtime.autotune import Config, autotune, heuristics
from .runtime.compiler import CompiledKernel
from .runtime.jit import Kernel, TensorSpec, kernel

__all__ = [
    *_language_names, "layout", "kernel", "Kernel", "TensorSpec", "CompiledKernel",
    "autotune", "heuristics", "Config", "cache", "testing", "knobs",
    "TilejitError", "CompilationError", "DispatchError", "ScopeError", "LayoutError",
    "LaunchError",
]
