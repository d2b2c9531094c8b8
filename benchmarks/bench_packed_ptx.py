"""PTX of f16/bf16 pointwise math on registers with the ``packed`` family (f16x2/bf16x2)
and with the ``scalar`` one (``dispatch="scalar"``), compiled for sm_80 and sm_90a (no GPU
needed: NVRTC's PTX and CUBIN say): ``PYTHONPATH=. python benchmarks/bench_packed_ptx.py``.
The kernel: a 32 x 32 tile over one warp, a row per lane (16 pairs per thread), ``a + b``
then ``max(a, b)``, loaded and stored by the ``vec`` family alike in both."""
import collections

import tilejit as tj
from tilejit.layout import TileLayout

ROWS = TileLayout.parse("(32,32):(1@laneid,1@m)")


@tj.kernel
def add_max(x, y, out, D: tj.constexpr):
    a = tj.fragment((32, 32), x.dtype, layout=ROWS)
    b = tj.fragment((32, 32), x.dtype, layout=ROWS)
    tj.copy(a, x[0:32, 0:32])
    tj.copy(b, y[0:32, 0:32])
    tj.add(a, a, b, dispatch=D)
    tj.maximum(a, a, b, dispatch=D)
    tj.copy(out[0:32, 0:32], a)


def instructions(ptx: str) -> list[str]:
    lines = (line.strip() for line in ptx.splitlines())
    return [line.split()[0] for line in lines
            if line and line[0].isalpha() and not line.endswith(":")]


for dtype in (tj.float16, tj.bfloat16):
    for arch in ("sm_80", "sm_90a"):
        spec = tj.TensorSpec((32, 32), dtype, device="cuda")
        row = []
        for dispatch in (None, "scalar"):
            compiled = add_max.compile(spec, spec, spec, D=dispatch, target="cuda", arch=arch)
            ops = instructions(compiled.asm["ptx"])
            (rule,) = {r.rule for r in compiled.dispatch_log if r.primitive == "pointwise"}
            math = collections.Counter(op for op in ops if op.split(".")[0] in
                                       ("add", "max", "fma", "cvt", "mov", "prmt")
                                       and ".s32" not in op and ".s64" not in op
                                       and ".u32" not in op and ".u64" not in op)
            row.append(f"{rule}: {len(ops)} PTX instructions, {compiled.metadata['registers']} "
                       f"registers, {dict(math.most_common(6))}")
        print(f"{dtype.name} {arch}\n  " + "\n  ".join(row))
