"""Facts about the statements a control-flow construct holds, read from the AST before it
is walked (does a loop body break or return, which names does it assign...), and the
value classes that decide how a name flows through a construct (see ``control_flow``)."""
from __future__ import annotations

import ast

from tilejit.ir.types import BufferType, MemScope, RegionType

from .values import is_value

__all__ = ["BREAK", "COND", "CONTINUE", "MAX_RETYPES", "MAX_UNROLL", "MISSING", "REGION_FLOW",
           "RETURN", "assigned_names", "by_value", "holds_return", "inner_loop_variables",
           "is_range_call", "is_region", "jumps", "may_end_early", "may_jump", "same_constant",
           "same_tile_type", "walk_nodes"]

# not identifiers: users cannot clash
BREAK, CONTINUE, COND, RETURN = "$break", "$continue", "$cond", "$return"
MISSING = object()
MAX_UNROLL = 4096  # iterations a compile-time loop may unroll into
MAX_RETYPES = 8    # walks of a loop body while its carried types widen


def walk_nodes(nodes):
    """Nodes under ``nodes`` in order, not entering nested functions or classes."""
    for node in nodes:
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from walk_nodes(ast.iter_child_nodes(node))


def jumps(nodes, kinds) -> bool:
    """Whether ``nodes`` hold a break/continue (of ``kinds``) of the loop enclosing them."""
    for node in nodes:
        if isinstance(node, kinds):
            return True
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.Lambda, ast.ClassDef)) \
                and jumps(ast.iter_child_nodes(node), kinds):
            return True
    return False


def may_jump(stmt: ast.stmt) -> bool:
    return jumps([stmt], (ast.Break, ast.Continue))


def holds_return(nodes) -> bool:
    """Whether ``nodes`` hold a ``return`` (of the function they are in, at any depth)."""
    return any(isinstance(node, ast.Return) for node in walk_nodes(nodes))


def may_end_early(body) -> bool:
    """Whether a loop ``body`` may end its loop early: a ``break``, or a ``return``."""
    return jumps(body, ast.Break) or holds_return(body)


def assigned_names(stmts) -> list[str]:
    """Names the statements assign, in order of first assignment."""
    names = {n.id: None for n in walk_nodes(stmts)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return list(names)


def inner_loop_variables(stmts) -> set[str]:
    """Names the statements assign only as the variable of a nested run-time ``for`` (over
    ``range``/``tj.range``): such a name is not defined after that loop, so an enclosing
    loop cannot carry it."""
    targets = {id(n.target): n.target.id for n in walk_nodes(stmts)
               if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
               and is_range_call(n.iter)}
    others = {n.id for n in walk_nodes(stmts) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store) and id(n) not in targets}
    return set(targets.values()) - others


def is_range_call(node) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == "range") or \
        (isinstance(func, ast.Attribute) and func.attr == "range")


def same_constant(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an object whose == fails or is ambiguous is not "the same"
        return False


def by_value(x) -> bool:
    """A register tile: carried through control flow by value (see the module docstring)."""
    return is_value(x) and isinstance(x.type, BufferType) \
        and x.type.scope in (MemScope.FRAGMENT, MemScope.LOCAL)


def is_region(x) -> bool:
    return is_value(x) and isinstance(x.type, RegionType)


# Dispatch reads a region's buffer and starts off the op that made it.
REGION_FLOW = ("a region cannot flow out of a run-time {construct}; carry its start index "
                "instead and slice after it (e.g. `row = i` in the loop, then `x[row, 0:8]`)")


def same_tile_type(a, b) -> bool:
    return a.type.shape == b.type.shape and a.type.dtype == b.type.dtype
