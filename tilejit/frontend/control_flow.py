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
from tilejit.ir.types import BufferType, MemScope, RegionType, ScalarType, promote

from . import language
from .filters import KEEPS_NO_THREAD, filter_condition, thread_filter
from .semantics import fold, literal_type
from .values import (BarrierRef, Undefined, contains_value, describe, is_int_number, is_number,
                     is_scalar, is_value, number_type_promote, python_number_type)

__all__ = ["RETURN", "ControlFlowMixin", "assigned_names"]

# not identifiers: users cannot clash
BREAK, CONTINUE, COND, RETURN = "$break", "$continue", "$cond", "$return"
MISSING = object()
MAX_UNROLL = 4096  # iterations a compile-time loop may unroll into
MAX_RETYPES = 8    # walks of a loop body while its carried types widen


def _walk(nodes):
    """Nodes under ``nodes`` in order, not entering nested functions or classes."""
    for node in nodes:
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _walk(ast.iter_child_nodes(node))


def _jumps(nodes, kinds) -> bool:
    """Whether ``nodes`` hold a break/continue (of ``kinds``) of the loop enclosing them."""
    for node in nodes:
        if isinstance(node, kinds):
            return True
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.Lambda, ast.ClassDef)) \
                and _jumps(ast.iter_child_nodes(node), kinds):
            return True
    return False


def _may_jump(stmt: ast.stmt) -> bool:
    return _jumps([stmt], (ast.Break, ast.Continue))


def _returns(nodes) -> bool:
    """Whether ``nodes`` hold a ``return`` (of the function they are in, at any depth)."""
    return any(isinstance(node, ast.Return) for node in _walk(nodes))


def _stops(body) -> bool:
    """Whether a loop ``body`` may end its loop early: a ``break``, or a ``return``."""
    return _jumps(body, ast.Break) or _returns(body)


def assigned_names(stmts) -> list[str]:
    """Names the statements assign, in order of first assignment."""
    names = {n.id: None for n in _walk(stmts)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return list(names)


def _inner_loop_variables(stmts) -> set[str]:
    """Names the statements assign only as the variable of a nested run-time ``for`` (over
    ``range``/``tj.range``): such a name is not defined after that loop, so an enclosing
    loop cannot carry it."""
    targets = {id(n.target): n.target.id for n in _walk(stmts)
               if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
               and _is_range_call(n.iter)}
    others = {n.id for n in _walk(stmts) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store) and id(n) not in targets}
    return set(targets.values()) - others


def _is_range_call(node) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == "range") or \
        (isinstance(func, ast.Attribute) and func.attr == "range")


def _same_constant(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an object whose == fails or is ambiguous is not "the same"
        return False


def _by_value(x) -> bool:
    """A register tile: carried through control flow by value (see the module docstring)."""
    return is_value(x) and isinstance(x.type, BufferType) \
        and x.type.scope in (MemScope.FRAGMENT, MemScope.LOCAL)


def _is_region(x) -> bool:
    return is_value(x) and isinstance(x.type, RegionType)


# Dispatch reads a region's buffer and starts off the op that made it.
_REGION_FLOW = ("a region cannot flow out of a run-time {construct}; carry its start index "
                "instead and slice after it (e.g. `row = i` in the loop, then `x[row, 0:8]`)")


def _same_tile_type(a, b) -> bool:
    return a.type.shape == b.type.shape and a.type.dtype == b.type.dtype


class ControlFlowMixin:
    """Statement lists and control flow for ``CodeGenerator`` (see the module docstring)."""

    # ------------------------------------------------------------- statement lists
    def visit_stmts(self, stmts):
        for index, stmt in enumerate(stmts):
            self.visit(stmt)
            if self.returned:
                return
            rest = stmts[index + 1:]
            returns = _returns([stmt])
            if returns and self.loop_depth:  # a return ends the loops around it too
                self.syms[BREAK] = self.sem.logical("or", self.syms[BREAK], self.syms[RETURN])
            if rest and self.loop_depth and (returns or _may_jump(stmt)):
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
        if a is b or (not contains_value(a) and not contains_value(b) and _same_constant(a, b)):
            return "value", a
        if _is_region(a) or _is_region(b):
            return "value", Undefined(f"'{name}': " + _REGION_FLOW.format(construct=where))
        if _by_value(a) and _by_value(b):
            if _same_tile_type(a, b):
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
        if live is MISSING or isinstance(live, Undefined) or _is_region(live):
            return "value", undefined
        if live is before or not contains_value(live):
            return "value", live
        if _by_value(live):
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

    # ------------------------------------------------------------------------ loops
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
        has_break = _stops(node.body)
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
        if _stops(node.body):
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
        has_break = _stops(node.body)
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
        inner_loop_variables = _inner_loop_variables(body)
        for name in assigned_names(body):
            value = self.syms.get(name, MISSING)
            if name in exclude or value is MISSING or isinstance(value, Undefined):
                continue
            if name in inner_loop_variables:
                self.syms[name] = Undefined(f"'{name}' is the variable of a run-time loop "
                                            "nested in this loop, so it is not defined here")
                continue
            if _is_region(value):
                raise CompilationError(f"'{name}' is reassigned in the loop: "
                                       + _REGION_FLOW.format(construct="loop"))
            if _by_value(value):
                fixed[name] = self.syms[name] = self._tile_carry(value)
            elif is_value(value) or is_number(value):
                names.append(name)
            else:
                fixed[name] = value
        if has_break:
            names.append(BREAK)
        if _returns(body):
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
            if _by_value(value) and now is not value:
                self._copy_into_carry(name, value, now)
                continue
            if now is not value and not _same_constant(now, value):
                raise CompilationError(
                    f"'{name}' holds {describe(value)} and is reassigned in a run-time loop; only "
                    "scalars, buffers and regions can change from one iteration to the next")

    def _copy_into_carry(self, name, carry, now):
        """End of a loop body: the register tile ``name`` now holds ``now``; carry it over."""
        if isinstance(now, Undefined):
            raise CompilationError(now.reason)
        if not _by_value(now) or not _same_tile_type(carry, now):
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
