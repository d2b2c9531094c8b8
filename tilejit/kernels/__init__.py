"""Kernels written in the DSL, each in its own module, each also run on the CPU from the
same source. The nki kernels (AWS Trainium) compile for ``target="nki"`` into one NKI
module (docs/nki.md, "Kernels"); ``hopper_gemm``, ``fp8_gemm`` (and ``scaled_mm``) and
``hopper_attention`` compile for ``target="cuda"``, ``arch="sm_90a"``.

| kernel | module | what |
|---|---|---|
| ``nki_gemm`` | ``nki_gemm`` | the TIRx paper's GEMM (§5.3): C = A @ B on the paper's layouts |
| ``softmax`` | ``softmax`` | row softmax, 128 rows per tile |
| ``rmsnorm`` | ``rmsnorm`` | x * rsqrt(mean(x^2) + eps) * w |
| ``attention`` | ``attention`` | attention forward, keys in blocks of 128 with an online softmax |
| ``hopper_gemm`` | ``hopper_gemm`` | bf16/fp16 C = A @ B on sm_90a: TMA ring, producer warp, wgmma consumer warpgroups |
| ``fp8_gemm`` | ``hopper_gemm`` | e4m3 / e5m2 C = (A * scale_a) @ (B * scale_b)^T, per-tensor or 1x128 / 128x128 block scales |
| ``scaled_mm`` | ``hopper_gemm`` | ``fp8_gemm`` in ``torch._scaled_mm``'s orientation: B [K, N] column-major, taken without a copy |
| ``hopper_attention`` | ``hopper_attention`` | f16/bf16 attention forward on sm_90a, FlashAttention-3 style: TMA K/V ring, wgmma, online softmax in registers |
"""
from .attention import attention
from .hopper_attention import hopper_attention
from .hopper_gemm import fp8_gemm, hopper_gemm, scaled_mm
from .nki_gemm import nki_gemm
from .rmsnorm import rmsnorm
from .softmax import softmax

__all__ = ["attention", "fp8_gemm", "hopper_attention", "hopper_gemm", "nki_gemm", "rmsnorm",
           "scaled_mm", "softmax"]
