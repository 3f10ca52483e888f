"""ES's statistics, apart from its update (``methods.es``), which reads none of them.

The common ones (``methods.base.COMMON_STATS``; reward_mean/std over every member x prompt reward; flops: 2·P per
forward token, no backward pass), member_seconds / perturb_seconds per member, and the diagnostics of whether the
population sees a signal (docs/studies.md, "Reading ES's diagnostics"): fitness_mean/std/max over members;
tied_pairs, the share of antithetic pairs whose two members have exactly equal fitness (their shaped fitnesses
cancel: the pair moves nothing; near 1, the step is noise); sigma (as configured) and sigma_rms_median/min/max, the
σ each perturbed tensor gets over its RMS (tensors of RMS 0 left out); update_norm (common) and update_cosine, the
cosine between this step's change of θ and the previous step's (absent at the first step; near 0, successive
updates are unrelated draws; the previous change is kept, 4 bytes per trainable parameter, and checkpointed).
"""
from __future__ import annotations

import math
import statistics

import torch


def tied_pairs(fitness: torch.Tensor) -> float:
    """The share of antithetic pairs (members 2j, 2j + 1) whose fitnesses are exactly equal."""
    return float((fitness[0::2] == fitness[1::2]).double().mean())


def cosine(dot: float, squares_a: float, squares_b: float) -> float | None:
    """dot / (‖a‖ ‖b‖); None when either vector is zero."""
    return dot / math.sqrt(squares_a * squares_b) if squares_a > 0 and squares_b > 0 else None


class Movement:
    """update_norm and update_cosine, accumulated tensor by tensor as an update goes: the norm of one step's change
    of θ (fp32, after rounding into θ) and its cosine with the previous step's change, which it keeps."""

    def __init__(self, previous: dict[str, torch.Tensor] | None = None):
        self.previous = dict(previous or {})  # parameter name -> the last step's change (checkpointed)
        self.begin()

    def begin(self) -> None:
        self.squares = self.previous_squares = self.dot = 0.0

    def add(self, name: str, change: torch.Tensor) -> None:
        """One tensor's change of θ this step (fp32)."""
        wide = change.double()
        self.squares += float(wide.square().sum())
        if name in self.previous:
            previous = self.previous[name].double()
            self.dot += float((wide * previous).sum())
            self.previous_squares += float(previous.square().sum())
        self.previous[name] = change

    def stats(self) -> dict[str, float]:
        """update_norm, and update_cosine where there was a previous step."""
        update_cosine = cosine(self.dot, self.squares, self.previous_squares)
        return {"update_norm": math.sqrt(self.squares),
                **({"update_cosine": update_cosine} if update_cosine is not None else {})}


def sigma_over_rms(sigma: float, scales: dict[str, float], rms: dict[str, float]) -> dict[str, float]:
    """Median, min and max over the perturbed tensors of their σ·r_t over their RMS (RMS 0 left out)."""
    ratios = [sigma * scales[name] / value for name, value in rms.items() if value > 0]
    if not ratios:
        return {}
    return {"sigma_rms_median": statistics.median(ratios), "sigma_rms_min": min(ratios),
            "sigma_rms_max": max(ratios)}


def population_stats(fitness: torch.Tensor, totals: dict[str, float], antithetic: bool) -> dict[str, float]:
    """The fitness diagnostics and the per-member seconds of one step (``totals``: all-rank sums)."""
    n = len(fitness)
    stats = {"fitness_mean": float(fitness.mean()), "fitness_std": float(fitness.std(correction=0)),
             "fitness_max": float(fitness.max()), "member_seconds": totals["member_seconds"] / n,
             "perturb_seconds": totals["perturb_seconds"] / n}
    return stats | ({"tied_pairs": tied_pairs(fitness)} if antithetic else {})
