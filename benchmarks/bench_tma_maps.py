"""What a cache-hit launch of a TMA kernel spends on its tensor maps (issue 14).

    python benchmarks/bench_tma_maps.py

``CudaKernelModule.encoded_maps`` appends one encoded map per (tensor, box, swizzle),
keeping the bytes per (map, address, shape, strides): a repeated launch on the same
tensors looks each up and never calls ``cuTensorMapEncodeTiled``. Runs without a GPU: the
one miss is answered by a stand-in for the driver (a hit never reaches it).
"""
from __future__ import annotations

import timeit

from tilejit.targets.cuda import tensor_map
from tilejit.targets.cuda.module import CudaKernelModule


def main() -> None:
    tensor_map.encode = lambda record: bytes(128)   # the miss only: no driver needed
    specs = ({"param": "A", "box": [64, 64], "swizzle": 128, "dtype": "f16"},
             {"param": "C", "box": [64, 64], "swizzle": 128, "dtype": "f16"})
    module = CudaKernelModule(b"", "k", 128, 0, "sm_90a", ("A", "C"), tensor_maps=specs)
    records = [(0x7f0000000000, 4096, 4096, 4096, 1), (0x7f0000100000, 4096, 4096, 4096, 1)]
    module.encoded_maps(records)
    n = 20000
    best = min(timeit.repeat(lambda: module.encoded_maps(records), number=n, repeat=5)) / n
    print(f"two tensor maps per launch, cache hit: {best * 1e6:.2f} us per launch")


if __name__ == "__main__":
    main()
