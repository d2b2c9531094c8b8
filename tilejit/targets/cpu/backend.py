"""The CPU target's backend object: the host CPU's capabilities, compile, load and launch.

Importing it costs what loading a cached binary needs anyway (``jit``: llvmlite's binding
layer, and the launcher); the LLVM IR emitters and the dispatch rules are imported only by
``compile`` and ``register``, so a process that finds its kernels on disk skips them.
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm

from tilejit.knobs import knobs
from tilejit.passes.dispatch import PER_THREAD, TEAM_ONCE

from ..backend import Backend, Capabilities, register_backend
from . import jit
from .read_in_place import read_copies_in_place

__all__ = ["BACKEND", "CpuBackend", "SIMT_OPT_LEVEL"]

SIMT_OPT_LEVEL = 0   # LLVM optimization level of per-thread (SIMT) binaries


class CpuBackend(Backend):
    """Tile primitives run ``team_once``: one unit executes a whole team's tile with
    vectorized loops (docs/lowering.md); a kernel compiled in SIMT mode (``distribution =
    "per_thread"``) runs the GPU's lowering instead, one unit per thread. The vector width and register count come from the
    host's features, so rules size their instruction shapes for the machine the JIT
    compiles for."""

    name = "cpu"
    device = "cpu"
    passes = (("cpu-read-copies-in-place", read_copies_in_place, "dispatch"),)
    text_stages = ("llir", "asm")
    # Host assembly costs a quarter of a compile: stored only when dumped, else made on request.
    derived_stages = {"asm": lambda module: module.artifact.asm}

    @functools.cached_property
    def capabilities(self) -> Capabilities:
        from .emitter import CTA_MEMORY_LIMIT
        features = llvm.get_host_cpu_features()
        if features.get("avx512f"):
            vector_bytes, registers = 64, 32   # zmm0-31
        elif features.get("avx"):
            vector_bytes, registers = 32, 16   # ymm0-15
        else:
            vector_bytes, registers = 16, 16   # xmm0-15 (SSE2 is part of x86-64)
        return Capabilities(distribution=TEAM_ONCE, vector_bytes=vector_bytes,
                            registers_per_thread=registers,
                            shared_memory_per_cta=CTA_MEMORY_LIMIT, max_threads_per_cta=None,
                            element_loops=True, tmem_elements=True,
                            # SIMT mode runs mma.sync per warp (emit_mma.py) and wgmma per
                            # warpgroup (emit_wgmma.py), as a GPU does
                            tensor_core_shapes={"mma": ((16, 8, 16), (16, 8, 32)),
                                                "wgmma": tuple((64, n, k) for k in (16, 32)
                                                               for n in range(8, 257, 8))})

    def import_rules(self) -> None:
        from . import ops  # noqa: F401  (the cpu.* instructions in the op catalogue)
        from .rules import async_copy  # noqa: F401  (copy_async / gemm_async families)
        from .rules import elementwise_stream  # noqa: F401  (copy/pointwise between globals)
        from .rules import gemm_blocked  # noqa: F401  (gemm: register-blocked micro-kernel)
        from .rules import math_vector  # noqa: F401  (exp/exp2/log: polynomials LLVM vectorizes)
        from .rules import reduce_lanes  # noqa: F401  (reduce: rows in vector accumulators)

    def machine_id(self) -> str:
        return jit.host_cpu_id()

    def arch_id(self, arch: str | None) -> str:
        return jit.host_cpu_id()   # object code runs only on the CPU (and features) it is for

    def compile(self, lowered, debug: bool) -> tuple[dict[str, bytes], dict]:
        # SIMT mode (docs/lowering.md): the per-thread IR runs one unit per thread, as a GPU
        # runs it, whatever granularity its native code alone would allow. It checks what a
        # GPU would compute; LLVM's O3 on a coroutine per thread costs 3-6x team_once's
        # compile, so it runs LLVM's O0 pipeline (CoroSplit still lowers the coroutines).
        if lowered.attrs.get("distribution") == PER_THREAD:
            artifact = jit.compile(lowered, debug=debug, granularity="thread",
                                   opt_level=SIMT_OPT_LEVEL)
        else:
            artifact = jit.compile(lowered, debug=debug)
        files = {"llir": artifact.llir.encode(), "obj": artifact.obj}
        if "asm" in knobs.dump:
            files["asm"] = artifact.asm.encode()
        return files, {"entry": artifact.entry, "backend": artifact.meta}

    def load(self, files: dict[str, bytes], meta: dict):
        return jit.load(jit.CpuArtifact(llir=files["llir"].decode(), obj=files["obj"],
                                        entry=meta["entry"], meta=meta["backend"]))

    def launchers(self, module, arguments=None):
        launch = module.launch_records
        # The CPU runs a launch before returning: there is no stream to queue it on.
        return launch, lambda grid, records, stream: launch(grid, records)


BACKEND = register_backend(CpuBackend())
