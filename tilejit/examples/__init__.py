"""Example kernels used by the demo, the tutorials and the benchmarks.

Each is an ordinary ``@tj.kernel``; ``run_*`` helpers pick grids and constexprs the way a
user would.
"""
from .kernels import (
    layer_norm,
    matmul,
    row_softmax,
    run_layer_norm,
    run_matmul,
    run_softmax,
    run_vector_add,
    vector_add,
)

__all__ = ["vector_add", "row_softmax", "layer_norm", "matmul", "run_vector_add", "run_softmax",
           "run_layer_norm", "run_matmul"]
