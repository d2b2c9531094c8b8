"""The CPU target's own instruction families; each module registers its rules on import
(``tilejit/targets/cpu/__init__.py`` imports them).

| primitive | families | module |
|---|---|---|
| copy_async | ``immediate`` (default), ``tma``, ``cp.async`` | ``async_copy`` |
| gemm_async | ``immediate`` (default), ``wgmma``, ``tcgen05`` | ``async_copy`` |
| gemm | ``blocked`` (priority 10; ``fma`` stays the fallback) | ``gemm_blocked`` |
| pointwise exp/exp2/log (alone or in a fused chain) | ``poly`` (priority 10; then ``vector``, ``scalar``) | ``math_vector`` |
| copy, pointwise (globals; exp/exp2/log by ``poly``'s polynomials) | ``stream`` (priority 10; then ``vector``) | ``elementwise_stream`` |
| reduce | ``lanes`` (priority 10; ``tree`` stays the fallback) | ``reduce_lanes`` |
"""
