"""Loops for ``CodeGenerator``: compile-time ``for`` (unrolled), run-time ``for`` and
``while`` as structured IR with loop-carried names, ``break``/``continue``/``return``
through hidden flags, and register tiles carried by value (``control_flow`` explains the
rules; this mixin is its loop half and uses its ``if`` helpers)."""
from __future__ import annotations

import ast

from tilejit.errors import CompilationError
from tilejit.ir.core import Block
from tilejit.ir.types import ScalarType, promote

from . import language
from .flow_facts import (BREAK, COND, CONTINUE, MAX_RETYPES, MAX_UNROLL, MISSING, REGION_FLOW,
                         RETURN, assigned_names, by_value, holds_return, inner_loop_variables,
                         is_region, may_end_early, same_constant, same_tile_type)
from .semantics import fold, literal_type
from .values import (BarrierRef, Undefined, describe, is_int_number, is_number, is_scalar,
                     is_value, python_number_type)

__all__ = ["LoopMixin"]


class LoopMixin:
    """``for``/``while`` for ``CodeGenerator`` (with ``ControlFlowMixin``'s helpers)."""

    def _enter_loop(self) -> dict:
        saved = {flag: self.syms.get(flag, MISSING) for flag in (BREAK, CONTINUE)}
        self.syms[BREAK] = self.syms[CONTINUE] = False
        self.loop_depth += 1
        return saved

    def _leave_loop(self, saved: dict):
        self.loop_depth -= 1
        for flag, value in saved.items():
            if value is MISSING:
                self.syms.pop(flag, None)
            else:
                self.syms[flag] = value

    def visit_For(self, node):
        if node.orelse:
            raise CompilationError("for ... else is not supported")
        iterable = self.visit(node.iter)
        if isinstance(iterable, language.RangeSpec) and not iterable.static:
            return self._run_time_for(node, iterable)
        with self.at(node.iter):
            values = self._compile_time_iteration(iterable)
        self._unrolled_for(node, values)

    def _compile_time_iteration(self, iterable):
        if isinstance(iterable, language.RangeSpec):
            bounds = (iterable.start, iterable.stop, iterable.step)
            if not all(is_int_number(b) for b in bounds):
                raise CompilationError("tj.static_range bounds must be compile-time ints, got "
                                       + ", ".join(describe(b) for b in bounds))
            values = fold(range, *(int(b) for b in bounds), what="tj.static_range")
        elif is_value(iterable) or isinstance(iterable, BarrierRef):
            raise CompilationError(f"cannot iterate over {describe(iterable)}; use range(...) "
                                   "or tj.static_range(...)")
        else:
            values = self.unpack_all(iterable)
        if len(values) > MAX_UNROLL:
            raise CompilationError(f"a compile-time loop of {len(values)} iterations is too long "
                                   f"to unroll (limit {MAX_UNROLL}); use tj.range")
        return values

    def _unrolled_for(self, node, values):
        has_break = may_end_early(node.body)
        saved = self._enter_loop()
        try:
            for value in values:
                running = self.sem.logical_not(self.syms[BREAK]) if has_break else True
                if running is False:
                    break

                def iteration(value=value):
                    self.syms[CONTINUE] = False
                    self.assign(node.target, value)
                    self.visit_stmts(node.body)
                self._guard(running, iteration)
                if self.returned:
                    break
        finally:
            self._leave_loop(saved)

    def _run_time_for(self, node, rng):
        if not isinstance(node.target, ast.Name):
            raise CompilationError("a run-time for loop needs a single loop variable")
        with self.at(node.iter):
            lb, ub, step = self.sem.loop_bounds(rng.start, rng.stop, rng.step)
        if may_end_early(node.body):
            return self._for_with_break(node, rng, lb, ub, step)
        saved = self._enter_loop()
        try:
            before = self.syms
            names, fixed = self._carried(node.body, False, exclude=(node.target.id,))

            def body():
                self.syms[CONTINUE] = False
                self.visit_stmts(node.body)
            block, types = self._settle(self._initial_types(names), lambda types: self._loop_body(
                names, types, fixed, (lb.type, node.target.id), body))
            inits = [self._materialize(before[n], t) for n, t in zip(names, types)]
            op = self.b.create("for", (lb, ub, step, *inits),
                               {"unroll": rng.unroll, "pipeline": rng.pipeline}, regions=(block,))
            self._after_loop(before, names, fixed, op.results, node, node.target.id)
        finally:
            self._leave_loop(saved)

    def _for_with_break(self, node, rng, lb, ub, step):
        """A run-time ``for`` holding a ``break`` is a ``while`` loop over a hidden counter,
        so that breaking ends the iterations instead of skipping the rest of them."""
        if rng.unroll is not None or rng.pipeline is not None:
            raise CompilationError("a loop with `break` or `return` cannot be unrolled or "
                                   "pipelined; drop the unroll=/pipeline= argument of tj.range")
        target = node.target.id
        saved = self._enter_loop()
        counter = f"$iter{self.loop_depth}"   # one per nesting level
        try:
            self.syms[counter] = lb
            before = self.syms
            names, fixed = self._carried(node.body, True, exclude=(target,))
            names.append(counter)
            upward = rng.step > 0 if is_int_number(rng.step) else None

            def in_range():
                iv = self.syms[counter]
                if upward is not None:
                    return self.sem.compare("lt" if upward else "gt", iv, ub)
                rising = self.sem.logical("and", self.sem.compare("gt", step, 0),
                                          self.sem.compare("lt", iv, ub))
                falling = self.sem.logical("and", self.sem.compare("lt", step, 0),
                                           self.sem.compare("gt", iv, ub))
                return self.sem.logical("or", rising, falling)

            def condition():
                return self.sem.logical("and", self.sem.logical_not(self.syms[BREAK]),
                                        in_range())

            def body():
                self.syms[CONTINUE] = False
                iv = self.syms[counter]
                self.syms[target] = iv
                self.visit_stmts(node.body)
                self.syms[counter] = self.sem.binary("add", iv, step)
            self._while_loop(node, before, names, fixed, condition, body, target)
            self.syms.pop(counter, None)
        finally:
            self._leave_loop(saved)

    def visit_While(self, node):
        if node.orelse:
            raise CompilationError("while ... else is not supported")
        has_break = may_end_early(node.body)
        saved = self._enter_loop()
        try:
            before = self.syms
            names, fixed = self._carried(node.body, has_break)

            def body():
                self.syms[CONTINUE] = False
                self.visit_stmts(node.body)
            self._while_loop(node, before, names, fixed,
                             lambda: self._while_condition(node.test, has_break), body)
        finally:
            self._leave_loop(saved)

    def _while_loop(self, node, before, names, fixed, condition, body, target=None):
        """A ``while`` op carrying ``names``: ``condition()`` walked in its before-region
        (False: the body never runs), ``body()`` in its body-region."""
        def build(types):
            before_block = Block.with_arg_types(types, names)
            self.syms = dict(before)
            self.syms.update(zip(names, before_block.args))
            with self.b.insert_into(before_block), self._region():
                cond = condition()
                if cond is not False:
                    self.b.condition(self.sem.to_i1(cond), list(before_block.args))
            self.syms = before
            if cond is False:  # known false: the body never runs
                return None, types
            body_block, widened = self._loop_body(names, types, fixed, None, body)
            return (before_block, body_block), widened
        regions, types = self._settle(self._initial_types(names), build)
        if regions is None:
            return
        inits = [self._materialize(before[n], t) for n, t in zip(names, types)]
        op = self.b.create("while", inits, None, types, regions)
        self._after_loop(before, names, fixed, op.results, node, target)

    def _while_condition(self, test, has_break):
        if not has_break:
            return self.sem.truth(self.visit(test))

        def evaluate():
            self.syms[COND] = self.sem.truth(self.visit(test))

        def stop():
            self.syms[COND] = False
        self._guard(self.sem.logical_not(self.syms[BREAK]), evaluate, stop)
        return self.syms.pop(COND)

    def _carried(self, body, has_break, exclude=()) -> tuple[list[str], dict]:
        """Loop-carried names (IR-able values) and names holding other compile-time values,
        which must not change in the loop; a register tile is both: it stays in the tile
        :meth:`_tile_carry` makes, into which each iteration copies its new value."""
        names, fixed = [], {}
        nested_loop_variables = inner_loop_variables(body)
        for name in assigned_names(body):
            value = self.syms.get(name, MISSING)
            if name in exclude or value is MISSING or isinstance(value, Undefined):
                continue
            if name in nested_loop_variables:
                self.syms[name] = Undefined(f"'{name}' is the variable of a run-time loop "
                                            "nested in this loop, so it is not defined here")
                continue
            if is_region(value):
                raise CompilationError(f"'{name}' is reassigned in the loop: "
                                       + REGION_FLOW.format(construct="loop"))
            if by_value(value):
                fixed[name] = self.syms[name] = self._tile_carry(value)
            elif is_value(value) or is_number(value):
                names.append(name)
            else:
                fixed[name] = value
        if has_break:
            names.append(BREAK)
        if holds_return(body):
            names.append(RETURN)
        return names, fixed

    def _tile_carry(self, init):
        """A tile of ``init``'s type holding its value: a register tile's place in a loop."""
        t = init.type
        carry = self.b.alloc(t.scope, t.dtype, t.shape, t.layout)
        self.sem.tile.copy(carry, init, None, None, None)
        return carry

    def _initial_types(self, names) -> list:
        values = [self.syms[n] for n in names]
        return [v.type if is_value(v) else python_number_type(v) for v in values]

    @staticmethod
    def _settle(types, build):
        """``build(types) -> (result, widened types)`` until the carried types stop widening."""
        for _ in range(MAX_RETYPES):
            result, widened = build(types)
            if widened == types:
                return result, types
            types = widened
        raise CompilationError("the types of the loop-carried variables do not settle")

    def _loop_body(self, names, types, fixed, induction, body_fn) -> tuple[Block, list]:
        """Walk a loop body into a new block whose args are the ``induction`` variable
        ((type, name), if given) and the carried ``names``; return it with the carried types
        the body ends with. The block is complete (yields) only when they are ``types``."""
        before = self.syms
        lead_types, lead_names = ([induction[0]], [induction[1]]) if induction else ([], [])
        block = Block.with_arg_types([*lead_types, *types], [*lead_names, *names])
        self.syms = dict(before)
        self.syms.update(zip([*lead_names, *names], block.args))
        with self.b.insert_into(block), self._region():
            body_fn()
            ends = [self.syms.get(n, MISSING) for n in names]
            widened = [self._carried_type(n, t, before[n], end)
                       for n, t, end in zip(names, types, ends)]
            if widened == types:
                self._check_fixed(fixed)
                self.b.yield_([self._materialize(v, t) for v, t in zip(ends, types)])
        self.syms = before
        return block, widened

    def _carried_type(self, name, type_, init, end):
        if isinstance(end, Undefined):
            raise CompilationError(end.reason)
        if is_value(end) and end.type == type_:
            return type_
        if isinstance(type_, ScalarType) and (is_scalar(end) or is_number(end)):
            return promote(type_, end.type) if is_scalar(end) else literal_type(type_, end)
        raise CompilationError(f"loop-carried variable '{name}' is {describe(init)} before the "
                               f"loop but {describe(end)} at the end of its body")

    def _check_fixed(self, fixed: dict):
        for name, value in fixed.items():
            now = self.syms.get(name, MISSING)
            if by_value(value) and now is not value:
                self._copy_into_carry(name, value, now)
                continue
            if now is not value and not same_constant(now, value):
                raise CompilationError(
                    f"'{name}' holds {describe(value)} and is reassigned in a run-time loop; only "
                    "scalars, buffers and regions can change from one iteration to the next")

    def _copy_into_carry(self, name, carry, now):
        """End of a loop body: the register tile ``name`` now holds ``now``; carry it over."""
        if isinstance(now, Undefined):
            raise CompilationError(now.reason)
        if not by_value(now) or not same_tile_type(carry, now):
            raise CompilationError(f"loop-carried variable '{name}' is {describe(carry)} before "
                                   f"the loop but {describe(now)} at the end of its body; a "
                                   "register tile keeps its shape and dtype through a loop")
        self.sem.tile.copy(carry, now, None, None, None)
        self.syms[name] = carry

    def _after_loop(self, before, names, fixed, results, node, target=None):
        self.syms = dict(before)
        for name, result in zip(names, results):
            self.bind(name, result)
        line = self._line(node)
        for name in assigned_names(node.body):
            if name not in names and name not in fixed:
                self.syms[name] = Undefined(f"'{name}' is assigned inside the run-time loop at "
                                            f"line {line} and is not defined after it")
        if target is not None:
            self.syms[target] = Undefined(f"the loop variable '{target}' of the run-time loop at "
                                          f"line {line} is not defined after the loop")
