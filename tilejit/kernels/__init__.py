"""Kernels written in the DSL for the nki target (AWS Trainium), each a ``@tj.kernel`` in
its own module: they compile for ``target="nki"`` into one NKI module and run on the CPU
from the same source (docs/nki.md, "Kernels").

| kernel | module | what |
|---|---|---|
| ``nki_gemm`` | ``nki_gemm`` | the TIRx paper's GEMM (§5.3): C = A @ B on the paper's layouts |
| ``softmax`` | ``softmax`` | row softmax, 128 rows per tile |
| ``rmsnorm`` | ``rmsnorm`` | x * rsqrt(mean(x^2) + eps) * w |
| ``attention`` | ``attention`` | attention forward, keys in blocks of 128 with an online softmax |
"""
from .attention import attention
from .nki_gemm import nki_gemm
from .rmsnorm import rmsnorm
from .softmax import softmax

__all__ = ["attention", "nki_gemm", "rmsnorm", "softmax"]
