"""Example kernels used by the demo, the tutorials and the benchmarks.

Each is an ordinary ``@tj.kernel``; ``run_*`` helpers pick grids and constexprs the way a
user would.
"""
from .kernels import matmul, row_softmax, run_matmul, run_softmax, run_vector_add, vector_add

__all__ = ["vector_add", "row_softmax", "matmul", "run_vector_add", "run_softmax", "run_matmul"]
