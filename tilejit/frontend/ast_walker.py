"""The AST walker: Python syntax and name scopes; meaning lives in the semantics modules.

``CodeGenerator`` visits a kernel's (or an inlined device function's) AST. Each visit sets
the current source location on the builder, so every op carries the user's file, line
and column, and every error raised below it is located there (the innermost node wins).
An unexpected Python exception becomes a located "internal compiler error".

Names resolve to the local symbol table, then the function's closure and globals
(constants are recorded for the cache key), then a few Python builtins. Control flow
(if/for/while/with, break/continue) is in :mod:`control_flow`.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import traceback
from contextlib import contextmanager

from tilejit.errors import CompilationError, TilejitError
from tilejit.ir.core import Operation
from tilejit.ir.types import ScalarType, f32, i32
from tilejit.knobs import knobs

from . import language
from .control_flow import RETURN, ControlFlowMixin
from .dependencies import (check_outside_value, is_cache_constant, is_constexpr_annotation,
                           namespace_name, unwrap_constexpr)
from .semantics import Semantics, fold
from .source import FunctionSource, function_source
from .triton_names import undefined_name_hint, unknown_attribute
from .values import BarrierRef, Undefined, contains_value, describe, is_value

__all__ = ["CodeGenerator"]

# Nested @tj.func calls beyond this depth are taken to be unbounded recursion.
MAX_INLINE_DEPTH = 64

UNSUPPORTED = {
    ast.Lambda: "lambda expressions", ast.GeneratorExp: "generator expressions",
    ast.ListComp: "list comprehensions", ast.SetComp: "set comprehensions",
    ast.DictComp: "dict comprehensions", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield from", ast.NamedExpr: "assignment expressions (:=)",
    ast.Set: "set literals", ast.ClassDef: "class definitions",
    ast.FunctionDef: "nested functions (define device functions at module level with @tj.func)",
    ast.AsyncFunctionDef: "async functions", ast.AsyncFor: "async for",
    ast.AsyncWith: "async with", ast.Try: "try statements", ast.Raise: "raise statements",
    ast.Global: "global declarations", ast.Nonlocal: "nonlocal declarations",
    ast.Delete: "del statements", ast.Import: "import statements",
    ast.ImportFrom: "import statements", ast.Match: "match statements",
}
if hasattr(ast, "TryStar"):
    UNSUPPORTED[ast.TryStar] = "try statements"

BINARY_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
              ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift",
              ast.RShift: "rshift", ast.BitAnd: "bitand", ast.BitOr: "bitor",
              ast.BitXor: "bitxor", ast.MatMult: "matmul"}
COMPARE_OPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt",
               ast.GtE: "ge", ast.Is: "is", ast.IsNot: "is_not", ast.In: "in",
               ast.NotIn: "not_in"}
UNARY_OPS = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert", ast.Not: "not"}

# Python builtins usable in kernels. They run at compile time on compile-time arguments;
# those in RUNTIME_BUILTINS also take run-time scalars (and tiles, for min/max/abs).
PYTHON_BUILTINS = {name: getattr(builtins, name) for name in (
    "len", "int", "float", "bool", "tuple", "list", "isinstance", "round", "divmod",
    "pow", "sum", "any", "all", "zip", "enumerate", "reversed", "sorted", "str", "repr",
    "type", "getattr", "hasattr", "slice", "min", "max", "abs")}
PYTHON_BUILTINS["range"] = language.range
RUNTIME_BUILTINS = {"min": 2, "max": 2, "abs": 1, "int": 1, "float": 1, "bool": 1}


class CodeGenerator(ControlFlowMixin, ast.NodeVisitor):
    def __init__(self, source: FunctionSource, sem: Semantics):
        self.source = source
        self.closure = source.closure
        self.sem = sem
        sem.call_function = self.call
        self.b = sem.b
        self.syms: dict[str, object] = {RETURN: False}
        self.device_functions: dict[language.DeviceFunction, None] = {}  # ordered set
        self.globals_read: dict[str, object] = {}
        self.loop_depth = 0            # loops enclosing this point, in the current function
        self.region_depth = 0          # IR regions (if/for/while/team) enclosing this point
        self.function_region_depth = 0  # region_depth where the current function started
        self.inline_depth = 0
        self.returned = False
        self.return_value = None

    # --------------------------------------------------------------- location, errors
    @contextmanager
    def at(self, node: ast.AST):
        """Stamp ops with ``node``'s location and locate errors raised inside."""
        loc = self.source.loc(node)
        saved, self.b.loc = self.b.loc, loc
        try:
            yield loc
        except TilejitError as err:
            raise err.with_location(loc) from None
        except RecursionError:
            raise CompilationError("the kernel is nested too deeply to compile", loc) from None
        except Exception as err:  # a compiler bug: report it at the user's line, not as-is
            detail = f"\n{traceback.format_exc()}" if knobs.debug else ""
            raise CompilationError(f"internal compiler error: {type(err).__name__}: {err}{detail}",
                                   loc) from None
        finally:
            self.b.loc = saved

    def visit(self, node: ast.AST):
        if not hasattr(node, "lineno"):
            return super().visit(node)
        with self.at(node):
            return super().visit(node)

    def generic_visit(self, node: ast.AST):
        what = UNSUPPORTED.get(type(node), f"'{type(node).__name__}' syntax")
        raise CompilationError(f"unsupported inside a kernel: {what}")

    # ------------------------------------------------------------------------ names
    def lookup(self, name: str):
        if name in self.syms:
            value = self.syms[name]
            if isinstance(value, Undefined):
                raise CompilationError(value.reason)
            return value
        scope = self.closure if name in self.closure else self.source.globals
        if name in scope:
            value = unwrap_constexpr(scope[name])
            check_outside_value(name, value)
            if is_cache_constant(value):
                self.globals_read[name] = value
            return value
        if name in PYTHON_BUILTINS:
            return PYTHON_BUILTINS[name]
        if hasattr(builtins, name):
            hint = "; use tj.device_print" if name == "print" else ""
            raise CompilationError(f"the Python builtin '{name}' is not supported inside a "
                                   f"kernel{hint}")
        raise CompilationError(f"name '{name}' is not defined{undefined_name_hint(name)}")

    def bind(self, name: str, value):
        value = unwrap_constexpr(value)
        if is_value(value) and not value.name_hint and name.isidentifier():
            value.name_hint = name  # hidden flags ($break) stay unnamed
        self.syms[name] = value

    # ------------------------------------------------------------------- statements
    def visit_Expr(self, node):
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.visit(node.value)  # a bare string is a docstring or comment

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return  # `x: T` alone does nothing in Python either
        value = self.visit(node.value)
        try:  # Python never evaluates local annotations; only recognised ones matter here
            annotation = self.visit(node.annotation)
        except CompilationError:
            annotation = None
        if annotation is language.constexpr and contains_value(value):
            raise CompilationError("a tj.constexpr variable needs a compile-time value, got "
                                   f"{describe(value)}")
        if isinstance(annotation, ScalarType):
            value = self.sem.cast(value, annotation)
        self.assign(node.target, value)

    def visit_AugAssign(self, node):
        op, target = BINARY_OPS[type(node.op)], node.target
        if isinstance(target, ast.Name):
            current = self.lookup(target.id)
            self.bind(target.id, self.sem.binary(op, current, self.visit(node.value)))
        elif isinstance(target, ast.Subscript):
            container, index = self.visit(target.value), self.visit_index(target.slice)
            current = self.subscript(container, index)
            self.store(container, index, self.sem.binary(op, current, self.visit(node.value)))
        else:
            raise CompilationError("augmented assignment to an attribute is not supported")

    def assign(self, target: ast.AST, value):
        with self.at(target):
            if isinstance(target, ast.Name):
                self.bind(target.id, value)
            elif isinstance(target, (ast.Tuple, ast.List)):
                if any(isinstance(e, ast.Starred) for e in target.elts):
                    raise CompilationError("starred assignment (a, *b = ...) is not supported")
                items = self.unpack(value, len(target.elts))
                for element, item in zip(target.elts, items):
                    self.assign(element, item)
            elif isinstance(target, ast.Subscript):
                self.store(self.visit(target.value), self.visit_index(target.slice), value)
            else:
                raise CompilationError("only names, tuples of names and buffer elements "
                                       "(buf[i, j]) can be assigned")

    def unpack(self, value, count: int) -> tuple:
        if is_value(value) or isinstance(value, BarrierRef):
            raise CompilationError(f"cannot unpack {describe(value)}")
        items = fold(tuple, value, what=f"unpacking {describe(value)}")
        if len(items) != count:
            raise CompilationError(f"cannot unpack {len(items)} values into {count} names")
        return items

    def store(self, container, index, value):
        if not is_value(container):
            raise CompilationError("only elements of buffers can be assigned, not of "
                                   f"{describe(container)}")
        return self.sem.memory.store(container, index, value)

    def visit_Return(self, node):
        value = None if node.value is None else self.visit(node.value)
        if self.inline_depth == 0 and value is not None:
            raise CompilationError("a kernel cannot return a value; write results to an output "
                                   "tensor")
        if self.region_depth == self.function_region_depth:
            self.returned, self.return_value = True, value  # the rest is never compiled
        elif value is not None:
            raise CompilationError("returning a value inside run-time control flow (an if, "
                                   "loop or with block on run-time values) is not supported; "
                                   "assign a variable and return it at the end")
        else:  # the rest of the function runs under `if not $return` (control_flow)
            self.syms[RETURN] = True

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        if is_value(cond):
            raise CompilationError("assert needs a compile-time condition (use tj.device_print "
                                   "to inspect run-time values)")
        if not self.sem.truth(cond):
            msg = "" if node.msg is None else self.visit(node.msg)
            raise CompilationError("assertion failed" + (f": {msg}" if msg else ""))

    # ------------------------------------------------------------------ expressions
    def visit_Constant(self, node):
        return node.value

    def visit_Name(self, node):
        return self.lookup(node.id)

    def visit_Tuple(self, node):
        items = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                items.extend(self.unpack_all(self.visit(element.value)))
            else:
                items.append(self.visit(element))
        return tuple(items)

    visit_List = visit_Tuple  # lists in kernels are compile-time tuples (shapes, configs)

    def unpack_all(self, value) -> tuple:
        if is_value(value):
            raise CompilationError(f"cannot unpack {describe(value)}")
        return fold(tuple, value, what=f"unpacking {describe(value)}")

    def visit_Dict(self, node):
        result = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                result.update(fold(dict, self.visit(value), what="a ** expansion"))
            else:
                result[self.visit(key)] = self.visit(value)
        return result

    def visit_JoinedStr(self, node):
        return "".join(str(self.visit(part)) for part in node.values)

    def visit_FormattedValue(self, node):
        value = self.visit(node.value)
        if contains_value(value):
            raise CompilationError("f-strings can only format compile-time values; pass run-time "
                                   "values to tj.device_print as arguments")
        convert = {115: str, 114: repr, 97: ascii}.get(node.conversion, lambda v: v)
        spec = "" if node.format_spec is None else self.visit(node.format_spec)
        return fold(format, convert(value), spec, what="an f-string field")

    def visit_Attribute(self, node):
        return self.attribute(self.visit(node.value), node.attr)

    def attribute(self, base, name: str):
        if is_value(base):
            return self.sem.memory.attribute(base, name)
        if isinstance(base, BarrierRef):
            raise CompilationError(f"{describe(base)} has no attribute '{name}'")
        try:
            value = getattr(base, name)
        except AttributeError as err:  # tj.load, tl.dot: name the tilejit spelling
            raise CompilationError(unknown_attribute(base, name) or str(err)) from None
        value = unwrap_constexpr(value)
        namespace = namespace_name(base)
        if namespace is not None:
            check_outside_value(f"{namespace}.{name}", value)
            if is_cache_constant(value):
                self.globals_read[f"{namespace}.{name}"] = value
        return value

    def visit_BinOp(self, node):
        op = BINARY_OPS[type(node.op)]
        return self.sem.binary(op, self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node):
        return self.sem.unary(UNARY_OPS[type(node.op)], self.visit(node.operand))

    def visit_BoolOp(self, node):
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.visit(node.values[0])
        for operand in node.values[1:]:
            if is_value(result):
                result = self.sem.logical(op, result, self.visit(operand))
                continue
            truthy = self.sem.truth(result)  # Python semantics: short-circuit on constants
            if truthy == (op == "or"):
                return result
            result = self.visit(operand)
        return result

    def visit_Compare(self, node):
        left, result = self.visit(node.left), None
        for op, comparator in zip(node.ops, node.comparators):
            right = self.visit(comparator)
            outcome = self.sem.compare(COMPARE_OPS[type(op)], left, right)
            result = outcome if result is None else self.sem.logical("and", result, outcome)
            if not is_value(result) and not self.sem.truth(result):
                return result  # a chain stops at its first false link, as in Python
            left = right
        return result

    def visit_IfExp(self, node):
        cond = self.sem.truth(self.visit(node.test))
        if not is_value(cond):
            return self.visit(node.body if cond else node.orelse)
        return self.sem.select(cond, self.visit(node.body), self.visit(node.orelse))

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Attribute) and node.value.attr in ("shape", "strides"):
            base = self.visit(node.value.value)
            if is_value(base) and not isinstance(node.slice, (ast.Slice, ast.Tuple)):
                return self.sem.memory.dim(base, node.value.attr, self.visit(node.slice))
            container = self.attribute(base, node.value.attr)
        else:
            container = self.visit(node.value)
        return self.subscript(container, self.visit_index(node.slice))

    def subscript(self, container, index):
        if is_value(container):
            return self.sem.memory.subscript(container, index)
        if contains_value(index):
            raise CompilationError(f"{describe(container)} can only be indexed with compile-time "
                                   f"values, got {describe(index)}")
        item = fold(lambda: container[index], what=f"indexing {describe(container)}")
        return unwrap_constexpr(item)

    def visit_index(self, node: ast.AST):
        """An index expression; slices become Python ``slice`` objects of walker values."""
        if isinstance(node, ast.Slice):
            return slice(*(None if part is None else self.visit(part)
                           for part in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Tuple):
            return tuple(self.visit_index(element) for element in node.elts)
        return self.visit(node)

    def visit_Starred(self, node):
        raise CompilationError("*expressions are only supported in calls and tuples")

    # ------------------------------------------------------------------------ calls
    def visit_Call(self, node):
        callee = self.visit(node.func)
        args = []
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                args.extend(self.unpack_all(self.visit(arg.value)))
            elif position == 0 and isinstance(arg, ast.Subscript) \
                    and getattr(callee, "__tj_place__", False):
                args.append(self.place(arg))  # tj.atomic_add(buf[i], v) updates buf[i]
            else:
                args.append(self.visit(arg))
        kwargs = {}
        for keyword in node.keywords:
            value = self.visit(keyword.value)
            if keyword.arg is None:
                kwargs.update(fold(dict, value, what="a ** expansion"))
            else:
                kwargs[keyword.arg] = value
        return self.call(callee, args, kwargs)

    def place(self, node: ast.Subscript):
        """``buf[i, j]`` as the element an atomic updates (not the value it holds)."""
        with self.at(node):
            container = self.visit(node.value)
            index = self.visit_index(node.slice)
            if is_value(container):
                return self.sem.memory.place(container, index)
            return self.subscript(container, index)

    def call(self, callee, args: list, kwargs: dict):
        if isinstance(callee, language.DeviceFunction):
            return self.inline(callee, args, kwargs)
        if language.is_builtin(callee):
            result = callee(*args, _sem=self.sem, **kwargs)
            return None if isinstance(result, Operation) else result  # ops without results
        name = getattr(callee, "__name__", None)
        if contains_value(args) or contains_value(kwargs):
            if name in RUNTIME_BUILTINS and callee is getattr(builtins, name):
                return self.runtime_builtin(name, args, kwargs)
            raise CompilationError(
                f"{name or describe(callee)} is called with run-time values, but only @tj.func "
                "device functions and tj builtins take them (plain Python functions run at "
                "compile time)")
        if not callable(callee):
            raise CompilationError(f"{describe(callee)} is not callable")
        result = fold(lambda: callee(*args, **kwargs), what=f"the call to {name or callee!r}")
        return unwrap_constexpr(result)

    def runtime_builtin(self, name: str, args, kwargs):
        if kwargs or len(args) != RUNTIME_BUILTINS[name]:
            raise CompilationError(f"{name}() of run-time values takes {RUNTIME_BUILTINS[name]} "
                                   "positional argument(s)")
        if name in ("min", "max"):
            return self.sem.min_max(name, *args)
        if name == "abs":
            return self.sem.math("abs", args[0])
        if name == "bool":
            return self.sem.to_i1(args[0])
        return self.sem.cast(args[0], i32 if name == "int" else f32)

    def inline(self, dfn: language.DeviceFunction, args, kwargs):
        """Inline a @tj.func call: its body runs in a fresh scope with its own locations."""
        if self.inline_depth >= MAX_INLINE_DEPTH:
            raise CompilationError(f"device functions nest more than {MAX_INLINE_DEPTH} deep "
                                   f"(is {dfn.fn.__name__} recursive on run-time values?)")
        self.device_functions.setdefault(dfn, None)
        source = function_source(dfn.fn)
        signature = inspect.signature(dfn.fn)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise CompilationError(f"{dfn.fn.__name__}(): {err}") from None
        bound.apply_defaults()
        for name, param in signature.parameters.items():
            if is_constexpr_annotation(param.annotation, dfn.fn.__globals__) \
                    and contains_value(bound.arguments.get(name)):
                raise CompilationError(f"parameter '{name}' of {dfn.fn.__name__} is a "
                                       "tj.constexpr, but got a run-time value")
        saved = (self.source, self.closure, self.syms, self.loop_depth,
                 self.function_region_depth, self.returned, self.return_value)
        self.source, self.closure, self.loop_depth = source, source.closure, 0
        self.syms = {RETURN: False}
        self.function_region_depth = self.region_depth
        self.returned, self.return_value = False, None
        self.inline_depth += 1
        try:
            for name, value in bound.arguments.items():
                self.bind(name, value)
            self.visit_stmts(source.node.body)
            return self.return_value
        finally:
            self.inline_depth -= 1
            (self.source, self.closure, self.syms, self.loop_depth,
             self.function_region_depth, self.returned, self.return_value) = saved
