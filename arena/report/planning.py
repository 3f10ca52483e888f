"""``arena report STUDY --plan``: from a pilot study's store, the seeds per arm and the evaluation size a study needs
to decide each of its comparisons at its margin. Planning, not evidence: the pilot's spreads stand in for the truth.

For each arm against the reference (and against the sharpening control, when the study has it), with the pilot's
seed SDs s_a, s_b and evaluation variance V_e of the difference (``arena.report.stats``):

- seeds per arm n for 80% power to find a true difference of ±margin (two-sided test), and for 80% power to declare
  equivalence within ±margin (TOST) when the true difference is 0: SE(n)² = (s_a² + s_b²) / n + V_e, Student t with
  Satterthwaite's ν, at level / m for m comparisons (Holm's first and strictest step);
- the evaluation prompts N (at the pilot's k samples and at 2k, 4k) that bring V_e under ``share`` of SE(n)²:
  V_e(N, k) = V_e · N0 / N · ((1 - w) + w · k0 / k), w the within-prompt (decoding) share of the per-prompt gains'
  variance in the pilot (``stats.within_prompt_share``).

A comparison that no seed count decides (V_e alone too large) says so: only a larger evaluation helps there.
``evaluation=(N, k)`` plans the seeds for that evaluation instead of the pilot's (N prompts over all draws, k
samples each): V_e is rescaled to it by the same formula before the seeds are counted, so a pre-registration can
name its evaluation size and the seeds that go with it.
"""
from __future__ import annotations

import math

import numpy as np

from arena.report import stats
from arena.report.comparison import statistics
from arena.report.records import Results

POWER = 0.8
MOST_PROMPTS = 1 << 16


def prompts_needed(evaluation_var: float, seed_var: float, prompts: int, samples: int, within: float,
                   to_samples: int, share: float) -> int | None:
    """The fewest prompts (a multiple of 8) at ``to_samples`` samples for which V_e is at most ``share`` of the
    variance; None when even ``MOST_PROMPTS`` is not enough."""
    if seed_var <= 0:
        return None
    for n in range(8, MOST_PROMPTS + 1, 8):
        v = stats.evaluation_var_at(evaluation_var, prompts, samples, within, n, to_samples)
        if v <= share * (v + seed_var):
            return n
    return None


def plan(results: Results, margin: float | None = None, share: float = 0.25,
         evaluation: tuple[int, int] | None = None) -> str:
    study = results.study
    margin = margin if margin is not None else study.analysis.margin
    if margin is None:
        raise ValueError("no margin to plan for: declare analysis.margin in the study, or pass --margin")
    statistic = statistics(study)["tail"]
    reference = study.reference
    pairs = [(arm, reference) for arm in results.arms if arm != reference and reference in results.arms]
    pairs += [(arm, "sharpen") for arm in results.arms if "sharpen" in results.controls]
    if not pairs:
        return "nothing to plan: the study has no finished comparison (an arm and its reference, or the sharpen control)"
    level = study.analysis.level / max(1, sum(b == reference for _, b in pairs))
    pooled = study.pooled_draws()
    sizes = sorted({(spec.prompts, spec.samples) for spec in map(study.evaluation.of_draw, pooled)})
    if len(sizes) > 1:
        raise ValueError(f"the draws the verdicts pool ({list(pooled)}) differ in size ({sizes}); plan from draws of "
                         "one size: set analysis.draws to them")
    (prompts, k), = sizes
    pilot_prompts = prompts * len(pooled)
    planned = f"{evaluation[0]} prompts x {evaluation[1]} samples (V_e rescaled)" if evaluation else "the pilot's"
    lines = [f"plan for {study.name} from its pilot ({len(pooled)} draw(s) of {prompts} prompts x "
             f"{k} samples): margin ±{margin:g}, power {POWER:g}, level {level:.3g} "
             f"(study level over the comparisons with the reference, Holm's first step); seeds and eval SE at "
             f"{planned} evaluation", ""]
    width = max(len(f"{a} vs {b}") for a, b in pairs)
    head = (f"{'comparison':<{width}}  {'seed SDs':>13}  {'eval SE':>7}  {'seeds: differ':>13}  {'seeds: equiv':>12}  "
            f"prompts for eval share <= {share:g} at k = {k}, {2 * k}, {4 * k}")
    lines.append(head)
    for arm, other in pairs:
        a, b = results.pooled(arm), results.pooled(other)
        sd = [0.0 if name in results.controls else float(stats.seed_gains(draws, statistic).mean(axis=1).std(ddof=1))
              for name, draws in ((arm, a), (other, b))]
        evaluation_var = stats.evaluation_variance([(1.0, a), (-1.0, b)], statistic)
        within = stats.within_prompt_share(np.concatenate([r.start_rewards for r in results.arms[arm]]),
                                           np.concatenate([r.end_rewards for r in results.arms[arm]]))
        at_plan = evaluation_var if evaluation is None else stats.evaluation_var_at(
            evaluation_var, pilot_prompts, k, within, *evaluation)
        differ, equivalent = stats.seeds_needed(tuple(sd), at_plan, margin, level, POWER)
        seeds = max(n for n in (differ, equivalent, len(results.arms[arm])) if n is not None)
        seed_var = sum(s**2 for s in sd) / seeds
        sizes = [prompts_needed(evaluation_var, seed_var, pilot_prompts, k, within, k * f, share) for f in (1, 2, 4)]
        show = lambda n: "none decides" if n is None else str(n)  # noqa: E731
        lines.append(f"{f'{arm} vs {other}':<{width}}  {sd[0]:>6.3f}/{sd[1]:<6.3f}  {math.sqrt(at_plan):>7.3f}  "
                     f"{show(differ):>13}  {show(equivalent):>12}  "
                     + ", ".join("-" if n is None else str(n) for n in sizes) + f" (at {seeds} seeds)")
    lines += ["", "seeds: per arm (a control has none); prompts: all draws together (D draws of N count as D·N), at the seed count in brackets; "
              f"eval SE: of the difference, at {planned} evaluation. A planning approximation (docs/reporting.md)."]
    return "\n".join(lines)
