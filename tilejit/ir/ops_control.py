"""Catalogue entries: structured control flow, terminators and team switches."""
from __future__ import annotations

from .attrs import BOOL, FILTER, INT, STR, Attr, Enum, Optional
from .opdef import OpGroup, RegionSpec, register
from .types import TeamKind

CONTROL, SCOPE = OpGroup.CONTROL, OpGroup.SCOPE


def _operand_types(start: int):
    return lambda op: tuple(v.type for v in op.operands[start:])


def _check_for(op):
    lb, ub, step = (v.type for v in op.operands[:3])
    return None if lb == ub == step else f"loop bounds have different types: {lb}, {ub}, {step}"


def _check_positive(name: str):
    def check(op):
        value = op.attrs[name]
        return None if value is None or value > 0 else f"{name} must be positive, got {value}"
    return check


def _check_for_attrs(op):
    return _check_for(op) or _check_positive("unroll")(op) or _check_positive("pipeline")(op)


register("for", CONTROL, "lb:int ub:int step:int *inits",
         {"unroll": Attr(Optional(INT), None), "pipeline": Attr(Optional(INT), None),
          "independent": Attr(BOOL, False)},
         results=lambda types, attrs: types[3:],
         regions=(RegionSpec("body", "yield",
                             arg_types=lambda op: (op.operands[0].type, *op.result_types)),),
         check=_check_for_attrs,
         doc="body args: (iv, *iter_args); the body yields the next iter args; "
             "independent: the rule that made it promises no iteration reads or writes what "
             "another writes (the nki target prints nl.affine_range)")
register("if", CONTROL, "cond:i1", {"filter": Attr(Optional(FILTER), None)},
         regions=(RegionSpec("then", "yield"), RegionSpec("else", "yield")),
         doc="filter: the thread range the then-branch keeps, when cond is a thread filter")
register("while", CONTROL, "*inits",
         regions=(RegionSpec("before", "condition", arg_types=_operand_types(0)),
                  RegionSpec("after", "yield", arg_types=lambda op: op.result_types,
                             yield_types=_operand_types(0))),
         doc="before(args) ends in condition(cond, *results); after(results) yields new args")
register("yield", CONTROL, "*values", terminator=True)
register("condition", CONTROL, "cond:i1 *values", terminator=True, yields_from=1)
register("team", SCOPE, attrs={"kind": Attr(Enum(TeamKind))},
         regions=(RegionSpec("body", "yield"),),
         doc="runs the body with another team kind; values assigned inside escape via yield")
register("single", SCOPE,
         attrs={"team": Attr(Enum(TeamKind)), "reason": Attr(Optional(STR), None)},
         regions=(RegionSpec("body", "yield"),),
         doc="runs the body once per team instance, after all of the team's active threads "
             "arrive (what a team-level tile primitive lowers to on the CPU target); empty, "
             "a barrier of the team's active threads (reason: why sync-hazards inserted it)")
