"""Every attention mask, position id and token shift of arena lives here (docs/design.md explains them).

Conventions of Fast-dLLM v2:
- Blocks are aligned to absolute positions of the whole sequence: block k is [kB, (k+1)B).
- Attention is bidirectional inside a block and causal across blocks (``block_causal_mask``).
- Token shift: the logit at position j-1 scores the token at j. For the first token of a block
  (j = kB) that logit sits at the end of the *completed previous block*, seen clean; for any other
  position it sits inside the same block.

Packed scoring layout (``PackedLayout``): one clean stream over positions [0, T) followed by K noisy
streams over positions [noisy_start, T) (noisy_start is block aligned), all with the same position
ids as the clean stream. Clean block k attends to clean blocks <= k; noisy block k of stream s
attends to itself (stream s, bidirectional) and to clean blocks < k. One forward then scores every
block of every stream: the first token of block k from the clean stream at kB-1, every other
position j from its own noisy stream at j-1. K noisy streams share one clean stream, so that K Monte Carlo
draws of an estimator cost K noisy streams in one forward, not K forwards.

What a noisy stream shows is a view of the clean sequence with some positions replaced by the mask
token. Two families of views follow the sampler, which decodes a block sub-block by sub-block, left
to right, later sub-blocks masked until their turn (``arena.model.sampler``):
- ``sub_block_views``: for mask d and in-block sub-block index s, the view shows mask d inside
  sub-block s, earlier sub-blocks clean, the maskable positions of later sub-blocks masked; stream
  d * (B / S) + s (``sub_block_stream``). With S = B it is mask d itself, in stream d.
- ``step_views``: view v shows the state the sampler was in at a block's (v+1)-th decoding step:
  positions decoded at earlier steps clean, the others masked (``step_ranks``).
Each is a whole block (the masked later positions are keys the sampler attended to), so K views of
every block cost K x T noisy tokens in one forward.

Masks are dense booleans (True = may attend) of shape (batch, 1, queries, keys), the format SDPA
takes on CPU and GPU alike; key validity (padding) is folded in per row.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def block_of(positions: torch.Tensor, block_size: int) -> torch.Tensor:
    return torch.div(positions, block_size, rounding_mode="floor")


def block_causal_mask(
    query_positions: torch.Tensor, key_positions: torch.Tensor, block_size: int, key_valid: torch.Tensor
) -> torch.Tensor:
    """(batch, 1, Q, K) mask of the inference attention: query block >= key block, valid keys only.

    ``query_positions``/``key_positions`` are (batch, Q)/(batch, K) absolute positions (rows may be
    offset by padding); ``key_valid`` is (batch, K).
    """
    q_block = block_of(query_positions, block_size)[:, :, None]
    k_block = block_of(key_positions, block_size)[:, None, :]
    return ((q_block >= k_block) & key_valid[:, None, :])[:, None]


def causal_mask(valid: torch.Tensor) -> torch.Tensor:
    """(batch, 1, T, T) plain autoregressive mask over valid keys (the ``ar`` estimator)."""
    T = valid.shape[1]
    lower = torch.ones(T, T, dtype=torch.bool, device=valid.device).tril()
    return (lower[None] & valid[:, None, :])[:, None]


def shift_logits(block_logits: torch.Tensor) -> torch.Tensor:
    """Inside a block, position j is predicted by the logit at j-1; position 0 gets a filler copy.

    The filler is never used: position 0 of a block is always given (prompt tail) or decoded from
    the previous block's last logit.
    """
    return torch.cat([block_logits[:, :1], block_logits[:, :-1]], dim=1)


@dataclass(frozen=True)
class PackedLayout:
    """Index bookkeeping of the packed [clean | noisy_1 | ... | noisy_K] scoring layout."""

    length: int  # T, clean sequence length (padded)
    block_size: int
    n_noisy: int = 1
    noisy_start: int = 0  # first position covered by the noisy streams; a multiple of block_size

    def __post_init__(self):
        if self.noisy_start % self.block_size or not 0 <= self.noisy_start < self.length:
            raise ValueError(f"noisy_start={self.noisy_start} must be block aligned and inside [0, {self.length})")

    @property
    def noisy_length(self) -> int:
        return self.length - self.noisy_start

    @property
    def total(self) -> int:
        return self.length + self.n_noisy * self.noisy_length

    def _streams(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per packed slot: its absolute position and its stream (0 = clean, s >= 1 = noisy s)."""
        clean = torch.arange(self.length, device=device)
        noisy = torch.arange(self.noisy_start, self.length, device=device).repeat(self.n_noisy)
        stream = torch.arange(1, self.n_noisy + 1, device=device).repeat_interleave(self.noisy_length)
        positions = torch.cat([clean, noisy])
        return positions, torch.cat([torch.zeros_like(clean), stream])

    def position_ids(self, batch: int, device=None) -> torch.Tensor:
        return self._streams(device)[0].expand(batch, -1)

    def attention_mask(self, valid: torch.Tensor) -> torch.Tensor:
        """(batch, 1, total, total); ``valid`` (batch, T) marks real (non-padding) clean positions."""
        positions, stream = self._streams(valid.device)
        block = block_of(positions, self.block_size)
        q_block, k_block = block[:, None], block[None, :]
        q_stream, k_stream = stream[:, None], stream[None, :]
        clean_to_clean = (q_stream == 0) & (k_stream == 0) & (k_block <= q_block)
        noisy_to_self = (q_stream > 0) & (k_stream == q_stream) & (k_block == q_block)
        noisy_to_clean = (q_stream > 0) & (k_stream == 0) & (k_block < q_block)
        structure = clean_to_clean | noisy_to_self | noisy_to_clean
        key_valid = torch.cat([valid, valid[:, self.noisy_start :].repeat(1, self.n_noisy)], dim=1)
        return (structure[None] & key_valid[:, None, :])[:, None]

    def pack(self, clean: torch.Tensor, noisy: torch.Tensor) -> torch.Tensor:
        """Token ids in packed order from clean (batch, T) and noisy (batch, K, T - noisy_start)."""
        return torch.cat([clean, noisy.flatten(1)], dim=1)

    def predictor_index(self, positions: torch.Tensor, stream: int | torch.Tensor = 1) -> torch.Tensor:
        """Packed slot whose output scores the token at each absolute position (the token shift).

        Block starts are scored from the clean stream at j-1; every other position from noisy
        stream ``stream`` (an int, or one per position) at j-1. Positions must be >= max(1, noisy_start).
        """
        block_start = positions % self.block_size == 0
        noisy_slot = self.length + (stream - 1) * self.noisy_length + (positions - 1 - self.noisy_start)
        return torch.where(block_start, positions - 1, noisy_slot)


# ---------------------------------------------------------------------------------------------
# views of the noisy streams: what the sampler saw (sub-blocks, decoding steps)


def sub_block_index(positions: torch.Tensor, block_size: int, sub_block: int) -> torch.Tensor:
    """In-block index of the sub-block holding each absolute position: (j mod B) // S."""
    return torch.div(positions % block_size, sub_block, rounding_mode="floor")


def sub_block_views(masks: torch.Tensor, maskable: torch.Tensor, block_size: int, sub_block: int) -> torch.Tensor:
    """(n, D * B/S, T) views of the sub-block chain from masks (n, D, T) and maskable (n, 1 or D, T).

    Stream d * (B/S) + s shows mask d inside in-block sub-block s of every block, the positions of
    earlier sub-blocks clean and the maskable positions of later sub-blocks masked: the state of the
    sampler while it decoded sub-block s. With sub_block = block_size the views are ``masks``.
    """
    n, D, T = masks.shape
    index = sub_block_index(torch.arange(T, device=masks.device), block_size, sub_block)
    views = [(masks & (index == s)) | (maskable & (index > s)) for s in range(block_size // sub_block)]
    return torch.stack(views, 2).reshape(n, D * len(views), T)


def sub_block_stream(draw: torch.Tensor, positions: torch.Tensor, block_size: int, sub_block: int) -> torch.Tensor:
    """0-based stream of ``sub_block_views`` that scores mask ``draw`` at ``positions`` (its own sub-block's view)."""
    return draw * (block_size // sub_block) + sub_block_index(positions, block_size, sub_block)


def step_ranks(steps: torch.Tensor, maskable: torch.Tensor, block_size: int) -> torch.Tensor:
    """(n, T) rank of each maskable position's decoding step among the distinct steps of its block.

    ``steps`` (n, T): the forward step at which the sampler decoded each position. Positions decoded
    together (one step, confidence threshold < 1) share a rank; elsewhere the rank is -1.
    """
    n, T = steps.shape
    s = torch.where(maskable, steps, -1).reshape(n, T // block_size, block_size)
    m = maskable.reshape(n, T // block_size, block_size)
    earlier = m[:, :, None, :] & (s[:, :, None, :] < s[:, :, :, None])  # [i, j]: j decoded before i
    same = m[:, :, None, :] & (s[:, :, None, :] == s[:, :, :, None])
    first_of_step = ~(same & torch.ones(block_size, block_size, dtype=torch.bool, device=steps.device).tril(-1)).any(-1)
    rank = (earlier & first_of_step[:, :, None, :]).sum(-1)  # distinct earlier steps
    return torch.where(m, rank, -1).reshape(n, T)


def step_views(ranks: torch.Tensor, views: int) -> torch.Tensor:
    """(n, views, T): view v masks every position of step rank >= v (its own step and the later ones)."""
    v = torch.arange(views, device=ranks.device)[None, :, None]
    return ranks[:, None, :] >= v
