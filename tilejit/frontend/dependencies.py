"""What a kernel's compiled code depends on besides its own source.

The runtime's cache key needs, before compiling anything, the device functions a kernel
may call and the module-level constants it may read: :func:`find_dependencies` finds them
statically (a superset: names in dead branches count too). ``compile_to_ir_with_deps``
reports the exact ones a compilation used.
"""
from __future__ import annotations

import ast
import inspect
import numbers
from dataclasses import dataclass, field

from tilejit.errors import CompilationError
from tilejit.ir.types import ScalarType

from . import language
from .source import function_source

__all__ = ["Dependencies", "check_outside_value", "find_dependencies", "is_cache_constant",
           "is_constexpr_annotation", "namespace_name", "unwrap_constexpr"]


@dataclass
class Dependencies:
    """``functions``: @tj.func objects (first use first); ``globals``: qualified name -> value
    of each module-level constant read (``BLOCK``, ``config.TILE``)."""

    functions: tuple = ()
    globals: dict = field(default_factory=dict)


def in_package(module_name: str, package: str) -> bool:
    """``module_name`` is ``package`` or one of its submodules (``tilejit_utils`` is not in
    ``tilejit``)."""
    return module_name == package or module_name.startswith(package + ".")


def is_tilejit_module(module) -> bool:
    """tilejit's own modules: what a kernel reads from them is the language, not a constant."""
    return in_package(module.__name__, "tilejit")


def namespace_name(value) -> str | None:
    """The qualified name under which a kernel's reads of ``value.X`` are recorded (a
    user module or class: rebinding ``X`` there must recompile), or None."""
    if inspect.ismodule(value):
        return None if is_tilejit_module(value) else value.__name__
    if inspect.isclass(value) and not in_package(value.__module__, "tilejit"):
        return f"{value.__module__}.{value.__qualname__}"
    return None


def is_layout(value) -> bool:
    return in_package(type(value).__module__, "tilejit.layout")


def is_cache_constant(value) -> bool:
    """A module-level value a kernel compiles in (so it belongs in the cache key): numbers,
    strings, None, dtypes, layouts, ``tj.constexpr`` values and tuples of those. All are
    immutable, so the value recorded is the value compiled in until the name is rebound."""
    if isinstance(value, language.constexpr):
        value = value.value
    if value is None or isinstance(value, (bool, int, float, str, ScalarType)):
        return True
    if isinstance(value, tuple):
        return all(is_cache_constant(v) for v in value)
    return is_layout(value)


def _is_code(value) -> bool:
    """Modules, functions, classes and tilejit's own objects (device functions, builtins):
    what a kernel calls or looks names up in, not data it compiles in."""
    return (inspect.ismodule(value) or inspect.isroutine(value) or inspect.isclass(value)
            or in_package(type(value).__module__, "tilejit"))


def _mutable_part(value):
    """The first element of ``value`` that is neither a cache constant nor code."""
    if isinstance(value, tuple):
        return next((part for part in map(_mutable_part, value) if part is not None), None)
    return None if is_cache_constant(value) or _is_code(value) else value


def check_outside_value(name: str, value) -> None:
    """Refuse a global or closure value a kernel reads unless it is a cache constant or code.

    Its value is compiled in, and a launch rechecks only whether the name still holds the
    same object: a list, dict, array or other object changed in place would keep running
    the binary built with its old contents. ``value`` is unwrapped (no tj.constexpr)."""
    part = _mutable_part(value)
    if part is None:
        return
    kind = type(part).__qualname__
    held = "" if part is value else f" that holds a {kind}"
    if isinstance(part, numbers.Number):  # immutable, but not a number the cache key takes
        why, fix = "", "Convert it with int(...) or float(...)"
    else:
        why = (f", and a {kind} can change in place without the kernel noticing, so it "
               "would keep using the old contents")
        fix = "Use a tuple (of numbers, strings, bools, None or dtypes)"
    raise CompilationError(
        f"'{name}' is a {type(value).__qualname__}{held} defined outside the kernel; a kernel "
        "compiles in the values it reads from outside and accepts only Python numbers, "
        f"strings, bools, None, dtypes, layouts and tuples of those{why}. {fix}, or pass the "
        "value as a tj.constexpr argument")


def unwrap_constexpr(value):
    return value.value if isinstance(value, language.constexpr) else value


def is_constexpr_annotation(annotation, globals_: dict) -> bool:
    """Whether a parameter annotation means ``tj.constexpr`` (also as a string annotation)."""
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, dict(globals_))  # the user's own annotation text
        except Exception:  # an annotation that does not evaluate is not tj.constexpr
            return False
    return annotation is language.constexpr


def find_dependencies(fn) -> Dependencies:
    """Device functions and module-level (or closure) constants ``fn`` refers to,
    transitively."""
    functions: dict = {}
    constants: dict = {}

    def scan(f):
        source = function_source(f)
        local = {a.arg for a in ast.walk(source.node.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(source.node) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        scope = {**f.__globals__, **source.closure}
        for node in ast.walk(source.node):
            for name, value in _global_refs(node, local, scope):
                if isinstance(value, language.DeviceFunction):
                    if value not in functions:
                        functions[value] = None
                        scan(value.fn)
                elif is_cache_constant(value):
                    constants[name] = unwrap_constexpr(value)

    scan(fn)
    return Dependencies(tuple(functions), constants)


def _global_refs(node: ast.AST, local: set, globals_: dict):
    """(qualified name, value) of the global ``node`` names: ``X``, ``module.X`` or
    ``Class.X``."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local \
            and node.id in globals_:
        yield node.id, globals_[node.id]
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id not in local and node.value.id in globals_:
        namespace = globals_[node.value.id]
        qualified = namespace_name(namespace)
        if qualified is not None and hasattr(namespace, node.attr):
            yield f"{qualified}.{node.attr}", getattr(namespace, node.attr)
