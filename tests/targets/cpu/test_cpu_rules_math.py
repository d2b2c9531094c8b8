"""The CPU ``poly`` family: exp, exp2 and log as range reduction + polynomial, vectorized
by LLVM. Checked in ulps against float64 references over the whole f32 range (special
values, subnormal results and inputs, overflow), with tiles whose length is not a multiple
of the vector width, masked global tiles, and the declines that keep the libm path."""
import numpy as np
import pytest
import torch
from rule_kernels import fresh_cache, host_assembly, records, unary_global, unary_tile  # noqa: F401

import tilejit as tj
from tilejit.targets import cpu

REFERENCE = {"exp": np.exp, "exp2": np.exp2, "log": np.log}
MAX_ULPS = 2


def _inputs(op: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-45, 1e-40,
               1.1754944e-38, 3.4028235e38, 88.7, 88.72, 88.73, 89.0, -87.3, -88.0, -100.0,
               -103.0, -103.9, -104.0, -126.0, -140.0, -149.0, -149.5, -150.0, 127.9, 128.0,
               0.34657, -0.34657, 1e-7, -1e-7]
    if op == "log":
        wide = np.exp(rng.uniform(-103, 88.7, 3000))
        near_one = 1 + rng.uniform(-0.3, 0.3, 500)
        values = np.concatenate([special, wide, near_one, -wide[:20]])
    else:
        span = 150 if op == "exp2" else 104
        values = np.concatenate([special, rng.uniform(-span, span, 3000),
                                 rng.standard_normal(500) * 4])
    return values.astype(np.float32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in units of the last place of the correctly rounded f32 result."""
    rounded = want.astype(np.float32)
    spacing = np.spacing(np.abs(rounded)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


@pytest.mark.parametrize("op", ["exp", "exp2", "log"])
def test_poly_is_within_two_ulps_and_exact_on_special_values(op):
    x = torch.from_numpy(_inputs(op))
    n = x.numel()
    block = 1000                        # 62 vectors of 16 and a tail of 8; the last tile masked
    out = torch.empty_like(x)
    compiled = unary_tile.warmup(x, out, OP=op, BLOCK=block, DTYPE=tj.float32)
    unary_tile[(tj.cdiv(n, block),)](x, out, OP=op, BLOCK=block, DTYPE=tj.float32)
    (record,) = records(compiled, "pointwise")
    assert record.rule == "poly"
    with np.errstate(all="ignore"):
        want = REFERENCE[op](x.numpy().astype(np.float64))
        rounded = want.astype(np.float32)          # overflows to inf where f32 does
    got = out.numpy()
    finite = np.isfinite(rounded)
    np.testing.assert_array_equal(got[~finite], rounded[~finite])
    ulps = _ulps(got[finite], want[finite])
    worst = int(np.argmax(ulps))
    assert ulps[worst] <= MAX_ULPS, (x.numpy()[finite][worst], got[finite][worst],
                                     want[finite][worst])


@pytest.mark.parametrize("op", ["exp", "log"])
def test_poly_reads_a_masked_global_tile(op):
    """OP(x) into a fragment copied out: fuse-pointwise makes it one op between tensors,
    which the stream family runs with the polynomials (no libm call left)."""
    x = torch.rand(1234) * 10 + 0.01
    out = torch.empty_like(x)
    compiled = unary_global.warmup(x, out, OP=op, BLOCK=128)
    unary_global[(tj.cdiv(1234, 128),)](x, out, OP=op, BLOCK=128)
    assert [r.rule for r in records(compiled, "pointwise")] == ["stream"]
    assert f"{op}f" not in host_assembly(compiled)
    torch.testing.assert_close(out, getattr(torch, op)(x), rtol=3e-7, atol=0)


def test_half_precision_keeps_the_libm_path_with_the_reason():
    x = torch.randn(300)
    out = torch.empty_like(x)
    compiled = unary_tile.warmup(x, out, OP="exp", BLOCK=100, DTYPE=tj.float16)
    unary_tile[(3,)](x, out, OP="exp", BLOCK=100, DTYPE=tj.float16)
    (record,) = records(compiled, "pointwise")
    assert record.rule == "vector"
    assert ("poly", "dst is f16: the polynomials are evaluated in f32") in record.rejected
    torch.testing.assert_close(out, torch.exp(x.half()).float(), rtol=1e-3, atol=1e-3)


def test_exp_is_vector_code_without_libm_calls():
    x, out = torch.randn(4096), torch.empty(4096)
    compiled = unary_tile.warmup(x, out, OP="exp", BLOCK=1024, DTYPE=tj.float32)
    assert "@expf" not in compiled.asm["llir"] and "@llvm.exp." not in compiled.asm["llir"]
    width = cpu.CONTEXT.vector_bytes // 4
    if width >= 8:
        register = "%zmm" if width == 16 else "%ymm"
        vector = [line for line in host_assembly(compiled).splitlines()
                  if register in line and ("vfmadd" in line or "vscalef" in line)]
        assert len(vector) >= 8


def test_ldexp_without_avx512_scales_in_two_exact_steps(monkeypatch):
    """Hosts without vscalefps: 2^n applied as two normal powers of two."""
    from tilejit.targets.cpu import emit_vector
    monkeypatch.setattr(emit_vector, "_has_scalef", lambda: False)
    unary_tile.clear_memory_cache()          # compile again (the disk cache is fresh)
    x = torch.from_numpy(_inputs("exp"))
    out = torch.empty_like(x)
    compiled = unary_tile.warmup(x, out, OP="exp", BLOCK=1000, DTYPE=tj.float32)
    assert "llvm.ldexp" not in compiled.asm["llir"]
    unary_tile[(tj.cdiv(x.numel(), 1000),)](x, out, OP="exp", BLOCK=1000, DTYPE=tj.float32)
    unary_tile.clear_memory_cache()
    with np.errstate(all="ignore"):
        want = np.exp(x.numpy().astype(np.float64))
        rounded = want.astype(np.float32)
    finite = np.isfinite(rounded)
    np.testing.assert_array_equal(out.numpy()[~finite], rounded[~finite])
    assert _ulps(out.numpy()[finite], want[finite]).max() <= MAX_ULPS
