"""The pass pipeline, in order, in one visible list.

``run_pipeline(kernel)`` runs every pass of :data:`PIPELINE` (and then the target's own
passes, which its backend lists: ``target_passes``), verifies the IR after each
(so a broken pass is blamed by name), times each pass and keeps the printed IR after it.
``TILEJIT_DUMP`` (or ``dump=``) naming a pass -- or ``passes`` for all of them -- prints
that IR to stderr.

Each pass also runs alone on a text file::

    python -m tilejit.passes.pipeline kernel.ir [--passes scope-analysis] [--timing]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import Callable, Iterable, Sequence

from ..errors import CompilationError, TilejitError
from ..ir.core import KernelIR
from . import addresses, dispatch, fusion, layout_inference, scope_analysis
from . import shared_plan, software_pipeline, sync_hazards, tmem, wgmma_groups
from .dispatch import lower as lower_tiles

__all__ = ["PIPELINE", "Pass", "Stages", "run_pipeline", "get_pass", "main"]

Pass = Callable[[KernelIR], KernelIR]

# Later stages (dispatch, loop generation, ...) append here, in the order they run.
PIPELINE: list[tuple[str, Pass]] = [
    ("software-pipeline", software_pipeline.run),        # tj.range(pipeline=S) loops
    ("scope-analysis", scope_analysis.run),
    ("infer-fragment-layouts", layout_inference.run),    # per-thread kernels only
    ("sync-hazards", sync_hazards.run),
    ("wgmma-groups", wgmma_groups.run),                  # gemm_async(wait=False)
    ("fuse-pointwise", fusion.run),
    ("dispatch", dispatch.run),
    ("lower-tiles", lower_tiles.run),
    ("lower-tmem", tmem.run),                            # per-thread kernels only
    ("place-fragments", addresses.place_fragments),      # per-thread kernels only
    ("plan-shared-memory", shared_plan.run),
    ("lower-addresses", addresses.lower_addresses),      # per-thread kernels only
    ("carry-wgmma-accumulators", wgmma_groups.carry_accumulators),
]

DUMP_ALL = "passes"  # TILEJIT_DUMP=passes prints the IR after every pass


class Stages(Mapping):
    """Pass name -> printed IR after that pass; ``.kernels`` the IR itself, ``.timings``
    seconds per pass. The IR is printed when first asked for (printing every stage was a
    quarter of a compile): passes leave their input untouched, so a stage's IR stays as
    the pass left it."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        self.kernels: dict[str, KernelIR] = {}
        self._texts: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        text = self._texts.get(name)
        if text is None:
            text = self._texts[name] = str(self.kernels[name])
        return text

    def __iter__(self):
        return iter(self.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    def timing_table(self) -> str:
        width = max((len(name) for name in self.timings), default=0)
        rows = [f"{name:<{width}}  {seconds * 1e3:9.3f} ms" for name, seconds in self.timings.items()]
        rows.append(f"{'total':<{width}}  {sum(self.timings.values()) * 1e3:9.3f} ms")
        return "\n".join(rows)


def get_pass(name: str, target_passes: Sequence[tuple] = ()) -> Pass:
    for pass_name, fn, *_before in (*PIPELINE, *target_passes):
        if pass_name == name:
            return fn
    known = ", ".join(n for n, *_ in (*PIPELINE, *target_passes))
    raise KeyError(f"no pass named {name!r}; the pipeline has: {known}")


def _ordered(target_passes: Sequence[tuple]) -> list[tuple[str, Pass]]:
    """:data:`PIPELINE` with the target's passes placed: each before the pass it names, or
    at the end."""
    selected = list(PIPELINE)
    for name, fn, *before in target_passes:
        names = [n for n, _ in selected]
        selected.insert(names.index(before[0]) if before else len(selected), (name, fn))
    return selected


def _verify(kernel: KernelIR, after: str, accepted: dict) -> None:
    from ..ir.verifier import verify
    try:
        verify(kernel, accepted)
    except TilejitError as err:
        raise type(err)(f"invalid IR {after}: {err.message}", err.loc) from None


def run_pipeline(kernel: KernelIR, verify: bool = True, dump: Iterable[str] | None = None,
                 passes: Iterable[str] | None = None,
                 target_passes: Sequence[tuple] = ()) -> tuple[KernelIR, Stages]:
    """Run ``passes`` (default: all of :data:`PIPELINE`, then ``target_passes``, in order)
    on ``kernel``. ``target_passes`` are the (name, pass) pairs the target's backend adds;
    a (name, pass, before) triple runs just before the pipeline's pass named ``before``.

    ``dump``: stage names whose IR to print to stderr (default: the ``TILEJIT_DUMP`` knob).
    Returns the final kernel and the :class:`Stages` record.
    """
    if dump is None:
        from ..knobs import knobs
        dump = knobs.dump
    dump = frozenset(dump)
    selected = _ordered(target_passes) if passes is None else \
        [(name, get_pass(name, target_passes)) for name in passes]
    stages = Stages()
    accepted: dict = {}   # the verifier's memo of op signatures it checked (ir/verifier.py)
    if verify:
        _verify(kernel, "before the first pass", accepted)
    for name, fn in selected:
        start = time.perf_counter()
        try:
            kernel = fn(kernel)
        except TilejitError:
            raise
        except Exception as err:  # a compiler bug: still name the kernel (passes with
            # per-op patterns report the op's line themselves; see ir/rewrite.py)
            raise CompilationError(f"internal compiler error in pass {name!r}: "
                                   f"{type(err).__name__}: {err}", kernel.loc) from None
        stages.timings[name] = time.perf_counter() - start
        stages.kernels[name] = kernel
        if verify:
            _verify(kernel, f"after pass {name!r}", accepted)
        if name in dump or DUMP_ALL in dump:
            print(f"// ----- IR after {name} ----- //\n{stages[name]}", file=sys.stderr)
    return kernel, stages


def main(argv: list[str] | None = None) -> int:
    from ..ir.parser import parse_kernel
    parser = argparse.ArgumentParser(prog="python -m tilejit.passes.pipeline",
                                     description="Run tilejit passes on a textual IR file.")
    parser.add_argument("file", help="textual IR ('-' reads stdin)")
    parser.add_argument("--passes", help="comma-separated pass names "
                        f"(default: all: {','.join(n for n, _ in PIPELINE)})")
    parser.add_argument("--timing", action="store_true", help="print per-pass wall time to stderr")
    parser.add_argument("--no-verify", action="store_true", help="skip the IR verifier")
    args = parser.parse_args(argv)
    source = "<stdin>" if args.file == "-" else args.file
    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    names = None if args.passes is None else [p.strip() for p in args.passes.split(",") if p.strip()]
    try:
        kernel = parse_kernel(text, source)
        kernel, stages = run_pipeline(kernel, verify=not args.no_verify, dump=(), passes=names)
    except (TilejitError, KeyError) as err:
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 1
    print(kernel, flush=True)
    if args.timing:
        print(stages.timing_table(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
