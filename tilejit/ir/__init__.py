"""tilejit IR: a small SSA IR with structured control flow (see docs/ir.md).

Build kernels with :class:`Builder` (its module docstring lists the API), print them with
``str(kernel)``, read text back with :func:`parse_kernel`, check them with :func:`verify`
and transform them with :class:`Rewriter` patterns.
"""
from . import types
from .attrs import FilterSpec
from .builder import Builder
from .core import Block, KernelIR, Operation, Value, walk
from .ops import OPS, OpDef, OpGroup, get_opdef
from .parser import parse_kernel, parse_type
from .printer import Printer, print_kernel, print_op
from .rewrite import Pattern, RewriteContext, Rewriter, rewrite
from .types import (SCALAR_TYPES, BarrierType, BufferType, MemScope, RegionType, ScalarType,
                    TeamKind, promote)
from .verifier import verify

__all__ = [
    "types", "Builder", "Block", "KernelIR", "Operation", "Value", "walk",
    "OPS", "OpDef", "OpGroup", "get_opdef", "FilterSpec",
    "parse_kernel", "parse_type", "Printer", "print_kernel", "print_op", "verify",
    "Pattern", "RewriteContext", "Rewriter", "rewrite",
    "SCALAR_TYPES", "BarrierType", "BufferType", "MemScope", "RegionType", "ScalarType",
    "TeamKind", "promote",
]
