"""The frontend: Python kernel source to tilejit IR (see docs/frontend.md).

``compile_to_ir(fn, arg_specs, constexprs, options)`` is the entry point; ``language``
holds the ``tj.*`` names used inside kernels.
"""
from .compile import compile_to_ir, compile_to_ir_with_deps
from .dependencies import Dependencies, find_dependencies
from .signature import ArgSpec, LaunchOptions

__all__ = ["compile_to_ir", "compile_to_ir_with_deps", "ArgSpec", "LaunchOptions",
           "Dependencies", "find_dependencies"]
