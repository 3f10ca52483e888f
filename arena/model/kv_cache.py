"""The sampler's key/value caches: the clean prefix, and the current block's (the sub-block cache).

Both implement the two methods transformers' attention layers and decoder call on a cache
(``update``, ``get_seq_length``), so ``Policy.hidden`` runs them like any cache.

``PrefixCache`` holds the committed blocks. ``BlockCache`` adds Fast-dLLM v2's ``use_block_cache``
(its paper's DualCache, semantics in ``arena.model.sampler``): the keys/values of every position of
the current block, as a full forward of the block last computed them, per row. One forward sees the
cache through a ``BlockCacheView`` for some of the rows: either a refresh (the forwarded block's
keys/values replace the row's stored ones) or a sub-block step (the forwarded sub-block's
keys/values overwrite their own slice of the stored block, and the queries attend to the prefix
plus the whole stored block).
"""
from __future__ import annotations

import torch


class PrefixCache:
    """Block-level KV cache: the clean prefix stays fixed while a block is denoised.

    Keys/values are appended only when ``commit`` is set (the forward of a completed block).
    """

    def __init__(self):
        self.keys, self.values, self.commit = [], [], True

    def update(self, key, value, layer_idx, *args, **kwargs):
        if layer_idx == len(self.keys):
            self.keys.append(key[:, :, :0])
            self.values.append(value[:, :, :0])
        full_key = torch.cat([self.keys[layer_idx], key], dim=-2)
        full_value = torch.cat([self.values[layer_idx], value], dim=-2)
        if self.commit:
            self.keys[layer_idx], self.values[layer_idx] = full_key, full_value
        return full_key, full_value

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[0].shape[-2] if self.keys else 0

    def select(self, rows: torch.Tensor) -> None:
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]


class BlockCache:
    """The current block's keys/values, (rows, kv heads, B, head dim) per layer, for every alive row.

    Empty at the start of each block (``clear``): the first step of a block refreshes every row, so the
    stored tensors are that forward's own; later refreshes and sub-block steps write the rows they forward.
    """

    def __init__(self):
        self.keys, self.values = [], []

    def clear(self) -> None:
        self.keys, self.values = [], []


class BlockCacheView:
    """What one forward of batch ``slots`` (None: every row) sees: their prefix keys/values, then their block's.

    ``in_block`` None: a refresh, the queries are the whole block and their keys/values are stored.
    Else (rows, Q) in-block positions of the queries: their keys/values overwrite those positions of
    the stored block (kept, as the reference keeps them) and the queries attend to the whole stored block.
    """

    def __init__(self, prefix: PrefixCache, block: BlockCache, slots: torch.Tensor | None,
                 in_block: torch.Tensor | None):
        self.prefix, self.block, self.slots, self.in_block = prefix, block, slots, in_block

    def update(self, key, value, layer_idx, *args, **kwargs):
        return self._attended(self.block.keys, key, self.prefix.keys, layer_idx), \
            self._attended(self.block.values, value, self.prefix.values, layer_idx)

    def _attended(self, stored: list, new: torch.Tensor, prefix: list, layer: int) -> torch.Tensor:
        """Store ``new`` (rows, heads, Q, d) in layer ``layer`` of ``stored``; the prefix and block it attends to."""
        rows = self.slots
        if self.in_block is None and rows is None:  # every row refreshes (always so at a block's first step)
            stored[layer:layer + 1] = [new]
        elif self.in_block is None:
            stored[layer][rows] = new
        else:  # advanced indices on both sides of the head dimension index as (rows, Q, heads, d)
            every = torch.arange(len(stored[layer]), device=new.device) if rows is None else rows
            stored[layer][every[:, None], :, self.in_block] = new.transpose(1, 2)
        block = stored[layer] if rows is None else stored[layer][rows]
        if layer >= len(prefix):  # no committed prefix yet
            return block
        return torch.cat([prefix[layer] if rows is None else prefix[layer][rows], block], dim=-2)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.prefix.get_seq_length(layer_idx)
