"""The NKI (AWS Trainium) target's backend object: a NeuronCore's capabilities, its
instruction families (``rules/``) and the printer of NKI source (``emit.py``).

It emits one Python module per kernel (stage ``nki``) for the Neuron SDK to compile; it
launches nothing here (``device`` None), so loading gives the source and launching is a
LaunchError saying where to run it (docs/nki.md).
"""
from __future__ import annotations

from tilejit.errors import LaunchError
from tilejit.passes.dispatch import TEAM_ONCE

from ..backend import Backend, Capabilities, register_backend
from .loops import mark_independent_loops
from .peel import peel_ragged_tiles

__all__ = ["BACKEND", "NkiBackend", "NEURON_CORE"]

# A NeuronCore runs one instruction stream per program: each engine instruction covers a
# whole tile (up to 128 partitions by a free dimension), so a team's tile is issued once
# (team_once) and there are no threads, per-thread vectors or registers to count. Engines
# read and write SBUF and PSUM by tiles, never one element at a time: the generic
# element-loop rules do not apply. Memory: SBUF 24 MiB (128 partitions x 192 KiB), PSUM
# 2 MiB (128 partitions x 16 KiB: 8 banks of 2 KiB each). nc_matmul takes a stationary
# tile of at most 128 (k, partitions) x 128 (m) and a moving one of 128 (k) x 512 (n).
# NKI compiles a kernel per tensor shape: the runtime specializes them (static_shapes).
NEURON_CORE = Capabilities(
    distribution=TEAM_ONCE,
    vector_bytes=0,
    registers_per_thread=0,
    shared_memory_per_cta=128 * 192 * 1024,
    max_threads_per_cta=1,
    element_loops=False,
    tensor_core_shapes={"nc_matmul": ((128, 512, 128),)},
    partitions=128,
    accumulator_memory=128 * 16 * 1024,
    static_shapes=True,
)


class NkiBackend(Backend):
    name = "nki"
    device = None   # it emits source to run under the Neuron SDK: it launches nothing
    text_stages = ("nki",)
    capabilities = NEURON_CORE
    passes = (("nki-peel-ragged-tiles", peel_ragged_tiles, "dispatch"),
              ("nki-independent-loops", mark_independent_loops))

    def import_rules(self) -> None:
        from . import ops  # noqa: F401  (the nki.* instructions in the op catalogue)
        from .rules import affine, copy, gemm, pointwise, reduce  # noqa: F401  (they register)

    def arch_id(self, arch: str | None) -> str:
        return arch or "trn1"

    def compile(self, lowered, debug: bool) -> tuple[dict[str, bytes], dict]:
        from .emit import print_nki
        return {"nki": print_nki(lowered).encode()}, {}

    def load(self, files: dict[str, bytes], meta: dict):
        return files["nki"].decode()

    def launchers(self, module, arguments=None):
        def launch(grid, records, stream=None):
            raise LaunchError("the nki target emits NKI source and launches nothing here: "
                              "take kernel.compile(...).asm['nki'] to a Trainium machine "
                              "(docs/nki.md)")
        return launch, launch


BACKEND = register_backend(NkiBackend())
