"""Markers of the tests that need NVRTC (compiling for cuda), nvdisasm (reading SASS) or
NVIDIA GPUs (launching)."""
import shutil
import subprocess
from pathlib import Path

import pytest

from tilejit.targets.cuda.nvrtc import nvrtc_unavailable_reason

__all__ = ["cuda_available", "needs_gpu", "needs_nvdisasm", "needs_nvrtc", "needs_two_gpus",
           "nvdisasm", "sass"]


def cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(nvrtc_unavailable_reason() is not None,
                                 reason=f"needs NVRTC: {nvrtc_unavailable_reason()}")


def nvdisasm() -> str | None:
    """The nvdisasm executable: on PATH or from the pip wheel nvidia-cuda-nvdisasm (CUDA 12
    wheels install it under nvidia/cuda_nvdisasm/bin, CUDA 13 ones under nvidia/cu13/bin)."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    # the wheel's layout: nvidia/cuda_nvdisasm/bin (CUDA 12) or nvidia/cu13/bin (CUDA 13)
    for root in map(Path, nvidia.__path__):
        for candidate in sorted(root.glob("*/bin/nvdisasm")):
            return str(candidate)
    return None


def sass(cubin: bytes, tmp_path) -> str:
    """The SASS text of a CUBIN, through nvdisasm."""
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    return subprocess.run([nvdisasm(), str(path)], capture_output=True, text=True,
                          check=True).stdout


needs_nvdisasm = pytest.mark.skipif(nvdisasm() is None,
                                    reason="needs nvdisasm (on PATH or pip nvidia-cuda-nvdisasm)")
needs_gpu = pytest.mark.skipif(not cuda_available(),
                               reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")


def _gpu_count() -> int:
    if not cuda_available():
        return 0
    import torch
    return torch.cuda.device_count()


needs_two_gpus = pytest.mark.skipif(_gpu_count() < 2, reason="needs two NVIDIA GPUs")
