"""Work split over the ranks of a run across processes (``torchrun`` / ``accelerate launch``), and gathered back.

Each rank takes the items rank, rank + world, ... of a list every rank holds alike, works on them, and ``gather``
hands every rank the results of all ranks. The split is by global item index, so whatever keys an item's
randomness by that index (the sampler's rows: (decoding seed, row)) draws the same on any number of processes.
On one process (no process group) the rank's share is every item and ``gather`` returns its argument.
"""
from __future__ import annotations

from methods.base import world


def share(count: int) -> list[int]:
    """The indices of ``count`` items that this rank takes: rank, rank + world, ... (all of them on one process)."""
    rank, size = world()
    return list(range(rank, count, size))


def gather(items: list) -> list:
    """Every rank's ``items`` (picklable), concatenated in rank order, on every rank: a collective that every rank
    must call alike."""
    size = world()[1]
    if size == 1:
        return list(items)
    import torch.distributed as dist

    every: list = [None] * size
    dist.all_gather_object(every, list(items))
    return [item for part in every for item in part]
