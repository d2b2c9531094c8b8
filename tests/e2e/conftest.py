"""End-to-end tests: kernels written with ``import tilejit as tj`` and launched on the CPU.

``tests/e2e`` is put on ``sys.path`` so the tests can share ``e2e_helpers``.
"""
import pathlib
import sys

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

