"""Thread-block clusters (``kernel[grid](..., cluster=(x, y, z))``) on the cuda target.

The CPU gives ``cta_id_in_cluster`` its meaning (``cta_id % cluster`` per dimension) and
refuses a grid that does not split into clusters, as CUDA does; the
printer compiles the shape in (``__cluster_dims__``: PTX ``.explicitcluster`` and
``.reqnctapercluster``), refuses it before sm_90 and above 16 CTAs at the kernel's line
(above the portable 8 the loader sets the function's non-portable opt-in); the launch goes
through cuLaunchKernelEx in those clusters and a grid that does not split into them is a
LaunchError. Without a GPU against a stand-in for the driver
(tests/support/fake_cuda_driver.py); on a GPU (``-m gpu``) the ranks are read back."""
import struct

import numpy as np
import pytest
import torch

import tilejit as tj
from support.fake_cuda_driver import fake_driver
from support.gpu import needs_gpu, needs_nvrtc
from tilejit.errors import CompilationError, LaunchError


@tj.kernel
def cluster_ranks(out):
    """out[y, x] = the rank of CTA (x, y) in its cluster: x rank + 10 * y rank."""
    with tj.thread():
        if tj.thread_id() == 0:
            out[tj.cta_id(1), tj.cta_id(0)] = tj.cta_id_in_cluster(0) + 10 * tj.cta_id_in_cluster(1)


def expected_ranks(grid, cluster) -> np.ndarray:
    x, y = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]))
    return (x % cluster[0] + 10 * (y % cluster[1])).astype(np.int32)


def _compile(arch="sm_90a", cluster=(3, 2)):
    spec = tj.TensorSpec((4, 6), tj.int32, device="cuda")
    return cluster_ranks.compile(spec, cluster=cluster, target="cuda", arch=arch)


def test_the_cpu_gives_cluster_ranks_their_meaning():
    out = torch.full((4, 6), -1, dtype=torch.int32)
    cluster_ranks[(6, 4)](out, cluster=(3, 2), target="cpu")
    np.testing.assert_array_equal(out.numpy(), expected_ranks((6, 4), (3, 2)))
    with pytest.raises(LaunchError, match=r"kernel 'cluster_ranks': grid \(6, 3, 1\) is not "
                                          r"a multiple of the cluster \(3, 2, 1\): 3 CTAs in y "
                                          "do not split into clusters of 2") as info:
        cluster_ranks[(6, 3)](out, cluster=(3, 2), target="cpu")
    assert info.value.loc.line == cluster_ranks.fn.__code__.co_firstlineno + 1


@needs_nvrtc
def test_the_cluster_shape_is_compiled_in(fresh_cache):
    compiled = _compile()
    (head,) = [line for line in compiled.asm["cuda"].splitlines() if "__global__" in line]
    assert "__launch_bounds__(128) __cluster_dims__(3, 2, 1) cluster_ranks(" in head
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert ".explicitcluster" in ptx and ".reqnctapercluster 3, 2, 1" in ptx
    assert compiled.metadata["cluster"] == [3, 2, 1] and compiled.module.cluster == (3, 2, 1)
    plain = _compile(cluster=(1, 1, 1))
    assert "__cluster_dims__" not in plain.asm["cuda"]
    assert ".explicitcluster" not in plain.asm["ptx"]
    assert ".reqnctapercluster" not in plain.asm["ptx"]


@needs_nvrtc
def test_clusters_before_sm_90_or_above_16_ctas_are_refused_at_the_kernel(fresh_cache):
    with pytest.raises(CompilationError, match=r"cluster=\(2, 1, 1\): thread-block clusters "
                                               "need sm_90 or later; compiling for sm_80") as info:
        _compile(arch="sm_80", cluster=(2, 1))
    assert info.value.loc.line == cluster_ranks.fn.__code__.co_firstlineno + 1
    assert "def cluster_ranks(out):" in str(info.value)
    with pytest.raises(CompilationError, match=r"cluster=\(4, 8, 1\) has 32 CTAs, above the "
                                               "16 that sm_90 runs with the non-portable "
                                               r"opt-in \(the loader sets it above the portable "
                                               r"8\)") as info:
        _compile(cluster=(4, 8))
    assert info.value.loc.line == cluster_ranks.fn.__code__.co_firstlineno + 1


@needs_nvrtc
def test_a_non_portable_cluster_compiles_in_and_the_loader_opts_in(monkeypatch, fresh_cache):
    """16 CTAs: compiled in like any cluster; loading the CUBIN sets the function's
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED once, before the launch; a portable one never does."""
    opt_in = ("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1)
    compiled = _compile(cluster=(2, 8))
    ptx = [line.strip() for line in compiled.asm["ptx"].splitlines()]
    assert ".reqnctapercluster 2, 8, 1" in ptx
    fake = fake_driver(monkeypatch, (8, 8, 8, 8, 8), functions=(b"cluster_ranks",),
                       required_cluster=(2, 8, 1))
    record = (0x7000, 8, 2, 2, 1)
    compiled.launch((2, 8, 1), [record])
    compiled.launch((4, 8, 1), [record])
    assert fake.set_attrs.count(opt_in) == 1 and len(fake.launches) == 2
    portable = _compile()
    fake = fake_driver(monkeypatch, (8, 8, 8, 8, 8), functions=(b"cluster_ranks",),
                       required_cluster=(3, 2, 1))
    portable.launch((6, 4, 1), [record])
    assert opt_in not in fake.set_attrs and len(fake.launches) == 1


@needs_nvrtc
def test_a_launch_runs_in_the_compiled_clusters(monkeypatch, fresh_cache):
    """The runtime's launch reaches cuLaunchKernelEx with the grid in CTAs; the compiled-in
    shape makes it a cluster launch (no contradicting attribute); a grid that does not
    split into clusters never reaches the driver."""
    compiled = _compile()
    fake = fake_driver(monkeypatch, (8, 8, 8, 8, 8), functions=(b"cluster_ranks",),
                       required_cluster=(3, 2, 1))
    record = (0x7000, 4, 6, 6, 1)
    compiled.launch((6, 4, 1), [record])
    (launch,) = fake.launches
    assert (launch.grid, launch.block, launch.shared, launch.cluster) == \
        ((6, 4, 1), (128, 1, 1), 0, None)
    assert launch.params == [struct.pack("<Q", 0x7000), *(struct.pack("<q", v) for v in record[1:])]
    with pytest.raises(LaunchError, match=r"grid \(5, 4, 1\) is not a multiple of the cluster "
                                          r"\(3, 2, 1\): 5 CTAs in x") as info:
        compiled.launch((5, 4, 1), [record])
    assert info.value.loc.line == cluster_ranks.fn.__code__.co_firstlineno + 1
    assert len(fake.launches) == 1


# The hardware's own view: the CTA's rank in its cluster and the cluster's size, from the
# special registers (not from blockIdx), with and without a compiled-in shape.
HARDWARE_RANKS = r"""
__device__ int rank_and_size() {
  unsigned rank, size;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  return rank + 100 * size;
}
extern "C" __global__ void launch_shaped(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = rank_and_size();
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) compiled_in(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = rank_and_size();
}
"""


@pytest.fixture(scope="module")
def hardware_ranks():
    from tilejit.targets.cuda.nvrtc import compile_cuda
    return compile_cuda(HARDWARE_RANKS, "sm_90a", name="cluster_ranks.cu")


@needs_nvrtc
def test_only_the_compiled_in_kernel_requires_its_cluster(hardware_ranks):
    entries = {text.split("(")[0]: text for text in hardware_ranks.ptx.split(".entry ")[1:]}
    assert ".reqnctapercluster" not in entries["launch_shaped"]
    assert ".explicitcluster" not in entries["launch_shaped"]
    assert ".reqnctapercluster 2, 1, 1" in entries["compiled_in"]
    assert ".explicitcluster" in entries["compiled_in"]


# --------------------------------------------------------------------------- on a GPU
def _sm90():
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need sm_90")


@pytest.mark.gpu
@needs_gpu
@needs_nvrtc
def test_the_hardware_sees_the_launchs_clusters(hardware_ranks):
    """cluster= on a kernel without __cluster_dims__ travels as the launch attribute; a
    compiled-in shape holds without it, and a launch contradicting it never starts."""
    from tilejit.targets.cuda.driver import load_module
    _sm90()
    module = load_module(hardware_ranks)
    out = torch.full((8,), -1, dtype=torch.int32, device="cuda")
    module["launch_shaped"](out, grid=8, block=32, cluster=4)
    torch.cuda.synchronize()
    assert out.tolist() == [i % 4 + 400 for i in range(8)]
    out.fill_(-1)
    module["launch_shaped"](out, grid=8, block=32)    # no cluster: each CTA its own
    torch.cuda.synchronize()
    assert out.tolist() == [100] * 8
    fixed = module["compiled_in"]
    assert fixed.compiled_cluster == (2, 1, 1)
    out.fill_(-1)
    fixed(out, grid=8, block=32)
    torch.cuda.synchronize()
    assert out.tolist() == [i % 2 + 200 for i in range(8)]
    with pytest.raises(LaunchError, match="contradicts it"):
        fixed(out, grid=8, block=32, cluster=4)


@pytest.mark.gpu
@needs_gpu
@needs_nvrtc
def test_cluster_ranks_on_the_gpu():
    _sm90()
    out = torch.full((4, 6), -1, dtype=torch.int32, device="cuda")
    cluster_ranks[(6, 4)](out, cluster=(3, 2))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), expected_ranks((6, 4), (3, 2)))
    with pytest.raises(LaunchError, match="is not a multiple of the cluster"):
        cluster_ranks[(5, 4)](out, cluster=(3, 2))
