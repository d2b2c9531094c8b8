"""tj.device_print on the CPU target: printf formats print as C's printf would."""
import torch

import tilejit as tj


@tj.kernel
def report(x, n):
    if tj.thread_id() == 0:
        v = x[0]
        tj.device_print("x0 = %f", v)
        tj.device_print("[%5d|%-4d|%03i|%.3f|%.2e|%g|%s|100%%]", n, 7, tj.cta_id(0), v, v, 2,
                        "hi")
        tj.device_print("%x %X %u %d", n - 4, 255, n - 4, n > 0)
        tj.device_print("plain", v, n)


def test_printf_formats(capfd):
    report[(1,)](torch.tensor([1.5]), 3)
    assert capfd.readouterr().out.splitlines() == [
        "x0 = 1.500000",
        "[    3|7   |000|1.500|1.50e+00|2|hi|100%]",
        "ffffffff FF 4294967295 1",   # an int32 -1 as %x and %u, as in C
        "plain 1.5 3",
    ]


@tj.kernel
def narrow_and_wide(x, y):
    if tj.thread_id() == 0:
        tj.device_print("%.3f %d", x[0], y[0])


def test_narrow_floats_and_wide_ints(capfd):
    narrow_and_wide[(1,)](torch.tensor([0.25], dtype=torch.float16),
                          torch.tensor([-2**40], dtype=torch.int64))
    assert capfd.readouterr().out.splitlines() == [f"0.250 {-2**40}"]
