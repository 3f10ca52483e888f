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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

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

    def __post_init__(self):
        if self.order not in ("confidence", "random"):
            raise ValueError(f"order must be 'confidence' or 'random', got {self.order!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")


@dataclass
class Generation:
    prompts: list[list[int]]
    tokens: list[list[int]]  # completion ids, whole blocks through the block holding the stop token
    steps: list[list[int]]  # forward step at which each completion token was decoded
    probs: list[list[float]]  # probability each token was drawn with
    lengths: list[int]  # completion tokens up to and including the stop token (the text)
    forward_tokens: int = 0  # query tokens forwarded through the model
    texts: list[str] = field(default_factory=list)


class PrefixCache:
    """Block-level KV cache: the clean prefix stays fixed while a block is denoised.

    Implements the one method transformers' attention layers call (``update``); keys/values are
    appended only when ``commit`` is set (the forward of a completed block).
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
    device, B, n = policy.device, policy.block_size, len(prompts)
    S = config.sub_block or policy.sub_block
    if B % S:
        raise ValueError(f"sub_block {S} must divide the block size {B}")
    row_ids = list(range(n)) if row_ids is None else list(row_ids)
    temps = torch.tensor(temperatures or [config.temperature] * n, dtype=torch.float32, device=device)
    generators = [torch_generator(seed, r) for r in row_ids]

    # ---- layout: row r's first generation block is its block P_r // B; align them all at `base`
    first = [len(p) // B for p in prompts]
    tails = [len(p) - k * B for p, k in zip(prompts, first)]  # prompt tokens inside that block
    n_blocks = [-(-(len(p) + config.max_new_tokens) // B) - k for p, k in zip(prompts, first)]
    base = max(first)
    offset = torch.tensor([(base - k) * B for k in first], device=device)  # left padding, whole blocks
    prompt_blocks = torch.full((n, base * B), policy.pad_id, dtype=torch.long, device=device)
    for r, p in enumerate(prompts):
        if first[r]:
            prompt_blocks[r, -first[r] * B :] = torch.tensor(p[: first[r] * B])
    prompt_valid = torch.arange(base * B, device=device)[None] >= offset[:, None]
    context = prompt_blocks[:, :0]  # committed tokens (kept only without the cache)
    context_valid = prompt_valid[:, :0]

    # ---- outputs, indexed by completion position c = g*B + j - tail (block g, in-block position j)
    width = max(nb * B - t for nb, t in zip(n_blocks, tails))
    tokens_out = torch.full((n, width), policy.pad_id, dtype=torch.long)
    steps_out = torch.full((n, width), -1, dtype=torch.long)
    probs_out = torch.zeros((n, width), dtype=torch.float64)
    ends = [0] * n  # completion length covered by finished blocks
    alive = torch.arange(n, device=device)  # original row of each batch slot
    cache = PrefixCache() if config.use_cache else None
    counters = {"step": 0, "forward_tokens": 0}

    def forward(queries: torch.Tensor, queries_valid: torch.Tensor, start: int, commit: bool) -> torch.Tensor:
        """Hidden states (rows, Q, d) of ``queries`` at physical positions [start, start+Q) after the committed context.

        Callers take logits only where they need them: the prompt prefix and a committed block need
        their last position alone (a full-vocabulary logit tensor per prefix position is gigabytes at 7B).
        """
        nonlocal context, context_valid
        width_q = queries.shape[1]
        keys_valid = torch.cat([context_valid, queries_valid], 1)
        key_positions = (torch.arange(start + width_q, device=device)[None] - offset[alive][:, None]).clamp_min(0)
        query_positions = key_positions[:, start:]
        if cache is not None:
            cache.commit = commit
            mask = block_causal_mask(query_positions, key_positions, B, keys_valid)
            hidden = policy.hidden(queries, query_positions, mask, cache=cache)
        else:
            mask = block_causal_mask(key_positions, key_positions, B, keys_valid)
            hidden = policy.hidden(torch.cat([context, queries], 1), key_positions, mask)[:, start:]
        if commit:
            context_valid = keys_valid
            if cache is None:
                context = torch.cat([context, queries], 1)
        counters["step"] += 1
        counters["forward_tokens"] += mask.shape[0] * mask.shape[2]
        return hidden

    def record(slot: int, c: int, token: int, prob: float) -> None:
        r = int(alive[slot])
        tokens_out[r, c], steps_out[r, c], probs_out[r, c] = token, counters["step"], prob

    def first_tokens(last_logits: torch.Tensor, slots: list[int], block_start: list[int]) -> torch.Tensor:
        """AR step: draw the first token of each row's next block from its previous block's last logit."""
        rows = [int(alive[s]) for s in slots]
        u = torch.stack([torch.rand((), generator=generators[r], dtype=torch.float64) for r in rows]).to(device)
        tokens, probs = draw(last_logits[slots], temps[rows], config.top_p, u.float())
        for s, c, t, p in zip(slots, block_start, tokens.tolist(), probs.tolist()):
            record(s, c, t, p)
        return tokens

    # `pending` marks masked positions by state, not by token id, so a model that emits the mask id
    # cannot confuse the loop (the scorer conditions on the same states).
    block = torch.full((n, B), policy.mask_id, dtype=torch.long, device=device)
    pending = torch.ones((n, B), dtype=torch.bool, device=device)
    for r, p in enumerate(prompts):
        block[r, : tails[r]] = torch.tensor(p[first[r] * B :], dtype=torch.long)
        pending[r, : max(tails[r], 1)] = False
    if base > 0:  # full prompt blocks in one forward; prompts ending on a boundary take an AR first token
        last = policy.logits(forward(prompt_blocks, prompt_valid, 0, commit=True)[:, -1])
        ar_slots = [r for r in range(n) if tails[r] == 0]
        if ar_slots:
            block[ar_slots, 0] = first_tokens(last, ar_slots, [0] * len(ar_slots))

    generated = 0  # blocks generated so far (same for every alive row)
    while True:
        start = (base + generated) * B
        # ---- denoise the current block, sub-block by sub-block
        while pending.any():
            logits = shift_logits(policy.logits(forward(block, torch.ones_like(pending), start, commit=False)))
            sub_of_first_mask = pending.float().argmax(1) // S
            in_sub = pending & (torch.arange(B, device=device)[None] // S == sub_of_first_mask[:, None])
            for slot in pending.any(1).nonzero().flatten().tolist():
                r = int(alive[slot])
                candidates = in_sub[slot].nonzero().flatten()
                u = torch.rand(2, B, generator=generators[r], dtype=torch.float64)[:, : len(candidates)].to(device)
                tokens, probs = draw(logits[slot, candidates], temps[r].expand(len(candidates)), config.top_p, u[0].float())
                if config.order == "random":
                    chosen = u[1].argmax()[None]
                else:
                    chosen = ((probs > config.threshold) | (torch.arange(len(probs), device=device) == probs.argmax())).nonzero().flatten()
                for c in chosen.tolist():
                    j = int(candidates[c])
                    block[slot, j], pending[slot, j] = tokens[c], False
                    record(slot, generated * B + j - tails[r], int(tokens[c]), float(probs[c]))
        # ---- rows that produced the stop token or reached their length end here
        generated += 1
        keep = []
        for slot, r in enumerate(alive.tolist()):
            ends[r] = generated * B - tails[r]
            if not ((tokens_out[r, : ends[r]] == policy.eos_id).any() or generated >= n_blocks[r]):
                keep.append(slot)
        if not keep:
            break
        keep_t = torch.tensor(keep, device=device)
        alive, block = alive[keep_t], block[keep_t]
        context, context_valid = context[keep_t], context_valid[keep_t]
        if cache is not None:
            cache.select(keep_t)
        # ---- commit the completed block; its last logit gives the next block's first token
        last = policy.logits(forward(block, torch.ones_like(block, dtype=torch.bool), start, commit=True)[:, -1])
        block = torch.full_like(block, policy.mask_id)
        pending = torch.ones_like(block, dtype=torch.bool)
        pending[:, 0] = False
        starts = [generated * B - tails[r] for r in alive.tolist()]
        block[:, 0] = first_tokens(last, list(range(len(alive))), starts)

    tokens = [tokens_out[r, : ends[r]].tolist() for r in range(n)]
    lengths = [t.index(policy.eos_id) + 1 if policy.eos_id in t else len(t) for t in tokens]
    return Generation(
        prompts=[list(p) for p in prompts], tokens=tokens,
        steps=[steps_out[r, : ends[r]].tolist() for r in range(n)],
        probs=[probs_out[r, : ends[r]].tolist() for r in range(n)],
        lengths=lengths, forward_tokens=counters["forward_tokens"],
        texts=[policy.decode(t[: k - (t[k - 1 : k] == [policy.eos_id])]) for t, k in zip(tokens, lengths)],
    )
