"""tj.device_print: a format with a % is a printf format, checked against the arguments
when the kernel compiles; one without keeps {} placeholders and appends the rest."""
import pytest

from tilejit.frontend import language as tj

from .helpers import S, T, build, f16, f32, i32, kernel_from_source, ops, raises

SPECS = {"x": T(f32, 1), "n": S(i32)}


def printed(kernel, specs=SPECS):
    return [(op.attrs["fmt"], op.attrs["printf"], [v.type for v in op.operands])
            for op in ops(build(kernel, specs), "device_print")]


def test_printf_formats_keep_their_conversions_and_fold_only_strings():
    def kernel(x, n):
        v = x[0]
        tj.device_print("x0 = %f", v)
        tj.device_print("%5d|%-4x|%.3e|%s=%g|100%%", n, True, v, "name%", 2)
    assert printed(kernel) == [
        ("x0 = %f", True, [f32]),
        ("%5d|%-4x|%.3e|name%%=%g|100%%", True, [i32, tj.bool, f32, tj.float64])]


def test_a_format_without_percent_keeps_placeholders_and_appended_arguments():
    def kernel(x, n):
        tj.device_print("n = {}", n, x[0])
    assert printed(kernel) == [("n = {}", False, [i32, f32])]


def test_narrow_floats_print_with_float_conversions():
    def kernel(x, n):
        tj.device_print("%.2f", x[0])
    assert printed(kernel, {"x": T(f16, 1), "n": S(i32)}) == [("%.2f", True, [f16])]


MISMATCHES = [
    ('tj.device_print("x0 = %f")', r"format 'x0 = %f' has 1 conversion\(s\) \(%f\) but 0"),
    ('tj.device_print("%d %d", n)', r"has 2 conversion\(s\) \(%d %d\) but 1 argument"),
    ('tj.device_print("100% done", n, n)', r"\(% d\) but 2 argument\(s\) were given \(write %% "),
    ('tj.device_print("%d", x[0])', r"%d needs an integer, got .*f32.*; convert it with int"),
    ('tj.device_print("%.2f", n)', r"%.2f needs a float, got .*i32.*; convert it with float"),
    ('tj.device_print("%x", 1.5)', r"%x needs an integer, got .*1.5"),
    ('tj.device_print("%f", "a")', r"%f needs a float, got .*'a'"),
    ('tj.device_print("%d", x)', r"%d needs an integer, got .*; tj.device_print prints scalars"),
    ('tj.device_print("%s", n)', r"%s prints compile-time values, got .*; use %d or %f"),
    ('tj.device_print("%q", n)', r"'%q' \(position 0\) is not a printf conversion"),
    ('tj.device_print("50%", n)', r"'%' \(position 2\) is not a printf conversion"),
]


@pytest.mark.parametrize("call, message", MISMATCHES, ids=[c for c, _ in MISMATCHES])
def test_a_format_that_does_not_match_its_arguments_is_located(tmp_path, call, message):
    fn = kernel_from_source(tmp_path, f"def kernel(x, n):\n    y = 1\n    {call}\n")
    err = raises(fn, message, call, SPECS)
    assert err.col == 4 and "tj.device_print" in err.message
