"""The NKI (AWS Trainium) target's backend object: a NeuronCore's capabilities; emitting
NKI source comes later.

Until it exists, compiling for ``nki`` raises the CompilationError of :class:`Placeholder`.
"""
from __future__ import annotations

from tilejit.passes.dispatch import TEAM_ONCE

from ..backend import Capabilities, Placeholder, register_backend

__all__ = ["BACKEND", "NkiBackend", "NEURON_CORE"]

# A NeuronCore runs one instruction stream per program: each engine instruction covers a
# whole tile (up to 128 partitions by a free dimension), so a team's tile is issued once
# (team_once) and there are no threads, per-thread vectors or registers to count. Engines
# read and write SBUF and PSUM by tiles, never one element at a time: the generic
# element-loop rules do not apply. Memory: SBUF 24 MiB (128 partitions x 192 KiB), PSUM
# 2 MiB (128 partitions x 16 KiB: 8 banks of 2 KiB each). nc_matmul takes a stationary
# tile of at most 128 (k, partitions) x 128 (m) and a moving one of 128 (k) x 512 (n).
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
)


class NkiBackend(Placeholder):
    name = "nki"
    device = None   # it emits source to run under the Neuron SDK: it launches nothing
    text_stages = ("nki",)
    capabilities = NEURON_CORE


BACKEND = register_backend(NkiBackend())
