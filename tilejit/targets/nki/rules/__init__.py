"""The nki target's instruction families; each module registers its rules on import
(``NkiBackend.import_rules``). No generic element-loop rule applies on this target
(``element_loops=False``): a primitive none of these takes is a DispatchError.

| primitive | families | module |
|---|---|---|
| copy | ``dma`` (HBM <-> SBUF, masked loads), ``tensor_copy``, ``nc_transpose`` (on chip) | ``copy`` |
| gemm | ``nc_matmul`` | ``gemm`` |
| pointwise | ``engine`` (tensor_tensor, tensor_scalar, activation, memset) | ``pointwise`` |
| reduce | ``tensor_reduce`` | ``reduce`` |
| index tiles (``tj.arange``), select, copy of one | ``index_tile``, ``affine_select``, ``iota`` | ``affine`` |
"""
