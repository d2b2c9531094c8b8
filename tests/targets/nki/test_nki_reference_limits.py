"""The NKI reference's checks: affine_range and grid programs shuffled and checked for
carried dependences, and every documented limit refused with the call, the kernel line and
the limit."""
import numpy as np
import pytest
from nki_kernels import BODY_LINE, SOFTMAX, gemm, module, prefix_blocks
from nki_reference import NkiReferenceError, ReferenceRun, run

RNG = np.random.default_rng(150)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- loops

def test_affine_range_runs_shuffled_and_sequential_in_order():
    state = ReferenceRun("<nki:prefix_blocks>", seed=3, strict_reads=False)
    x = randn(128, 4 * 64)
    want = np.cumsum(x.reshape(128, 4, 64), axis=1).reshape(128, 256)
    right = run(prefix_blocks("sequential_range"), "prefix_blocks", x)
    np.testing.assert_allclose(right, want, rtol=1e-5, atol=1e-5)
    # The same loop falsely claimed free of carried dependences: the shuffle shows it.
    wrong = run(prefix_blocks("affine_range"), "prefix_blocks", x, state=state)
    assert state.affine_orders == [state.affine_orders[0]] and \
        state.affine_orders[0] != [0, 1, 2, 3]
    assert not np.allclose(wrong, want, atol=1e-3)


def test_matmul_accumulate_flag_on_first_k_is_order_dependent():
    a_t, b = randn(384, 64), randn(384, 64)
    ordered = run(gemm(accumulate="k != 0", k_loop="sequential_range"), "gemm", a_t, b)
    np.testing.assert_allclose(ordered, a_t.T @ b, rtol=1e-4, atol=1e-4)
    shuffled = run(gemm(accumulate="k != 0"), "gemm", a_t, b)
    assert not np.allclose(shuffled, a_t.T @ b, atol=1e-2)


HOISTED_SCRATCH = """
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for b in nl.LOOP(4):
        nisa.dma_copy(dst=t, src=x[0:128, b * 64:(b + 1) * 64])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[0:128, b * 64:(b + 1) * 64], src=t)
    return out
"""


def test_a_tile_shared_by_affine_iterations_is_a_carried_dependence():
    x = randn(128, 256)
    ok = run(module(HOISTED_SCRATCH.replace("LOOP", "sequential_range")), "k", x)
    np.testing.assert_allclose(ok, np.exp(x), rtol=1e-6)
    with pytest.raises(NkiReferenceError, match=r"nisa.dma_copy \(kernel line 11\): dst t: "
                       r"iteration \d of the nl.affine_range at kernel line 10 writes "
                       r"elements written by its iteration \d: a loop-carried dependence"):
        run(module(HOISTED_SCRATCH.replace("LOOP", "affine_range")), "k", x)


def test_affine_iterations_writing_one_output_element_collide():
    raises(r"nisa.dma_copy .*dst out: iteration . of the nl.affine_range .* writes elements", """
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=out, src=t)
        return out
    """, randn(8, 8))


def test_torch_inputs_including_bfloat16():
    torch = pytest.importorskip("torch")
    a_t = torch.randn(130, 70, dtype=torch.bfloat16)
    b = torch.randn(130, 90)
    out = run(gemm("bfloat16"), "gemm", a_t, b)
    want = (a_t.float().T @ b.bfloat16().float()).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


GRID_ROWS = """
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    rows = R // nl.num_programs(0)
    r0 = nl.program_id(0) * ROWS
    t = nl.ndarray((rows, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[r0:r0 + rows, 0:C])
    nisa.activation(dst=t, op=nl.square, data=t)
    nisa.dma_copy(dst=out[r0:r0 + rows, 0:C], src=t)
    return out
"""


def test_grid_programs_share_their_outputs():
    x = randn(384, 40)
    out = run(module(GRID_ROWS.replace("ROWS", "rows")), "k", x, grid=(3,))
    np.testing.assert_allclose(out, x * x, rtol=1e-6)
    with pytest.raises(NkiReferenceError, match=r"dst out: program \(\d,\) of the launch grid "
                       r"writes elements written by its program \(\d,\)"):
        run(module(GRID_ROWS.replace("ROWS", "0")), "k", x, grid=(3,))
    raises(r"nl.program_id .*axis 1 of a 1-D launch grid \(1,\)",
           "i = nl.program_id(1)", params="")


# ---------------------------------------------------------------- limits

def raises(match, body, *inputs, params="x", **kw):
    with pytest.raises(NkiReferenceError, match=match) as info:
        run(module(body, params), "k", *inputs, **kw)
    return info.value


def test_partition_axis_129():
    raises(r"nl.ndarray .*partition axis 129 > 128",
           "t = nl.ndarray((129, 4), dtype=nl.float32, buffer=nl.sbuf)", params="")


def test_moving_free_513():
    raises(r"nisa.nc_matmul .*moving free size 513 > 512", """
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((128, 513), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m)
    """, params="")


def test_stationary_free_and_contraction_limits():
    raises(r"stationary free size 129 > 128", """
        s = nl.ndarray((64, 129), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m)
    """, params="")
    raises(r"contraction \(partition\) sizes differ", """
        s = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m)
    """, params="")


def test_matmul_operands_from_hbm_and_dst_dtype():
    raises(r"stationary .* is in hbm; this instruction takes SBUF only", """
        m = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=x, moving=m)
    """, randn(8, 8))
    raises(r"dst must be float32, got bfloat16", """
        s = nl.ndarray((8, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        acc = nl.ndarray((8, 8), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=s)
    """, params="")


def test_psum_bank_overflow():
    raises(r"PSUM tile \(128, 4097\) float32 needs 9 bank\(s\) \(16388 B per partition\); "
           r"0 of 8", "acc = nl.ndarray((128, 4097), dtype=nl.float32, buffer=nl.psum)",
           params="")
    raises(r"PSUM tile \(128, 1024\) float32 needs 2 bank\(s\) .*; 7 of 8 banks live", """
        acc = nl.ndarray((128, 7, 512), dtype=nl.float32, buffer=nl.psum)
        more = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    """, params="")


def test_matmul_dst_inside_one_bank():
    body = """
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=s, value=1.0)
        m = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m, value=1.0)
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc[0:128, START:START + 512], stationary=s, moving=m)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc[0:128, START:START + 512])
        nisa.dma_copy(dst=out, src=res)
        return out
    """
    out = run(module(body.replace("START", "512"), params=""), "k")   # bank 1
    np.testing.assert_array_equal(out, np.full((128, 512), 128.0))
    raises(r"dst <psum acc \(128, 512\) float32> spans PSUM banks \[0, 1\]",
           body.replace("START", "256"), params="")


def test_psum_banks_are_released_when_tiles_die():
    run(module("""
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.sequential_range(20):
            acc = nl.ndarray((128, 4, 512), dtype=nl.float32, buffer=nl.psum)
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        nisa.dma_copy(dst=out, src=t)
        return out
    """, params=""), "k")


def test_sbuf_capacity():
    raises(r"SBUF tile \(128, 10000\) float32 needs 40000 B per partition; 160000 B live", """
        a = nl.ndarray((128, 40000), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 10000), dtype=nl.float32, buffer=nl.sbuf)
    """, params="")


def test_engines_do_not_touch_hbm_and_dma_does_not_touch_psum():
    raises(r"nisa.tensor_tensor .*data1 .* is in hbm", """
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=x, data2=t, op=nl.add)
    """, randn(8, 8))
    raises(r"nisa.dma_copy .*dst .* is in psum", """
        acc = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.dma_copy(dst=acc, src=x)
    """, randn(8, 8))


def test_matmul_onto_psum_written_by_memset_is_refused():
    raises(r"accumulates onto PSUM last written by a non-matmul", """
        s = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=s, value=1.0)
        acc = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=0.0)
        nisa.nc_matmul(dst=acc, stationary=s, moving=s)
    """, params="")


def test_static_bounds_on_views():
    raises(r"slice \[0:9\] out of bounds \[0, 8\]", "y = x[0:9, 0:8]", randn(8, 8))
    raises(r"integer index on the partition axis", """
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        u = t[3, 0:8]
    """, params="")


def test_uninitialized_reads_show_as_nan_or_raise():
    body = """
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:4], src=x[0:4])
        nisa.dma_copy(dst=out, src=t)
        return out
    """
    out = run(module(body), "k", randn(8, 8))
    assert np.isnan(out[4:]).all() and not np.isnan(out[:4]).any()
    raises(r"nisa.dma_copy .*src .* reads 32 element\(s\) never written", body, randn(8, 8),
           strict_reads=True)


def test_outputs_must_be_written_and_in_shared_hbm():
    raises(r"output 0 \(8, 8\): 32 element\(s\) never written", """
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0:4], src=x[0:4])
        return out
    """, randn(8, 8))
    raises(r"output 0 must be an nl.shared_hbm tensor, got sbuf", """
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        return t
    """, params="")


def test_error_names_the_kernel_line():
    err = raises(r"kernel line", """
        s = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_scalar(dst=acc, data=s, op0=nl.exp, operand0=1.0)
    """, params="")
    assert err.line == BODY_LINE + 2 and err.call == "nisa.tensor_scalar"
    assert "op0=nl.exp is not one of the supported alu/cmp operators" in str(err)


def test_fake_nki_modules_do_not_leak():
    import sys
    before = {n: sys.modules.get(n) for n in ("nki", "nki.language", "nki.isa")}
    run(SOFTMAX, "softmax", randn(4, 4))
    assert {n: sys.modules.get(n) for n in before} == before
