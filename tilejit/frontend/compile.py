"""``compile_to_ir``: a kernel function plus its launch signature to a ``KernelIR``.

Parameters become the kernel's IR parameters (tensors -> global buffers, scalars -> scalar
values) or compile-time values (``tj.constexpr`` parameters, constexprs given by the
runtime, defaults of parameters not passed). Launch options become kernel attributes.
"""
from __future__ import annotations

import inspect

from tilejit.errors import CompilationError, TilejitError, reraise_located
from tilejit.ir.builder import Builder
from tilejit.ir.core import KernelIR
from tilejit.ir.types import BufferType, MemScope, ScalarType, i32, i64
from tilejit.ir.verifier import verify
from tilejit.knobs import knobs

from .ast_walker import CodeGenerator
from .dependencies import Dependencies, is_constexpr_annotation, unwrap_constexpr
from .semantics import Semantics
from .signature import CONSTEXPR, TENSOR, ArgSpec, LaunchOptions
from .source import FunctionSource, function_source

__all__ = ["compile_to_ir", "compile_to_ir_with_deps"]


def compile_to_ir(fn, arg_specs: dict[str, ArgSpec] | None = None, constexprs: dict | None = None,
                  options: LaunchOptions | None = None) -> KernelIR:
    """Walk ``fn``'s source into a kernel (verified when ``TILEJIT_VERIFY`` is set).

    ``arg_specs`` maps parameter names to their ``ArgSpec``; ``constexprs`` maps names of
    compile-time parameters to values. Raises a located ``CompilationError`` (or subclass).
    """
    return compile_to_ir_with_deps(fn, arg_specs, constexprs, options)[0]


def compile_to_ir_with_deps(fn, arg_specs=None, constexprs=None,
                            options=None) -> tuple[KernelIR, Dependencies]:
    """Like ``compile_to_ir``, also returning the device functions inlined and the
    module-level constants read (for the runtime's cache key)."""
    fn = getattr(fn, "fn", fn)  # a @tj.kernel object keeps the Python function as .fn
    options = options or LaunchOptions()
    try:
        source = function_source(fn)
        kernel, gen = _generate(source, dict(arg_specs or {}), dict(constexprs or {}), options)
        if knobs.verify:
            verify(kernel)
    except TilejitError as err:
        reraise_located(err, None)
    except Exception as err:  # a compiler bug outside any statement (the walker wraps its own)
        raise CompilationError(f"internal compiler error: {type(err).__name__}: {err}") from None
    return kernel, Dependencies(tuple(gen.device_functions), dict(gen.globals_read))


def _generate(source: FunctionSource, arg_specs: dict, constexprs: dict, options: LaunchOptions):
    params, folded = _bind_parameters(source, arg_specs, constexprs)
    loc = source.loc(source.node)
    attrs = {"num_warps": options.num_warps, "cluster": options.cluster,
             "target": options.target, "arch": options.arch,
             "distribution": "per_thread" if options.simt else None,
             "auto_sync": options.auto_sync,
             "constexprs": {name: _attr_value(value) for name, value in folded.items()},
             "specialization": {name: spec.specialization for name, spec in params.items()
                                if spec.specialization}}
    kernel = KernelIR.new(source.name, list(params), [_param_type(s) for s in params.values()],
                          attrs, loc)
    builder = Builder(loc)
    index64 = any(spec.index64 for spec in params.values())
    gen = CodeGenerator(source, Semantics(builder, options,
                                          grid_index_type=i64 if index64 else i32))
    for name, value in folded.items():
        gen.bind(name, value)
    for param in kernel.params:
        gen.bind(param.name_hint, param)
    with builder.insert_into(kernel.body):
        gen.visit_stmts(source.node.body)
    return kernel, gen


def _bind_parameters(source: FunctionSource, arg_specs: dict, constexprs: dict):
    """(run-time parameter name -> ArgSpec, compile-time parameter name -> value)."""
    fn, signature = source.fn, inspect.signature(source.fn)
    arg_nodes = {a.arg: a for a in source.node.args.args + source.node.args.kwonlyargs}
    unknown = sorted((set(arg_specs) | set(constexprs)) - set(signature.parameters))
    if unknown:
        raise CompilationError(f"kernel {fn.__name__} has no parameter(s) {', '.join(unknown)}",
                               source.loc(source.node))
    params, folded = {}, {}
    for name, param in signature.parameters.items():
        where = source.loc(arg_nodes[name]) if name in arg_nodes else source.loc(source.node)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise CompilationError("*args and **kwargs are not supported in kernel signatures",
                                   where)
        spec = arg_specs.get(name)
        if name in constexprs:
            folded[name] = constexprs[name]
        elif spec is not None and spec.kind == CONSTEXPR:
            folded[name] = spec.value
        elif spec is not None:
            if is_constexpr_annotation(param.annotation, fn.__globals__):
                raise CompilationError(f"parameter '{name}' is a tj.constexpr but was passed as a "
                                       f"run-time {spec.kind}", where)
            params[name] = spec
        elif param.default is not param.empty:
            folded[name] = param.default
        else:
            raise CompilationError(f"no value for parameter '{name}' of kernel {fn.__name__}",
                                   where)
    return params, {name: unwrap_constexpr(value) for name, value in folded.items()}


def _param_type(spec: ArgSpec):
    if spec.kind != TENSOR:
        return spec.dtype
    shape = spec.shape or (None,) * spec.rank
    strides = (None,) * spec.rank
    if spec.unit_stride and spec.rank:
        strides = strides[:-1] + (1,)
    return BufferType(spec.dtype, shape, MemScope.GLOBAL, strides=strides)


def _attr_value(value):
    """A constexpr as the kernel's ``constexprs`` attribute can hold it (else its text)."""
    if value is None or isinstance(value, (bool, int, float, str, ScalarType)):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_attr_value(v) for v in value)
    return str(value)
