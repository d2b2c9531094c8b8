"""What the CPU target tells dispatch about itself (registered when the package loads).

Tile primitives run ``team_once``: one unit executes a whole team's tile with vectorized
loops (see docs/lowering.md). The vector width and register count come from the host's
features, so rules size their instruction shapes for the machine the JIT compiles for.
"""
from __future__ import annotations

import llvmlite.binding as llvm

from tilejit.passes.dispatch import TEAM_ONCE, DispatchContext, register_target


def host_context() -> DispatchContext:
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        vector_bytes, registers = 64, 32   # zmm0-31
    elif features.get("avx"):
        vector_bytes, registers = 32, 16   # ymm0-15
    else:
        vector_bytes, registers = 16, 16   # xmm0-15 (SSE2 is part of x86-64)
    return DispatchContext("cpu", distribution=TEAM_ONCE, vector_bytes=vector_bytes,
                           registers=registers)


CONTEXT = register_target(host_context())
