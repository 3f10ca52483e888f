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

from methods.base import register
from methods.grpo import GRPO, GRPOConfig


@dataclass
class DiffuGRPOConfig(GRPOConfig):
    p_mask: float = 0.15  # prompt masking probability (d1 runs: 0.15; its config default is 0.3)

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.p_mask < 1.0:
            raise ValueError(f"p_mask={self.p_mask!r} must be in [0, 1)")


@register("diffu_grpo")
class DiffuGRPO(GRPO):
    Config = DiffuGRPOConfig

    def _estimator(self) -> tuple[str, dict]:
        return "d1", {"p_mask": self.config.p_mask}
