"""The launcher generated once per kernel, and what it finds for a known signature.

``generate_launcher(kernel)`` writes a Python function with the kernel's own parameters
(plus keyword-only launch options): it reads each argument's facts (inlined for torch
tensors), looks the signatures up in ``kernel._fast`` and calls the backend with the launch
records; a miss goes to ``kernel._miss``. ``FastEntry`` is what a hit finds.
"""
from __future__ import annotations

import ast
import functools
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from ..ir.types import ScalarType
from ..knobs import knobs
from . import arguments

LAUNCH_OPTIONS = ("num_warps", "cluster", "stream", "target", "arch", "simt")
DEFAULT_NUM_WARPS = 4
DEFAULT_CLUSTER = (1, 1, 1)
PREFIX = "_tj_"   # names of the generated launcher's own locals and globals
MISSING = object()   # a required argument the call did not give
# Constexpr values whose (type, value) pair is already an exact dict key.
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None), ScalarType})


class FastEntry:
    """What a launch needs once its signature is found: the two backend calls, and the
    module-level values the code was compiled with (``watch``) to notice a changed one.
    The calls are bound to ``bound``, the arguments of the launch that found the signature
    missing: what the signature fixes about them (the device of CUDA tensors) holds for
    every launch that finds it."""

    __slots__ = ("compiled", "watch", "launch", "launch_on_stream")

    def __init__(self, compiled, watch: tuple, candidates: tuple[str, ...], bound: dict):
        self.compiled, self.watch = compiled, watch
        launch, launch_on_stream = compiled.launchers_for(bound)
        if compiled.runtime_params != candidates:
            # A tj.constexpr value passed for an ordinary parameter was compiled in: drop it.
            keep = [i for i, n in enumerate(candidates) if n in compiled.runtime_params]
            launch = functools.partial(_select_records, launch, keep)
            launch_on_stream = functools.partial(_select_records, launch_on_stream, keep)
        self.launch, self.launch_on_stream = launch, launch_on_stream

    def is_stale(self) -> bool:
        for read, compiled_with in self.watch:
            now = read()
            if now is not compiled_with and arguments.exact(now) != arguments.exact(compiled_with):
                return True
        return False


def _select_records(launch: Callable, keep: list[int], grid, records: tuple, *stream) -> None:
    launch(grid, tuple(records[i] for i in keep), *stream)


def generate_launcher(kernel) -> Callable:
    """``launch(grid, <the kernel's parameters>, *, <launch options>)`` for this kernel.

    Required parameters default to a marker and surplus arguments are collected, so that a
    call that does not bind reaches ``Kernel._bad_call`` (a LaunchError) instead of raising
    Python's TypeError. (Passing one argument both by position and by keyword is still
    Python's TypeError, naming the kernel and the argument.)
    """
    # Named after the kernel for tracebacks, unless the launcher reads a global of that name.
    function = kernel.__name__
    if not function.isidentifier() or function in reserved_names(kernel):
        function = "_tj_kernel"
    source, namespace = _launcher_source(kernel, kernel.arg_names, function)
    namespace["__name__"] = kernel.fn.__module__
    exec(compile(source, f"<tilejit launcher of {kernel.__qualname__}>", "exec"), namespace)
    return namespace[function]


def reserved_names(kernel) -> frozenset[str]:
    """The names the generated launcher uses besides the kernel's parameters: its globals,
    its locals, its launch options and the builtins it calls. A kernel parameter so named
    would shadow one of them. Read off the launcher's own text, written with stand-ins for
    the parameters (they carry ``PREFIX``, which no parameter may).

    That text depends on the parameters only through which are constexprs and which have
    defaults: the names are remembered per that pattern (parsing costs a millisecond, and
    every decoration asks)."""
    pattern = tuple((n in kernel.constexprs, n in kernel.defaults) for n in kernel.arg_names)
    reserved = _RESERVED.get(pattern)
    if reserved is None:
        stand_ins = [f"{PREFIX}parameter{i}" for i in range(len(pattern))]
        source, namespace = _launcher_source(kernel, stand_ins, "_tj_kernel")
        used = set(namespace)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.arg):
                used.add(node.arg)
        reserved = _RESERVED[pattern] = frozenset(used - set(stand_ins))
    return reserved


_RESERVED: dict[tuple, frozenset[str]] = {}


def _launcher_source(kernel, spellings: list[str], function: str) -> tuple[str, dict[str, Any]]:
    """(source, namespace) of the launcher named ``function``, whose parameters are spelled
    ``spellings`` (the kernel's own names, or stand-ins for ``reserved_names``)."""
    names = kernel.arg_names
    namespace: dict[str, Any] = {
        "_tj_MISSING": MISSING, "_tj_bad_call": kernel._bad_call,
        "_tj_bad_argument": kernel._bad_argument,
        "_tj_facts": arguments.facts, "_tj_learn": arguments.facts_of,
        "_tj_exact": arguments.exact, "_tj_plain": _PLAIN_TYPES,
        "_tj_grids": arguments.grids, "_tj_resolve_grid": kernel._resolve_grid,
        "_tj_fast": kernel._fast.get, "_tj_miss": kernel._miss, "_tj_hits": kernel._fast_hits,
        "_tj_overrides": knobs.overrides, "_tj_cluster": DEFAULT_CLUSTER,
        **arguments.TORCH_FACTS_GLOBALS,
    }
    # The knobs a binary depends on: their raw environment text and any Python override are
    # part of the lookup, so changing one makes the next launch take the slow path.
    knob_reads = []
    for i, knob in enumerate(("target", "debug", "bounds_check", "always_compile", "simt")):
        namespace[f"_tj_env{i}"], namespace[f"_tj_envkey{i}"] = knobs.raw_lookup(knob)
        knob_reads.append(f"_tj_env{i}(_tj_envkey{i})")
    # Plain torch tensors get their facts inline; other arguments through arguments.facts.
    torch = sys.modules.get("torch")
    namespace["_tj_Tensor"] = torch.Tensor if torch is not None else MISSING
    params, signature_parts, fact_lines, records = [], [], [], []
    for i, (name, spelled) in enumerate(zip(names, spellings)):
        namespace[f"_tj_default{i}"] = kernel.defaults.get(name, MISSING)
        params.append(f"{spelled}=_tj_default{i}")
        if name in kernel.constexprs:
            signature_parts.append(f"{spelled}.__class__, {spelled} if {spelled}.__class__ in "
                                   f"_tj_plain else _tj_exact({spelled})")
        else:
            fact_lines += [
                f"if {spelled}.__class__ is _tj_Tensor:",
                arguments.torch_facts_code(spelled, f"_tj_s{i}", f"_tj_r{i}", "    "),
                "else:",
                f"    _tj_s{i}, _tj_r{i} = _tj_facts({spelled}.__class__, _tj_learn)({spelled})"]
            signature_parts.append(f"_tj_s{i}")
            records.append(f"_tj_r{i}")
    required = [s for n, s in zip(names, spellings) if n not in kernel.defaults]
    unbound = " or ".join(["_tj_extra", "_tj_unknown", *(f"{s} is _tj_MISSING" for s in required)])
    pairs = [f"{n!r}: {s}" for n, s in zip(names, spellings)]
    bound = ", ".join(pairs)
    meta = ", ".join([*pairs, *(f"{n!r}: {n}" for n in LAUNCH_OPTIONS)])
    values = "".join(f"{s}, " for s in spellings)
    facts = textwrap.indent("\n".join(fact_lines or ["pass"]), " " * 8).lstrip()
    records = "".join(f"{r}, " for r in records)
    source = f"""
def {function}({', '.join(['_tj_grid', *params])}, *_tj_extra,
        num_warps={DEFAULT_NUM_WARPS}, cluster=_tj_cluster, stream=None, target=None, arch=None,
        simt=None, **_tj_unknown):
    if {unbound}:
        _tj_bad_call(_tj_extra, _tj_unknown, {{{bound}}})
    try:
        _tj_grid3 = _tj_grids(_tj_grid)
    except TypeError:   # a list
        _tj_grid3 = None
    if _tj_grid3 is None:
        _tj_grid3 = _tj_resolve_grid(_tj_grid, {{{meta}}})
    try:
        {facts}
    except Exception as _tj_error:   # e.g. a sparse tensor: no strides, no data pointer
        _tj_bad_argument(_tj_error, {{{bound}}})
    _tj_key = ({', '.join(knob_reads)}, len(_tj_overrides) and tuple(_tj_overrides.items()),
               target, arch, simt, num_warps, cluster, {', '.join(signature_parts)})
    try:
        _tj_entry = _tj_fast(_tj_key)
    except TypeError:   # an unhashable constexpr or option: looked up the slow way
        _tj_entry = None
    if _tj_entry is None or _tj_entry.watch and _tj_entry.is_stale():
        _tj_entry = _tj_miss(_tj_key, ({values}), num_warps, cluster, target, arch, simt)
    else:
        _tj_hits[0] += 1
    if stream is None:
        return _tj_entry.launch(_tj_grid3, ({records}))
    return _tj_entry.launch_on_stream(_tj_grid3, ({records}), stream)
"""
    return source, namespace
