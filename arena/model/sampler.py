"""Batched block-diffusion generation, as Fast-dLLM v2 decodes (arXiv 2509.26328, §3 and App. A.4).

For every row, blocks are aligned to absolute positions. The first generation block holds the
prompt tail; every later block starts with a token decoded from the last logit of the completed
previous block (the AR step); the remaining positions start masked and are denoised sub-block by
sub-block, left to right. Each denoising step forwards the current block against the cached clean
prefix, proposes a token for every masked position of the current sub-block (temperature, top-p),
and unmasks (``confidence`` order) every proposal whose probability exceeds ``threshold`` plus the
single most confident one, or (``random`` order) one uniformly chosen position. A completed block
is forwarded once more to append its keys/values to the prefix cache and to give the next block's
first token. A row stops after the block in which it produced the stop token.

Rows of different prompt lengths run in lockstep: each is left-padded by whole blocks so that all
first generation blocks share one physical block; position ids undo the padding, so every row sees
exactly what it would see alone. Random draws come from a per-row generator keyed by
(seed, row id), so a row's output does not depend on its batch mates.

Returned per completion token: the forward step at which it was decoded and the probability it
was drawn with (under the tempered, top-p-truncated distribution; for greedy rows, the untempered
probability of the argmax token). Completions cover whole blocks: tokens after the stop token in
its block were decoded too and belong to the block's likelihood; ``lengths`` marks the text.

The sub-block cache (``sub_block_cache``, off by default as in the reference; Fast-dLLM v2's
``use_block_cache``, its paper's DualCache) changes what a denoising step forwards, per row:
- A *refresh* forwards the whole block against the prefix cache (the step above) and keeps the
  keys/values of all B block positions, per layer. A row refreshes at the first step of every
  block, and at every step at which the first position of its current sub-block is still masked.
- Any other step forwards only the S positions of the row's current sub-block, at their absolute
  positions. In every layer their fresh keys/values overwrite their own slice of the kept block
  (the slice stays overwritten), and the S queries attend to the prefix cache plus all B kept
  positions: the other sub-blocks' keys/values are *stale*, those of the last refresh, computed
  when more of the block was masked (later positions decoded since then are not seen).
- Why the refresh rule: a step's logit for position j sits at j-1, and for the sub-block's first
  position j-1 lies outside the forwarded sub-block. While that position is masked the step needs
  the full block; once it is decoded the S forwarded positions give every logit still needed.
  In sub-block 0 the first position is always given (block start or prompt tail), so only the
  block's first step refreshes; in a later sub-block the row refreshes until that sub-block's
  first position is decoded, which in confidence order may be its last step.
- A block's kept keys/values are dropped when the block completes; the commit forward (and so the
  prefix cache and the next block's first token) is the same as without the cache.
The reference decides the refresh for the whole batch (refresh if any row needs it); here each row
decides alone (what the reference's single-sequence ``generate`` does), so that a row's output
still does not depend on its batch mates: rows that disagree are forwarded in two parts, and rows
already done with the block are not forwarded. The likelihood of a cached rollout is not the one
the scorer's estimators compute from full-block forwards (docs/performance.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from arena.model.kv_cache import BlockCache, BlockCacheView, PrefixCache
from arena.model.layout import block_causal_mask, shift_logits
from arena.model.policy import Policy
from arena.rng import torch_generator


@dataclass(frozen=True)
class SamplerConfig:
    max_new_tokens: int = 64  # generation ends with the block that reaches prompt length + this
    temperature: float = 0.0  # 0 = greedy; a per-row list may be passed to ``generate`` instead
    top_p: float = 1.0  # RL rollouts keep 1.0: the scorer does not apply top-p truncation
    threshold: float = 1.0  # confidence threshold; 1.0 unmasks one token per step
    sub_block: int | None = None  # None = the checkpoint's sub-block size
    order: str = "confidence"  # or "random": uniform unmasking order (the exactness tests need it)
    use_cache: bool = True
    sub_block_cache: bool = False  # Fast-dLLM v2's use_block_cache (module docstring); needs use_cache

    def __post_init__(self):
        if self.order not in ("confidence", "random"):
            raise ValueError(f"order must be 'confidence' or 'random', got {self.order!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.sub_block_cache and not self.use_cache:
            raise ValueError("sub_block_cache keeps the block's keys/values next to the prefix cache: it needs "
                             "use_cache=True")


@dataclass
class Generation:
    prompts: list[list[int]]
    tokens: list[list[int]]  # completion ids, whole blocks through the block holding the stop token
    steps: list[list[int]]  # forward step at which each completion token was decoded
    probs: list[list[float]]  # probability each token was drawn with
    lengths: list[int]  # completion tokens up to and including the stop token (the text)
    forward_tokens: int = 0  # query tokens forwarded through the model
    texts: list[str] = field(default_factory=list)


def draw(logits: torch.Tensor, temperature: torch.Tensor, top_p: float, uniforms: torch.Tensor):
    """Sample one token per row of ``logits`` (n, V) by inverse CDF with ``uniforms`` (n,).

    Returns (tokens, probabilities drawn with). Rows with temperature 0 take the argmax and report
    its untempered probability.
    """
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, 1.0, temperature)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep_sorted = (sorted_probs.cumsum(-1) - sorted_probs) < top_p  # the crossing token stays
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    cdf = probs.cumsum(-1)
    sampled = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None]).squeeze(1).clamp_max(probs.shape[-1] - 1)
    tokens = torch.where(greedy, probs.argmax(-1), sampled)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(1)


@torch.no_grad()
def generate(
    policy: Policy,
    prompts: list[list[int]],
    config: SamplerConfig = SamplerConfig(),
    seed: int = 0,
    row_ids: list[int] | None = None,
    temperatures: list[float] | None = None,
) -> Generation:
    """Generate completions for token-id prompts (each non-empty). ``row_ids`` key each row's draws."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs one or more prompts, each with at least one token")
    S = config.sub_block or policy.sub_block
    if policy.block_size % S:
        raise ValueError(f"sub_block {S} must divide the block size {policy.block_size}")
    decoding = Decoding(policy, prompts, config, S, seed, row_ids, temperatures)
    decoding.open_first_block()
    while True:
        start = decoding.block_start
        decoding.denoise(start)
        if not decoding.close_block():
            break
        decoding.commit(start)
    return decoding.generation()


class Decoding:
    """The state of one batched ``generate``: the aligned layout, the current block, the rows still decoding
    (``alive``: the original row of each batch slot) and what they have decoded."""

    def __init__(self, policy: Policy, prompts: list[list[int]], config: SamplerConfig, sub_block: int, seed: int,
                 row_ids: list[int] | None, temperatures: list[float] | None):
        device, B, n = policy.device, policy.block_size, len(prompts)
        self.policy, self.prompts, self.config, self.device = policy, prompts, config, device
        self.B, self.S = B, sub_block
        row_ids = list(range(n)) if row_ids is None else list(row_ids)
        self.temps = torch.tensor(temperatures or [config.temperature] * n, dtype=torch.float32, device=device)
        self.generators = [torch_generator(seed, r) for r in row_ids]

        # ---- layout: row r's first generation block is its block P_r // B; align them all at `base`
        self.first = [len(p) // B for p in prompts]
        self.tails = [len(p) - k * B for p, k in zip(prompts, self.first)]  # prompt tokens inside that block
        self.tails_t = torch.tensor(self.tails, device=device)
        self.n_blocks = [-(-(len(p) + config.max_new_tokens) // B) - k for p, k in zip(prompts, self.first)]
        self.base = max(self.first)
        # left padding, whole blocks
        self.offset = torch.tensor([(self.base - k) * B for k in self.first], device=device)
        # the committed tokens (kept only without the cache) and their validity
        self.context = torch.zeros((n, 0), dtype=torch.long, device=device)
        self.context_valid = torch.zeros((n, 0), dtype=torch.bool, device=device)

        # ---- outputs, indexed by completion position c = g*B + j - tail (block g, in-block position j)
        width = max(nb * B - t for nb, t in zip(self.n_blocks, self.tails))
        self.tokens_out = torch.full((n, width), policy.pad_id, dtype=torch.long)
        self.steps_out = torch.full((n, width), -1, dtype=torch.long)
        self.probs_out = torch.zeros((n, width), dtype=torch.float64)
        self.ends = [0] * n  # completion length covered by finished blocks
        self.alive = torch.arange(n, device=device)
        self.cache = PrefixCache() if config.use_cache else None
        self.block_cache = BlockCache() if config.sub_block_cache else None
        self.step, self.forward_tokens = 0, 0
        self.generated = 0  # blocks generated so far (same for every alive row)
        # `pending` marks masked positions by state, not by token id, so a model that emits the mask id
        # cannot confuse the loop (the scorer conditions on the same states).
        self.block = torch.full((n, B), policy.mask_id, dtype=torch.long, device=device)
        self.pending = torch.ones((n, B), dtype=torch.bool, device=device)

    @property
    def block_start(self) -> int:
        """The physical position of the current block."""
        return (self.base + self.generated) * self.B

    def forward(self, queries: torch.Tensor, queries_valid: torch.Tensor, start: int, commit: bool) -> torch.Tensor:
        """Hidden states (rows, Q, d) of ``queries`` at physical positions [start, start+Q) after the committed context.

        Callers take logits only where they need them: the prompt prefix and a committed block need
        their last position alone (a full-vocabulary logit tensor per prefix position is gigabytes at 7B).
        """
        policy, cache, B = self.policy, self.cache, self.B
        width_q = queries.shape[1]
        keys_valid = torch.cat([self.context_valid, queries_valid], 1)
        key_positions = self.positions(start + width_q)
        query_positions = key_positions[:, start:]
        if cache is not None:
            cache.commit = commit
            mask = block_causal_mask(query_positions, key_positions, B, keys_valid)
            hidden = policy.hidden(queries, query_positions, mask, cache=cache)
        else:
            mask = block_causal_mask(key_positions, key_positions, B, keys_valid)
            hidden = policy.hidden(torch.cat([self.context, queries], 1), key_positions, mask)[:, start:]
        if commit:
            self.context_valid = keys_valid
            if cache is None:
                self.context = torch.cat([self.context, queries], 1)
        self.step += 1
        self.forward_tokens += mask.shape[0] * mask.shape[2]
        return hidden

    def positions(self, length: int) -> torch.Tensor:
        """(alive rows, length) position ids of the physical positions [0, length): the left padding undone."""
        return (torch.arange(length, device=self.device)[None] - self.offset[self.alive][:, None]).clamp_min(0)

    def cached_logits(self, first_step: bool) -> torch.Tensor:
        """One denoising step through the sub-block cache (module docstring): logits (rows, B, V) of the current
        block at the positions forwarded (elsewhere zeros, never read: no candidate is predicted from there)."""
        B, S, pending = self.B, self.S, self.pending
        if first_step:
            self.block_cache.clear()
        sub_start = pending.float().argmax(1) // S * S  # in-block start of each row's current sub-block
        decoding = pending.any(1)
        refresh = decoding & (first_step | pending.gather(1, sub_start[:, None]).squeeze(1))
        whole = torch.arange(B, device=self.device).expand(len(pending), B)
        sub_block = sub_start[:, None] + torch.arange(S, device=self.device)
        logits = None
        for part, in_block, refreshing in ((refresh, whole, True), (decoding & ~refresh, sub_block, False)):
            slots = part.nonzero().flatten()
            if len(slots) == 0:
                continue
            in_block = in_block[slots]
            part_logits = self.policy.logits(self.sub_block_forward(None if len(slots) == len(part) else slots,
                                                                    in_block, refreshing))
            if logits is None:
                logits = part_logits.new_zeros(len(part), B, part_logits.shape[-1])
            logits[slots[:, None], in_block] = part_logits
        self.step += 1
        return logits

    def sub_block_forward(self, slots: torch.Tensor | None, in_block: torch.Tensor, refresh: bool) -> torch.Tensor:
        """Hidden states (rows, Q, d) of batch ``slots`` (None: every row) at in-block positions ``in_block``
        (rows, Q) through the sub-block cache: a refresh (the whole block) or a sub-block step."""
        B, start = self.B, self.block_start
        rows = slice(None) if slots is None else slots
        block = self.block[rows]
        keys_valid = torch.cat([self.context_valid[rows], torch.ones_like(block, dtype=torch.bool)], 1)
        key_positions = self.positions(start + B)[rows]
        query_positions = key_positions[:, start:].gather(1, in_block)
        mask = block_causal_mask(query_positions, key_positions, B, keys_valid)
        view = BlockCacheView(self.cache, self.block_cache, slots, None if refresh else in_block)
        self.forward_tokens += mask.shape[0] * mask.shape[2]
        return self.policy.hidden(block.gather(1, in_block), query_positions, mask, cache=view)

    def record(self, slots: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor, probs: torch.Tensor) -> None:
        """Store decoded ``tokens`` (drawn with ``probs``) of batch ``slots`` at completion ``positions``."""
        rows, positions = self.alive[slots].cpu(), positions.cpu()
        self.tokens_out[rows, positions] = tokens.cpu()
        self.steps_out[rows, positions] = self.step
        self.probs_out[rows, positions] = probs.cpu().double()

    def uniforms(self, slots, shape: tuple[int, ...]) -> torch.Tensor:
        """One float64 draw of ``shape`` from each slot's row generator, stacked (slots, *shape): a row's stream does
        not depend on its batch mates."""
        return torch.stack([torch.rand(shape, generator=self.generators[r], dtype=torch.float64)
                            for r in self.alive[slots].tolist()]).to(self.device)

    def first_tokens(self, last_logits: torch.Tensor, slots: list[int], block_start: list[int]) -> torch.Tensor:
        """AR step: draw the first token of each row's next block from its previous block's last logit."""
        u = self.uniforms(slots, ())
        tokens, probs = draw(last_logits[slots], self.temps[self.alive[slots]], self.config.top_p, u.float())
        self.record(torch.tensor(slots), torch.tensor(block_start), tokens, probs)
        return tokens

    def open_first_block(self) -> None:
        """The prompt tails into the first generation block; full prompt blocks in one forward, and an AR first
        token for prompts that end on a block boundary."""
        policy, B, n, device = self.policy, self.B, len(self.prompts), self.device
        prompt_blocks = torch.full((n, self.base * B), policy.pad_id, dtype=torch.long, device=device)
        for r, p in enumerate(self.prompts):
            if self.first[r]:
                prompt_blocks[r, -self.first[r] * B :] = torch.tensor(p[: self.first[r] * B])
        prompt_valid = torch.arange(self.base * B, device=device)[None] >= self.offset[:, None]
        for r, p in enumerate(self.prompts):
            self.block[r, : self.tails[r]] = torch.tensor(p[self.first[r] * B :], dtype=torch.long)
            self.pending[r, : max(self.tails[r], 1)] = False
        if self.base > 0:
            last = policy.logits(self.forward(prompt_blocks, prompt_valid, 0, commit=True)[:, -1])
            ar_slots = [r for r in range(n) if self.tails[r] == 0]
            if ar_slots:
                self.block[ar_slots, 0] = self.first_tokens(last, ar_slots, [0] * len(ar_slots))

    def denoise(self, start: int) -> None:
        """Denoise the current block at physical position ``start``, sub-block by sub-block."""
        config, B, S, device, pending = self.config, self.B, self.S, self.device, self.pending
        first_step = True
        while pending.any():
            if self.block_cache is None:
                logits = self.policy.logits(self.forward(self.block, torch.ones_like(pending), start, commit=False))
            else:
                logits = self.cached_logits(first_step)
            first_step = False
            logits = shift_logits(logits)
            sub_of_first_mask = pending.float().argmax(1) // S
            in_sub = pending & (torch.arange(B, device=device)[None] // S == sub_of_first_mask[:, None])
            # every candidate of every decoding row in one draw; candidate k of a row (in position order) takes
            # its row's k-th uniform, as the row decoded alone would
            slots = pending.any(1).nonzero().flatten()
            u = self.uniforms(slots, (2, B))
            candidates = in_sub[slots]
            row, j = candidates.nonzero(as_tuple=True)
            k = (candidates.cumsum(1) - 1)[row, j]  # each candidate's rank within its row
            tokens, probs = draw(logits[slots[row], j], self.temps[self.alive[slots[row]]], config.top_p,
                                 u[row, 0, k].float())
            # the candidate with the highest score (the first of ties, as argmax over the candidates alone); the
            # threshold compares in the probabilities' own dtype, as before
            by = u[row, 1, k] if config.order == "random" else probs
            score = torch.full(candidates.shape, -1.0, dtype=by.dtype, device=device)
            score[row, j] = by
            chosen = torch.arange(B, device=device)[None] == score.argmax(1, keepdim=True)
            if config.order == "confidence":
                chosen |= score > config.threshold
            take = chosen[row, j]
            row, j, tokens, probs = row[take], j[take], tokens[take], probs[take]
            self.block[slots[row], j], pending[slots[row], j] = tokens, False
            self.record(slots[row], self.generated * B + j - self.tails_t[self.alive[slots[row]]], tokens, probs)

    def close_block(self) -> bool:
        """End the rows that produced the stop token or reached their length; whether any row goes on."""
        self.generated += 1
        keep = []
        for slot, r in enumerate(self.alive.tolist()):
            self.ends[r] = self.generated * self.B - self.tails[r]
            stopped = (self.tokens_out[r, : self.ends[r]] == self.policy.eos_id).any()
            if not (stopped or self.generated >= self.n_blocks[r]):
                keep.append(slot)
        if not keep:
            return False
        keep_t = torch.tensor(keep, device=self.device)
        self.alive, self.block = self.alive[keep_t], self.block[keep_t]
        self.context, self.context_valid = self.context[keep_t], self.context_valid[keep_t]
        if self.cache is not None:
            self.cache.select(keep_t)
        return True

    def commit(self, start: int) -> None:
        """Commit the completed block at ``start``; its last logit gives the next block's first token."""
        policy, B = self.policy, self.B
        last = policy.logits(self.forward(self.block, torch.ones_like(self.block, dtype=torch.bool), start,
                                          commit=True)[:, -1])
        self.block = torch.full_like(self.block, policy.mask_id)
        self.pending = torch.ones_like(self.block, dtype=torch.bool)
        self.pending[:, 0] = False
        starts = [self.generated * B - self.tails[r] for r in self.alive.tolist()]
        self.block[:, 0] = self.first_tokens(last, list(range(len(self.alive))), starts)

    def generation(self) -> Generation:
        policy, n = self.policy, len(self.prompts)
        tokens = [self.tokens_out[r, : self.ends[r]].tolist() for r in range(n)]
        lengths = [t.index(policy.eos_id) + 1 if policy.eos_id in t else len(t) for t in tokens]
        return Generation(
            prompts=[list(p) for p in self.prompts], tokens=tokens,
            steps=[self.steps_out[r, : self.ends[r]].tolist() for r in range(n)],
            probs=[self.probs_out[r, : self.ends[r]].tolist() for r in range(n)],
            lengths=lengths, forward_tokens=self.forward_tokens,
            texts=[policy.decode(t[: k - (t[k - 1 : k] == [policy.eos_id])]) for t, k in zip(tokens, lengths)],
        )
