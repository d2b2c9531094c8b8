"""The dispatch registry: instruction-family rules per (primitive, target), and targets.

A :class:`Rule` is a small declarative record -- family name, primitive, the targets it
serves, a priority, whether it is a fallback -- plus two functions:

* ``check(call) -> Plan | Decline``: the legality contract. A legal rule answers a
  :class:`Plan` listing every instruction shape it can use for this call, best (largest)
  first; an illegal one answers a :class:`Decline` that says why, in words a user can act on.
* ``lower(call, plan, emitter)``: emit native IR for the chosen shape (``plan.shape``)
  through a :class:`tilejit.passes.loopgen.Emitter`.

Shape choice is the selector's job, not the rule's: it takes ``config["shape"]`` when
that is one of the plan's shapes and the first (largest) shape otherwise.

Targets register a :class:`DispatchContext` template: what a rule may ask of the target
(how a team's work is distributed over its threads, the vector register size, the
register budget of a blocked kernel) without writing ``if target == ...``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ...errors import CompilationError

if TYPE_CHECKING:
    from ..loopgen import Emitter
    from .call import PrimitiveCall

__all__ = [
    "GENERIC",
    "PER_THREAD",
    "PRIMITIVES",
    "TEAM_ONCE",
    "Decline",
    "DispatchContext",
    "Plan",
    "Rule",
    "context_for",
    "lookup",
    "register",
    "register_target",
    "rules_for",
    "unregister",
    "unregister_target",
]

PRIMITIVES = ("copy", "copy_async", "gemm", "gemm_async", "reduce", "scan", "pointwise", "atomic",
              "permute", "gather", "scatter")
GENERIC = "*"  # a rule serving every target

# How a team's share of a primitive is spread over its threads (docs/lowering.md):
TEAM_ONCE = "team_once"    # one unit runs the whole tile once per team instance (CPU)
PER_THREAD = "per_thread"  # every thread of the team takes its share (GPU)


@dataclass(frozen=True)
class Plan:
    """A legal rule's answer: the instruction shapes it can use, best first, and any
    facts its lowering needs (``details``). After selection ``shapes`` holds one shape."""

    shapes: tuple[tuple[int, ...], ...]
    details: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self):
        shapes = tuple(tuple(s) for s in self.shapes)
        if not shapes:
            raise ValueError("a plan needs at least one instruction shape")
        object.__setattr__(self, "shapes", shapes)

    @property
    def shape(self) -> tuple[int, ...]:
        """The chosen shape (the largest legal one until the selector picks)."""
        return self.shapes[0]

    def choose(self, shape) -> Plan:
        return replace(self, shapes=(tuple(shape),))


@dataclass(frozen=True, init=False)
class Decline:
    """A rule's refusal: one reason per violated constraint."""

    reasons: tuple[str, ...]

    def __init__(self, *reasons: str):
        if not reasons:
            raise ValueError("a decline needs a reason")
        object.__setattr__(self, "reasons", tuple(reasons))

    def __str__(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class Rule:
    family: str
    primitive: str
    check: Callable[[PrimitiveCall], Plan | Decline]
    lower: Callable[[PrimitiveCall, Plan, Emitter], None]
    targets: tuple[str, ...] = (GENERIC,)
    priority: int = 0
    fallback: bool = False
    doc: str = ""
    # the distributions it is tried under (a per-thread family: PER_THREAD alone)
    distributions: tuple[str, ...] = (TEAM_ONCE, PER_THREAD)

    def __post_init__(self):
        if self.primitive not in PRIMITIVES:
            raise ValueError(f"rule {self.family}: unknown primitive {self.primitive!r}")
        object.__setattr__(self, "targets", tuple(self.targets))

    def serves(self, target: str) -> bool:
        return GENERIC in self.targets or target in self.targets


_RULES: list[Rule] = []  # registration order breaks priority ties


def register(rule: Rule) -> Rule:
    """Add ``rule``; a family may appear once per (primitive, target)."""
    for old in _RULES:
        if (old.family, old.primitive) == (rule.family, rule.primitive) \
                and set(old.targets) & set(rule.targets):
            raise ValueError(f"family {rule.family!r} for {rule.primitive} is already "
                             f"registered for targets {old.targets}")
    _RULES.append(rule)
    return rule


def unregister(rule: Rule) -> None:
    _RULES.remove(rule)


def _load_generic_rules() -> None:
    # Imported on first use: the rules build on passes.loopgen, which builds on this package.
    from .. import rules  # noqa: F401


def rules_for(primitive: str, target: str) -> list[Rule]:
    """The rules to try, in order: specialized by priority, then fallbacks by priority."""
    _load_generic_rules()
    candidates = [r for r in _RULES if r.primitive == primitive and r.serves(target)]
    return sorted(candidates, key=lambda r: (r.fallback, -r.priority))


def lookup(family: str, primitive: str, target: str,
           distribution: str | None = None) -> Rule | None:
    """The rule of ``family``; with ``distribution``, the one tried under it (a family may
    have a per-thread rule and a target's own team-once stand-in)."""
    return next((r for r in rules_for(primitive, target) if r.family == family
                 and (distribution is None or distribution in r.distributions)), None)


# --------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class DispatchContext:
    """What dispatch knows about the target: its name and arch, how a team's work is
    distributed (``team_once`` or ``per_thread``), the widest vector in bytes, how many
    accumulators a register-blocked rule may keep live, whether the target can run
    per-element loops at all (the generic rules need them) and whether, when a team runs
    a primitive once, they reach tensor memory (``tj.alloc_tmem``), and the ``(m, n, k)`` shapes
    of its matrix instructions per family (``{"mma": ((16, 8, 16),)}``). A target's
    backend makes it from its capabilities (``tilejit.targets.backend``)."""

    target: str
    arch: str | None = None
    distribution: str = TEAM_ONCE
    vector_bytes: int = 16
    registers: int = 32
    element_loops: bool = True
    tmem_elements: bool = False   # team_once keeps tensor memory as plain memory (the CPU)
    tensor_core_shapes: Mapping[str, tuple[tuple[int, int, int], ...]] = \
        field(default_factory=dict, hash=False)

    def __post_init__(self):
        if self.distribution not in (TEAM_ONCE, PER_THREAD):
            raise ValueError(f"distribution must be {TEAM_ONCE} or {PER_THREAD}, "
                             f"got {self.distribution!r}")


_TARGETS: dict[str, DispatchContext] = {}


def register_target(context: DispatchContext) -> DispatchContext:
    """Declare a target (its package does this on import); re-registering replaces it."""
    _TARGETS[context.target] = context
    return context


def unregister_target(context: DispatchContext) -> None:
    """Forget ``context`` (a test's own target, once the test is done)."""
    if _TARGETS.get(context.target) != context:
        raise ValueError(f"target {context.target!r} is not registered as {context}")
    del _TARGETS[context.target]


register_target(DispatchContext("generic"))


def context_for(kernel) -> DispatchContext:
    """The context of ``kernel``'s ``target``/``arch`` attributes (``generic`` when unset)."""
    name = kernel.attrs.get("target") or "generic"
    if name not in _TARGETS:
        known = ", ".join(sorted(_TARGETS))
        raise CompilationError(f"target {name!r} is not registered with dispatch (known: "
                               f"{known}); its backend registers it for compiling "
                               f"(tilejit.targets.backend.get_backend({name!r}).register())",
                               kernel.loc)
    context = replace(_TARGETS[name], arch=kernel.attrs.get("arch"))
    mode = kernel.attrs.get("distribution")   # a kernel's own mode (the CPU's SIMT mode)
    if mode is None or mode == context.distribution:
        return context
    if mode not in (TEAM_ONCE, PER_THREAD):
        raise CompilationError(f"kernel attribute distribution must be {TEAM_ONCE!r} or "
                               f"{PER_THREAD!r}, got {mode!r}", kernel.loc)
    return replace(context, distribution=mode)
