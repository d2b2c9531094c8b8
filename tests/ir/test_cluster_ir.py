"""Thread-block cluster ops (``ir/ops_cluster.py``): ``cluster_sync``, ``cluster_map`` and
the ``cta_rank_in_cluster`` index, and a multicast ``tma_load_at``: their text
round-trips; the verifier refuses mapping anything but the CTA's own shared allocations
and mbarriers, every mbarrier op but ``mbarrier_arrive`` on another CTA's, a multicast
mask wider than PTX's ctaMask, and the asynchronous proxy's and the tensor cores' ops on
another CTA's memory."""
import pytest

from tilejit.errors import CompilationError
from tilejit.ir import parse_kernel, verify

HEAD = ('kernel @cl(%x: buffer<global, f32, [?, ?], strides=[?, 1]>) '
        '{cluster = [2, 1, 1], distribution = "per_thread"} loc("/src/k.py":1:0) {\n')


def kernel(*body: str) -> str:
    return HEAD + "\n".join([
        "  %s = alloc {scope = shared, dtype = f32, shape = [8, 32]} : "
        "buffer<shared, f32, [8, 32]> loc(2:4)",
        "  %bar = alloc_barrier {count = 1} : barrier<1> loc(3:4)",
        "  %r = thread_index {kind = cta_rank_in_cluster} : i32 loc(4:4)",
        "  %z = const {value = 0} : i32 loc(4:4)",
        "  %o = const {value = 0} : i64 loc(4:4)",
        *body]) + "\n}"


MAPPED = "  %m = cluster_map(%s, %r) : buffer<shared, f32, [8, 32]> loc(5:4)"
MAPPED_BAR = "  %mb = cluster_map(%bar, %r) : barrier<1> loc(6:4)"
TEXT = kernel(MAPPED, MAPPED_BAR,
              "  %v = load_at(%m, %o) : f32 loc(7:4)",
              "  store_at(%m, %v, %o) loc(8:4)",
              "  mbarrier_arrive(%mb, %z) loc(9:4)",
              "  tma_load_at(%s, %o, %x, %bar, %z, %z, %z) {box = [8, 32], multicast = 3} "
              "loc(10:4)",
              "  cluster_sync loc(11:4)")


def test_cluster_ops_round_trip():
    kernel_ir = verify(parse_kernel(TEXT))
    assert str(kernel_ir) == TEXT
    names = [op.name for op in kernel_ir.walk()]
    assert names.count("cluster_map") == 2 and names[-1] == "cluster_sync"


@pytest.mark.parametrize("body, message", [
    (["  %m = cluster_map(%x, %r) : buffer<global, f32, [?, ?], strides=[?, 1]> loc(5:4)"],
     "cluster_map maps a shared buffer this CTA allocates .* or its mbarriers"),
    ([MAPPED_BAR, "  mbarrier_wait(%mb, %z, %z) loc(7:4)"],
     "mbarrier_wait on another CTA's mbarriers .*only mbarrier_arrive reaches them"),
    ([MAPPED_BAR, "  mbarrier_init(%mb, %z, %z) loc(7:4)"],
     "mbarrier_init on another CTA's mbarriers"),
    (["  tma_load_at(%s, %o, %x, %bar, %z, %z, %z) {box = [8, 32], multicast = 65536} "
      "loc(7:4)"], "multicast is a mask of the cluster's 16 CTA ranks at most, not 0x10000"),
    ([MAPPED, "  tma_load_at(%m, %o, %x, %bar, %z, %z, %z) {box = [8, 32]} loc(7:4)"],
     "tma_load_at needs root buffers"),
    ([MAPPED, "  cp_async_at(%m, %o, %x, %o, %z) {bytes = 16} loc(7:4)"],
     "cp_async_at needs root buffers"),
], ids=["global", "remote-wait", "remote-init", "wide-mask", "remote-tma", "remote-cp-async"])
def test_the_verifier_refuses(body, message):
    with pytest.raises(CompilationError, match=message) as info:
        verify(parse_kernel(kernel(*body)))
    assert info.value.loc.line in (5, 7)
