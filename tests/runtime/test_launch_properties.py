"""Random sequences of launches of one kernel object: whatever the order of dtypes,
alignments, strides, containers and scalar values, the signature lookup never runs a
binary compiled for other facts (every result is checked against numpy, and no byte
outside the written elements changes)."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilejit as tj


@tj.kernel
def axpy_ramp(x, out, a, n):
    """out[i] = x[i] * a + i for i < n, by thread 0."""
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(n):
                out[i] = x[i] * a + i


DTYPES = {"float32": (np.float32, torch.float32), "float64": (np.float64, torch.float64),
          "int32": (np.int32, torch.int32)}

launch = st.fixed_dictionaries({
    "dtype": st.sampled_from(sorted(DTYPES)),
    "n": st.sampled_from([0, 1, 5, 16, 17, 32, 45]),      # multiples of 16 and not
    "offset": st.integers(0, 3),                            # misaligns the data pointer
    "step": st.integers(1, 3),                              # innermost stride
    "container": st.sampled_from(["torch", "numpy"]),
    "a": st.sampled_from([2, -3, 0.5, True]),
})


def make(spec, seed: int):
    np_dtype, _ = DTYPES[spec["dtype"]]
    rng = np.random.default_rng(seed)
    size = spec["offset"] + spec["step"] * max(spec["n"], 1) + 3
    base = rng.integers(-50, 50, size).astype(np_dtype)
    x = base[spec["offset"]::spec["step"]][:spec["n"]]
    out_base = np.full(size, 7, np_dtype)
    out = out_base[spec["offset"]::spec["step"]][:spec["n"]]
    return x, out, out_base


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(launch, min_size=2, max_size=8))
def test_launch_sequences_match_numpy(launches):
    for seed, spec in enumerate(launches):
        x, out, out_base = make(spec, seed)
        expected_base = out_base.copy()
        a = spec["a"]
        if spec["dtype"] == "int32" and isinstance(a, float):
            a = 2   # an int32 kernel takes an integer factor
        index = np.arange(spec["n"], dtype=np.float64)
        expected = (x.astype(np.float64) * a + index).astype(x.dtype)
        expected_base[spec["offset"]::spec["step"]][:spec["n"]] = expected
        if spec["container"] == "torch":
            x_arg, out_arg = torch.from_numpy(x), torch.from_numpy(out)
        else:
            x_arg, out_arg = x, out
        axpy_ramp[(1,)](x_arg, out_arg, a, spec["n"])
        np.testing.assert_array_equal(out_base, expected_base, err_msg=str(spec))


refusable = st.fixed_dictionaries({
    "n": st.sampled_from([0, 1, 2, 5, 17]),
    "x_step": st.sampled_from([0, 1, 2]),     # reading elements at one address is fine
    "out_step": st.sampled_from([0, 1, 2]),   # writing them races: refused when n >= 2
    "negative_x": st.booleans(),              # torch's negative bit: refused
    "container": st.sampled_from(["torch", "numpy"]),
})


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(refusable, min_size=2, max_size=8))
def test_racing_outputs_and_negative_views_are_refused_in_any_launch_order(launches):
    """A refused argument differs from an accepted one only in facts the signature holds,
    so whichever launched first, the fast path never runs the other."""
    for spec in launches:
        n, size = spec["n"], 2 * spec["n"] + 3
        x_base = np.arange(1, size + 1, dtype=np.float32)
        out_base = np.full(size, 7, np.float32)
        x = np.lib.stride_tricks.as_strided(x_base, (n,), (4 * spec["x_step"],))
        out = np.lib.stride_tricks.as_strided(out_base, (n,), (4 * spec["out_step"],))
        negative = spec["negative_x"] and spec["container"] == "torch"
        racing = spec["out_step"] == 0 and n >= 2
        expected_base = out_base.copy()
        if not (negative or racing):
            expected_out = np.lib.stride_tricks.as_strided(expected_base, (n,), out.strides)
            expected_out[:] = x * 2 + np.arange(n)
        if spec["container"] == "torch":
            x, out = torch.from_numpy(x), torch.from_numpy(out)
            if negative:
                x = torch._neg_view(x)
        if negative or racing:
            with pytest.raises(tj.LaunchError, match="negative bit" if negative
                               else "share addresses"):
                axpy_ramp[(1,)](x, out, 2.0, n)
        else:
            axpy_ramp[(1,)](x, out, 2.0, n)
        np.testing.assert_array_equal(out_base, expected_base, err_msg=str(spec))
