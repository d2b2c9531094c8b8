"""The CUDA target's own instruction families; each module registers its rules on import
(``CudaBackend.import_rules``). Every one is per thread (the target's distribution).

| primitive | family | module |
|---|---|---|
| copy_async | ``immediate`` (default): the element copy at once, then the bytes | ``immediate`` |
| copy_async | ``cp.async``: global -> shared chunks of 4/8/16 bytes | ``cp_async`` |
| gemm_async | ``immediate`` (default): the cuda ``gemm`` rules, synchronously | ``immediate`` |
| copy_async | ``tma``: global <-> shared boxes (cp.async.bulk.tensor, tensor maps) | ``tma`` |
| gemm_async | ``wgmma``: the generic per-thread family | ``passes/rules/gemm_wgmma`` |
| gemm_async | ``tcgen05``: the generic per-thread family (sm_100a) | ``passes/rules/gemm_tcgen05`` |
| copy | ``tcgen05``: tensor memory -> fragment, generic per thread | ``passes/rules/copy_tcgen05`` |

The contracts (roles, dtypes, barriers) are ``passes/rules/async_contracts``, which the
CPU's families read too.
"""
