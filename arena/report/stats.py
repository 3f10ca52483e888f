"""The numbers of a study: pure functions of numpy arrays (no MLflow, no drawing). docs/reporting.md says each
in plain words; this is the one definition every table, figure and printed summary uses.

A gain g(s, d) is measured for each training seed s on each evaluation draw d (prompts and decoding seeds; every
run of a study is evaluated on the same draws, common random numbers). The estimate is the mean over seeds and
draws; its variance has two parts, and the 95% interval counts both:

- **seeds**: the variance over seeds of each seed's mean over draws, / S (for a difference of two arms, one such
  term per arm: the arms' seeds are independent, so the difference is unpaired, Welch's);
- **evaluation**: the variance the finite evaluation draw adds, which no number of seeds averages away because every
  seed shares the draw. Estimated per draw by a bootstrap over whole prompts (the same resampled prompts for every
  run and arm, since they share them, each prompt carrying its k samples at the start and at the end), and divided
  by D² over the D independent draws.

    V = Σ_arms s²_arm / S_arm + V_evaluation,   interval = estimate ± t_(0.975, ν) · √V,
    ν = V² / Σ_arms (s²_arm / S_arm)² / (S_arm - 1)     (Satterthwaite; V_evaluation, from N prompts, as known)

The seed variance measured on one draw also holds the seed x draw interaction, which the bootstrap counts again:
the interval errs wide by that term / S (a few percent here; tests/report/test_stats.py measures the coverage). Curves
(bands over budget) use the seed part only, Student's t, and say so: they are conditional on the evaluation draw.
Intervals and bands of a reward or a gain are cut to the values it can take (``clipped``); differences are not.
Controls (``frozen``, ``sharpen``) have no training seed: their seed part is zero, not unknown.

Verdicts of arms against the reference: a two-sided test of the difference, Holm-adjusted within the study, and,
when the study declares a margin m, two one-sided tests (TOST) of |difference| < m, Holm-adjusted too:
"different", "equivalent within ±m", else "inconclusive". A non-significant test is never read as "no difference".
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from arena.rng import StatsKey, numpy_generator

LEVEL = 0.95
EVALUATION_RESAMPLES = 1000

SEEDS_ONLY = "95% t interval over seeds, given the evaluation draw"
SEEDS_AND_EVALUATION = "95% interval over seeds and evaluation draws"


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% interval (``nan`` bounds: unavailable) and the two parts of its standard error."""

    value: float
    low: float = math.nan
    high: float = math.nan
    seeds: int = 1  # the fewest seeds behind it (0: a control, which has no training seed)
    seed_se: float = math.nan  # the standard error from training seeds
    evaluation_se: float = 0.0  # the standard error from the evaluation draw (0: not counted, or none; nan: unknown)
    df: float = math.nan

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def se(self) -> float:
        return math.hypot(self.seed_se, self.evaluation_se)


def quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (the normal's at df = inf)."""
    from scipy import stats

    p = 1 - (1 - level) / 2
    return float(stats.norm.ppf(p) if math.isinf(df) else stats.t.ppf(p, df))


def combine(value: float, seed_parts: list[tuple[float, int]], evaluation_var: float = 0.0,
            seeds: int | None = None) -> Interval:
    """The interval of ``value`` from its variance parts: ``seed_parts`` holds, per arm, (s² / S, S), with S = 0
    for a control (no seed variance); ``evaluation_var`` is V_evaluation. No interval when an arm has one seed."""
    fewest = min(n for _, n in seed_parts) if seeds is None else seeds
    if any(n == 1 for _, n in seed_parts) or not math.isfinite(evaluation_var):
        return Interval(value, seeds=fewest,
                        evaluation_se=math.sqrt(evaluation_var) if math.isfinite(evaluation_var) else math.nan)
    seed_var = sum(v for v, n in seed_parts if n > 1)
    denominator = sum(v**2 / (n - 1) for v, n in seed_parts if n > 1)
    total = seed_var + evaluation_var
    df = total**2 / denominator if denominator > 0 else math.inf
    half = quantile(df) * math.sqrt(total)
    return Interval(value, value - half, value + half, fewest, math.sqrt(seed_var), math.sqrt(evaluation_var), df)


def t_interval(values) -> Interval:
    """The mean over seeds with its Student-t 95% interval, conditional on the evaluation draw (one seed: none)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    return combine(float(values.mean()), [(float(values.var(ddof=1)) / n if n > 1 else math.nan, n)])


def welch_interval(a, b) -> Interval:
    """mean(a) − mean(b) for two independent sets of seeds, with Welch's t interval (no interval with one seed)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    parts = [(float(x.var(ddof=1)) / len(x) if len(x) > 1 else math.nan, len(x)) for x in (a, b)]
    return combine(float(a.mean() - b.mean()), parts)


def curve_band(curves, bounds: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Mean curve over seeds (rows of ``curves``) and its pointwise Student-t 95% band (seeds only), cut to
    ``bounds`` (``clipped``); no band with one seed."""
    curves = np.asarray(curves, dtype=float)
    n = len(curves)
    mean = curves.mean(axis=0)
    if n < 2:
        return mean, None, None
    half = quantile(n - 1) * curves.std(axis=0, ddof=1) / math.sqrt(n)
    return mean, np.clip(mean - half, *bounds), np.clip(mean + half, *bounds)


def clipped(estimate: Interval, bounds: tuple[float, float]) -> Interval:
    """``estimate`` with its interval cut to ``bounds``, the values the quantity can take (a reward's range, or a
    gain's: lo - hi to hi - lo). The part cut off holds no possible value, so the interval covers the truth as
    often as before; with 2 seeds (t quantile 12.7) an uncut one often runs past the range."""
    if not estimate.has_interval:
        return estimate
    low, high = bounds
    return dataclasses.replace(estimate, low=min(max(estimate.low, low), high), high=max(min(estimate.high, high), low))


# ---------------------------------------------------------------------------------------------
# gains on evaluation draws


@dataclass(frozen=True)
class Draw:
    """One arm's evaluation on one draw: per-prompt rewards of each seed at the start and at the end, (seeds, N),
    and the hard-subset mask (N,) picked on the start model by an independent decoding."""

    start: np.ndarray
    end: np.ndarray
    hard: np.ndarray


Statistic = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (start, end, hard) -> gain, last axis N


def tail_gain(alpha: float) -> Statistic:
    """Lower CVaR at ``alpha`` at the end minus at the start (``arena.evaluate.lower_cvar``), along the last axis."""
    def gain(start, end, hard):
        count = max(1, math.ceil(alpha * start.shape[-1] - 1e-9))
        return np.sort(end, axis=-1)[..., :count].mean(-1) - np.sort(start, axis=-1)[..., :count].mean(-1)
    return gain


def mean_gain(start, end, hard):
    return end.mean(-1) - start.mean(-1)


def hard_gain(start, end, hard):
    """Mean gain over the hard prompts (which travel with their prompts when prompts are resampled; a resample
    without one gives nan, which the variance skips)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((end - start) * hard).sum(-1) / hard.sum(-1)


def seed_gains(draws: list[Draw], statistic: Statistic) -> np.ndarray:
    """(seeds, draws) gains."""
    return np.stack([statistic(d.start, d.end, d.hard) for d in draws], axis=1)


def evaluation_variance(terms: list[tuple[float, list[Draw]]], statistic: Statistic,
                        resamples: int = EVALUATION_RESAMPLES) -> float:
    """V_evaluation of Σ weight · (mean over seeds of the arm's gain, averaged over draws), for ``terms`` of
    (weight, the arm's draws): on each draw, whole prompts resampled with replacement, the same for every arm."""
    count = len(terms[0][1])
    total = 0.0
    for d in range(count):
        n = terms[0][1][d].start.shape[-1]
        index = numpy_generator(StatsKey.PROMPT_BOOTSTRAP, d).integers(0, n, (resamples, n))  # alike for every arm
        combined = np.zeros(resamples)
        with warnings.catch_warnings():  # a resample without a hard prompt is nan (hard_gain), and skipped
            warnings.simplefilter("ignore", RuntimeWarning)
            for weight, draws in terms:
                draw = draws[d]
                combined += weight * np.nanmean(statistic(draw.start[:, index], draw.end[:, index], draw.hard[index]), 0)
        total += float(np.nanvar(combined, ddof=1))
    return total / count**2


def seed_part(gains: np.ndarray, control: bool) -> tuple[float, int]:
    """(s² / S, S) of the per-seed means over draws; (0, 0) for a control."""
    if control:
        return 0.0, 0
    means = gains.mean(axis=1)
    return (float(means.var(ddof=1)) / len(means) if len(means) > 1 else math.nan), len(means)


def gain_interval(draws: list[Draw], statistic: Statistic, control: bool = False,
                  resamples: int = EVALUATION_RESAMPLES) -> Interval:
    """An arm's mean gain over seeds and draws, with the interval that counts both."""
    gains = seed_gains(draws, statistic)
    return combine(float(gains.mean()), [seed_part(gains, control)],
                   evaluation_variance([(1.0, draws)], statistic, resamples))


def difference_interval(a: list[Draw], b: list[Draw], statistic: Statistic, a_control: bool = False,
                        b_control: bool = False) -> Interval:
    """Arm a's mean gain minus arm b's (unpaired over seeds; both on the same draws), with its interval."""
    ga, gb = seed_gains(a, statistic), seed_gains(b, statistic)
    return combine(float(ga.mean() - gb.mean()), [seed_part(ga, a_control), seed_part(gb, b_control)],
                   evaluation_variance([(1.0, a), (-1.0, b)], statistic))


def between_draw_sd(draws: list[Draw], statistic: Statistic) -> float:
    """The SD over draws of an arm's mean gain, measured directly (nan with one draw): what the bootstrap's
    evaluation part predicts per draw, sqrt(D) · evaluation SE."""
    per_draw = seed_gains(draws, statistic).mean(axis=0)
    return float(per_draw.std(ddof=1)) if len(per_draw) > 1 else math.nan


def hodges_lehmann(a, b, level: float = LEVEL) -> tuple[Interval, float]:
    """The rank-based sensitivity of a difference of two arms' per-seed gains ``a`` and ``b`` (each seed's mean
    over the pooled draws): the Hodges-Lehmann shift, the median of the m·n pairwise differences a_i − b_j, with
    the distribution-free interval that inverts the Mann-Whitney test, [D_(k), D_(mn+1−k)] over the sorted
    differences, k = ⌈mn/2 − z·√(mn(m+n+1)/12)⌉: the shifts δ whose U = #{D > δ} the normal approximation to U's
    null distribution accepts (Hollander & Wolfe §4.3), and the two-sided Mann-Whitney p. Over seeds only, given the evaluation draws: a sensitivity to
    long-tailed seed distributions, not a second verdict. No interval when k < 1 (too few seeds)."""
    from scipy import stats as scipy_stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    m, n = len(a), len(b)
    differences = np.sort((a[:, None] - b[None, :]).ravel())
    shift = float(np.median(differences))
    k = math.ceil(m * n / 2 - quantile(math.inf, level) * math.sqrt(m * n * (m + n + 1) / 12))
    p = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue) if m and n else math.nan
    if k < 1:
        return Interval(shift, seeds=min(m, n)), p
    return Interval(shift, float(differences[k - 1]), float(differences[m * n - k]), seeds=min(m, n)), p


# ---------------------------------------------------------------------------------------------
# tests, multiplicity, verdicts


def p_value(estimate: Interval) -> float:
    """Two-sided p of 'the true value is 0', from the estimate's standard error and degrees of freedom."""
    from scipy import stats

    if not estimate.has_interval or estimate.se == 0:
        return math.nan
    t = abs(estimate.value) / estimate.se
    return float(2 * (stats.norm.sf(t) if math.isinf(estimate.df) else stats.t.sf(t, estimate.df)))


def one_sided_p(estimate: Interval, margin: float) -> tuple[float, float]:
    """The p values of H0 value <= -margin and of H0 value >= +margin (nan, nan without an interval)."""
    from scipy import stats

    if not estimate.has_interval or estimate.se == 0:
        return math.nan, math.nan
    distribution = stats.norm if math.isinf(estimate.df) else stats.t(estimate.df)
    return (float(distribution.sf((estimate.value + margin) / estimate.se)),
            float(distribution.cdf((estimate.value - margin) / estimate.se)))


def tost_p(estimate: Interval, margin: float) -> float:
    """Two one-sided tests of -margin < true value < margin: the larger of their p values (small: equivalent)."""
    return max(one_sided_p(estimate, margin))


def noninferiority_p(estimate: Interval, margin: float) -> float:
    """One-sided test of H0 value <= -margin (small: the value is above -margin, "not worse by the margin")."""
    return one_sided_p(estimate, margin)[0]


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p values: sorted ascending, p_(i) · (m - i + 1), running maximum, capped at 1;
    ``nan`` stays ``nan`` and does not count among the m tests."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, math.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m, running = len(order), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        out[index] = running
    return out


def adjust(p_values, correction: str) -> np.ndarray:
    p = np.asarray(p_values, dtype=float)
    if correction == "holm":
        return holm(p)
    if correction == "bonferroni":
        return np.minimum(1.0, p * np.isfinite(p).sum())
    return p


DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"


def verdict(p_adjusted: float, tost_adjusted: float, level: float, margin: float | None) -> str:
    """'different' (adjusted two-sided p < level), else 'equivalent within ±m' (adjusted TOST p < level, when a
    margin is declared), else 'inconclusive'; 'n/a' when the test cannot be computed."""
    if not math.isfinite(p_adjusted):
        return "n/a"
    if p_adjusted < level:
        return DIFFERENT
    if margin is not None and math.isfinite(tost_adjusted) and tost_adjusted < level:
        return f"{EQUIVALENT} within ±{margin:g}"
    return INCONCLUSIVE


# ---------------------------------------------------------------------------------------------
# planning (arena report --plan): how many seeds and how large an evaluation


def _satterthwaite(parts: list[tuple[float, int]], evaluation_var: float) -> tuple[float, float]:
    seed_var = sum(v for v, _ in parts)
    denominator = sum(v**2 / (n - 1) for v, n in parts if n > 1)
    total = seed_var + evaluation_var
    return total, (total**2 / denominator if denominator > 0 else math.inf)


def power_different(difference: float, se: float, df: float, level: float) -> float:
    """Probability that the two-sided test at ``level`` finds a true ``difference`` (both tails)."""
    from scipy import stats

    distribution = stats.norm if math.isinf(df) else stats.t(df)
    critical = distribution.ppf(1 - level / 2)
    shift = abs(difference) / se
    return float(distribution.sf(critical - shift) + distribution.cdf(-critical - shift))


def power_equivalent(difference: float, margin: float, se: float, df: float, level: float) -> float:
    """Probability that TOST at ``level`` declares |true value| < margin when the true value is ``difference``."""
    from scipy import stats

    distribution = stats.norm if math.isinf(df) else stats.t(df)
    critical = distribution.ppf(1 - level)
    upper = (margin - abs(difference)) / se - critical  # the estimate must fall within ±(margin - critical·se)
    lower = (-margin - abs(difference)) / se + critical
    return float(max(0.0, distribution.cdf(upper) - distribution.cdf(lower)))


def seeds_needed(seed_sds: tuple[float, float], evaluation_var: float, margin: float, level: float,
                 power: float = 0.8, most: int = 1000) -> tuple[int | None, int | None]:
    """Seeds per arm for ``power`` to find a true difference of ``margin``, and to declare equivalence within
    ``margin`` when the true difference is 0; None where no count up to ``most`` does (the evaluation part alone
    is too large). A control arm has seed SD 0."""
    found: list[int | None] = [None, None]
    for n in range(2, most + 1):
        total, df = _satterthwaite([(sd**2 / n, n) for sd in seed_sds if sd > 0], evaluation_var)
        se = math.sqrt(total)
        if found[0] is None and power_different(margin, se, df, level) >= power:
            found[0] = n
        if found[1] is None and power_equivalent(0.0, margin, se, df, level) >= power:
            found[1] = n
        if None not in found:
            break
    return found[0], found[1]


def within_prompt_share(start_rewards: np.ndarray, end_rewards: np.ndarray) -> float:
    """The share of the per-prompt gains' variance that comes from decoding (the k samples), not from which
    prompts were drawn: mean over prompts of var_j(r_end_ij - r_start_ij) / k, over the variance of the
    per-prompt gains; the samples are paired by their decoding seed (common random numbers)."""
    k = start_rewards.shape[1]
    differences = end_rewards - start_rewards
    within = float(differences.var(axis=1, ddof=1).mean()) / k if k > 1 else 0.0
    total = float(differences.mean(axis=1).var(ddof=1))
    return min(1.0, within / total) if total > 0 else 1.0


def evaluation_var_at(evaluation_var: float, prompts: int, samples: int, within: float, to_prompts: int,
                      to_samples: int) -> float:
    """V_evaluation rescaled from an evaluation of ``prompts`` x ``samples`` to one of ``to_prompts`` x
    ``to_samples``: ∝ (between-prompt part + within-prompt part · k0 / k) / N (a planning approximation)."""
    return evaluation_var * prompts / to_prompts * ((1 - within) + within * samples / to_samples)


def area_under_curve(marks, values) -> np.ndarray:
    """Trapezoid area under each curve (last axis of ``values``) over the budget ``marks``, divided by the
    budget they span: the curve's average over the budget, in the curve's own unit."""
    marks, values = np.asarray(marks, dtype=float), np.asarray(values, dtype=float)
    area = ((values[..., 1:] + values[..., :-1]) / 2 * np.diff(marks)).sum(axis=-1)
    return area / (marks[-1] - marks[0])


def sorted_profiles(per_prompt) -> np.ndarray:
    """Each seed's per-prompt rewards (rows) sorted ascending: column j is the (j+1)-th worst prompt."""
    return np.sort(np.asarray(per_prompt, dtype=float), axis=1)


def tail_profiles(sorted_profiles) -> np.ndarray:
    """Lower CVaR at every level: column j is the mean of the j+1 worst prompts, the tail reward at
    α = (j+1)/N (``arena.evaluate.lower_cvar``); the last column is the mean reward."""
    sorted_profiles = np.asarray(sorted_profiles, dtype=float)
    return np.cumsum(sorted_profiles, axis=1) / np.arange(1, sorted_profiles.shape[1] + 1)


def speeds_differ(seconds: dict[str, float], tolerance: float = 0.1) -> bool:
    """Whether the arms' training seconds (each arm's mean over seeds) differ by more than ``tolerance``."""
    values = [v for v in seconds.values() if v > 0]
    return len(values) > 1 and max(values) > (1 + tolerance) * min(values)

