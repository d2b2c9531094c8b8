"""The CPU ``stream`` family: copy/pointwise straight between global tensors, each chunk
loaded whole before it is stored, so it vectorizes without aliasing facts. Checked against
torch with masked edge tiles, dtype conversion, scalars, in-place updates and the
declines that leave the ``vector`` family."""
import platform

import pytest
import torch
from rule_kernels import fresh_cache, host_assembly, pointwise_global, records  # noqa: F401

import tilejit as tj
from tilejit.targets import cpu

H, W, BM, BN = 37, 70, 16, 32                  # 3 x 3 tiles, the last row and column masked
GRID = (tj.cdiv(H, BM), tj.cdiv(W, BN))
EXPECTED = {"add": lambda x, y: x + y, "maximum": torch.maximum, "scale": lambda x, y: x * 2.5,
            "copy": lambda x, y: x, "mixed": lambda x, y: x + y}


@pytest.mark.parametrize("op", ["add", "maximum", "scale", "copy"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_stream_matches_torch_and_leaves_the_outside_alone(op, out_dtype):
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(H, W, generator=gen), torch.randn(H, W, generator=gen)
    out = torch.full((H + 1, W + 8), 7.0, dtype=out_dtype)
    view = out[:H, :W]                         # row stride W + 8: a strided output
    compiled = pointwise_global.warmup(x, y, view, OP=op, BM=BM, BN=BN)
    pointwise_global[GRID](x, y, view, OP=op, BM=BM, BN=BN)
    (record,) = [r for r in compiled.dispatch_log if r.line is not None][-1:]
    assert record.rule == "stream"
    # pointwise ops compute in the destination's dtype: sources are converted first
    torch.testing.assert_close(view, EXPECTED[op](x.to(out_dtype), y.to(out_dtype)))
    assert torch.all(out[H:, :] == 7.0) and torch.all(out[:, W:] == 7.0)


def test_in_place_update():
    x, y = torch.randn(H, W), torch.randn(H, W)
    expected = x + y
    pointwise_global[GRID](x, y, x, OP="add", BM=BM, BN=BN)
    torch.testing.assert_close(x, expected)


def test_one_global_source_stays_with_the_vector_family():
    x, y, out = torch.randn(H, W), torch.randn(H, W), torch.empty(H, W)
    compiled = pointwise_global.warmup(x, y, out, OP="mixed", BM=BM, BN=BN)
    pointwise_global[GRID](x, y, out, OP="mixed", BM=BM, BN=BN)
    add = records(compiled, "pointwise")[-1]
    assert add.rule == "stream"           # out and x are global: two global operands
    copy = records(compiled, "copy")[0]   # fragment <- global: private memory, no need
    assert copy.rule == "vector"
    assert "fewer than two operands in global memory" in dict(copy.rejected)["stream"]
    torch.testing.assert_close(out, x + y)


def test_vector_add_streams_vector_registers():
    from tilejit.examples import vector_add
    x, y, out = torch.randn(4096), torch.randn(4096), torch.empty(4096)
    compiled = vector_add.warmup(x, y, out, BLOCK=1024)
    width = cpu.CONTEXT.vector_bytes // 4
    if width >= 8:
        register = "%zmm" if width == 16 else "%ymm"
        adds = [line for line in host_assembly(compiled).splitlines()
                if "vaddps" in line and register in line]
        assert len(adds) >= 4


def test_streaming_stores_bypass_the_caches_and_keep_the_edges():
    from tilejit.examples import run_softmax, run_vector_add, vector_add
    n = 10_000                                       # the last tile masked
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n + 8,), 7.0)
    run_vector_add(x, y, out[:n], block=1024, cache="stream")
    torch.testing.assert_close(out[:n], x + y)
    assert torch.all(out[n:] == 7.0)
    compiled = vector_add.warmup(x, y, out[:n], BLOCK=1024, CACHE="stream")
    assert [r.rule for r in compiled.dispatch_log] == ["stream"]
    assert "!nontemporal" in compiled.asm["llir"]
    if platform.machine() in ("x86_64", "AMD64"):   # non-temporal moves, then a store fence
        asm = host_assembly(compiled)
        assert "movnt" in asm and "sfence" in asm
    s = torch.randn(7, 300)
    o = torch.empty_like(s)
    run_softmax(s, o, rows_per_cta=2, cache="stream")   # one global operand: dst
    torch.testing.assert_close(o, torch.softmax(s, 1), rtol=1e-5, atol=1e-6)


def test_an_unknown_cache_policy_is_declined_with_the_reason():
    from tilejit.examples import vector_add
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    compiled = vector_add.warmup(x, y, out, BLOCK=64, CACHE="evict_last")
    (record,) = compiled.dispatch_log
    assert record.rule == "vector"
    assert "config cache='evict_last' is not one of ('stream',)" in dict(record.rejected)["stream"]
