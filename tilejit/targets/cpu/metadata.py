"""LLVM metadata the emitter attaches: loop hints and alias scopes.

Alias scopes: every access to a kernel argument's memory carries the ``global`` scope and
every access to memory the CTA owns (shared memory, fragments, locals) the ``private``
scope, each marked ``noalias`` against the other. Plain CTA functions also get this from
``noalias`` parameters, but CoroSplit moves a coroutine's parameters into its frame and
drops their attributes; the per-access metadata survives, so loops copying between shared
and global memory still vectorize inside units.
"""
from __future__ import annotations

from llvmlite import ir


class DistinctNode(ir.values.MDValue):
    """``distinct !{!self, operands...}`` -- the self-referential node loop ids and alias
    scopes are made of (llvmlite only builds uniqued nodes)."""

    @classmethod
    def new(cls, module: ir.Module, operands) -> DistinctNode:
        return cls(module, operands, name=str(len(module.metadata)))

    def descr(self, buf):
        operands = ", ".join([self.get_reference(), *(op.get_reference() for op in self.operands)])
        buf += (f"distinct !{{ {operands} }}", "\n")


def loop_id(module: ir.Module, hints) -> DistinctNode:
    """A loop id carrying ``(name, value)`` properties such as ``llvm.loop.unroll.count``."""
    return DistinctNode.new(module, [module.add_metadata([ir.MetaDataString(module, name), value])
                                     for name, value in hints])


class AliasScopes:
    """The ``global`` and ``private`` scopes of one module, made on first use."""

    def __init__(self, module: ir.Module):
        self.module = module
        self._lists: dict[bool, tuple] = {}

    def tag(self, instruction, is_global: bool) -> None:
        if not self._lists:
            m = self.module
            domain = DistinctNode.new(m, [ir.MetaDataString(m, "tilejit")])
            scopes = {g: DistinctNode.new(m, [domain, ir.MetaDataString(m, name)])
                      for g, name in ((True, "global"), (False, "private"))}
            self._lists = {g: (m.add_metadata([scopes[g]]), m.add_metadata([scopes[not g]]))
                           for g in (True, False)}
        scope, other = self._lists[is_global]
        instruction.set_metadata("alias.scope", scope)
        instruction.set_metadata("noalias", other)
