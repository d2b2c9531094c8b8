"""The CPU target's own instruction families; each module registers its rules on import
(``tilejit/targets/cpu/__init__.py`` imports them).

| primitive | families | module |
|---|---|---|
| copy_async | ``immediate`` (default), ``tma``, ``cp.async`` | ``async_copy`` |
| gemm_async | ``immediate`` (default), ``wgmma``, ``tcgen05`` | ``async_copy`` |
"""
