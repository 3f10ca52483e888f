"""block-GRPO: GRPO with an exact chain rule across blocks and an estimate inside each block.

The GRPO update of ``methods.grpo`` with one importance ratio per block, ρ_k = exp(ℓ̂_θ,k - ℓ̂_old,k),
where ℓ̂_k = log p(first token of block k | clean blocks < k) + an estimate of the block's inner
log-likelihood (``methods.likelihood``, DESIGN §4):

- ``estimator: masked``: the block fully masked, one pass (d1-style inside the block);
- ``estimator: elbo`` (default): K Monte Carlo draws of the masked-diffusion ELBO (``draws``,
  ``form`` uniform or count, ``antithetic``);
- ``estimator: gauss_legendre``: the same integral on ``nodes`` Gauss-Legendre nodes (GDPO,
  arXiv 2510.08554, does this for whole sequences), optionally with ``exact_count`` masks.

Masks are fresh every inner iteration and shared by θ, θ_old and the reference within one. The
idea and the three estimators come from the seed post (shared/seed/block-grpo-blog.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.base import register
from methods.grpo import GRPO, GRPOConfig

ESTIMATOR_NAMES = {"masked": "block_masked", "elbo": "block_elbo", "gauss_legendre": "block_gauss_legendre"}


@dataclass
class BlockGRPOConfig(GRPOConfig):
    estimator: str = "elbo"  # masked | elbo | gauss_legendre
    draws: int = 2  # elbo: Monte Carlo draws per block (sharing one clean stream)
    form: str = "count"  # elbo: "count" (l ~ U{1..m}, weight m/l) or "uniform" (t ~ U(0,1], weight 1/t)
    antithetic: bool = False  # elbo: pair each draw with its complement
    nodes: int = 2  # gauss_legendre: quadrature nodes (>= ceil(m/2) makes it unbiased for the ELBO)
    exact_count: bool = False  # gauss_legendre: |M| = ceil(t m) masks

    def __post_init__(self):
        super().__post_init__()
        problems = []
        if self.estimator not in ESTIMATOR_NAMES:
            problems.append(f"estimator={self.estimator!r} is not one of {', '.join(ESTIMATOR_NAMES)}")
        if self.draws < 1 or (self.antithetic and self.draws % 2):
            problems.append(f"draws={self.draws!r} must be >= 1 (and even with antithetic)")
        if self.form not in ("count", "uniform"):
            problems.append(f"form={self.form!r} must be 'count' or 'uniform'")
        if self.nodes < 1:
            problems.append(f"nodes={self.nodes!r} must be >= 1")
        if problems:
            raise ValueError("; ".join(problems))


@register("block_grpo")
class BlockGRPO(GRPO):
    Config = BlockGRPOConfig

    def _estimator(self) -> tuple[str, dict]:
        c = self.config
        options = {
            "masked": {},
            "elbo": {"draws": c.draws, "form": c.form, "antithetic": c.antithetic},
            "gauss_legendre": {"nodes": c.nodes, "exact_count": c.exact_count},
        }[c.estimator]
        return ESTIMATOR_NAMES[c.estimator], options
