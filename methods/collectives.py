"""Collectives every method uses when a torch.distributed process group is initialised (one process: no-ops),
beside ``methods.fsdp``, which shards the model itself."""
from __future__ import annotations

import zlib

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` across ranks in place (no-op on one process)."""
    if world()[1] > 1:
        dist.all_reduce(tensor)
    return tensor


def all_reduce_sums(values: dict[str, float], max_keys: tuple[str, ...] = ()) -> dict[str, float]:
    """Named scalars summed over ranks (those in ``max_keys``: their maximum), in one collective.

    Every rank must pass the same names: the values travel in sorted-name order with a checksum of
    the names, and ranks whose names differ raise instead of mixing values up. Every rank reduces
    the same gathered float64 table, so all get the same bits. One process: the values as they are.
    """
    names = sorted(values)
    size = world()[1]
    if size == 1:
        return {name: float(values[name]) for name in names}
    signature = zlib.crc32(repr((names, sorted(max_keys))).encode())  # exact in float64
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    local = torch.tensor([signature, *(values[name] for name in names)], dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(gathered, local)
    table = torch.stack(gathered).cpu()
    if (table[:, 0] != signature).any():
        raise RuntimeError(f"ranks reduce different statistics; this rank has {names} (max: {sorted(max_keys)})")
    return {name: float(column.max() if name in max_keys else column.sum())
            for name, column in zip(names, table[:, 1:].T)}
