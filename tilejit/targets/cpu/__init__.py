"""The CPU target: native IR -> LLVM (llvmlite) -> object code, run on a thread pool.

    artifact = compile(kernel_ir, debug=False, noalias=False)   # CpuArtifact
    module = load(artifact)                                     # CpuModule (from obj alone)
    module.launch(grid, [x, y, out, n])
    host_cpu_id()                   # what object code is specific to (part of a cache key)
    CONTEXT                         # the CPU's registered dispatch context (for compiling)

The runtime drives it through its backend object (``backend.py``). See
``docs/lowering.md`` ("CPU target") for the design.
"""
from .jit import CpuArtifact, compile, host_cpu_id, load
from .launch import CpuModule


def __getattr__(name: str):
    if name == "CONTEXT":   # registering imports the dispatch rules: only when asked for
        from .backend import BACKEND
        return BACKEND.register()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONTEXT", "CpuArtifact", "CpuModule", "compile", "host_cpu_id", "load"]
