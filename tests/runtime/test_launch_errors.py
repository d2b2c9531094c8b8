"""Every bad launch is a ``tj.LaunchError`` naming what is wrong, raised before anything runs."""
import inspect
import traceback

import numpy as np
import pytest
import torch

import tilejit as tj


@tj.kernel
def fill(out, value, n, BLOCK: tj.constexpr = 8):
    base = tj.cta_id(0) * BLOCK
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(BLOCK):
                if base + i < n:
                    out[base + i] = value


@tj.kernel
def add(x, y, out, n):
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(n):
                out[i] = x[i] + y[i]


@tj.kernel
def fill_rows(out, value, rows, cols):
    with tj.thread():
        if tj.thread_id() == 0:
            for i in range(rows):
                for j in range(cols):
                    out[i, j] = value


@tj.kernel
def marked(out, _tjMISSING):
    with tj.thread():
        if tj.thread_id() == 0:
            out[0] = _tjMISSING


@pytest.fixture
def out():
    """A buffer that every test checks is untouched: errors come before anything runs."""
    buffer = torch.zeros(8)
    yield buffer
    assert not buffer.any()


def launch_error(launch, *match: str) -> tj.LaunchError:
    with pytest.raises(tj.LaunchError) as info:
        launch()
    for text in match:
        assert text in str(info.value), str(info.value)
    return info.value


# -- binding -------------------------------------------------------------------------------
def test_too_many_arguments(out):
    launch_error(lambda: fill[(1,)](out, 1.0, 8, 8, 9), "fill() takes 4 arguments",
                 "but 5 were given")


def test_missing_argument(out):
    err = launch_error(lambda: fill[(1,)](out, 1.0), "missing argument 'n'")
    assert err.file == __file__ and err.line is not None   # points at the parameter


def test_unexpected_keyword(out):
    launch_error(lambda: fill[(1,)](out, 1.0, 8, BLOK=8), "unexpected keyword", "'BLOK'")


def test_same_errors_through_the_kernel_protocol(out):
    launch_error(lambda: fill.run((1,), (out,), {}), "missing argument 'value'")
    launch_error(lambda: fill.compile(out, 1.0), "missing argument 'n'")


def test_calling_a_kernel_without_a_grid(out):
    launch_error(lambda: fill(out, 1.0, 8), "fill[grid](...)")


# -- argument types, dtypes, layouts ----------------------------------------------------------
@pytest.mark.parametrize("value, kind", [("1", "str"), (None, "NoneType"), ([1.0], "list"),
                                         (1j, "complex")])
def test_unsupported_argument_type(out, value, kind):
    launch_error(lambda: fill[(1,)](out, value, 8), "argument 'value'", kind)


def test_unsupported_dtype(out):
    launch_error(lambda: fill[(1,)](torch.zeros(8, dtype=torch.complex64), 1.0, 8),
                 "argument 'out'", "complex64")


def test_wrong_dtype_for_a_compiled_kernel(out):
    compiled = fill.compile(out, 1.0, 8)
    launch_error(lambda: compiled[(1, 1, 1)](torch.zeros(8, dtype=torch.float64), 1.0, 8),
                 "argument 'out'", "float64")


def test_integer_too_wide(out):
    launch_error(lambda: fill[(1,)](out, 1.0, 2**70), "argument 'n'")


def test_a_tensor_without_strides_or_storage(out):
    fill[(1,)](out[:0], 1.0, 0)   # compiled: the inlined facts meet the sparse tensor
    launch_error(lambda: fill[(1,)](torch.zeros(8).to_sparse(), 1.0, 8), "argument 'out'",
                 "cannot be passed")


def test_float_beyond_f32(out):
    fill[(1,)](out[:0], 1.0, 0)   # compiled, so the fast path meets the bad value
    launch_error(lambda: fill[(1,)](out, 1e300, 8), "argument 'value'", "f32")


def test_read_only_arrays_can_be_read_but_not_written(tmp_path):
    x = np.arange(8, dtype=np.float32)
    x.flags.writeable = False
    out = np.zeros(8, np.float32)
    add[(1,)](x, x, out, 8)                     # read-only inputs are fine
    np.testing.assert_array_equal(out, 2 * x)
    np.zeros(8, np.float32).tofile(tmp_path / "zeros.bin")
    mapped = np.memmap(tmp_path / "zeros.bin", np.float32, mode="r")   # writing would fault
    err = launch_error(lambda: add[(1,)](x, x, mapped, 8), "argument 'out'", "read-only")
    assert err.line is not None
    launch_error(lambda: add.compiled_kernels()[0][(1, 1, 1)](x, x, mapped, 8), "read-only")
    launch_error(lambda: fill[(1,)](np.frombuffer(bytes(32), np.float32), 1.0, 8), "read-only")


def test_negative_strides():
    a = np.zeros(8, np.float32)
    launch_error(lambda: fill[(1,)](a[::-1], 1.0, 8), "argument 'out'", "negative strides")
    b = np.zeros((2, 8), np.float32)
    launch_error(lambda: add[(1,)](b[::-1], b, b, 8), "argument 'x'", "negative strides")
    assert not a.any() and not b.any()


def test_strides_that_are_not_whole_elements():
    fill[(1,)](np.zeros(8, np.float32)[::2], 1.0, 4)   # a binary for strided float32 vectors
    raw = np.zeros(64, np.uint8)
    odd = np.ndarray((4,), np.float32, buffer=raw, strides=(6,))
    launch_error(lambda: fill[(1,)](odd, 1.0, 4), "argument 'out'", "not whole")
    assert not raw.any()


def test_non_contiguous_view_recompiles_instead_of_failing(out):
    fill[(1,)](torch.zeros(8), 2.0, 8)
    wide = torch.zeros(16)
    fill[(1,)](wide[::2], 3.0, 8)   # the stride-2 view gets its own binary
    assert wide[::2].eq(3.0).all() and wide[1::2].eq(0.0).all()


# -- devices -------------------------------------------------------------------------------
def test_tensor_on_the_wrong_device_for_the_target(out):
    launch_error(lambda: fill[(1,)](torch.zeros(8, device="meta"), 1.0, 8, target="cpu"),
                 "argument 'out' is on meta", "target 'cpu'")
    launch_error(lambda: fill[(1,)](out, 1.0, 8, target="cuda"),
                 "argument 'out' is on cpu", "target 'cuda'")


def test_tensors_on_different_devices(out):
    meta = torch.zeros(8, device="meta")
    launch_error(lambda: add[(1,)](out, meta, out, 8), "different devices", "'y' on meta")


def test_unknown_target(out):
    launch_error(lambda: fill[(1,)](out, 1.0, 8, target="tpu"), "unknown target 'tpu'")


# -- grid and options ----------------------------------------------------------------------
@pytest.mark.parametrize("grid", [(), (0,), (1, 2, 3, 4), (1.5,), "a", (False,), (2, -1),
                                  [1, 0], None, lambda meta: (0,), lambda meta: "x",
                                  (2**31,), (1, 2**40)])   # CTA ids are 32-bit
def test_bad_grid(out, grid):
    launch_error(lambda: fill[grid](out, 1.0, 8), "grid must be 1 to 3 positive ints")


def test_good_grids(out):
    wide = torch.zeros(8)
    for grid in [1, (1,), [1], (1, 1), (1, 1, 1), np.int64(1), (np.int32(1),),
                 lambda meta: (1,), lambda meta: 1]:
        fill[grid](wide, 1.0, 8)
    assert wide.eq(1.0).all()


@pytest.mark.parametrize("options, match", [
    ({"num_warps": 0}, "num_warps"), ({"num_warps": True}, "num_warps"),
    ({"num_warps": "4"}, "num_warps"), ({"cluster": (0, 1)}, "cluster"),
    ({"cluster": (1, 1, 1, 1)}, "cluster"), ({"cluster": "2"}, "cluster")])
def test_bad_launch_options(out, options, match):
    launch_error(lambda: fill[(1,)](out, 1.0, 8, **options), match)


# -- what the error looks like -------------------------------------------------------------
def test_error_traceback_stays_out_of_the_argument_checks(out):
    with pytest.raises(tj.LaunchError) as info:
        fill[(1,)](out, "1", 8)
    files = {frame.filename for frame in traceback.extract_tb(info.value.__traceback__)}
    assert not any(f.endswith("arguments.py") for f in files), files
    assert info.value.file == __file__


def test_errors_are_not_cached(out):
    for _ in range(2):   # a failed launch stores nothing that a retry could hit
        launch_error(lambda: fill[(1,)](out, "1", 8), "argument 'value'")
    good = torch.zeros(8)
    fill[(1,)](good, 4.0, 8)
    assert good.eq(4.0).all()


# -- where the error points ------------------------------------------------------------------
def def_line(fn) -> int:
    """The line of the ``def`` of a function or kernel (below any decorator)."""
    lines, first = inspect.getsourcelines(getattr(fn, "fn", fn))
    return first + next(i for i, text in enumerate(lines) if text.lstrip().startswith("def "))


def assert_located(err: tj.TilejitError, line: int) -> None:
    assert err.file == __file__ and err.line == line, err.loc
    assert f"{__file__}:{line}:" in str(err), str(err)


@pytest.mark.parametrize("grid", [(), (0,), (1.5,), (2**31,), "a", lambda meta: "x",
                                  lambda meta: (1, 2, 3, 4)])
def test_grid_errors_point_at_the_kernel(out, grid):
    assert_located(launch_error(lambda: fill[grid](out, 1.0, 8), "grid"), def_line(fill))


def test_a_float_beyond_f32_on_the_fast_path_points_at_the_kernel(out):
    fill[(1,)](out[:0], 1.0, 0)   # compiled, so the fast path meets the bad value
    assert_located(launch_error(lambda: fill[(1,)](out, 1e300, 8), "argument 'value'"),
                   def_line(fill))


def test_errors_of_a_compiled_kernel_point_at_the_kernel(out):
    compiled = fill.compile(out, 1.0, 8)
    for launch in [lambda: compiled[(1, 2, 3, 4)](out, 1.0, 8),
                   lambda: compiled[(1,)](out, 1.0),
                   lambda: compiled[(1,)](out.double(), 1.0, 8),
                   lambda: compiled[(1,)](out, 1e300, 8),
                   lambda: compiled[(1,)](out, "1", 8)]:
        assert_located(launch_error(launch), def_line(fill))


def test_a_tensor_for_a_scalar_of_a_compiled_kernel(out):
    compiled = fill.compile(out, 1.0, 8)
    for wrong in [torch.ones(2), np.ones(2, np.float32)]:
        err = launch_error(lambda: compiled[(1,)](out, wrong, 8), "argument 'value'", "float")
        assert_located(err, def_line(fill))
    err = launch_error(lambda: compiled[(1,)](out, 1.0, torch.ones(2, dtype=torch.int32)),
                       "argument 'n'", "integer")
    assert_located(err, def_line(fill))


def decoration_error(fn) -> tj.TilejitError:
    with pytest.raises(tj.TilejitError) as info:
        tj.kernel(fn)
    return info.value


def test_parameters_the_launcher_cannot_bind_are_refused_where_they_are_written():
    def star(out, *rest):
        pass

    def slash(out, n, /):
        pass

    def launch_option(out, num_warps):
        pass

    err = decoration_error(star)
    assert "'rest' must be an ordinary parameter" in str(err)
    assert_located(err, def_line(star))   # the parameter is on the def line
    assert_located(decoration_error(slash), def_line(slash))
    err = decoration_error(launch_option)
    assert "'num_warps' is reserved (a launch option)" in str(err)
    assert_located(err, def_line(launch_option))


@pytest.mark.parametrize("name", ["_tj_MISSING", "_tj_fast", "_tj_key", "len", "tuple",
                                  "TypeError", "stream"])
def test_a_parameter_named_like_a_launcher_name_is_refused(name):
    namespace = {}
    exec(f"def clash(out, {name}):\n    pass\n", namespace)
    err = decoration_error(namespace["clash"])
    assert f"parameter name {name!r} is reserved" in str(err), str(err)


def test_every_name_of_the_generated_launcher_is_reserved():
    """The reserved set is read off the launcher: every global it was given and every name
    its code uses, except the kernel's own parameters."""
    from tilejit.runtime import launcher
    reserved = launcher.reserved_names(add)
    written = launcher.generate_launcher(add)
    code = written.__code__
    assert set(written.__globals__) - {"__name__", "__builtins__", written.__name__} <= reserved
    assert set(code.co_varnames) - set(add.arg_names) <= reserved
    assert not reserved & set(add.arg_names)
    assert {"len", "tuple", "num_warps"} <= reserved


def test_a_parameter_named_like_an_old_launcher_global_launches(out):
    """``_tjMISSING`` was the launcher's marker for a missing argument: every launch of a
    kernel with a parameter of that name raised a bare StopIteration."""
    wide = torch.zeros(1)
    marked[(1,)](wide, 5.0)
    assert wide.item() == 5.0


# -- arrays a kernel cannot read or write as they are ------------------------------------------
def racing_outputs():
    """Outputs two of whose elements share an address: the CTAs' writes to them would race."""
    storage = torch.zeros(8)
    return {"zero stride": torch.zeros(1).expand(8),
            "as_strided overlap": storage.as_strided((4, 4), (1, 1)),
            "unfold windows": storage.unfold(0, 4, 2),
            "numpy zero stride": np.lib.stride_tricks.as_strided(np.zeros(1, np.float32),
                                                                 (8,), (0,))}


def fill_all(out) -> None:
    if out.ndim == 1:
        fill[(1,)](out, 1.0, out.shape[0])
    else:
        fill_rows[(1,)](out, 1.0, *out.shape)


@pytest.mark.parametrize("case", sorted(racing_outputs()))
def test_an_output_whose_elements_overlap_is_refused(case):
    racing = racing_outputs()[case]
    err = launch_error(lambda: fill_all(racing), "argument 'out'", "share addresses")
    assert err.loc is not None
    assert not racing.any()


def test_an_overlapping_output_is_refused_after_a_clean_launch_of_the_same_signature():
    """Same dtype, rank, alignment and unit stride as a launch that ran: the signature still
    tells them apart, so the fast path never runs the racing one."""
    fill_all(torch.zeros(4, 4))
    racing = torch.zeros(7).as_strided((4, 4), (1, 1))
    launch_error(lambda: fill_all(racing), "argument 'out'", "share addresses")
    assert not racing.any()
    fill_all(torch.zeros(2, 4).t())   # not contiguous, but distinct elements: fine
    strided = torch.zeros(16)
    fill_all(strided[::2])
    assert strided[::2].eq(1).all() and not strided[1::2].any()


def test_overlapping_inputs_can_be_read():
    out = torch.zeros(8)
    add[(1,)](torch.ones(1).expand(8), torch.arange(8.), out, 8)
    torch.testing.assert_close(out, torch.arange(8.) + 1)


def test_an_overlapping_output_of_a_compiled_kernel_is_refused():
    x = torch.arange(8.)
    compiled = add.compile(x, x, x, 8)
    err = launch_error(lambda: compiled[(1,)](x, x, torch.zeros(1).expand(8), 8),
                       "argument 'out'", "share addresses")
    assert_located(err, def_line(add))


def negative_views():
    z = torch.complex(torch.zeros(8), torch.arange(8.))
    return {"conj().imag": z.conj().imag, "_neg_view": torch._neg_view(torch.arange(8.)),
            "detached": torch._neg_view(torch.arange(8.)).detach()}


@pytest.mark.parametrize("case", sorted(negative_views()))
def test_a_tensor_with_the_negative_bit_is_refused(case):
    negative = negative_views()[case]
    assert negative.is_neg()
    out = torch.zeros(8)
    add[(1,)](torch.arange(8.), torch.arange(8.), out, 8)   # the same signature otherwise
    out.zero_()
    err = launch_error(lambda: add[(1,)](negative, negative, out, 8), "argument 'x'",
                       "negative bit", "resolve_neg")
    assert err.loc is not None and not out.any()
    compiled = add.compile(negative.resolve_neg(), negative.resolve_neg(), out, 8)
    assert_located(launch_error(lambda: compiled[(1,)](negative, negative, out, 8),
                                "argument 'x'", "negative bit"), def_line(add))
    add[(1,)](negative.resolve_neg(), negative.resolve_neg(), out, 8)   # resolved: right sign
    torch.testing.assert_close(out, 2 * negative)


def test_autotune_and_heuristics_errors_point_at_the_kernel(out):
    tuned = tj.autotune(configs=[tj.Config({"BLOCK": 8})], key=["n"])(fill)
    assert_located(launch_error(lambda: tuned[(1,)](out, 1.0, [8]), "autotune key 'n'"),
                   def_line(fill))
    assert_located(launch_error(lambda: tuned[(1,)](out, 1.0, 8, BLOCK=4), "chosen by @autotune"),
                   def_line(fill))
    computed = tj.heuristics({"BLOCK": lambda meta: 8})(fill)
    assert_located(launch_error(lambda: computed[(1,)](out, 1.0, 8, BLOCK=4), "@heuristics"),
                   def_line(fill))
    nested = tj.autotune(configs=[tj.Config({}, num_warps=1)], key=["n"])(computed)
    assert_located(launch_error(lambda: nested[(1,)](out, 1.0, 8, BLOCK=4), "@heuristics"),
                   def_line(fill))
