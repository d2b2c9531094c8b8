"""The CUDA target's backend object: Hopper's capabilities; code generation comes later.

Until it exists, compiling for ``cuda`` raises the CompilationError of :class:`Placeholder`.
"""
from __future__ import annotations

import sys

from tilejit.passes.dispatch import PER_THREAD

from ..backend import Capabilities, Placeholder, register_backend

__all__ = ["BACKEND", "CudaBackend", "HOPPER"]

# H100 / H200 (sm_90a, the first-class arch): 228 KiB of shared memory per SM, of which one
# CTA may use 227 KiB (the opt-in maximum); 64K 32-bit registers per SM, at most 255 per
# thread; mma.sync m16n8k16 per warp and wgmma m64nNk16 (N a multiple of 8 up to 256) per
# warpgroup for f16/bf16.
HOPPER = Capabilities(
    distribution=PER_THREAD,
    vector_bytes=16,               # ld/st .v4.b32: 128 bits per thread
    registers_per_thread=255,
    shared_memory_per_cta=227 * 1024,
    max_threads_per_cta=1024,
    element_loops=True,
    tensor_core_shapes={"mma": ((16, 8, 16),),
                        "wgmma": tuple((64, n, 16) for n in range(8, 257, 8))},
)


class CudaBackend(Placeholder):
    name = "cuda"
    device = "cuda"
    text_stages = ("cuda", "ptx")
    capabilities = HOPPER

    def machine_id(self) -> str | None:
        """The current GPU, when torch has started CUDA (never started here)."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        major, minor = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()}:sm_{major}{minor}"


BACKEND = register_backend(CudaBackend())
