"""The CUDA target's own instruction families; each module registers its rules on import
(``CudaBackend.import_rules``). Every one is per thread (the target's distribution).

| primitive | families | module |
|---|---|---|
| copy_async | ``immediate`` (default: the element copy at once, then the tile's bytes completed on the barrier) | ``immediate`` |
| copy_async | ``cp.async`` (global -> shared chunks of 4/8/16 bytes, ``passes/rules/copy_cp_async``) | ``cp_async`` |
| gemm_async | ``immediate`` (default: the cuda ``gemm`` rules, ``mma`` or ``fma``, run synchronously) | ``immediate`` |
| copy_async / gemm_async | ``tma`` / ``wgmma``, ``tcgen05``: declined, saying why (issue 14) | ``hopper`` |

The contracts (roles, dtypes, barriers) are ``passes/rules/async_contracts``, which the
CPU's families read too.
"""
