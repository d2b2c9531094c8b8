"""Triton's names and idioms in tilejit: the one table the errors for Triton habits read
(``tj.load``, ``tl.dot``, ``x_ptr + offs``), so that they name the tilejit spelling.

``TRITON_NAMES`` maps a ``triton.language`` name to its tilejit spelling. An entry whose
tilejit name does not exist (yet) gives its ``otherwise`` spelling, built from names that
do. docs/triton-to-tilejit.md is the same table for readers.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from . import language

__all__ = ["TRITON_NAMES", "TritonName", "not_a_pointer", "undefined_name_hint",
           "unknown_attribute"]


@dataclass(frozen=True)
class TritonName:
    use: str                # the tilejit spelling, e.g. "tj.gemm(acc, a, b)"
    needs: str | None = None  # the tj name `use` relies on, when it may not exist yet
    otherwise: str = ""     # the spelling with today's names when `needs` does not exist


_LOAD = ("slice the tensor and copy into a tile: a = tj.fragment((BLOCK,), x.dtype); "
         "tj.copy(a, x[base:base + BLOCK], mask=offs < n, other=0.0) (tensors are sliced, not "
         "pointers)")
_FILL = "a = tj.fragment(shape, dtype); tj.fill(a, value)"

TRITON_NAMES: dict[str, TritonName] = {
    "program_id": TritonName("tj.program_id(axis) (also tj.cta_id(axis))"),
    "num_programs": TritonName("tj.num_ctas(axis)"),
    "arange": TritonName("tj.arange(start, end)"),
    "load": TritonName(_LOAD),
    "store": TritonName("tj.copy(out[base:base + BLOCK], a, mask=offs < n) (a masked store "
                        "into a slice of the tensor)"),
    "make_block_ptr": TritonName("a region of the tensor: x[r:r + BM, c:c + BN]"),
    "advance": TritonName("a region with moved starts: x[r:r + BM, c + BN:c + 2 * BN]"),
    "where": TritonName("tj.where(cond, a, b)"),
    "dot": TritonName("tj.gemm(acc, a, b) (accumulates a @ b into the fragment acc)"),
    "sum": TritonName("tj.sum(x, axis)"),
    "max": TritonName("tj.max(x, axis) (tj.maximum(a, b) element by element)"),
    "min": TritonName("tj.min(x, axis) (tj.minimum(a, b) element by element)"),
    "argmax": TritonName("tj.argmax(x, axis)"),
    "cumsum": TritonName("tj.cumsum(x, axis)"),
    "exp": TritonName("tj.exp(x)"),
    "atomic_add": TritonName("tj.atomic_add(x[i], v), or tj.atomic_add(out[r:r + BM], tile) "
                             "for a tile"),
    "atomic_max": TritonName("tj.atomic_max(x[i], v)"),
    "atomic_cas": TritonName("tj.atomic_cas(x[i], cmp, val)"),
    "atomic_xchg": TritonName("tj.atomic_xchg(x[i], v)"),
    "rand": TritonName("tj.rand(seed, offsets)"),
    "randn": TritonName("tj.randn(seed, offsets)"),
    "zeros": TritonName("tj.zeros(shape, dtype)", "zeros", _FILL.replace("value", "0")),
    "zeros_like": TritonName("tj.zeros(x.shape, x.dtype)", "zeros",
                             "a = tj.fragment(x.shape, x.dtype); tj.fill(a, 0)"),
    "full": TritonName("tj.full(shape, value, dtype)", "full", _FILL),
    "trans": TritonName("tj.trans(x) (or x.T)", "trans",
                        "tj.gemm(..., transpose_a=True / transpose_b=True), or a copy into a "
                        "tile with a transposed layout"),
    "reshape": TritonName("tj.reshape(x, shape)", "reshape", "x.view(shape, layout=...)"),
    "broadcast_to": TritonName("tj.broadcast_to(x, shape)", "broadcast_to",
                               "operands broadcast by themselves, like numpy"),
    "expand_dims": TritonName("x[:, None]"),
    "cdiv": TritonName("tj.cdiv(a, b)"),
    "static_range": TritonName("tj.static_range(n)"),
    "debug_barrier": TritonName("tj.sync()"),
    "device_print": TritonName("tj.device_print(fmt, *args)"),
    "static_print": TritonName("print() outside the kernel, or tj.static_assert"),
    "constexpr": TritonName("tj.constexpr"),
    "autotune": TritonName("@tj.autotune(configs=[tj.Config({...}, num_warps=4)], key=[...])"),
    "jit": TritonName("@tj.kernel (and @tj.func for device functions)"),
    "do_bench": TritonName("tj.testing.do_bench(fn)"),
}


def _spelling(entry: TritonName) -> str:
    if entry.needs is None or hasattr(language, entry.needs):
        return entry.use
    return entry.otherwise


def _is_tilejit(module) -> bool:
    return module is language or getattr(module, "__name__", None) == "tilejit"


def _is_triton(module) -> bool:
    name = getattr(module, "__name__", "")
    return isinstance(name, str) and (name == "triton" or name.startswith("triton."))


def unknown_attribute(module, name: str) -> str | None:
    """The message for ``tj.<name>`` or ``tl.<name>`` that does not exist; None for other
    objects (their AttributeError says enough)."""
    if _is_tilejit(module):
        prefix = f"tj.{name} does not exist"
    elif _is_triton(module):
        prefix = f"tl.{name} is Triton's, which a tilejit kernel does not run"
    else:
        return None
    entry = TRITON_NAMES.get(name)
    if entry is not None:
        return f"{prefix}; in tilejit: {_spelling(entry)} (docs/triton-to-tilejit.md)"
    close = difflib.get_close_matches(name, language.__all__, n=3)
    hint = f"; did you mean {', '.join('tj.' + c for c in close)}?" if close else ""
    return f"{prefix}{hint} (the kernel language: docs/language.md)"


def undefined_name_hint(name: str) -> str:
    """What to add to "name 'tl' is not defined" for a Triton habit."""
    if name in ("tl", "triton"):
        return ("; tilejit kernels use `import tilejit as tj` and tj.* names "
                "(docs/triton-to-tilejit.md)")
    return ""


def not_a_pointer(tensor_name: str) -> str:
    """The message for ``x_ptr + offs``: a tensor is not a pointer."""
    x = tensor_name or "x"
    return (f"tensors are not pointers: {x} + offset has no meaning in tilejit; slice the "
            f"tensor instead, {x}[base:base + BLOCK] (a region a tile primitive reads or "
            f"writes, masked past its end), or read one element with {x}[i]")
