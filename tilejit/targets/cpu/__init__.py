"""The CPU target: native IR -> LLVM (llvmlite) -> object code, run on a thread pool.

    artifact = compile(kernel_ir, debug=False, noalias=False)   # CpuArtifact
    module = load(artifact)                                     # CpuModule (from obj alone)
    module.launch(grid, [x, y, out, n])
    buffers_disjoint([x, y, out])   # whether the runtime may compile with noalias=True
    host_cpu_id()                   # what object code is specific to (part of a cache key)

See ``docs/lowering.md`` ("CPU target") for the design.
"""
from .jit import CpuArtifact, compile, host_cpu_id, load
from .launch import CpuModule, buffers_disjoint
from .target import CONTEXT  # registers the "cpu" target with dispatch
from .rules import async_copy  # noqa: F401  (copy_async / gemm_async families)
from .rules import elementwise_stream  # noqa: F401  (copy/pointwise between globals)
from .rules import gemm_blocked  # noqa: F401  (gemm: register-blocked micro-kernel)
from .rules import math_vector  # noqa: F401  (exp/exp2/log: polynomials LLVM vectorizes)
from .rules import reduce_lanes  # noqa: F401  (reduce: rows in vector accumulators)

PIPELINE_EXTRA: list = []  # the CPU target adds no passes of its own

__all__ = ["CONTEXT", "PIPELINE_EXTRA", "CpuArtifact", "CpuModule", "buffers_disjoint",
           "compile", "host_cpu_id", "load"]
