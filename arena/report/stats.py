"""The numbers of a study report, over seeds: pure functions of numpy arrays (no MLflow, no drawing).

Every interval is a 95% percentile bootstrap over seeds, ``RESAMPLES`` resamples drawn from a generator keyed
by ``key`` (``arena.rng.numpy_generator``; no global RNG state), so a report is reproducible to the digit:

- a per-arm statistic (a mean over the arm's seeds): the arm's seeds resampled with replacement;
- a statistic of two arms (probability of improvement): each arm's seeds resampled within that arm
  (stratified), independently of the other's;
- a curve: whole seed curves resampled, so that the band at every point uses the same resamples.

With fewer than two seeds there is nothing to resample: intervals are ``nan`` (the tables say "n/a").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arena.rng import name_key, numpy_generator

RESAMPLES = 10_000
BOOTSTRAP_KEY = 12  # the first integer of every bootstrap key: (BOOTSTRAP_KEY, name_key(arm), name_key(statistic))
LEVEL = 0.95


def bootstrap_key(*names: str) -> tuple[int, ...]:
    """The key of one bootstrap: the arm(s) and the statistic, by name (stable across runs and machines)."""
    return (BOOTSTRAP_KEY, *(name_key(name) for name in names))


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its 95% interval (``nan`` bounds: unavailable, fewer than two seeds)."""

    value: float
    low: float = math.nan
    high: float = math.nan
    seeds: int = 1

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def _percentiles(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(samples, [tail, 100 - tail], axis=0)
    return low, high


def resampled_means(values: np.ndarray, key: tuple[int, ...]) -> np.ndarray:
    """Means over seeds (axis 0 of ``values``) of ``RESAMPLES`` resamples of the seeds with replacement:
    shape (RESAMPLES, *values.shape[1:])."""
    values = np.asarray(values, dtype=float)
    index = numpy_generator(*key).integers(0, len(values), size=(RESAMPLES, len(values)))
    return values[index].mean(axis=1)


def mean_interval(values, key: tuple[int, ...]) -> Estimate:
    """The mean over seeds of a per-seed value, with its 95% bootstrap interval (``nan`` with one seed)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return Estimate(float(values.mean()), seeds=len(values))
    low, high = _percentiles(resampled_means(values, key))
    return Estimate(float(values.mean()), float(low), float(high), len(values))


def curve_band(curves, key: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Mean curve over seeds (rows of ``curves``) and its pointwise 95% band from resampled whole curves;
    no band (None, None) with one seed."""
    curves = np.asarray(curves, dtype=float)
    if len(curves) < 2:
        return curves.mean(axis=0), None, None
    low, high = _percentiles(resampled_means(curves, key))
    return curves.mean(axis=0), low, high


def probability_of_improvement(x, y) -> float:
    """P(X > Y) over all (x, y) seed pairs, ties counting half: the Mann-Whitney U of ``x`` over n·m."""
    x, y = np.asarray(x, dtype=float)[:, None], np.asarray(y, dtype=float)[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def improvement_interval(x, y, key: tuple[int, ...]) -> Estimate:
    """``probability_of_improvement(x, y)`` with a stratified 95% bootstrap interval (each arm's seeds
    resampled within the arm); no interval when either arm has fewer than two seeds."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    value = probability_of_improvement(x, y)
    if min(len(x), len(y)) < 2:
        return Estimate(value, seeds=min(len(x), len(y)))
    generator = numpy_generator(*key)
    xs = x[generator.integers(0, len(x), size=(RESAMPLES, len(x)))][:, :, None]
    ys = y[generator.integers(0, len(y), size=(RESAMPLES, len(y)))][:, None, :]
    low, high = _percentiles(np.mean((xs > ys) + 0.5 * (xs == ys), axis=(1, 2)))
    return Estimate(value, float(low), float(high), min(len(x), len(y)))


@dataclass(frozen=True)
class Significance:
    """A named test of one arm against the reference arm; ``nan`` when it cannot be computed."""

    name: str
    statistic: float
    p: float
    detectable: float = math.nan  # the smallest true difference this test detects at 80% power (``detectable_effect``)


WELCH = "Welch's t-test"


def evaluation_se(start: np.ndarray, end: np.ndarray, alpha: float, key: tuple[int, ...],
                  resamples: int = 2000) -> float:
    """Standard error of one run's tail gain that comes from its evaluation alone: the k samples of each prompt
    (``start``, ``end``: (prompts, k) rewards) resampled with replacement within the prompt, at both points, at
    fixed prompts and policy. The seeds' spread says how much training varies; this says how much of a gain a
    finite evaluation (N prompts x k samples) can show without any change in the policy. Resampling k values
    shrinks each prompt's variance by (k-1)/k, which is put back; the tail's selection of its lowest prompts
    still makes it run low, by about 15% at 64 prompts x 8 samples (tests/test_report.py): a lower bound."""
    from arena.evaluate import lower_cvar

    generator = numpy_generator(*key)

    def resampled_tails(rewards: np.ndarray) -> np.ndarray:
        n, k = rewards.shape
        picks = generator.integers(0, k, (resamples, n, k))
        means = np.take_along_axis(np.broadcast_to(rewards, (resamples, n, k)), picks, axis=2).mean(axis=2)
        return np.array([lower_cvar(row, alpha) for row in means])

    k = start.shape[1]
    return float((resampled_tails(end) - resampled_tails(start)).std(ddof=1) * math.sqrt(k / (k - 1)))


def welch_test(x, y) -> Significance:
    """Welch's t-test of mean(x) = mean(y) (``scipy.stats.ttest_ind(equal_var=False)``), two-sided;
    ``nan`` with fewer than two seeds on either side or no spread on both."""
    from scipy import stats

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if min(len(x), len(y)) < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return Significance(WELCH, math.nan, math.nan)
    result = stats.ttest_ind(x, y, equal_var=False)
    return Significance(WELCH, float(result.statistic), float(result.pvalue), detectable_effect(x, y))


def detectable_effect(x, y, power: float = 0.8, level: float = 0.05) -> float:
    """The smallest true difference of means that Welch's two-sided test at ``level`` detects with probability
    ``power``, at these seed counts and spreads: (t_(1-level/2, ν) + t_(power, ν)) · sqrt(s_x²/n_x + s_y²/n_y),
    ν by Welch-Satterthwaite (the usual approximation to the noncentral t; the spreads are the observed ones)."""
    from scipy import stats

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    if vx + vy == 0:
        return math.nan
    nu = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    return float((stats.t.ppf(1 - level / 2, nu) + stats.t.ppf(power, nu)) * math.sqrt(vx + vy))


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
