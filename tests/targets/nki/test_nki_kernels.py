"""The kernels of ``tilejit/kernels/`` on the nki target: attention forward over several
key blocks (online softmax) run on the NKI reference against torch and on the CPU, the
lines that matter, and the source sizes docs/nki.md records beside the paper's."""
import ast
import importlib
import importlib.util
import inspect
import io
import math
import tokenize

import numpy as np
import pytest
import torch

import tilejit as tj
from tilejit import kernels

reference = pytest.importorskip(
    "nki_reference", reason="the NKI reference (tests/targets/nki/nki_reference.py) is absent")
nki_lint = pytest.importorskip("nki_lint", reason="the NKI subset lint is absent")

H, S, D = 2, 384, 64


def spec(*shape):
    return tj.TensorSpec(shape, tj.float32)


@pytest.fixture(scope="module")
def attention():
    qkv = spec(H, S, D)
    return kernels.attention.compile(qkv, qkv, qkv, qkv, H=H, S=S, D=D,
                                     scale=1 / math.sqrt(D), target="nki")


def qkv(seed, spread=1.0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((H, S, D), dtype=np.float32) * spread for _ in range(3)]


def torch_attention(q, k, v, causal=False):
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()


def test_attention_walks_the_key_blocks_in_order(attention):
    body = [line.strip() for line in attention.asm["nki"].splitlines()]
    loops = [line for line in body if line.startswith("for ")]
    # heads and query blocks share nothing (their tiles are allocated inside them); the key
    # loop carries the running max, sum and output
    assert loops == ["for h in nl.affine_range(2):", "for i in nl.affine_range(3):",
                     "for j in nl.sequential_range(3):"]
    # the running max rescales the row sum and the output before this block adds to them
    calls = [line for line in body if line.startswith("nisa.")]
    rescale = ["nisa.tensor_tensor(dst=rescale, data1=m, data2=m_new, op=nl.subtract)",
               "nisa.activation(dst=rescale, op=nl.exp, data=rescale)"]
    assert calls[calls.index(rescale[0]) + 1] == rescale[1]
    assert "nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=rescale)" in body
    # P turned onto the key partitions, then accumulated into o (accum=True)
    at = calls.index("nisa.nc_transpose(dst=transposed_2, data=s)")
    assert calls[at + 1:at + 4] == [
        "nisa.tensor_copy(dst=p_t, src=transposed_2)",
        "nisa.nc_matmul(dst=acc_1, stationary=p_t, moving=V)",
        "nisa.tensor_tensor(dst=o, data1=o, data2=acc_1, op=nl.add)"]
    assert nki_lint.lint(attention.asm["nki"]) == []


@pytest.mark.parametrize("seed, spread", [(0, 1.0), (1, 3.0)])
def test_attention_runs_on_the_reference_as_torch_computes_it(attention, seed, spread):
    """spread 3 makes later key blocks raise the row max, so the rescaling matters."""
    q, k, v = qkv(seed, spread)
    out = reference.run(attention.asm["nki"], "attention", q, k, v, seed=seed,
                        strict_reads=True)
    np.testing.assert_allclose(out, torch_attention(q, k, v), rtol=1e-4, atol=1e-4)


def test_causal_attention_masks_each_block_at_its_offsets_on_the_reference():
    qkv_spec = spec(H, S, D)
    compiled = kernels.attention.compile(qkv_spec, qkv_spec, qkv_spec, qkv_spec, H=H, S=S,
                                         D=D, scale=1 / math.sqrt(D), causal=True,
                                         target="nki")
    assert ("nisa.affine_select(dst=s, pattern=[[-1, 128]], channel_multiplier=1, "
            "on_true_tile=s, on_false_value=-30000.0, cmp_op=nl.greater_equal, "
            "offset=i * 128 - j * 128)") in [line.strip() for line in
                                              compiled.asm["nki"].splitlines()]
    q, k, v = qkv(3)
    out = reference.run(compiled.asm["nki"], "attention", q, k, v, seed=3, strict_reads=True)
    np.testing.assert_allclose(out, torch_attention(q, k, v, causal=True), rtol=1e-4,
                               atol=1e-4)


def test_attention_runs_on_the_cpu():
    q, k, v = qkv(2)
    out = torch.zeros(H, S, D)
    kernels.attention[(1,)](*(torch.from_numpy(x) for x in (q, k, v)), out, H=H, S=S, D=D,
                            scale=1 / math.sqrt(D), num_warps=1)
    np.testing.assert_allclose(out.numpy(), torch_attention(q, k, v), rtol=1e-4, atol=1e-5)
    kernels.attention[(1,)](*(torch.from_numpy(x) for x in (q, k, v)), out, H=H, S=S, D=D,
                            scale=1 / math.sqrt(D), causal=True, num_warps=1)
    np.testing.assert_allclose(out.numpy(), torch_attention(q, k, v, causal=True), rtol=1e-4,
                               atol=1e-5)


def code_lines(name: str) -> int:
    """Lines of module ``tilejit.kernels.<name>`` holding code: not blank, not only a
    comment, not a docstring."""
    source = inspect.getsource(importlib.import_module(f"tilejit.kernels.{name}"))
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER):
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


# (module, its code lines as docs/nki.md records them, the paper's hand-written NKI)
@pytest.mark.parametrize("module, lines, hand_written", [("nki_gemm", 15, 120),
                                                        ("attention", 51, 1188)])
def test_the_kernels_are_as_long_as_docs_nki_says(module, lines, hand_written):
    assert code_lines(module) == lines < hand_written


def test_code_lines_leaves_out_docstrings_and_comments():
    assert code_lines("softmax") == 15
    assert code_lines("rmsnorm") == 19


def emitted_cases():
    """(kernel name, its emitted module, inputs, torch's answer) for every kernel here."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((512, 1024), dtype=np.float32), rng.standard_normal(
        (1024, 256), dtype=np.float32)
    x, w = rng.standard_normal((256, 96), dtype=np.float32), rng.standard_normal(
        96, dtype=np.float32)
    rows = np.broadcast_to(w, (128, 96)).copy()
    q, k, v = qkv(4)
    return [
        ("nki_gemm", kernels.nki_gemm.compile(spec(512, 1024), spec(1024, 256),
                                              spec(512, 256), target="nki"), (a, b), a @ b),
        ("softmax", kernels.softmax.compile(spec(256, 96), spec(256, 96), R=256, N=96,
                                            target="nki"),
         (x,), torch.softmax(torch.from_numpy(x), 1).numpy()),
        ("rmsnorm", kernels.rmsnorm.compile(spec(256, 96), spec(128, 96), spec(256, 96),
                                            R=256, N=96, target="nki"),
         (x, rows), x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w),
        ("attention", kernels.attention.compile(spec(H, S, D), spec(H, S, D), spec(H, S, D),
                                                spec(H, S, D), H=H, S=S, D=D,
                                                scale=1 / math.sqrt(D), target="nki"),
         (q, k, v), torch_attention(q, k, v)),
    ]


def test_every_emitted_kernel_runs_on_the_reference_as_torch_computes_it():
    for name, compiled, inputs, want in emitted_cases():
        out = reference.run(compiled.asm["nki"], name, *inputs, strict_reads=True)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3, err_msg=name)


def test_every_emitted_kernel_on_the_nki_simulator(tmp_path):
    """On a Neuron machine: nki.simulate gives torch's answer for the emitted modules too."""
    # nki.language, not nki: under pytest a test directory named nki is importable as a
    # namespace package called nki
    pytest.importorskip("nki.language")
    import nki
    for name, compiled, inputs, want in emitted_cases():
        path = tmp_path / f"{name}_nki.py"            # nki.jit reads the kernel's source file
        path.write_text(compiled.asm["nki"])
        spec_ = importlib.util.spec_from_file_location(f"{name}_nki", path)
        module = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(module)
        out = nki.simulate(getattr(module, name))(*inputs)
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-3, atol=1e-3,
                                   err_msg=name)
