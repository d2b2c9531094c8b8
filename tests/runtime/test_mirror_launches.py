"""The machinery of ``pytest --cuda-run`` (tests/support/cuda_run.py), tested on the CPU: a
launch is run again on copies of its tensors with other launch options, and what each wrote
is compared -- here the mirror is the CPU itself (per thread, or with a changed constexpr to
make a disagreement), on a GPU machine it is the cuda target."""
import pytest
import torch
from support import cuda_run

import tilejit as tj
from tilejit.runtime.jit import Kernel


@tj.kernel
def scaled_add(x, y, out, n, SCALE: tj.constexpr, BLOCK: tj.constexpr):
    start = tj.cta_id(0) * BLOCK
    a = tj.fragment((BLOCK,), x.dtype)
    b = tj.fragment((BLOCK,), y.dtype)
    tj.copy(a, x[start:start + BLOCK])
    tj.copy(b, y[start:start + BLOCK])
    tj.copy(out[start:start + BLOCK], a * SCALE + b)


@pytest.fixture
def mirror(request, monkeypatch):
    made = cuda_run.Mirror("cpu", request.param, lambda: None)
    monkeypatch.setattr(Kernel, "__getitem__",
                        cuda_run.mirrored_getitem(made, Kernel.__getitem__))
    return made


def launch(n=300, scale=2.0, dtype=torch.float32):
    x, y = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    out = torch.zeros(n, dtype=dtype)
    scaled_add[(-(-n // 128),)](x, y, out, n, SCALE=scale, BLOCK=128)
    return x, y, out


@pytest.mark.parametrize("mirror", [{"simt": True}], indirect=True)
def test_a_launch_is_repeated_and_agrees(mirror):
    x, y, out = launch()
    torch.testing.assert_close(out, x * 2 + y)
    assert mirror.compared == 1 and not mirror.failures and not mirror.refused


@pytest.mark.parametrize("mirror", [{"SCALE": 3.0}], indirect=True)
def test_a_disagreement_names_the_kernel_and_the_tensor(mirror):
    launch()
    (failure,) = mirror.failures
    assert failure.startswith("scaled_add[(3,)]: tensor argument 2: Tensor-likes are not close")


@pytest.mark.parametrize("mirror", [{"target": "nki"}], indirect=True)
def test_a_target_that_refuses_the_kernel_counts_it_without_failing(mirror):
    launch()
    assert not mirror.failures and mirror.compared == 0
    (why,) = mirror.refused   # nki slices are static: the tile at a run-time start is refused
    assert "NKI slices are static" in why


@pytest.mark.parametrize("mirror", [{"simt": True}], indirect=True)
def test_a_launch_the_cpu_refuses_is_not_repeated(mirror):
    with pytest.raises(tj.TilejitError):   # a 2-d tensor where the kernel slices 1-d
        scaled_add[(1,)](torch.zeros(4, 4), torch.zeros(4), torch.zeros(4), 4,
                         SCALE=1.0, BLOCK=128)
    assert mirror.compared == 0 and not mirror.failures


def test_integers_compare_bit_for_bit_and_floats_within_their_dtypes_tolerance():
    ints = torch.arange(10, dtype=torch.int32)
    assert cuda_run.mismatch(ints, ints.clone()) is None
    assert cuda_run.mismatch(ints, ints + (ints == 7)) == "1 elements differ, first at (7,)"
    floats = torch.linspace(1, 2, 10)
    assert cuda_run.mismatch(floats, floats * (1 + 1e-6)) is None
    assert cuda_run.mismatch(floats, floats * (1 + 1e-3)) is not None
    halves = floats.half()
    assert cuda_run.mismatch(halves, (halves.float() * (1 + 4e-3)).half()) is None
