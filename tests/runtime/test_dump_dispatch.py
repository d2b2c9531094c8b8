"""TILEJIT_DUMP=dispatch prints the dispatch log once per compile and once per binary
loaded from the disk cache (the dispatch pass printed it a second time when compiling)."""
import torch

import tilejit as tj

LOG_HEADER = "// ----- dispatch of copy_through ----- //"


@tj.kernel
def copy_through(x, out, BLOCK: tj.constexpr = 16):
    a = tj.fragment((BLOCK,), x.dtype)
    tj.copy(a, x[0:BLOCK])
    tj.copy(out[0:BLOCK], a)


def launch():
    out = torch.zeros(16)
    copy_through[(1,)](torch.arange(16.0), out)
    assert torch.equal(out, torch.arange(16.0))


# x copied straight into out where their boxes share no bytes, else through the fragment
# (cpu-read-copies-in-place): three copies in the log
COPIES = 3


def test_the_dispatch_log_is_printed_once(monkeypatch, fresh_cache, capfd):
    monkeypatch.setenv("TILEJIT_DUMP", "dispatch")
    launch()
    err = capfd.readouterr().err
    assert err.count(LOG_HEADER) == 1 and err.count("| copy ") == COPIES, err
    copy_through.clear_memory_cache()
    launch()   # from the disk cache
    err = capfd.readouterr().err
    assert copy_through.cache_info().disk_hits == 1
    assert err.count(LOG_HEADER) == 1 and err.count("| copy ") == COPIES, err
