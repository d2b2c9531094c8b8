"""tilejit: a Python compiler for ML kernels."""
from .errors import (CompilationError, DispatchError, LaunchError, LayoutError, ScopeError,
                     TilejitError)

__version__ = "0.1.0"
