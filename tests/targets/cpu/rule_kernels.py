"""Kernels and helpers for the CPU family tests (``test_cpu_rules_*.py``): tilejit kernels
written with ``import tilejit as tj`` that exercise one primitive each, the dispatch
records of a compiled kernel, and the host assembly of its LLVM IR."""
from __future__ import annotations

import pathlib
import sys

import pytest

import tilejit as tj

_TESTS = str(pathlib.Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:  # support.tile_kernels: IR-level kernels for dispatch checks
    sys.path.insert(0, _TESTS)


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache: a stale entry would hide the rules."""
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    for name in ("TILEJIT_DUMP", "TILEJIT_TARGET", "TILEJIT_DEBUG", "TILEJIT_ALWAYS_COMPILE"):
        monkeypatch.delenv(name, raising=False)


@tj.kernel
def gemm_tile(A, B, C, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr,
              TA: tj.constexpr, TB: tj.constexpr, ACC: tj.constexpr, A_SCOPE: tj.constexpr,
              SHAPE: tj.constexpr):
    """One tile: C (+)= op(A) @ op(B) with A staged in shared memory (or a fragment), B in
    shared memory and C in a fragment; operands as stored (A is [K, M] when TA)."""
    if TA:
        a = tj.alloc_shared((K, M), A.dtype)
        tj.copy(a, A[0:K, 0:M])
    else:
        a = tj.alloc_shared((M, K), A.dtype)
        tj.copy(a, A[0:M, 0:K])
    if A_SCOPE == "fragment":
        if TA:
            a_frag = tj.fragment((K, M), A.dtype)
        else:
            a_frag = tj.fragment((M, K), A.dtype)
        tj.copy(a_frag, a)
        a = a_frag
    if TB:
        b = tj.alloc_shared((N, K), B.dtype)
        tj.copy(b, B[0:N, 0:K])
    else:
        b = tj.alloc_shared((K, N), B.dtype)
        tj.copy(b, B[0:K, 0:N])
    c = tj.fragment((M, N), C.dtype)
    tj.copy(c, C[0:M, 0:N])
    tj.gemm(c, a, b, transpose_a=TA, transpose_b=TB, accum=ACC, config={"shape": SHAPE})
    tj.copy(C[0:M, 0:N], c)


@tj.kernel
def row_reduce(x, out, OP: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr):
    """out[r] = OP over x[r, :] for the BM rows of each CTA (BN = the row length)."""
    row0 = tj.cta_id(0) * BM
    tile = tj.fragment((BM, BN), tj.float32)
    tj.copy(tile, x[row0:row0 + BM, 0:BN])
    red = tj.fragment((BM,), tj.float32)
    tj.reduce(red, tile, OP, axis=1)
    tj.copy(out[row0:row0 + BM], red)


@tj.kernel
def column_reduce(x, out, OP: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr):
    """out[c] = OP over x[:, c] (axis 0: not the contiguous one)."""
    tile = tj.fragment((BM, BN), tj.float32)
    tj.copy(tile, x[0:BM, 0:BN])
    red = tj.fragment((1, BN), tj.float32)
    tj.reduce(red, tile, OP, axis=0)
    tj.copy(out[0:1, 0:BN], red)


@tj.kernel
def unary_tile(x, out, OP: tj.constexpr, BLOCK: tj.constexpr, DTYPE: tj.constexpr):
    """out = OP(x) through fragments of DTYPE, BLOCK elements per CTA."""
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), DTYPE)
    tj.copy(a, x[base:base + BLOCK])
    if OP == "exp":
        tj.exp(a, a)
    elif OP == "exp2":
        tj.exp2(a, a)
    else:
        tj.log(a, a)
    tj.copy(out[base:base + BLOCK], a)


@tj.kernel
def unary_global(x, out, OP: tj.constexpr, BLOCK: tj.constexpr):
    """out = OP(x) straight from a global tile into a fragment (masked at the end)."""
    base = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), tj.float32)
    if OP == "exp":
        tj.exp(a, x[base:base + BLOCK])
    else:
        tj.log(a, x[base:base + BLOCK])
    tj.copy(out[base:base + BLOCK], a)


def records(compiled, primitive: str) -> list:
    """The dispatch records of ``primitive`` calls in a compiled kernel."""
    return [r for r in compiled.dispatch_log if r.primitive == primitive]


def host_assembly(compiled) -> str:
    """Host assembly of a compiled kernel's LLVM IR."""
    from tilejit.targets import cpu
    return cpu.CpuArtifact(compiled.asm["llir"], b"", meta={"opt_level": 3}).asm


@tj.kernel
def pointwise_global(x, y, out, OP: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr):
    """out = OP(x, y) on BM x BN tiles straight between global tensors (masked edges)."""
    r = tj.cta_id(0) * BM
    c = tj.cta_id(1) * BN
    if OP == "add":
        tj.add(out[r:r + BM, c:c + BN], x[r:r + BM, c:c + BN], y[r:r + BM, c:c + BN])
    elif OP == "maximum":
        tj.maximum(out[r:r + BM, c:c + BN], x[r:r + BM, c:c + BN], y[r:r + BM, c:c + BN])
    elif OP == "scale":
        tj.mul(out[r:r + BM, c:c + BN], x[r:r + BM, c:c + BN], 2.5)
    elif OP == "copy":
        tj.copy(out[r:r + BM, c:c + BN], x[r:r + BM, c:c + BN])
    else:  # a source that is a fragment: one global operand besides dst
        f = tj.fragment((BM, BN), y.dtype)
        tj.copy(f, y[r:r + BM, c:c + BN])
        tj.add(out[r:r + BM, c:c + BN], x[r:r + BM, c:c + BN], f)
