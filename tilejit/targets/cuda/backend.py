"""The CUDA target's backend object: Hopper's capabilities; per-thread IR printed as CUDA C++
(emit.py), compiled by NVRTC (nvrtc.py), launched through the driver API (module.py).

Compiling needs only NVRTC (no GPU, no driver): the stages are ``cuda`` (the printed
source), ``ptx`` and ``cubin``, and the metadata carries the CUBIN's resource usage.
Loading makes a module that touches the driver on its first launch on each device; a
launch runs on the device of its tensors (docs/cuda.md).
"""
from __future__ import annotations

import sys

from tilejit.errors import CompilationError, SourceLocation
from tilejit.passes.dispatch import PER_THREAD

from ..backend import Backend, Capabilities, register_backend

__all__ = ["BACKEND", "CudaBackend", "DEFAULT_ARCH", "HOPPER", "default_arch"]

# H100 / H200 (sm_90a, the first-class arch): 228 KiB of shared memory per SM, of which one
# CTA may use 227 KiB (the opt-in maximum); 64K 32-bit registers per SM, at most 255 per
# thread; mma.sync m16n8k16 per warp and wgmma m64nNk16 (N a multiple of 8 up to 256) per
# warpgroup for f16/bf16, m64nNk32 for fp8.
HOPPER = Capabilities(
    distribution=PER_THREAD,
    vector_bytes=16,               # ld/st .v4.b32: 128 bits per thread
    registers_per_thread=255,
    shared_memory_per_cta=227 * 1024,
    max_threads_per_cta=1024,
    element_loops=True,
    tensor_core_shapes={"mma": ((16, 8, 16), (16, 8, 32)),
                        "wgmma": tuple((64, n, k) for k in (16, 32)   # k32: fp8
                                       for n in range(8, 257, 8))},
)
DEFAULT_ARCH = "sm_90a"   # without a GPU to ask: the first-class arch


def default_arch() -> str:
    """The current GPU's arch when torch sees one, else :data:`DEFAULT_ARCH`."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        from .nvrtc import arch_for_capability
        return arch_for_capability(*torch.cuda.get_device_capability())
    return DEFAULT_ARCH


class CudaBackend(Backend):
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

    def arch_id(self, arch: str | None) -> str:
        return arch or default_arch()

    def import_rules(self) -> None:
        from .rules import cp_async, immediate, tma  # noqa: F401  (copy_async, gemm_async)

    def compile(self, lowered, debug: bool) -> tuple[dict[str, bytes], dict]:
        from .emit import CudaPrinter
        from .nvrtc import compile_cuda, parse_arch
        arch = self.arch_id(lowered.attrs.get("arch"))
        if parse_arch(arch)[0] != "sm":
            raise CompilationError(f"the cuda target compiles to a CUBIN: pass an sm_XX arch, "
                                   f"not {arch!r}")
        printer = CudaPrinter(lowered, arch, debug)
        source, entry = printer.print(), printer.entry
        options = ("-lineinfo",) if debug else ()
        program = compile_cuda(source, arch, name=f"{lowered.name}.cu", options=options,
                               minimal=True)
        usage = program.resources().get(entry)
        files = {"cuda": source.encode(), "ptx": program.ptx.encode(), "cubin": program.cubin}
        meta = {
            "entry": entry, "cuda_arch": arch, "threads": 32 * lowered.attrs["num_warps"],
            "registers": usage.registers if usage else None,
            "spill_bytes": ((usage.spill_store_bytes or 0) + (usage.spill_load_bytes or 0))
            if usage else None,
            "static_shared_bytes": usage.shared_bytes if usage else None,
            "stack_frame_bytes": usage.stack_frame_bytes if usage else None,
            "file": lowered.loc.file, "line": lowered.loc.line,   # where launch errors point
            "cluster": list(lowered.attrs["cluster"]),   # printed as __cluster_dims__
            "param_formats": printer.param_formats,   # how a launch packs the parameters
            # the TMA tensor maps the launcher encodes after the kernel's own arguments
            "tensor_maps": [{"param": param, "box": list(box), "swizzle": swizzle,
                             "dtype": dtype} for (param, box, swizzle, dtype), _ in
                            printer.tensor_maps],
        }
        return files, meta

    def load(self, files: dict[str, bytes], meta: dict):
        from .module import CudaKernelModule
        return CudaKernelModule(files["cubin"], meta["entry"], meta["threads"],
                                meta.get("shared_bytes") or 0, meta["cuda_arch"],
                                tuple(meta["runtime_params"]),
                                tensor_maps=tuple(meta.get("tensor_maps", ())),
                                location=SourceLocation(meta["file"], meta["line"])
                                if meta.get("file") else None,
                                cluster=tuple(meta.get("cluster", (1, 1, 1))),
                                param_formats=meta.get("param_formats"))

    def launchers(self, module, arguments=None):
        # The launch signature fixes the tensors' device (torch's get_device() is in it):
        # launches of the signature run there, whichever device is current.
        from .module import launch_device
        device = launch_device(arguments or {})

        def launch(grid, records):
            module.launch_records(grid, records, None, device)

        def launch_on_stream(grid, records, stream):
            module.launch_records(grid, records, stream, device)

        return launch, launch_on_stream


BACKEND = register_backend(CudaBackend())
