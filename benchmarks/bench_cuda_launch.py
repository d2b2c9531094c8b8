"""What a cache-hit launch of a CUDA kernel costs on the host (issue 13's goal: <= 5 us
for 3 tensors), measured without a GPU and, where there is one, on it.

    python benchmarks/bench_cuda_launch.py

On a GPU (scripts/gpu_check.sh runs it): ``noop_3t[(1,)](x, y, out, n)`` on CUDA tensors,
all of it (runtime, backend, cuda-python, the driver's launch), in batches of 1000 launches
synchronized once each, the fastest batch per launch. Then, always, two parts with the
driver stubbed, each the per-launch time of the fastest of several batches:

- python: ``kernel[grid](x, y, out, n)`` up to the backend call (binding, argument facts,
  signature lookup) -- the generated launcher is the same for every target, so it is timed
  on the CPU target with the backend call replaced by a no-op (as bench_launch.py does);
- cuda backend: ``CudaKernelModule.launch_records`` of ``vector_add`` compiled for sm_90a
  (3 tensors: 9 parameters), through driver.py with cuda-python's own launch structs and
  the driver's functions stubbed (each returns success at once): packing the parameters,
  the context check, the stream, the launch configuration looked up per shape. The
  driver's own launch (cuLaunchKernelEx in libcuda and its cuda-python wrapper) is not in
  it: it needs a GPU (scripts/gpu_bench.py measures launches there).

Also: the driver's part with the configuration rebuilt each time (dimensions given as lists
are not kept), to show what keeping it saves.
"""
from __future__ import annotations

import os
import sys
import timeit
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tilejit as tj  # noqa: E402
from tilejit.targets.cuda import driver  # noqa: E402

OK = (0,)


def stub_driver():
    """cuda.bindings.driver with every function answering success and no GPU behind it."""
    from cuda.bindings import driver as real
    handle = types.SimpleNamespace(__int__=lambda self: 1)
    fake = types.SimpleNamespace(
        CUlaunchConfig=real.CUlaunchConfig, CUlaunchAttribute=real.CUlaunchAttribute,
        CUlaunchAttributeID=real.CUlaunchAttributeID, CUstream=real.CUstream,
        CUfunction_attribute=real.CUfunction_attribute,
        cuInit=lambda flags: OK, cuDeviceGet=lambda ordinal: (0, ordinal),
        cuDevicePrimaryCtxRetain=lambda dev: (0, 1000), cuCtxGetCurrent=lambda: (0, 1000),
        cuCtxSetCurrent=lambda ctx: OK, cuModuleLoadData=lambda image: (0, handle),
        cuModuleGetFunction=lambda module, name: (0, handle),
        cuFuncGetAttribute=lambda attribute, function: (0, 0),
        cuFuncSetAttribute=lambda function, attribute, value: OK,
        cuLaunchKernelEx=lambda config, function, params, extra: OK)
    driver._import_driver = lambda: fake
    driver._initialized.clear()


def per_call_us(fn, number: int = 20000, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def python_side_us() -> float:
    import torch
    from bench_launch import noop_3t
    x, y, out = torch.empty(1024), torch.empty(1024), torch.empty(1024)
    noop_3t[(1,)](x, y, out, 1024)   # compiles
    entry = next(e for e in noop_3t._fast.values() if e.compiled.target == "cpu")
    entry.launch = lambda grid, records: None
    return per_call_us(lambda: noop_3t[(1,)](x, y, out, 1024))


def cuda_backend_us() -> tuple[float, float]:
    from tilejit.examples.kernels import vector_add
    x = tj.TensorSpec((1 << 20,), tj.float32, device="cuda")
    module = vector_add.compile(x, x, x, BLOCK=1024, target="cuda", arch="sm_90a").module
    records = [(0x7f0000000000 + k * (4 << 20), 1 << 20, 1) for k in range(3)]
    grid = (1024, 1, 1)
    module.launch_records(grid, records, 0x55, 0)
    kept = per_call_us(lambda: module.launch_records(grid, records, 0x55, 0))
    fn, params = module.function(0), module._param_struct
    args = [value for record in records for value in record]
    rebuilt = per_call_us(lambda: fn.launch_struct(params, args, grid=[1024],
                                                   block=[module.threads], stream=0x55))
    return kept, rebuilt


def gpu_launch_us(batch: int = 1000) -> float:
    """A cache-hit launch of a no-op 3-tensor kernel on the GPU, per launch."""
    import torch
    from bench_launch import noop_3t
    x, y, out = (torch.empty(1024, device="cuda") for _ in range(3))
    noop_3t[(1,)](x, y, out, 1024)   # compiles
    assert noop_3t.compiled_kernels()[-1].target == "cuda"

    def launches():
        for _ in range(batch):
            noop_3t[(1,)](x, y, out, 1024)
        torch.cuda.synchronize()
    launches()
    return min(timeit.repeat(launches, number=1, repeat=7)) / batch * 1e6


def main() -> None:
    import torch
    if torch.cuda.is_available():
        print(f"µs per cache-hit launch of a no-op 3-tensor kernel on "
              f"{torch.cuda.get_device_name()}: {gpu_launch_us():6.2f}")
    stub_driver()
    python = python_side_us()
    backend, rebuilt = cuda_backend_us()
    print("µs per cache-hit launch of a 3-tensor kernel (driver stubbed)")
    print(f"  python (binding, facts, lookup; CPU target's launcher): {python:6.2f}")
    print(f"  cuda backend (launch_records -> cuLaunchKernelEx stub): {backend:6.2f}")
    print(f"  total without the driver's own launch:                  {python + backend:6.2f}")
    print(f"  driver launch, configuration rebuilt each time:         {rebuilt:6.2f}")


if __name__ == "__main__":
    main()
