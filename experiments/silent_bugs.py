"""The seed post's three silent bugs, put back one at a time, to measure what each one costs (issue 13).

Experiments only: nothing in ``arena`` or ``methods`` imports this module, and no registered method has
these flags. A study names the class by import path (``studies/silent_bugs.yaml``)::

    method: experiments.silent_bugs:SeedBugBlockGRPO
    options: {bug: log_of_sum, estimator: elbo, draws: 2, ...}

``SeedBugBlockGRPO`` is block-GRPO (``methods.block_grpo``) whose estimate goes through one seam,
``_score``; each bug rewrites what that seam returns, and ``bug: none`` is block-GRPO exactly. The
seed post (docs/design.md, "The seed post") describes them, and for each the property test that catches
it is named (the properties: docs/design.md, "The tests the design implies"):

- ``boundary_shift``: the first token of each block scored from the logit at its own position instead
  of the one before it (the token shift left out at the block boundary). The clean stream sees its own
  block, so that logit "predicts" a token it can see: a shifted sequence is scored. Property 3 (the
  first-token term is the sampler's own log-softmax) fails. One extra block-causal forward of the
  clean sequences (counted in forward tokens).
- ``log_of_sum``: the block's ELBO reduced over its Monte Carlo draws as log mean_d exp(v_d) (a
  log-of-sum) instead of mean_d v_d, v_d being draw d's own estimate (the first-token term plus the
  draw's weighted inner sum). By Jensen it is never below the ELBO estimate and, as draws grow, tends
  to log E[exp v], which exceeds the exact log-likelihood on some blocks: property 4b. Needs ``elbo``
  with ``draws >= 2`` (with one draw the two reductions agree).
- ``reused_mask_keys``: every inner iteration draws the masks of iteration 0 (the key's last entry, the
  iteration, dropped), so the μ updates on one batch see one mask draw instead of μ independent ones.
  Property 6 (masks differ across inner iterations) fails. Needs ``inner_iterations >= 2``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch

from arena.model.layout import block_causal_mask
from methods import likelihood
from methods.block_grpo import BlockGRPO, BlockGRPOConfig

Bug = Literal["none", "boundary_shift", "log_of_sum", "reused_mask_keys"]


@dataclass
class SeedBugConfig(BlockGRPOConfig):
    bug: Bug = "none"

    def problems(self):
        yield from super().problems()
        if self.bug == "log_of_sum" and (self.estimator != "elbo" or self.draws < 2):
            yield "bug", "log_of_sum reduces over Monte Carlo draws: it needs estimator 'elbo' with draws >= 2"
        if self.bug == "reused_mask_keys" and self.inner_iterations < 2:
            yield "bug", "reused_mask_keys reuses masks across inner iterations: it needs inner_iterations >= 2"


class SeedBugBlockGRPO(BlockGRPO):
    Config = SeedBugConfig

    def _score(self, batch, key, grad: bool, policy=None) -> likelihood.Estimate:
        if self.config.bug == "reused_mask_keys":
            key = key[:-1] + (0,)  # (seed, step, iteration) -> iteration 0's masks, every iteration
        est = super()._score(batch, key, grad, policy)
        if self.config.bug == "log_of_sum":
            return log_of_sum(est)
        if self.config.bug == "boundary_shift":
            with torch.set_grad_enabled(grad):
                est = unshifted_first_tokens(policy or self.policy, batch, est)
            self.forward_tokens += batch.ids.numel()
        return est


def log_of_sum(est: likelihood.Estimate) -> likelihood.Estimate:
    """log mean_d exp(v_d) over the draws, where the ELBO wants mean_d v_d."""
    draws = est.draw_values.shape[1]
    return dataclasses.replace(est, logp=torch.logsumexp(est.draw_values, 1) - math.log(draws))


def unshifted_first_tokens(policy, batch: likelihood.ScoringBatch, est: likelihood.Estimate) -> likelihood.Estimate:
    """``est`` with each block's first-token term read at the token's own position, not the one before."""
    n, T = batch.ids.shape
    B = policy.block_size
    positions = torch.arange(T, device=batch.ids.device).expand(n, -1)
    hidden = policy.hidden(batch.ids, positions, block_causal_mask(positions, positions, B, batch.valid))
    first = batch.completion & (positions % B == 0)
    rows, pos = first.nonzero(as_tuple=True)
    logits = policy.logits(hidden[rows, pos]) / (batch.temperature or 1.0)
    terms = torch.log_softmax(logits, -1).gather(-1, batch.ids[rows, pos][:, None]).squeeze(-1)
    wrong = torch.zeros_like(est.first_token_logp).index_put((rows, pos // B), terms, accumulate=True)
    return dataclasses.replace(est, logp=est.logp - est.first_token_logp + wrong, first_token_logp=wrong)
