"""Target-independent instruction families, one module each (docs/lowering.md).

Importing this package registers them (the registry does so on first use):

| primitive | family | fallback | module |
|---|---|---|---|
| copy, pointwise | ``vector`` | no | ``elementwise`` |
| copy, pointwise | ``vec`` (per thread: runs in one vector access) | no | ``copy_vector`` |
| copy | ``stmatrix`` (per thread: warp fragment -> shared, sm_90) | no | ``copy_stmatrix`` |
| copy, pointwise | ``packed`` (per thread: f16/bf16 pairs in one f16x2 instruction) | no | ``pointwise_packed`` |
| copy, pointwise | ``scalar`` | yes | ``elementwise`` |
| reduce | ``shuffle`` | no | ``reduce_shuffle`` |
| reduce | ``tree`` | yes | ``reduce`` |
| gemm | ``mma`` (tensor cores, per thread) | no | ``gemm_mma`` |
| gemm_async | ``wgmma`` (warpgroup tensor cores, per thread, ``dispatch="wgmma"``) | no | ``gemm_wgmma`` |
| gemm_async | ``tcgen05`` (Blackwell tensor cores into tensor memory, per thread, one issuing thread, ``dispatch="tcgen05"``) | no | ``gemm_tcgen05`` |
| copy | ``tcgen05`` (per thread: tensor memory -> a warpgroup's fragment, tcgen05.ld 32x32b) | no | ``copy_tcgen05`` |
| gemm | ``fma`` | yes | ``gemm_fma`` |
| scan | ``serial`` | yes | ``scan`` |
| permute, gather | ``scalar`` | yes | ``indexed`` |
| scatter | ``serial`` | yes | ``indexed`` |
| atomic | ``scalar`` | yes | ``atomic`` |

copy_async has no generic rule (TIRx Table 2): its synchronization protocol belongs to the
target's families; gemm_async's ``wgmma`` is generic per thread (the IR it makes runs on
the CPU's SIMT units and prints for sm_90a), the targets add their own synchronous stand-ins.
"""
from . import (atomic, copy_stmatrix, copy_tcgen05, copy_vector, elementwise, gemm_fma,
               gemm_mma, gemm_tcgen05, gemm_wgmma, indexed, pointwise_packed, reduce,
               reduce_shuffle, scan)

__all__ = ["atomic", "copy_stmatrix", "copy_tcgen05", "copy_vector", "elementwise", "gemm_fma",
           "gemm_mma", "gemm_tcgen05", "gemm_wgmma", "indexed", "pointwise_packed", "reduce",
           "reduce_shuffle", "scan"]
