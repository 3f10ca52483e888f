"""The tables of a study report (``summary.md``, ``table.tex``), typeset from numbers already computed: one row
per arm, no generated prose. A missing interval or test reads "n/a (why)", never a made-up number."""
from __future__ import annotations

import math
from dataclasses import dataclass

from arena.report.stats import WELCH, Estimate, Significance


@dataclass
class Row:
    """One arm of the table; ``improvement`` and ``test`` are None for the reference arm."""

    arm: str
    seeds: int
    tail_gain: Estimate
    seed_sd: float  # standard deviation of the final tail gain over seeds (nan with one seed)
    evaluation_se: float  # root mean square over seeds of a run's evaluation standard error of it
    area: Estimate
    mean_reward: Estimate
    budget: float  # mean over seeds, in the study's unit
    seconds: float  # mean training wall-clock seconds over seeds
    improvement: Estimate | None
    test: Significance | None


@dataclass
class Setup:
    study: str
    reference: str
    alpha: float
    unit: str
    amount: float
    prompts: int
    samples: int
    missing: list[tuple[str, int]]
    stale: int
    predating: dict  # (arm, seed) -> option params its run was logged without (arena.report.records)


def headers(setup: Setup) -> list[str]:
    return ["arm", "seeds", f"final tail gain (α={setup.alpha:g})", "seed SD / evaluation SE",
            "tail-reward AUC (average over budget)",
            "mean reward at end", f"budget used ({setup.unit.replace('_', ' ')})", "train time (s)",
            "P(tail gain > reference)", f"{WELCH} vs reference (tail gain)"]


COLUMNS = """\
Columns: mean over the arm's seeds, and in brackets its 95% percentile bootstrap interval over seeds (10,000
resamples of the arm's seeds, stratified by arm; a fixed key makes it reproducible); "n/a (1 seed)" where an
arm has a single seed.

- **final tail gain**: tail reward (lower CVaR at α: the mean of the worst α share of per-prompt rewards) at
  the last evaluation point minus at the start, same run;
- **seed SD / evaluation SE**: the final tail gain's standard deviation over the arm's seeds (how much training
  varies), and the standard error one run's gain has from its evaluation alone (each prompt's k samples
  resampled within the prompt at the start and at the end, prompts and policy fixed; root mean square over
  seeds; a bootstrap, which runs about 15% low): a gain of about that size is within what the evaluation
  itself can show. The start is shared by every run of a study, so differences between arms carry less;
- **tail-reward AUC (average over budget)**: trapezoid area under the tail-reward curve over the evaluation
  points, divided by the budget: the tail reward averaged over the run, in reward units;
- **mean reward at end**: mean per-prompt reward at the last evaluation point;
- **budget used**, **train time**: mean over seeds at the last point (training wall-clock, evaluation excluded);
- **P(tail gain > reference)**: the share of (seed of this arm, seed of the reference) pairs in which this arm's
  final tail gain is higher, ties counting half (the Mann-Whitney U over n·m); its interval resamples both
  arms' seeds, each within its arm;
- **Welch's t-test**: two-sided, unequal variances (`scipy.stats.ttest_ind(equal_var=False)`), final tail gain
  of this arm against the reference arm's; **detectable**: the smallest true difference that test finds with
  80% power at these seeds and spreads ((t_(0.975, ν) + t_(0.8, ν)) · standard error of the difference): a
  "no significant difference" rules out effects of about that size, not smaller ones."""


def _number(value: float, signed: bool) -> str:
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _why(seeds: int) -> str:
    return "n/a (no reference run)" if seeds == 0 else f"n/a ({seeds} seed{'s' if seeds != 1 else ''})"


def estimate_cell(estimate: Estimate, signed: bool = True, latex: bool = False) -> str:
    value = _number(estimate.value, signed)
    if not estimate.has_interval:
        return f"{_math(value) if latex else value} [{_why(estimate.seeds)}]"
    low, high = _number(estimate.low, signed), _number(estimate.high, signed)
    if latex:
        return f"{_math(value)} [{_math(low)}, {_math(high)}]"
    return f"{value} [{low}, {high}]"


def improvement_cell(row: Row, latex: bool = False) -> str:
    if row.improvement is None:
        return "reference"
    if row.improvement.seeds < 2:  # one pair of seeds (or none: no reference run) is no estimate
        return _why(row.improvement.seeds)
    return estimate_cell(row.improvement, signed=False, latex=latex)


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def significance_cell(row: Row, latex: bool = False) -> str:
    if row.test is None:
        return "reference"
    if not math.isfinite(row.test.p):
        fewest = row.improvement.seeds  # the fewer seeds of the two arms
        return _why(fewest) if fewest < 2 else "n/a (no spread)"
    text, detectable = f"t = {row.test.statistic:+.2f}, {_p(row.test.p)}", f"{row.test.detectable:.3f}"
    if latex:
        return _math(text.replace("p < ", "p<").replace(" = ", "=")) + f", detectable {_math(detectable)}"
    return f"{text}, detectable {detectable}"


def cells(row: Row, latex: bool = False) -> list[str]:
    arm = row.arm.replace("_", r"\_") if latex else row.arm
    spread = f"{'n/a' if math.isnan(row.seed_sd) else f'{row.seed_sd:.3f}'} / {row.evaluation_se:.3f}"
    return [arm, str(row.seeds), estimate_cell(row.tail_gain, True, latex), spread, estimate_cell(row.area, False, latex),
            estimate_cell(row.mean_reward, False, latex), f"{row.budget:.0f}", f"{row.seconds:.0f}",
            improvement_cell(row, latex), significance_cell(row, latex)]


def setup_lines(setup: Setup) -> list[str]:
    lines = [f"- study: `{setup.study}`; reference arm: `{setup.reference}`",
             f"- budget: {setup.amount:g} {setup.unit.replace('_', ' ')} per run; tail at α = {setup.alpha:g}; "
             f"evaluation: {setup.prompts} held-out prompts x {setup.samples} samples"]
    if setup.missing:
        lines.append("- missing (no finished run at the study's configuration): "
                     + ", ".join(f"{arm} seed {seed}" for arm, seed in setup.missing))
    if setup.predating:
        options = sorted({key for keys in setup.predating.values() for key in keys})
        arms = {}
        for arm, _ in setup.predating:
            arms[arm] = arms.get(arm, 0) + 1
        lines.append("- matched by parameters, not by config hash (logged before the code had "
                     + ", ".join(f"`{key}`" for key in options) + ", which the study leaves at the default): "
                     + ", ".join(f"{arm} ({count} seed{'s' if count != 1 else ''})" for arm, count in arms.items()))
    if setup.stale:
        lines.append(f"- left out: {setup.stale} finished runs at an earlier configuration of the study")
    return lines


def markdown(rows: list[Row], setup: Setup) -> str:
    """summary.md: what was compared (facts, no prose), the table, and what each column means."""
    head = headers(setup)
    lines = [f"# {setup.study}: arms at equal budget", "", *setup_lines(setup), "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(cells(row)) + " |" for row in rows]
    return "\n".join(lines + ["", COLUMNS]) + "\n"


def _math(text: str) -> str:
    return "$" + text.replace("−", "-") + "$"


def latex(rows: list[Row], setup: Setup) -> str:
    """table.tex: a booktabs tabular with the same rows (``\\usepackage{booktabs}``)."""
    head = [h.replace("_", r"\_").replace("α", r"$\alpha$").replace("P(", "$P$(").replace(">", "$>$")
            for h in headers(setup)]
    lines = [f"% arena report {setup.study}: mean over seeds [95% percentile bootstrap interval over seeds, "
             "stratified by arm]; AUC = area under the tail-reward curve / budget.",
             "% needs \\usepackage{booktabs}",
             r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule",
             " & ".join(head) + r" \\", r"\midrule"]
    lines += [" & ".join(cells(row, latex=True)) + r" \\" for row in rows]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"]) + "\n"
