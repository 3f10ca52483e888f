"""diffu-GRPO (Zhao et al. 2025, "d1", arXiv 2504.12216) on the block-diffusion policy.

The GRPO update of ``methods.grpo`` with d1's one-step log-prob estimate per token: one forward
over the prompt with each token masked with probability ``p_mask`` and the completion fully
masked, under the model's own block-causal attention; log p(y_j) is read at the masked position
through the token shift. Masks are fresh every inner iteration and shared by θ and θ_old within one
(d1 draws one mask seed per inner iteration). Unit: token.

Where d1 differs: d1 reseeds global RNGs with a 12-bit seed and cycles its mask seeds by micro-step;
here masks are keyed by (seed, step, iteration, sample).
"""
from __future__ import annotations

from dataclasses import dataclass

from arena.config import problems_of
from methods.base import register
from methods.grpo import GRPO, GRPOConfig
from methods.likelihood import D1Options


@dataclass
class DiffuGRPOConfig(GRPOConfig):
    p_mask: float = D1Options.p_mask  # prompt masking probability (checked by the d1 estimator's options)

    def problems(self):
        yield from super().problems()
        yield from problems_of(D1Options, p_mask=self.p_mask)


@register("diffu_grpo")
class DiffuGRPO(GRPO):
    Config = DiffuGRPOConfig

    def _estimator(self) -> tuple[str, dict]:
        return "d1", {"p_mask": self.config.p_mask}
