"""`arena report` on the synthetic studies (``arena.report.comparison``): the files it writes and logs, the rows
against numpy and scipy computed here, the sections along the budget and by rank, bands and captions, one seed
per arm, the draws' composition and arm labels."""
import math

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats

from arena.cli import main
from arena.report.comparison import curves, write_study_report
from arena.report.stats import SEEDS_AND_EVALUATION, SEEDS_ONLY
from arena.rng import numpy_generator
from arena.study import load_study
from arena.tracking import Tracker
from report_support import (ARMS, POINTS, AMOUNT, ALPHA, MARKS, FLOPS_PER_SAMPLE, FIGURES, CURVE_FIGURES,
                            DEFAULT_COLUMNS, LABELS, assert_one_column, bands_of, final_values, lines_of,
                            lower_cvar, report_of, study_file, synthetic_rewards, t_interval, table_heads, texts)
from report_support import report_store, synthetic_report  # noqa: F401 (the fixtures store and synthetic)


def prompt_bootstrap_variance(start, end, statistic, resamples=1000):
    """The evaluation part, recomputed by a plain loop: whole prompts resampled by the generator keyed (12, 0)
    (draw 0), the same prompts for every seed, the variance of the mean over seeds of the gain."""
    index = numpy_generator(12, 0).integers(0, start.shape[1], (resamples, start.shape[1]))
    means = [np.mean([statistic(s[i], e[i]) for s, e in zip(start, end)]) for i in index]
    return float(np.var(means, ddof=1))


def test_the_command_writes_every_file_and_logs_them_to_the_parent_run(store, capsys):
    folder, uri, studies, parents = store
    out = folder / "reports"
    code = main(["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "| arm | seeds |" in printed and f"logged to the parent run {parents['synthetic']}" in printed
    expected = ({f"{name}.{suffix}" for name in FIGURES for suffix in ("png", "pdf", "caption.txt")}
                | {"summary.md", "table.tex"})
    assert {p.name for p in out.iterdir()} == expected
    assert all((out / name).stat().st_size > 1000 for name in expected if name.endswith((".png", ".pdf")))
    assert (out / "tail_reward.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "tail_reward.pdf").read_bytes()[:4] == b"%PDF"
    logged = {a.path for a in MlflowClient(uri).list_artifacts(parents["synthetic"], "report")}
    assert logged == {f"report/{name}" for name in expected}
    table = (out / "table.tex").read_text()
    assert r"\toprule" in table and r"block\_grpo" in table and table.count(r" \\") == 1 + len(ARMS)
    assert table_heads(out) == DEFAULT_COLUMNS  # the compact default, to fit a two-column paper's width


def test_the_curves_against_flops_sit_at_the_flops_each_arm_logged(store):
    """--x flops: each arm's points at the (seed-mean) budget/flops it had used at each mark."""
    folder, uri, studies, _ = store
    report = write_study_report(studies["synthetic"], Tracker(uri, "synthetic"), folder / "flops", x="flops", log=False)
    axis = report.figures["tail_reward"].axes[0]
    assert "token-FLOPs" in axis.get_xlabel()
    for arm, line in zip(ARMS, lines_of(axis, ARMS)):
        assert np.allclose(line.get_xdata(), [(m + 4 * (m > 0)) * FLOPS_PER_SAMPLE[arm] for m in MARKS])


def test_rows_match_an_independent_computation(synthetic):
    """The final tail gain: mean over seeds; its interval t with Satterthwaite's ν on s²/S plus the prompt
    bootstrap's part; the reference comparison's p values Holm-adjusted by hand; AUC and mean reward with scipy's
    t interval; summary.md shows each cell."""
    study, results = synthetic.results.study, synthetic.results
    gains, means = final_values(study, "tail_gain"), final_values(study, "mean")
    rows = {row.arm: row for row in synthetic.rows}
    assert list(rows) == list(ARMS)
    summary = (synthetic.directory / "summary.md").read_text()
    tail = lambda s, e: lower_cvar(e, ALPHA) - lower_cvar(s, ALPHA)  # noqa: E731
    p_values = {}
    for arm in ARMS:
        row = rows[arm]
        assert row.seeds == 4 and row.budget == AMOUNT + 4
        assert row.tail_gain.value == pytest.approx(gains[arm].mean())
        seed_var = gains[arm].var(ddof=1) / 4
        runs = results.arms[arm]
        evaluation_var = prompt_bootstrap_variance(np.stack([r.start for r in runs]), np.stack([r.end for r in runs]),
                                                   tail)
        assert row.tail_gain.seed_se**2 == pytest.approx(seed_var)
        assert row.tail_gain.evaluation_se**2 == pytest.approx(evaluation_var)
        df = (seed_var + evaluation_var) ** 2 / (seed_var**2 / 3)
        half = stats.t.ppf(0.975, df) * math.sqrt(seed_var + evaluation_var)
        assert [row.tail_gain.low, row.tail_gain.high] == pytest.approx([gains[arm].mean() - half,
                                                                         gains[arm].mean() + half])
        assert row.mean_reward.value == pytest.approx(means[arm].mean())
        assert [row.mean_reward.low, row.mean_reward.high] == pytest.approx(t_interval(means[arm]))
        curve = results.values(arm, "eval/tail_reward")
        areas = np.trapezoid(curve, MARKS, axis=1) / AMOUNT  # the tail reward averaged over the budget
        assert [row.area.value, row.area.low, row.area.high] == pytest.approx([areas.mean(), *t_interval(areas)])
        assert row.seed_sd == pytest.approx(gains[arm].std(ddof=1))
        assert (f"| {arm} | 4 | {row.tail_gain.value:+.3f} [{row.tail_gain.low:+.3f}, {row.tail_gain.high:+.3f}] | "
                in summary)
        if arm == "grpo":
            assert row.comparison is None and row.reference
            continue
        difference = row.comparison.difference
        assert difference.value == pytest.approx(gains[arm].mean() - gains["grpo"].mean())
        t = abs(difference.value) / difference.se
        assert row.comparison.p == pytest.approx(2 * stats.t.sf(t, difference.df))
        p_values[arm] = row.comparison.p
    low, high = sorted(p_values.values())
    holm = {arm: (2 * low if p == low else max(2 * low, high)) for arm, p in p_values.items()}
    for arm in p_values:
        assert rows[arm].comparison.p_adjusted == pytest.approx(min(1.0, holm[arm]))
    assert rows["block_grpo"].comparison.verdict == "different"  # the drift shows
    assert "different, p" in summary and "(holm)" in summary and "tail-reward AUC" in summary


def test_the_rank_sensitivity_is_the_median_of_pairwise_seed_differences(synthetic):
    """summary.md's rank-based section: per arm against the reference, the Hodges-Lehmann shift recomputed here
    from the synthetic seeds' gains, and the Mann-Whitney p of scipy; no matched table without a sharpen control."""
    gains = final_values(synthetic.results.study, "tail_gain")
    summary = (synthetic.directory / "summary.md").read_text()
    section = summary.split("## Rank-based sensitivity (tail gain vs grpo)")[1].split("##")[0]
    for arm in ("block_grpo", "es"):
        shift = np.median(np.subtract.outer(gains[arm], gains["grpo"]))
        p = stats.mannwhitneyu(gains[arm], gains["grpo"], alternative="two-sided").pvalue
        line = next(line for line in section.splitlines() if line.startswith(f"| {arm} |"))
        assert f"| {shift:+.3f}" in line and line.endswith(f"| {'< 0.001' if p < 0.001 else f'{p:.3f}'} |")
    assert "At matched decoding" not in summary


def test_every_mark_has_its_difference_and_verdict_and_the_curve_its_area(synthetic):
    """summary.md's section along the budget: at each mark after the start, each arm's mean tail gain minus
    grpo's, recomputed here from the synthetic rewards, and the AUC difference from the logged curves."""
    study = synthetic.results.study
    summary = (synthetic.directory / "summary.md").read_text()
    section = summary.split("## Along the budget")[1].split("\n## ")[0]
    assert "holm over the arm's 3 marks" in section
    start = lower_cvar(synthetic_rewards("grpo", 0, 0).mean(axis=1), ALPHA)

    def gains(arm, point):
        return np.array([lower_cvar(synthetic_rewards(arm, seed, point).mean(axis=1), ALPHA) - start
                         for seed in study.seeds])
    for arm in ("block_grpo", "es"):
        line = next(line for line in section.splitlines() if line.startswith(f"| {arm} |"))
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for point in range(1, POINTS):
            assert cells[point].startswith(f"{(gains(arm, point) - gains('grpo', point)).mean():+.3f} [")
            assert cells[point].split("] ")[1] in ("different", "inconclusive", "equivalent within ±0.02")
        curves = {a: synthetic.results.values(a, "eval/tail_reward") for a in (arm, "grpo")}
        areas = {a: np.trapezoid(curves[a], MARKS, axis=1) / AMOUNT for a in curves}
        assert cells[-1].startswith(f"{areas[arm].mean() - areas['grpo'].mean():+.3f} [")
    assert "| block_grpo |" in section and "different" in section.split("| block_grpo |")[1].split("\n")[0]


def test_curve_bands_are_t_intervals_over_seeds_at_each_mark(synthetic):
    axis = synthetic.figures["mean_reward"].axes[0]
    for arm, curve, band in zip(ARMS, curves(synthetic.results, "eval/mean_reward", "samples"), bands_of(axis)):
        values = synthetic.results.values(arm, "eval/mean_reward")
        low, high = np.array([t_interval(values[:, j]) for j in range(values.shape[1])]).T
        low, high = np.nan_to_num(low, nan=values[0, 0]), np.nan_to_num(high, nan=values[0, 0])  # the shared start
        assert curve.arm == arm and list(curve.x) == MARKS and np.allclose(curve.mean, values.mean(axis=0))
        assert np.allclose(curve.low, low) and np.allclose(curve.high, high)
        drawn = band.get_paths()[0].vertices[:, 1]
        assert drawn.min() == pytest.approx(low.min()) and drawn.max() == pytest.approx(high.max())


def test_one_seed_per_arm_reports_with_intervals_marked_unavailable(store, capsys):
    folder, uri, _, _ = store
    out = folder / "single-report"
    assert main(["report", str(folder / "single.yaml"), "--tracking-uri", uri, "--out", str(out)]) == 0
    capsys.readouterr()
    summary = (out / "summary.md").read_text()
    main_table = summary.split("\n## ")[0]  # the sections below it (along the budget, ...) have rows of their own
    rows = [line for line in main_table.splitlines() if line.startswith("| ") and "seeds" not in line]
    assert len(rows) == len(ARMS)
    # 5 intervals per arm (tail, hard and mean gain, AUC, mean reward); the others' difference and verdict too
    assert [line.count("n/a (1 seed)") for line in rows] == [5, 7, 7]
    assert "nan" not in summary and "nan" not in (out / "table.tex").read_text()
    report = report_of(store, "single")
    assert not any(row.tail_gain.has_interval or row.area.has_interval for row in report.rows)
    for name in ("tail_reward", "mean_reward", "levels"):
        for axis in report.figures[name].axes:
            assert len(lines_of(axis, ARMS)) == len(ARMS) and not bands_of(axis)


def test_the_setup_states_each_draws_levels_and_the_prompts_draws_share():
    """The short confirmation's draws, rebuilt from the task's own keyed examples here: the 18 held-out level-1
    prompts are 14% of the 128-prompt draw 0 and 1.8% of each 1,024-prompt draw, and draws 1 and 2 share the
    prompts their item sets have in common (a pool of 1,648 makes 'fresh' draws overlap)."""
    from arena.report.comparison import draw_composition
    from arena.rng import EvaluationKey, seed_of
    from rewards import load_task

    study = load_study("studies/confirm/es_vs_blockgrpo.yaml")
    task = load_task("noisy_arithmetic", (1, 2))
    spec = study.evaluation
    sizes = {0: spec.prompts, 1: spec.draw_prompts, 2: spec.draw_prompts}
    seeds = {0: spec.seed, **{d: seed_of(spec.seed, EvaluationKey.DRAW_PROMPTS, d) for d in (1, 2)}}
    items = {d: task.examples("heldout", n=sizes[d], seed=seeds[d], distinct=True) for d in sizes}
    prompts = {d: {task.prompt(e) for e in items[d]} for d in items}
    composition, shared = draw_composition(study)
    for d in items:
        ones = sum(e["difficulty"] == 1 for e in items[d])
        assert f"draw {d}: {sizes[d]} prompts (level 1: {ones} ({ones / sizes[d]:.1%})" in composition
    assert ones == 18 and "level 1: 18 (14.1%)" in composition
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert f"draws {a} and {b} share {len(prompts[a] & prompts[b])}" in shared
    assert len(prompts[1] & prompts[2]) > 500  # the overlap the docs state


def test_the_statistical_note_is_a_caption_beside_each_figure_not_in_it(synthetic, store):
    """Each figure's interval definition and seed count sit in <name>.caption.txt (a paper's \\caption), and
    no text of a figure states an interval or a seed count; the curves' band is the t interval over seeds given
    the draw, the final gain's the table's interval over seeds and evaluation draws."""
    for name, figure in synthetic.figures.items():
        caption = (synthetic.directory / f"{name}.caption.txt").read_text()
        assert not any("95%" in text or "seed" in text for text in texts(figure)), (name, texts(figure))
        if name in (*CURVE_FIGURES, "tail_profile"):
            assert "mean over 4 seeds" in caption and SEEDS_ONLY in caption and "draw 0" in caption, name
        else:
            assert SEEDS_AND_EVALUATION in caption and "summary.md" in caption and "each seed" in caption
    single = report_of(store, "single")
    for name in CURVE_FIGURES:
        assert "one seed per arm: no band" in (single.directory / f"{name}.caption.txt").read_text()


def test_bands_and_intervals_of_rewards_stay_in_the_reward_range(store):
    """With 2 seeds (t quantile 12.7) the t band of the tail reward reaches below 0 for a reward in [0, 1]: the
    band drawn is the t interval over seeds clipped to the task's reward range, and so is the AUC's interval in
    the table; gains are clipped to [-1, 1]."""
    report = report_of(store, "pair")
    clipped = 0
    for key, name in (("eval/tail_reward", "tail_reward"), ("eval/mean_reward", "mean_reward")):
        axis = report.figures[name].axes[0]
        for arm, band in zip(ARMS, bands_of(axis)):
            values = report.results.values(arm, key)
            low, high = np.array([t_interval(values[:, j]) for j in range(values.shape[1])]).T
            low, high = (np.where(np.isnan(bound), values[0], bound) for bound in (low, high))  # seeds agree: no spread
            clipped += int(np.sum(low < 0) + np.sum(high > 1))
            drawn = band.get_paths()[0].vertices[:, 1]
            assert drawn.min() == pytest.approx(np.clip(low, 0, 1).min())
            assert drawn.max() == pytest.approx(np.clip(high, 0, 1).max())
    assert clipped, "the test needs a band that leaves [0, 1]"
    summary = (report.directory / "summary.md").read_text()
    areas_clipped = 0
    for row in report.rows:
        areas = np.trapezoid(report.results.values(row.arm, "eval/tail_reward"), MARKS, axis=1) / AMOUNT
        low, high = t_interval(areas) if np.ptp(areas) else (areas[0], areas[0])  # scipy: nan without spread
        areas_clipped += low < 0
        assert (row.area.low, row.area.high) == pytest.approx((max(low, 0.0), min(high, 1.0)))
        assert f"{row.area.value:.3f} [{max(low, 0.0):.3f}, {min(high, 1.0):.3f}]" in summary
        assert -1 <= row.tail_gain.low <= row.tail_gain.high <= 1
    assert areas_clipped, "the test needs an AUC interval that leaves [0, 1]"
    gains = report.figures["tail_profile"].axes[1]
    assert all(-1 <= v <= 1 for band in bands_of(gains) for v in band.get_paths()[0].vertices[:, 1])


def test_a_zero_width_band_is_named_in_the_caption(synthetic):
    """Where every seed of an arm has the same value the band has no width and nothing shows: the caption names
    those points, found here from the logged values (the shared start at least, for every arm)."""
    for key, name in (("eval/tail_reward", "tail_reward"), ("eval/mean_reward", "mean_reward")):
        caption = (synthetic.directory / f"{name}.caption.txt").read_text()
        agree = {arm: [MARKS[j] for j in range(POINTS) if np.ptp(synthetic.results.values(arm, key)[:, j]) == 0]
                 for arm in ARMS}
        common = sorted(set.intersection(*map(set, agree.values())))
        assert common == [0]
        said = f"every arm at {', '.join(map(str, common))} samples"
        for arm in ARMS:
            extra = [m for m in agree[arm] if m not in common]
            if extra:
                said += f"; {arm} at {', '.join(map(str, extra))} samples"
        assert f"all seeds agree (a band of zero width, not drawn): {said}." in caption, caption


def test_arm_labels_name_the_arms_in_every_legend_and_table_and_keep_the_runs(store, capsys):
    """A study's arms with ``label:`` keep their config hashes (so the same runs are read) and show the labels in
    every figure's legend and tick labels and in the tables' arm column; the figures stay one column wide with
    a long label."""
    folder, uri, studies, _ = store
    path = study_file(folder, "synthetic", [0, 1, 2, 3], LABELS, file="labelled")
    labelled = load_study(path)
    assert [run.config_hash for run in labelled.runs()] == [run.config_hash for run in studies["synthetic"].runs()]
    out = folder / "labelled-report"
    assert main(["report", str(path), "--tracking-uri", uri, "--out", str(out), "--columns", "all"]) == 0
    printed = capsys.readouterr().out
    report = write_study_report(labelled, Tracker(uri, "synthetic"), folder / "labelled-direct", log=False)
    assert [row.tail_gain.value for row in report.rows] == pytest.approx(
        [row.tail_gain.value for row in report_of(store, "synthetic").rows])
    for name in CURVE_FIGURES:
        legend = report.figures[name].legends[0]
        assert [text.get_text() for text in legend.get_texts()] == [LABELS[arm] for arm in ARMS]
    dots = report.figures["final_tail_gain"].axes[0]
    assert [label.get_text() for label in dots.get_yticklabels()] == [LABELS[arm] for arm in ARMS]
    assert_one_column(report)
    summary, table = (out / "summary.md").read_text(), (out / "table.tex").read_text()
    for arm in ARMS:
        assert f"| {LABELS[arm]} | 4 |" in summary and f"| {LABELS[arm]} | " in printed
        assert f"\n{LABELS[arm]} & 4 & " in table
