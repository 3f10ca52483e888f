"""block-GRPO: GRPO with an exact chain rule across blocks and an estimate inside each block.

The GRPO update of ``methods.grpo`` with one importance ratio per block, ρ_k = exp(ℓ̂_θ,k - ℓ̂_old,k),
where ℓ̂_k = log p(first token of block k | clean blocks < k) + an estimate of the block's inner
log-likelihood (``methods.likelihood``; the mathematics in docs/design.md). Inside a block the estimators
follow the sampler's sub-blocks (the rollout's, by default the policy's): exact chain across sub-blocks, each
estimated with the later sub-blocks masked, as the sampler saw them:

- ``estimator: masked``: each sub-block fully masked, one pass (d1-style inside the sub-block);
- ``estimator: elbo`` (default): K Monte Carlo draws of the masked-diffusion ELBO (``draws``,
  ``form`` count (default) or uniform, ``antithetic``). Keep ``count``: the ``uniform`` form's 1/t
  weight has infinite variance (its per-block log-ratio between nearby θ reached 85 nats, 99th
  percentile 15, against 11 for ``count``); GRPO's ±20-nat log-ratio clamp bounds what it can do;
- ``estimator: gauss_legendre``: the same integral on ``nodes`` Gauss-Legendre nodes (GDPO,
  arXiv 2510.08554, does this for whole sequences), optionally with ``exact_count`` masks;
- ``estimator: ebpo``: EBPO's estimator (LLaDA 2.1, arXiv 2602.08676): one count-form draw per block,
  the levels of a sequence's blocks stratified (one per stratum of (0, 1)), all blocks in one forward;
  unbiased per block like the 1-draw ELBO, at its cost; stratification acts on the sum over blocks only;
- ``estimator: trajectory``: the exact log-probability of the rollout's recorded decoding steps
  (each step's committed tokens given the state the sampler was in; exact for either order, the
  confidence order taken as given): the reference the ELBO family approximates. It refuses
  ``sub_block_cache: true`` rollouts, whose steps it cannot replay (docs/performance.md).

Masks are fresh every inner iteration and shared by θ, θ_old and the reference within one. The
idea and the three estimators come from the seed post (docs/design.md, "The seed post").
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from arena.config import problems_of
from methods.base import register
from methods.grpo import GRPO, GRPOConfig
from methods.likelihood import BLOCK_ESTIMATORS, ESTIMATORS, ElboForm, ElboOptions, GaussLegendreOptions


@dataclass
class BlockGRPOConfig(GRPOConfig):
    estimator: Literal[BLOCK_ESTIMATORS] = "elbo"
    # the estimators' own options, flat; defaults and checks come from methods.likelihood.ESTIMATORS
    draws: int = ElboOptions.draws
    form: ElboForm = ElboOptions.form
    antithetic: bool = ElboOptions.antithetic
    nodes: int = GaussLegendreOptions.nodes
    exact_count: bool = GaussLegendreOptions.exact_count

    def estimator_options(self) -> dict:
        """The options of the chosen estimator, by its own option class."""
        return {f.name: getattr(self, f.name) for f in fields(ESTIMATORS[self.estimator].options)}

    def inactive_options(self) -> set[str]:
        """The other estimators' options: this run ignores them (the one-variable rule skips them)."""
        every = {f.name for name in BLOCK_ESTIMATORS for f in fields(ESTIMATORS[name].options)}
        return every - set(self.estimator_options())

    def problems(self):
        yield from super().problems()
        yield from problems_of(ESTIMATORS[self.estimator].options, **self.estimator_options())
        if self.sub_block_cache and self.estimator == "trajectory":
            yield "sub_block_cache", ("the trajectory estimator replays the rollout's decoding steps with full-block "
                                      "forwards, but the sub-block cache decoded them against stale keys/values: its "
                                      "likelihood would not be the sampler's; use another estimator or "
                                      "sub_block_cache: false")


@register("block_grpo")
class BlockGRPO(GRPO):
    Config = BlockGRPOConfig

    def _estimator(self) -> tuple[str, dict]:
        return self.config.estimator, self.config.estimator_options()
