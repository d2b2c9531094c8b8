"""The CPU target: native IR -> LLVM (llvmlite) -> object code, run on a thread pool.

    artifact = compile(kernel_ir, debug=False, noalias=False)   # CpuArtifact
    module = load(artifact)                                     # CpuModule (from obj alone)
    module.launch(grid, [x, y, out, n])
    host_cpu_id()                   # what object code is specific to (part of a cache key)
    register_dispatch()             # the CPU's dispatch context and rules (for compiling)

See ``docs/lowering.md`` ("CPU target") for the design.
"""
from .jit import CpuArtifact, compile, host_cpu_id, load
from .launch import CpuModule

PIPELINE_EXTRA: list = []  # the CPU target adds no passes of its own


def register_dispatch():
    """Import the CPU's dispatch context and rule families, which register themselves, and
    return the context. Only compiling needs them: a process that loads cached binaries
    skips these imports (and the LLVM IR emitters, which ``compile`` imports)."""
    from .target import CONTEXT
    from .rules import async_copy  # noqa: F401  (copy_async / gemm_async families)
    from .rules import elementwise_stream  # noqa: F401  (copy/pointwise between globals)
    from .rules import gemm_blocked  # noqa: F401  (gemm: register-blocked micro-kernel)
    from .rules import math_vector  # noqa: F401  (exp/exp2/log: polynomials LLVM vectorizes)
    from .rules import reduce_lanes  # noqa: F401  (reduce: rows in vector accumulators)
    return CONTEXT


def __getattr__(name: str):
    if name == "CONTEXT":   # the registered DispatchContext of the host CPU
        return register_dispatch()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONTEXT", "PIPELINE_EXTRA", "CpuArtifact", "CpuModule",
           "compile", "host_cpu_id", "load", "register_dispatch"]
