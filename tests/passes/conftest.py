"""Make ``tests/`` importable so pass tests can use ``support.ir_exec``."""
import pathlib
import sys

_TESTS = str(pathlib.Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
