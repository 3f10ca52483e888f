"""Exact oracles for one block of a block-diffusion model (tiny vocabularies and blocks <= 8).

They enumerate subsets (one forward of 2^m rows for m denoised positions), so they serve the tests
and the estimator report (``arena estimators``) on small blocks only. All are built on a plain full
forward of the HF model with an attention mask written out here by position loops, independent of
``arena.model.layout``: the block under study attends to itself and to the clean prefix before it, the
prefix is block-causal.

Sub-blocks: the sampler decodes a block sub-block by sub-block, left to right, the later sub-blocks
masked meanwhile. Its likelihood of a block is the chain Σ_s log p(sub-block s | prefix, earlier
sub-blocks clean, later ones masked), each term the random-order likelihood of that sub-block's
positions (``sub_block_chain``: one enumeration per sub-block, with the later positions held masked),
and the matching ELBO is the sum of the per-sub-block analytic ELBOs. Sub-block = block gives the
whole-block quantities.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch


def loop_block_causal_mask(length: int, block_size: int) -> torch.Tensor:
    rows = [[(k // block_size) <= (q // block_size) for k in range(length)] for q in range(length)]
    return torch.tensor(rows, dtype=torch.bool)[None, None]


@torch.no_grad()
def next_token_logprobs(policy, sequences: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) at every position of (n, L) sequences; index j-1 predicts token j."""
    n, length = sequences.shape
    mask = loop_block_causal_mask(length, policy.block_size).to(sequences.device).expand(n, 1, length, length)
    positions = torch.arange(length, device=sequences.device)[None].expand(n, -1)
    logits = policy.model(input_ids=sequences, position_ids=positions, attention_mask=mask).logits.float()
    return torch.log_softmax(logits / temperature, dim=-1)


def conditionals(policy, prefix: list[int], block: list[int], masked: list[int], temperature: float = 1.0,
                 held: list[int] = ()):
    """For every subset V of the ``masked`` in-block positions kept visible: log p(block[i] | prefix, V).

    Returns {frozenset(V): {i: log p}} for i in masked \\ V. ``block`` holds the true tokens; the
    in-block positions ``held`` are masked in every row (the later sub-blocks), the others shown.
    """
    return conditionals_many(policy, prefix, [block], masked, temperature, held)[0]


def conditionals_many(policy, prefix: list[int], blocks: list[list[int]], masked: list[int], temperature: float = 1.0,
                      held: list[int] = (), rows_per_forward: int = 4096) -> list[dict]:
    """``conditionals`` of several blocks after the same prefix, in forwards of many rows."""
    subsets = [frozenset(s) for r in range(len(masked) + 1) for s in itertools.combinations(masked, r)]
    rows = []
    for block in blocks:
        for visible in subsets:
            noisy = [policy.mask_id if i in held or (i in masked and i not in visible) else t for i, t in enumerate(block)]
            rows.append(prefix + noisy)
    start, out = len(prefix), []
    for lo in range(0, len(rows), rows_per_forward):
        logp = next_token_logprobs(policy, torch.tensor(rows[lo : lo + rows_per_forward], device=policy.device), temperature)
        for row in range(logp.shape[0]):
            index = lo + row
            block, visible = blocks[index // len(subsets)], subsets[index % len(subsets)]
            if index % len(subsets) == 0:
                out.append({})
            out[-1][visible] = {i: float(logp[row, start + i - 1, block[i]]) for i in masked if i not in visible}
    return out


def exact_random_order_logprob(cond: dict, masked: list[int]) -> float:
    """log P(block) under the sampler that unmasks one uniformly random masked position at a time.

    Dynamic programme over unmasked sets: P(S) = sum_{i in S} P(S - i) * p(y_i | y_{S - i}) / (m - |S - i|).
    """
    m = len(masked)
    prob = {frozenset(): 1.0}
    for size in range(1, m + 1):
        for subset in itertools.combinations(masked, size):
            s = frozenset(subset)
            prob[s] = sum(prob[s - {i}] * math.exp(cond[s - {i}][i]) / (m - size + 1) for i in s)
    return math.log(prob[frozenset(masked)])


def analytic_elbo(cond: dict, masked: list[int]) -> float:
    """ELBO = integral_0^1 (1/t) E_{M~Bern(t)^m}[sum_{i in M} log p(y_i | y_notM)] dt, summed exactly.

    Each mask set M of size l carries weight integral t^(l-1) (1-t)^(m-l) dt = Beta(l, m-l+1).
    """
    m, total = len(masked), 0.0
    for size in range(1, m + 1):
        weight = math.gamma(size) * math.gamma(m - size + 1) / math.gamma(m + 1)
        for subset in itertools.combinations(masked, size):
            visible = frozenset(masked) - frozenset(subset)
            total += weight * sum(cond[visible][i] for i in subset)
    return total


@dataclass
class OracleSubBlock:
    """Exact terms of one sub-block: its denoised positions, held-masked later positions, conditionals."""

    masked: list[int]  # in-block positions the sampler denoises in this sub-block
    held: list[int]  # denoised positions of the later sub-blocks: masked throughout
    cond: dict  # conditionals(...) given the earlier sub-blocks clean and ``held`` masked
    elbo: float  # analytic ELBO of this sub-block's random-order likelihood
    exact: float  # exact log-probability of this sub-block under the random-order sampler

    @property
    def marginal(self) -> float:
        """Σ_i log p(y_i | the whole sub-block masked): the product of single-position marginals (``masked``'s term)."""
        return sum(self.cond[frozenset()].values())

    @property
    def dependence(self) -> float:
        """exact - marginal: what the joint knows beyond the marginals, in nats (0 for a product distribution;
        averaged over the model's own samples, the sub-block's total correlation)."""
        return self.exact - self.marginal


def sub_block_chain(policy, prefix: list[int], block: list[int], masked: list[int], sub_block: int,
                    temperature: float = 1.0) -> list[OracleSubBlock]:
    """The sampler's chain over sub-blocks of size ``sub_block`` (positions i // sub_block), left to right."""
    return sub_block_chains(policy, prefix, [block], masked, sub_block, temperature)[0]


def sub_block_chains(policy, prefix: list[int], blocks: list[list[int]], masked: list[int], sub_block: int,
                     temperature: float = 1.0) -> list[list[OracleSubBlock]]:
    """``sub_block_chain`` of several blocks after the same prefix (batched forwards)."""
    chains = [[] for _ in blocks]
    for s in sorted({i // sub_block for i in masked}):
        mine = [i for i in masked if i // sub_block == s]
        held = [i for i in masked if i // sub_block > s]
        for chain, cond in zip(chains, conditionals_many(policy, prefix, blocks, mine, temperature, held)):
            chain.append(OracleSubBlock(mine, held, cond, analytic_elbo(cond, mine), exact_random_order_logprob(cond, mine)))
    return chains


@dataclass
class OracleBlock:
    """Exact terms of one completion block: its first-token term and the inner ELBO / log-lik (sub-block chain)."""

    index: int
    first: float  # log p of the AR first token from the clean previous block; 0 for the prompt-tail block
    parts: list[OracleSubBlock]  # one per sub-block holding denoised positions

    @property
    def inner_elbo(self) -> float:
        return sum(part.elbo for part in self.parts)

    @property
    def inner_exact(self) -> float:
        return sum(part.exact for part in self.parts)

    @property
    def elbo(self) -> float:
        return self.first + self.inner_elbo

    @property
    def exact(self) -> float:
        return self.first + self.inner_exact


def completion_blocks(policy, prompt: list[int], completion: list[int], temperature: float = 1.0,
                      sub_block: int | None = None):
    """Exact per-block terms of a completion that covers whole blocks (as the sampler returns them), for
    the sampler with sub-blocks of ``sub_block`` (None: the policy's; the block size: whole blocks)."""
    B, full = policy.block_size, list(prompt) + list(completion)
    S = sub_block or policy.sub_block
    for k in range(len(prompt) // B, -(-len(full) // B)):
        block = full[k * B : (k + 1) * B]
        masked = [i for i in range(1, len(block)) if k * B + i >= len(prompt)]
        first = 0.0
        if k * B >= len(prompt):
            prefix = torch.tensor([full[: k * B]], device=policy.device)
            first = float(next_token_logprobs(policy, prefix, temperature)[0, -1, block[0]])
        yield OracleBlock(k, first, sub_block_chain(policy, full[: k * B], block, masked, S, temperature))
