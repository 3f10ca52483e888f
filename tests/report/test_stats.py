"""The report's statistics against known truths: coverage by simulation (the truth known, 2,000 replications per
case), TOST's error rates, Holm's adjusted p values by hand, Welch's interval from scipy, and the planner's power
against simulation. Every simulation draws from a fixed generator: the same numbers on every machine."""
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.special import expit, logit

from arena.report import stats

REPLICATIONS = 2000


def skewed(generator, shape):
    """Gamma(8) seeds, centred: skewness 0.71, the right-skew of a mean of a few runs' gains."""
    return (generator.gamma(8.0, 1.0, shape) - 8.0) / math.sqrt(8.0)


def percentile_bootstrap(values, generator, resamples=2000):
    """The interval the report used before: the 2.5th and 97.5th percentiles of resampled means over seeds."""
    index = generator.integers(0, len(values), (resamples, len(values)))
    return np.percentile(values[index].mean(axis=1), [2.5, 97.5])


@pytest.mark.parametrize("seeds", [3, 5, 15])
@pytest.mark.parametrize("distribution", ["normal", "skewed"])
def test_the_t_interval_over_seeds_covers_95_percent(seeds, distribution):
    generator = np.random.default_rng([seeds, distribution == "skewed"])
    draw = generator.standard_normal if distribution == "normal" else lambda shape: skewed(generator, shape)
    values = 0.1 + 0.03 * draw((REPLICATIONS, seeds))
    covered = [(iv.low <= 0.1 <= iv.high) for iv in map(stats.t_interval, values)]
    assert 0.93 <= np.mean(covered) <= 0.97, np.mean(covered)


def test_the_percentile_bootstrap_over_five_seeds_fails_the_coverage_test():
    """Why the report's intervals changed: at 5 seeds the percentile bootstrap covers far less than 95%."""
    generator = np.random.default_rng(3)
    values = 0.1 + 0.03 * generator.standard_normal((REPLICATIONS, 5))
    covered = [low <= 0.1 <= high for low, high in (percentile_bootstrap(v, generator, 500) for v in values)]
    assert np.mean(covered) < 0.90, np.mean(covered)


def test_the_difference_interval_is_welchs_when_the_evaluation_adds_nothing():
    generator = np.random.default_rng(4)
    x, y = generator.normal(0.1, 0.02, 5), generator.normal(0.05, 0.04, 7)
    interval = stats.combine(float(x.mean() - y.mean()), [(x.var(ddof=1) / 5, 5), (y.var(ddof=1) / 7, 7)])
    welch = scipy_stats.ttest_ind(x, y, equal_var=False)
    low, high = welch.confidence_interval(0.95)
    assert (interval.low, interval.high) == pytest.approx((low, high))
    assert stats.p_value(interval) == pytest.approx(welch.pvalue)
    assert interval.df == pytest.approx(welch.df)


# ---------------------------------------------------------------------------------------------
# the shared evaluation draw


def evaluation_draw(generator, seeds, prompts=64, samples=8, shift=0.4, seed_sd=0.05, prompt_sd=0.3):
    """One study's evaluation under common random numbers: N prompts drawn from a pool whose start success rates
    are Beta(2, 1); each seed's policy moves every prompt's logit by shift + seed_sd·z_s + prompt_sd·ε_is; the k
    samples at the start and at the end share their uniforms (the same decoding seeds), and the hard prompts are
    picked on an independent decoding of the start model."""
    p = 0.01 + 0.98 * generator.beta(2.0, 1.0, prompts)
    u = generator.random((prompts, samples))
    q = expit(logit(p)[None] + shift + seed_sd * generator.standard_normal((seeds, 1))
              + prompt_sd * generator.standard_normal((seeds, prompts)))
    selection = (generator.random((prompts, samples)) < p[:, None]).mean(axis=1)
    hard = np.zeros(prompts, dtype=bool)
    hard[np.lexsort((generator.random(prompts), selection))[: math.ceil(0.25 * prompts)]] = True
    start = np.broadcast_to((u < p[:, None]).mean(axis=1), (seeds, prompts))
    return stats.Draw(start, (u[None] < q[..., None]).mean(axis=2), hard)


def expected_gain(statistic, truth_draws=5000):
    """The estimand: the expected gain of one seed on one fresh evaluation draw at this N and k."""
    generator = np.random.default_rng(99)
    return float(np.mean([statistic(d.start, d.end, d.hard)[0]
                          for d in (evaluation_draw(generator, 1) for _ in range(truth_draws))]))


@pytest.mark.parametrize("name,statistic", [("tail", stats.tail_gain(0.25)), ("hard", stats.hard_gain)])
def test_a_gain_interval_that_counts_the_shared_evaluation_draw_covers_95_percent(name, statistic):
    """Every seed shares one evaluation draw, and the draw varies more than the seeds do (the testbed's case): an
    interval over seeds alone is conditional on the draw and covers far less than 95%; the report's interval, which
    adds the prompt bootstrap's evaluation part, covers 93-97%."""
    truth = expected_gain(statistic)
    generator = np.random.default_rng(17)
    counted, seeds_only, draw_sd, seed_se = [], [], [], []
    for _ in range(REPLICATIONS):
        draw = evaluation_draw(generator, 5)
        interval = stats.gain_interval([draw], statistic, resamples=200)
        naive = stats.t_interval(statistic(draw.start, draw.end, draw.hard))
        counted.append(interval.low <= truth <= interval.high)
        seeds_only.append(naive.low <= truth <= naive.high)
        draw_sd.append(interval.value)
        seed_se.append(naive.se)
    assert np.std(draw_sd) > 2 * np.median(seed_se)  # the design: the draw dominates
    assert 0.93 <= np.mean(counted) <= 0.97, np.mean(counted)
    assert np.mean(seeds_only) < 0.85, np.mean(seeds_only)


def test_independent_draws_measure_the_spread_the_bootstrap_predicts():
    """With D draws, the SD over draws measured directly agrees with sqrt(D) x the bootstrap's evaluation SE."""
    generator = np.random.default_rng(23)
    statistic = stats.tail_gain(0.25)
    measured, predicted = [], []
    for _ in range(200):
        draws = [evaluation_draw(generator, 3) for _ in range(4)]
        measured.append(stats.between_draw_sd(draws, statistic) ** 2)
        predicted.append(4 * stats.gain_interval(draws, statistic, resamples=200).evaluation_se ** 2)
    assert 0.8 < np.mean(predicted) / np.mean(measured) < 1.25, (np.mean(predicted), np.mean(measured))


def test_one_seed_has_no_interval_but_keeps_its_evaluation_se():
    """A one-seed run has no seed variance, so no interval, but its draw's noise is still known: the evaluation
    SE it reports matches the SD of one seed's gain over independent draws of the same design (it used to read
    0.000, the field's default)."""
    generator = np.random.default_rng(29)
    statistic = stats.tail_gain(0.25)
    reported, gains = [], []
    for _ in range(300):
        draw = evaluation_draw(generator, 1, seed_sd=0.0)
        interval = stats.gain_interval([draw], statistic, resamples=200)
        assert not interval.has_interval and math.isnan(interval.seed_se)
        reported.append(interval.evaluation_se)
        gains.append(interval.value)
    assert 0.8 < np.mean(np.square(reported)) / np.var(gains, ddof=1) < 1.25, (np.mean(reported), np.std(gains))


# ---------------------------------------------------------------------------------------------
# equivalence, multiplicity, planning


def tost_rate(true_difference, margin=0.02, seeds=15, sd=0.03, level=0.05):
    generator = np.random.default_rng([int(1000 * true_difference), seeds])
    x = generator.normal(true_difference, sd, (REPLICATIONS, seeds))
    y = generator.normal(0.0, sd, (REPLICATIONS, seeds))
    declared = []
    for a, b in zip(x, y):
        interval = stats.combine(float(a.mean() - b.mean()), [(a.var(ddof=1) / seeds, seeds),
                                                               (b.var(ddof=1) / seeds, seeds)])
        declared.append(stats.tost_p(interval, margin) < level)
    return float(np.mean(declared))


def test_tost_declares_equivalence_at_the_planned_rate_and_almost_never_at_the_margin():
    margin, seeds, sd = 0.02, 15, 0.03
    at_margin = tost_rate(margin)
    assert at_margin <= 0.05 + 0.015, at_margin  # the test's size, within simulation noise (SE 0.005)
    se = sd * math.sqrt(2 / seeds)
    planned = stats.power_equivalent(0.0, margin, se, 2 * seeds - 2, 0.05)
    assert abs(tost_rate(0.0) - planned) < 0.05, (tost_rate(0.0), planned)


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    adjusted = stats.holm([0.01, math.nan, 0.02])  # a test that could not run is not one of the m
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    assert stats.adjust([0.01, 0.02], "bonferroni") == pytest.approx([0.02, 0.04])


def test_verdicts_never_call_a_non_significant_difference_no_difference():
    assert stats.verdict(0.01, 0.9, 0.05, 0.02) == "different"
    assert stats.verdict(0.4, 0.01, 0.05, 0.02) == "equivalent within ±0.02"
    assert stats.verdict(0.4, 0.3, 0.05, 0.02) == "inconclusive"
    assert stats.verdict(0.4, math.nan, 0.05, None) == "inconclusive"  # no margin: never equivalent


@pytest.mark.parametrize("sd", [0.02, 0.035])
def test_the_planned_seed_count_reaches_80_percent_power_in_simulation(sd):
    margin, level = 0.02, 0.05
    different, equivalent = stats.seeds_needed((sd, sd), 0.0, margin, level)
    generator = np.random.default_rng(int(sd * 1000))
    x = generator.normal(margin, sd, (REPLICATIONS, different))
    y = generator.normal(0.0, sd, (REPLICATIONS, different))
    power = np.mean(scipy_stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < level)
    assert 0.77 <= power <= 0.87, (different, power)
    assert abs(tost_rate(0.0, margin, equivalent, sd) - 0.8) < 0.06
    fewer = stats.seeds_needed((sd, sd), 0.0, margin, level)[0] - 2
    x, y = x[:, :fewer], y[:, :fewer]
    assert np.mean(scipy_stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < level) < power


def test_no_seed_count_decides_when_the_evaluation_alone_is_too_noisy():
    assert stats.seeds_needed((0.02, 0.02), evaluation_var=0.03**2, margin=0.02, level=0.05) == (None, None)


def test_the_evaluation_part_rescales_with_prompts_and_samples():
    """Binary rewards of a frozen-rate policy: the within-prompt share of the gains' variance is what decoding
    adds; doubling the prompts halves the evaluation variance, more samples shrink only the decoding part."""
    generator = np.random.default_rng(8)
    rates = generator.beta(2, 1, 400)
    start = (generator.random((400, 8)) < rates[:, None]).astype(float)
    end = (generator.random((400, 8)) < np.clip(rates + 0.1, 0, 1)[:, None]).astype(float)
    within = stats.within_prompt_share(start, end)
    assert 0.5 < within <= 1.0  # independent decodings: mostly decoding noise
    assert stats.evaluation_var_at(1.0, 128, 8, within, 256, 8) == pytest.approx(0.5)
    assert stats.evaluation_var_at(1.0, 128, 8, within, 128, 16) == pytest.approx(1 - within / 2)


def test_hodges_lehmann_is_the_median_shift_and_its_interval_inverts_the_mann_whitney_test():
    """Against brute force: the shift is the median of all pairwise differences, and the interval is exactly the
    set of shifts δ that the Mann-Whitney test (normal approximation, no continuity correction, as the interval's
    derivation) does not reject for a − δ against b: just inside each bound p ≥ 0.05, just outside p < 0.05."""
    from scipy.stats import mannwhitneyu

    from arena.report.stats import hodges_lehmann

    generator = np.random.default_rng(11)
    for m, n in ((8, 8), (10, 15), (20, 6)):
        a, b = generator.standard_t(3, m) + 0.2, generator.standard_t(3, n)
        shift, p = hodges_lehmann(a, b)
        assert shift.value == pytest.approx(np.median([x - y for x in a for y in b]))
        assert p == pytest.approx(mannwhitneyu(a, b, alternative="two-sided").pvalue)
        for bound, inward in ((shift.low, 1), (shift.high, -1)):
            inside = mannwhitneyu(a - (bound + inward * 1e-9), b, method="asymptotic", use_continuity=False).pvalue
            outside = mannwhitneyu(a - (bound - inward * 1e-9), b, method="asymptotic", use_continuity=False).pvalue
            assert inside >= 0.05 > outside


def test_hodges_lehmann_interval_covers_the_shift_about_95_percent():
    from arena.report.stats import hodges_lehmann

    generator = np.random.default_rng(12)
    covered = [(lambda iv: iv.low <= 0.3 <= iv.high)(hodges_lehmann(generator.standard_t(3, 10) + 0.3,
                                                                        generator.standard_t(3, 12))[0])
               for _ in range(1000)]
    assert 0.93 <= np.mean(covered) <= 0.97  # binomial SE 0.007 at 1,000 draws


def test_hodges_lehmann_has_no_interval_with_too_few_seeds():
    from arena.report.stats import hodges_lehmann

    shift, _ = hodges_lehmann([0.1, 0.2], [0.0, 0.05])
    assert not shift.has_interval and shift.value == pytest.approx(np.median([0.1, 0.05, 0.2, 0.15]))
