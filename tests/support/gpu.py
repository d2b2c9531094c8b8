"""Markers of the tests that need NVRTC (compiling for cuda) or NVIDIA GPUs (launching)."""
import pytest

from tilejit.targets.cuda.nvrtc import nvrtc_unavailable_reason

__all__ = ["cuda_available", "needs_gpu", "needs_nvrtc", "needs_two_gpus"]


def cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(nvrtc_unavailable_reason() is not None,
                                 reason=f"needs NVRTC: {nvrtc_unavailable_reason()}")
needs_gpu = pytest.mark.skipif(not cuda_available(),
                               reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")


def _gpu_count() -> int:
    if not cuda_available():
        return 0
    import torch
    return torch.cuda.device_count()


needs_two_gpus = pytest.mark.skipif(_gpu_count() < 2, reason="needs two NVIDIA GPUs")
