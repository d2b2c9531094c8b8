"""The NKI lint (nki_lint.py) passes the hand-written modules of the contract and locates
each construct outside the NKI subset by line."""
import pytest
from nki_kernels import (ATTENTION, BODY_LINE, CAUSAL_T, RMSNORM, SOFTMAX, gemm, module,
                         prefix_blocks)
from nki_lint import lint


@pytest.mark.parametrize("source", [gemm(), gemm("bfloat16", "k != 0", "sequential_range"),
                                    SOFTMAX, RMSNORM, CAUSAL_T, ATTENTION,
                                    prefix_blocks("sequential_range")])
def test_contract_modules_are_clean(source):
    assert lint(source) == []


def lines(problems, text):
    return [p.line for p in problems if text in p.message]


def test_refused_statements_are_located():
    src = module("""
        try:
            t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        except ValueError:
            pass
        while True:
            break
        f = lambda v: v
        with open("f") as fh:
            pass
        out = [i for i in range(3)]
    """)
    problems = lint(src)
    assert lines(problems, "try/except") == [BODY_LINE]
    assert lines(problems, "while loops") == [BODY_LINE + 4]
    assert lines(problems, "lambdas") == [BODY_LINE + 6]
    assert lines(problems, "with blocks") == [BODY_LINE + 7]
    assert lines(problems, "comprehensions") == [BODY_LINE + 9]
    assert lines(problems, "call of 'open'") == [BODY_LINE + 7]


def test_imports_decorators_classes_and_closures():
    src = ("import os\nimport nki\nimport nki.language as lang\nfrom nki import isa\n\n"
           "class Tile:\n    pass\n\n@other\ndef k(x):\n    def inner():\n        pass\n"
           "    return x\n")
    problems = lint(src)
    assert lines(problems, "import of 'os'") == [1]
    assert lines(problems, "the contract spells it as nl") == [3]
    assert lines(problems, "'from ... import'") == [4]
    assert lines(problems, "module-level ClassDef") == [6]
    assert lines(problems, "decorator 'other'") == [9]
    assert lines(problems, "nested functions") == [11]
    assert lines(problems, "no @nki.jit kernel") == [1]


def test_control_flow_and_indices_on_tensor_data():
    src = module("""
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        if x.shape[0] > 4:
            pass
        if t:
            pass
        for i in nl.affine_range(x):
            pass
        u = x[t:8, 0:8]
        v = x[0:8:2, 0:8]
        w = x[..., 0]
        for j in [1, 2]:
            pass
    """)
    problems = lint(src)
    assert lines(problems, "a condition reads tensor 't'") == [BODY_LINE + 3]
    assert lines(problems, "a loop bound reads tensor 'x'") == [BODY_LINE + 5]
    assert lines(problems, "an index reads tensor 't'") == [BODY_LINE + 7]
    assert lines(problems, "stepped slices") == [BODY_LINE + 8]
    assert lines(problems, "'...' indexing") == [BODY_LINE + 9]
    assert lines(problems, "for loops iterate") == [BODY_LINE + 10]
    assert BODY_LINE + 1 not in lines(problems, "reads tensor")   # .shape is static


def test_calls_outside_the_reference_subset():
    src = module("""
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(t, x)
        a = nl.arange(8)
        nisa.dma_transpose(dst=t, src=x)
        import numpy
        numpy.zeros(3)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, oprand0=1.0)
    """)
    problems = lint(src)
    assert lines(problems, "pass every argument by keyword") == [BODY_LINE + 1]
    assert lines(problems, "nl.arange is not in the reference's subset") == [BODY_LINE + 2]
    assert lines(problems, "nisa.dma_transpose is not in") == [BODY_LINE + 3]
    assert lines(problems, "imports belong at module level") == [BODY_LINE + 4]
    assert lines(problems, "call of 'numpy.zeros'") == [BODY_LINE + 5]
    assert lines(problems, "has no argument 'oprand0'") == [BODY_LINE + 6]
    assert lines(problems, "needs operand0=") == [BODY_LINE + 6]


def test_syntax_error_is_one_problem():
    [problem] = lint("def k(:\n")
    assert problem.line == 1 and "syntax error" in problem.message


def test_program_ids_are_static_indices():
    src = module("""
        out = nl.ndarray((256, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        r0 = nl.program_id(0) * 128
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r0:r0 + 128, 0:8])
        nisa.dma_copy(dst=out[nl.program_id(0) * 128:nl.program_id(0) * 128 + 128, 0:8], src=t)
        return out
    """)
    assert lint(src) == []
