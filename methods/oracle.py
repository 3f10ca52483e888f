"""Exact oracles for one block of a block-diffusion model (tiny vocabularies and blocks <= 8).

They enumerate subsets (one forward of 2^m rows for m denoised positions), so they serve the tests
and the estimator report (``arena estimators``) on small blocks only. All are built on a plain full
forward of the HF model with an attention mask written out here by position loops, independent of
``arena.model.layout``: the block under study attends to itself and to the clean prefix before it, the
prefix is block-causal.
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


def conditionals(policy, prefix: list[int], block: list[int], masked: list[int], temperature: float = 1.0):
    """For every subset V of the ``masked`` in-block positions kept visible: log p(block[i] | prefix, V).

    Returns {frozenset(V): {i: log p}} for i in masked \\ V. ``block`` holds the true tokens.
    """
    subsets = [frozenset(s) for r in range(len(masked) + 1) for s in itertools.combinations(masked, r)]
    rows = []
    for visible in subsets:
        noisy = [t if (i not in masked or i in visible) else policy.mask_id for i, t in enumerate(block)]
        rows.append(prefix + noisy)
    logp = next_token_logprobs(policy, torch.tensor(rows, device=policy.device), temperature)
    start = len(prefix)
    out = {}
    for row, visible in enumerate(subsets):
        out[visible] = {i: float(logp[row, start + i - 1, block[i]]) for i in masked if i not in visible}
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
class OracleBlock:
    """Exact terms of one completion block: its first-token term and the inner ELBO / log-lik."""

    index: int
    first: float  # log p of the AR first token from the clean previous block; 0 for the prompt-tail block
    inner_elbo: float
    inner_exact: float
    cond: dict  # conditionals(...) of the block, for further exact quantities
    masked: list[int]

    @property
    def elbo(self) -> float:
        return self.first + self.inner_elbo

    @property
    def exact(self) -> float:
        return self.first + self.inner_exact


def completion_blocks(policy, prompt: list[int], completion: list[int], temperature: float = 1.0):
    """Exact per-block terms of a completion that covers whole blocks (as the sampler returns them)."""
    B, full = policy.block_size, list(prompt) + list(completion)
    for k in range(len(prompt) // B, -(-len(full) // B)):
        block = full[k * B : (k + 1) * B]
        masked = [i for i in range(1, len(block)) if k * B + i >= len(prompt)]
        first = 0.0
        if k * B >= len(prompt):
            prefix = torch.tensor([full[: k * B]], device=policy.device)
            first = float(next_token_logprobs(policy, prefix, temperature)[0, -1, block[0]])
        cond = conditionals(policy, full[: k * B], block, masked, temperature)
        yield OracleBlock(k, first, analytic_elbo(cond, masked), exact_random_order_logprob(cond, masked), cond, masked)
