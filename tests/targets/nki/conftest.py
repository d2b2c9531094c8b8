"""The nki tests import the numpy reference of the NKI subset (``nki_reference.py``, beside
them) as a top-level module: this folder goes on ``sys.path``."""
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
