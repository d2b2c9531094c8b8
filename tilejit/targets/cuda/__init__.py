"""CUDA target: NVRTC compilation (nvrtc.py) and driver-API loading and launching (driver.py).

Neither module imports cuda-python or torch at import time; they are needed only when a
kernel is compiled or launched (pip install 'tilejit[cuda]').
"""
from .driver import (CudaFunction, CudaModule, device_arch, device_capability, driver_version,
                     launch, load_module, pack_args)
from .nvrtc import (CudaProgram, ResourceUsage, arch_for_capability, compile_cuda,
                    cuda_include_dirs, nvrtc_unavailable_reason, nvrtc_version, parse_arch,
                    resource_usage, supported_archs)

__all__ = [
    "CudaFunction", "CudaModule", "CudaProgram", "ResourceUsage", "arch_for_capability",
    "compile_cuda", "cuda_include_dirs", "device_arch", "device_capability", "driver_version",
    "launch", "load_module", "nvrtc_unavailable_reason", "nvrtc_version", "pack_args",
    "parse_arch", "resource_usage", "supported_archs",
]
