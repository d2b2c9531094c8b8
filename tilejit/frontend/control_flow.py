"""Control flow: ``if``/``for``/``while``/``with``, ``break`` and ``continue`` as structured IR.

Python rebinds names; the IR is SSA. A construct on a compile-time condition (or over a
compile-time sequence) is resolved while walking. Otherwise its region is walked with a
copy of the symbol table, and the names it changed flow out through ``yield``:

* ``if``: a name changed in either branch becomes a result of the ``if`` op; a name
  defined in only one branch becomes ``Undefined`` (an error only if it is used later).
  ``with tj.tfilter(...)`` is an ``if`` without an ``else``. ``if A and B:`` without an
  ``else`` whose operands filter on different thread axes (``warp_id() == 0 and
  elect_sync()``) becomes the nested ``if A: if B:``, so each filter narrows the threads.
* loops: a name assigned in the body and defined before the loop is loop-carried (an
  iteration argument). Its type is the initial value's type, widened when the body
  assigns a wider one (``acc = 0`` then ``acc += x_f32`` makes an f32 loop), in which
  case the body is walked again with the wider type.
* register tiles (fragments and locals) flow out of an ``if`` and through a loop *by
  value*, as Triton's tensors do: the frontend allocates one tile of the same type before
  the construct, copies the initial value in, and copies each branch's (each iteration's)
  new value into it, so ``acc = acc + t`` in a loop needs no buffer-typed SSA value that a
  register file could not hold. Other buffers and regions (shared memory, tensors) are
  references and flow as SSA values.
* ``with tj.warp():``: a ``team`` op; names assigned inside escape through its yield.
* ``continue``/``break`` set hidden flags (``$continue``, ``$break``); the statements after
  one that may jump run under ``if not (break or continue)``, and a ``while`` condition is
  ``not break and cond``. A run-time ``for`` holding a ``break`` becomes such a ``while``
  over a hidden counter (``$iter<depth>``), so breaking ends the loop; an unrolled loop
  guards each remaining iteration with ``if not break`` (folded when known).
* ``return`` under run-time control flow (``if pid * BLOCK >= n: return``) sets the hidden
  flag ``$return`` (False when a function starts): the statements after one that may
  return run under ``if not return``, and inside a loop it also breaks every loop around
  it. A tile primitive left under such an ``if`` must be reached by its whole team, as
  under any ``if`` (a ScopeError when the return differs between its threads).
"""
from __future__ import annotations

import ast
from contextlib import contextmanager

from tilejit.errors import CompilationError
from tilejit.ir.core import Block
from tilejit.ir.types import ScalarType, promote

from . import language
from .filters import KEEPS_NO_THREAD, filter_condition, thread_filter
from .flow_facts import (BREAK, CONTINUE, MISSING, REGION_FLOW, RETURN, assigned_names,
                         by_value, holds_return, is_region, may_jump, same_constant,
                         same_tile_type)
from .loops import LoopMixin
from .semantics import literal_type
from .values import (Undefined, contains_value, describe, is_number, is_scalar, is_value,
                     number_type_promote)

__all__ = ["RETURN", "ControlFlowMixin", "assigned_names"]


class ControlFlowMixin(LoopMixin):
    """Statement lists and control flow for ``CodeGenerator`` (see the module docstring)."""

    # ------------------------------------------------------------- statement lists
    def visit_stmts(self, stmts):
        for index, stmt in enumerate(stmts):
            self.visit(stmt)
            if self.returned:
                return
            rest = stmts[index + 1:]
            returns = holds_return([stmt])
            if returns and self.loop_depth:  # a return ends the loops around it too
                self.syms[BREAK] = self.sem.logical("or", self.syms[BREAK], self.syms[RETURN])
            if rest and self.loop_depth and (returns or may_jump(stmt)):
                stopped = self.sem.logical("or", self.syms[BREAK], self.syms[CONTINUE])
            elif rest and returns:
                stopped = self.syms[RETURN]
            else:
                continue
            # The guard takes the location of the statement that may return (`if pid >= n:`),
            # so that a ScopeError about it names the user's `if`.
            with self.at(stmt if returns else rest[0]):
                self._guard(self.sem.logical_not(stopped),
                            lambda rest=rest: self.visit_stmts(rest))
            return

    def visit_Break(self, node):
        if not self.loop_depth:
            raise CompilationError("'break' outside a loop")
        self.syms[BREAK] = True

    def visit_Continue(self, node):
        if not self.loop_depth:
            raise CompilationError("'continue' outside a loop")
        self.syms[CONTINUE] = True

    @contextmanager
    def _region(self):
        self.region_depth += 1
        try:
            yield
        finally:
            self.region_depth -= 1

    def _line(self, node) -> int:
        return self.source.loc(node).line

    # --------------------------------------------------------------------------- if
    def visit_If(self, node):
        if self._filter_conjunction(node):
            return
        cond = self.sem.truth(self.visit(node.test))
        if not is_value(cond):
            self.visit_stmts(node.body if cond else node.orelse)
            return
        with self.at(node.test):
            spec = thread_filter(cond, self.sem.options)
        if spec is KEEPS_NO_THREAD:
            self.visit_stmts(node.orelse)
            return
        orelse = (lambda: self.visit_stmts(node.orelse)) if node.orelse else None
        self._build_if(cond, lambda: self.visit_stmts(node.body), orelse, spec, self._line(node))

    def _filter_conjunction(self, node) -> bool:
        """Walk ``if A and B: ...`` (no ``else``) as ``if A: if B: ...`` when its operands are
        thread filters on different axes, or filters mixed with run-time conditions
        (``if tj.warp_id() == 0 and tj.elect_sync():``): one filter is one range on one
        axis, so only the nested form narrows the active threads step by step, which the
        tile primitives inside need. True when the statement was walked here. (Operands
        are evaluated up front, as ``and`` on run-time values always is; a compile-time
        false operand ends the conjunction as in Python.)"""
        test = node.test
        if node.orelse or not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
            return False
        conds, specs = [], []
        for operand in test.values:
            cond = self.sem.truth(self.visit(operand))
            if not is_value(cond):
                if not cond:
                    return True  # never true, and there is no else-branch
                continue
            with self.at(operand):
                specs.append(thread_filter(cond, self.sem.options))
            if specs[-1] is KEEPS_NO_THREAD:
                return True  # never true, and there is no else-branch
            conds.append(cond)
        axes = {spec.axis for spec in specs if spec is not None}
        one_filter = None not in specs and len(axes) == 1 and "elect" not in axes
        line = self._line(node)
        if len(conds) < 2 or not axes or one_filter:  # what `and` gives: one condition
            cond = conds[0] if conds else True
            for other in conds[1:]:
                cond = self.sem.logical("and", cond, other)
            if not is_value(cond):
                self.visit_stmts(node.body)
                return True
            with self.at(test):
                spec = thread_filter(cond, self.sem.options)
            if spec is not KEEPS_NO_THREAD:
                self._build_if(cond, lambda: self.visit_stmts(node.body), None, spec, line)
            return True

        def level(i: int):
            if i == len(conds):
                self.visit_stmts(node.body)
            else:
                self._build_if(conds[i], lambda: level(i + 1), None, specs[i], line)
        level(0)
        return True

    def _guard(self, cond, then_fn, else_fn=None):
        """Run ``then_fn`` (else ``else_fn``) under ``cond``: directly when it is known."""
        if not is_value(cond):
            fn = then_fn if cond else else_fn
            if fn is not None:
                fn()
            return
        self._build_if(cond, then_fn, else_fn, None, self.b.loc.line)

    def _build_if(self, cond, then_fn, else_fn, spec, line: int, construct: str = "if"):
        """An ``if`` op running ``then_fn``/``else_fn`` (walkers of the branches) whose
        results are the names the branches change; ``construct`` names it in messages."""
        before = self.syms
        branches = []
        for fn in (then_fn, else_fn):
            block, self.syms = Block(), dict(before)
            if fn is not None:
                with self.b.insert_into(block), self._region():
                    fn()
            branches.append((block, self.syms))
        self.syms = dict(before)
        returned = [syms.get(RETURN) is True for _, syms in branches]
        names, types, tiles, live_only = [], [], {}, set()
        for name in self._changed(before, *(syms for _, syms in branches)):
            values = [syms.get(name, MISSING) for _, syms in branches]
            kind, merged = self._merge(name, *values, f"{construct} at line {line}")
            if isinstance(merged, Undefined) and returned.count(True) == 1 \
                    and not name.startswith("$"):
                # Nothing reads a name on the path that returned: the other one defines it.
                live = values[returned.index(False)]
                kind, merged = self._merge_live(live, before.get(name, MISSING), merged)
                live_only.add(name)
            if kind == "phi":
                names.append(name)
                types.append(merged)
            elif kind == "tile":
                tiles[name] = self.b.alloc(merged.scope, merged.dtype, merged.shape,
                                           merged.layout)
            else:
                self.syms[name] = merged
        for (block, syms), ended in zip(branches, returned):
            with self.b.insert_into(block):
                for name, carry in tiles.items():
                    if not (ended and name in live_only):
                        self.sem.tile.copy(carry, syms[name], None, None, None)
                self.b.yield_([self.sem.to_ir(0, t) if ended and n in live_only
                               else self._materialize(syms[n], t)
                               for n, t in zip(names, types)])
        self.syms.update(tiles)
        op = self.b.create("if", (cond,), {"filter": spec}, types, [b for b, _ in branches])
        for name, result in zip(names, op.results):
            self.bind(name, result)

    @staticmethod
    def _changed(before: dict, *afters: dict) -> list[str]:
        names = {}
        for after in afters:
            for name, value in after.items():
                if value is not before.get(name, MISSING):
                    names.setdefault(name)
        return list(names)

    def _merge(self, name: str, a, b, where: str):
        """("value", v) when both branches agree at compile time, ("phi", type) when the
        ``if`` must yield it, ("tile", buffer type) when each branch copies its register
        tile into one, ("value", Undefined) when it cannot be defined after."""
        for value in (a, b):
            if isinstance(value, Undefined):
                return "value", value
        if a is MISSING or b is MISSING:
            return "value", Undefined(f"'{name}' is not assigned on every path through the "
                                      f"{where}, so it is not defined after it")
        if a is b or (not contains_value(a) and not contains_value(b) and same_constant(a, b)):
            return "value", a
        if is_region(a) or is_region(b):
            return "value", Undefined(f"'{name}': " + REGION_FLOW.format(construct=where))
        if by_value(a) and by_value(b):
            if same_tile_type(a, b):
                return "tile", a.type
            return "value", Undefined(f"'{name}' is {describe(a)} in one branch of the {where} "
                                      f"and {describe(b)} in the other")
        joined = self._join_type(a, b)
        if joined is None:
            return "value", Undefined(f"'{name}' is {describe(a)} in one branch of the {where} "
                                      f"and {describe(b)} in the other")
        return "phi", joined

    @staticmethod
    def _merge_live(live, before, undefined):
        """:meth:`_merge`'s answer for a name only the branch that did not return defines
        (``live``); ``undefined`` when that branch cannot define it either."""
        if live is MISSING or isinstance(live, Undefined) or is_region(live):
            return "value", undefined
        if live is before or not contains_value(live):
            return "value", live
        if by_value(live):
            return "tile", live.type
        if is_scalar(live):
            return "phi", live.type
        return "value", undefined

    def _join_type(self, a, b):
        """The type both values can take as one SSA value, or None."""
        if is_value(a) and is_value(b):
            if a.type == b.type:
                return a.type
            return promote(a.type, b.type) if is_scalar(a) and is_scalar(b) else None
        if is_value(a) or is_value(b):
            value, other = (a, b) if is_value(a) else (b, a)
            if is_scalar(value) and is_number(other):
                return literal_type(value.type, other)
            return None
        return number_type_promote(a, b) if is_number(a) and is_number(b) else None

    def _materialize(self, value, type_):
        return self.sem.to_ir(value, type_) if isinstance(type_, ScalarType) else value

    # ------------------------------------------------------------------------- with
    def visit_With(self, node):
        self._with_items(node.items, node.body)

    def _with_items(self, items, body):
        if not items:
            self.visit_stmts(body)
            return
        item, inner = items[0], (lambda: self._with_items(items[1:], body))
        with self.at(item.context_expr):
            if item.optional_vars is not None:
                raise CompilationError("'with ... as name' is not supported")
            ctx = self.visit(item.context_expr)
            if isinstance(ctx, language.ThreadFilter):
                cond = filter_condition(self.sem, ctx.axis, ctx.lo, ctx.hi)
                spec = thread_filter(cond, self.sem.options)
            elif isinstance(ctx, language.TeamScope):
                raise CompilationError(f"write 'with tj.{ctx.name}():' (call the scope)")
            elif not isinstance(ctx, language.TeamSwitch):
                raise CompilationError(f"{describe(ctx)} cannot open a with block; use a scope "
                                       "such as tj.warp() or tj.warpgroup(), or tj.tfilter(...)")
        if isinstance(ctx, language.TeamSwitch):
            self._team(ctx.kind, inner, self._line(item.context_expr))
        elif spec is not KEEPS_NO_THREAD:
            self._build_if(cond, inner, None, spec, self._line(item.context_expr),
                           "tj.tfilter block")

    def _team(self, kind, body_fn, line: int):
        before = self.syms
        self.syms, block = dict(before), Block()
        with self.b.insert_into(block), self._region():
            body_fn()
        after = self.syms
        outer = {id(v) for v in before.values() if is_value(v)}
        names = []
        for name in self._changed(before, after):
            value = after[name]
            if is_value(value) and id(value) not in outer:
                names.append(name)
            elif not is_value(value) and contains_value(value):
                after[name] = Undefined(f"'{name}' holds run-time values computed inside the "
                                        f"with block at line {line}, which cannot leave it")
        with self.b.insert_into(block):
            self.b.yield_([after[n] for n in names])
        op = self.b.create("team", (), {"kind": kind}, [after[n].type for n in names], (block,))
        self.syms = dict(after)
        for name, result in zip(names, op.results):
            self.bind(name, result)
