"""The cuda printer's TMA copies (``ir/ops_tma.py``) as inline PTX, sm_90 on.

* ``tma_load_at`` is ``cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx
  ::bytes [dst], [map, {coords}], [bar];`` (the box's bytes complete on the mbarrier), with
  ``multicast`` ``...::bytes.multicast::cluster [dst], [map, {coords}], [bar], mask;`` (a
  16-bit ``ctaMask``: the box and its completion land in each CTA of the mask);
* ``tma_store_at`` is ``cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group [map,
  {coords}], [src];``;
* ``bulk_commit`` / ``bulk_wait {pending = N, read}`` are ``cp.async.bulk.commit_group;`` /
  ``cp.async.bulk.wait_group[.read] N;``; ``fence_proxy_async`` is
  ``fence.proxy.async.shared::cta;``.

PTX names coordinates innermost first (the reverse of the IR's). Each distinct (tensor
argument, box, swizzle) gets a tensor map, a ``const __grid_constant__ tj_tensor_map``
parameter after the kernel's own; the printer records them (``CudaPrinter.tensor_maps``)
for the launcher, which encodes them from the tensor argument (``tensor_map``).
"""
from __future__ import annotations

from tilejit.ir.core import Operation
from tilejit.ir.ops_tma import multicast_ranks

from .emit import CudaPrinter
from .emit_cluster import check_ranks
from .emit_async import _needs

__all__ = ["HANDLERS", "MIN_SM"]

MIN_SM = 90


def _map(p: CudaPrinter, op: Operation, tensor) -> str:
    """The C name of the tensor map of ``tensor`` (a kernel parameter) with ``op``'s box."""
    param = p.kernel.param_names[p.kernel.params.index(tensor)]
    key = (param, tuple(op.attrs["box"]), op.attrs["swizzle"], tensor.type.dtype.name)
    for known, name in p.tensor_maps:
        if known == key:
            return name
    name = p.fresh(f"map_{param}")
    p.tensor_maps.append((key, name))
    return name


def _tensor(p: CudaPrinter, op: Operation, tensor, coords) -> tuple[str, str, list[str]]:
    """(the ``.Nd`` of the instruction, ``[map, {coords}]`` with operand numbers from 1,
    the coordinates' operands)."""
    rank = len(coords)
    inner_first = list(reversed(coords))
    text = "[%1, {" + ", ".join(f"%{2 + k}" for k in range(rank)) + "}]"
    operands = [f'"l"(reinterpret_cast<unsigned long long>(&{_map(p, op, tensor)}))'] + \
        [f'"r"((int){p[c]})' for c in inner_first]
    return f"{rank}d", text, operands


def print_tma_load_at(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "TMA")
    dst, dst_offset, src, bar, index, *coords = op.operands
    nd, place, operands = _tensor(p, op, src, coords)
    bar_operand = f"%{2 + len(coords)}"
    mask = op.attrs["multicast"]
    check_ranks(p, op, multicast_ranks(op), f"multicast={mask:#x}")
    multicast, mask_operand = ("", "") if not mask else \
        (".multicast::cluster", f", %{3 + len(coords)}")
    mask_value = f', "h"((unsigned short){mask:#x})' if mask else ""
    p.emit(f'asm volatile("cp.async.bulk.tensor.{nd}.shared::cluster.global.mbarrier::'
           f'complete_tx::bytes{multicast} [%0], {place}, [{bar_operand}]{mask_operand};" :: '
           f'"r"(tj_smem_addr(&{p[dst]}[{p[dst_offset]}])), ' + ", ".join(operands)
           + f', "r"(tj_smem_addr(&{p[bar]}[{p[index]}])){mask_value} : "memory");')


def print_tma_store_at(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "TMA")
    dst, src, src_offset, *coords = op.operands
    nd, place, operands = _tensor(p, op, dst, coords)
    p.emit(f'asm volatile("cp.async.bulk.tensor.{nd}.global.shared::cta.bulk_group {place}, '
           f'[%0];" :: "r"(tj_smem_addr(&{p[src]}[{p[src_offset]}])), ' + ", ".join(operands)
           + ' : "memory");')


def print_bulk_commit(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "bulk async groups")
    p.emit('asm volatile("cp.async.bulk.commit_group;" ::: "memory");')


def print_bulk_wait(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "bulk async groups")
    read = ".read" if op.attrs["read"] else ""
    p.emit(f'asm volatile("cp.async.bulk.wait_group{read} {op.attrs["pending"]};" ::: '
           '"memory");')


def print_fence_proxy_async(p: CudaPrinter, op: Operation) -> None:
    _needs(p, op, MIN_SM, "the async proxy")
    p.emit('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')


HANDLERS = {"tma_load_at": print_tma_load_at, "tma_store_at": print_tma_store_at,
            "bulk_commit": print_bulk_commit, "bulk_wait": print_bulk_wait,
            "fence_proxy_async": print_fence_proxy_async}
