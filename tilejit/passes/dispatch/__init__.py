"""Tile-primitive dispatch (docs/lowering.md "Dispatch", TIRx §5).

* :mod:`.registry` -- :class:`Rule`, :class:`Plan`, :class:`Decline`, :func:`register`,
  :func:`lookup`; targets' :class:`DispatchContext`.
* :mod:`.call` -- :class:`PrimitiveCall` / :class:`Operand`: what a rule sees.
* :mod:`.select` -- :func:`select`, the ``dispatch`` pass (:func:`run`) and
  :class:`DispatchRecord` / :func:`dispatch_log`.
* :mod:`.lower` -- the ``lower-tiles`` pass (import it as a submodule: it builds on
  ``passes.loopgen``, which builds on this package).

The generic rules (``tilejit/passes/rules``) register themselves the first time the
registry is asked for rules; a target's own families register when its package is imported.
"""
from .call import Operand, PrimitiveCall
from .registry import (
                       GENERIC,
                       PER_THREAD,
                       TEAM_ONCE,
                       Decline,
                       DispatchContext,
                       Plan,
                       Rule,
                       context_for,
                       lookup,
                       register,
                       register_target,
                       rules_for,
                       unregister,
                       unregister_target,
)
from .select import DispatchRecord, Selection, dispatch_log, format_log, run, select

__all__ = [
                       "GENERIC",
                       "PER_THREAD",
                       "TEAM_ONCE",
                       "Decline",
                       "DispatchContext",
                       "DispatchRecord",
                       "Operand",
                       "Plan",
                       "PrimitiveCall",
                       "Rule",
                       "Selection",
                       "context_for",
                       "dispatch_log",
                       "format_log",
                       "lookup",
                       "register",
                       "register_target",
                       "rules_for",
                       "run",
                       "select",
                       "unregister",
                       "unregister_target",
]

