"""`arena report` on studies this file logs itself, with known synthetic curves, through arena.tracking into a
SQLite store (runs, tags, params, metrics and artifacts as arena/runner.py writes them; no model): the files,
the figures' lines and bands, the numbers against numpy and scipy computed here, one seed per arm, which runs
are read, and the figures logged to the parent run."""
import math
import re

import numpy as np
import pytest
import yaml
from matplotlib.collections import PolyCollection
from matplotlib.text import Text
from mlflow.tracking import MlflowClient
from PIL import Image
from scipy import stats

from arena.cli import main
from arena.report.comparison import curves, write_study_report
from arena.report.records import finished_runs
from arena.report.stats import SEEDS_AND_EVALUATION, SEEDS_ONLY
from arena.rng import name_key, numpy_generator
from arena.study import load_study
from arena.tracking import Tracker

ARMS = ("grpo", "block_grpo", "es")  # reference first
PROMPTS, SAMPLES, POINTS, AMOUNT, ALPHA = 24, 4, 4, 300, 0.25
MARKS = [0, 100, 200, 300]
DRIFT = {"grpo": 0.0, "block_grpo": 0.25, "es": 0.1}  # how far each arm lifts the success probabilities
SECONDS_PER_SAMPLE = {"grpo": 0.1, "block_grpo": 0.2, "es": 0.1}  # block_grpo twice as slow: a wall-clock panel
FLOPS_PER_SAMPLE = {"grpo": 6e6, "block_grpo": 2e7, "es": 1e6}  # ES has no backward pass
FIGURES = ("tail_reward", "mean_reward", "levels", "final_tail_gain", "tail_profile")
CURVE_FIGURES = ("tail_reward", "mean_reward", "levels")
DEFAULT_COLUMNS = ["arm", "seeds", r"tail gain ($\alpha$=0.25)", "vs reference (tail gain)", "verdict"]  # the docs' set
LABELS = {"grpo": "GRPO", "block_grpo": "Block-GRPO (ELBO, 2 draws, lr 1e-4)", "es": "ES"}  # one long on purpose


def study_file(folder, name: str, seeds: list[int], labels: dict | None = None, file: str | None = None):
    study = {
        "name": name, "task": {"name": "noisy_arithmetic", "levels": [1, 2]}, "train": {"prompts_per_step": 4},
        "evaluation": {"prompts": PROMPTS, "samples": SAMPLES, "points": POINTS, "alphas": [ALPHA, 0.5],
                       "primary_alpha": ALPHA},
        "budget": {"unit": "samples", "amount": AMOUNT}, "seeds": seeds, "reference": "grpo",
        "arms": {"grpo": {"method": "grpo", "options": {"lr": 1e-4, "group_size": 4}},
                 "block_grpo": {"method": "block_grpo", "options": {"lr": 1e-4, "group_size": 4}},
                 "es": {"method": "es", "options": {"population": 4}}},
    }
    for arm, label in (labels or {}).items():
        study["arms"][arm]["label"] = label
    path = folder / f"{file or name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def lower_cvar(per_prompt, alpha):
    return np.sort(per_prompt)[:math.ceil(alpha * len(per_prompt))].mean()


def synthetic_rewards(arm: str, seed: int, point: int) -> np.ndarray:
    """(prompts, samples) binary rewards; every run shares the start (point 0), as the runner's cached start."""
    generator = np.random.default_rng([seed if point else 0, point, name_key(arm) if point else 0])
    probability = np.clip(np.linspace(0.05, 0.9, PROMPTS) + DRIFT[arm] * point / (POINTS - 1) * (1 + 0.3 * seed)
                          - 0.02 * seed * (point > 0), 0, 1)
    return (generator.random((PROMPTS, SAMPLES)) < probability[:, None]).astype(float)


def log_run(tracker, run, parent_id: str, tags: dict | None = None, params: dict | None = None,
            status: str = "FINISHED") -> str:
    """One (arm, seed) run as arena/runner.py logs it: tags, params, study.yaml, then at every mark the eval/*
    and budget/* rows, completions.json and per_prompt_rewards.npz; train/* rows between marks."""
    tags = tags or {"arena.study": run.study, "arena.arm": run.arm, "arena.seed": str(run.seed),
                    "arena.config_hash": run.config_hash, "arena.method": run.method, "arena.profile": "none",
                    "arena.git_commit": "test"}
    run_id = tracker.start_run(f"{run.arm}/seed{run.seed}", parent_id, tags, params or run.resolved())
    tracker.log_text(run_id, "# synthetic\n", "study.yaml")
    start = synthetic_rewards(run.arm, run.seed, 0).mean(axis=1)
    levels = np.arange(PROMPTS) % 2 + 1
    for point, mark in enumerate(MARKS):
        rewards = synthetic_rewards(run.arm, run.seed, point)
        p = rewards.mean(axis=1)
        samples = mark + 4 * (point > 0)  # the runner evaluates after the step that reaches the mark
        tail = lower_cvar(p, ALPHA)
        rows = {"eval/tail_reward": tail, "eval/tail_gain": tail - lower_cvar(start, ALPHA),
                "eval/mean_reward": p.mean(), "eval/mean_gain": p.mean() - start.mean(),
                "eval/tail_reward_a0.5": lower_cvar(p, 0.5), "eval/level1_mean_reward": p[levels == 1].mean(),
                "eval/level2_mean_reward": p[levels == 2].mean(), "eval/weight_drift": 0.01 * point,
                "budget/samples": samples, "budget/tokens": 6 * samples, "budget/forward_tokens": 20 * samples,
                "budget/flops": samples * FLOPS_PER_SAMPLE[run.arm],
                "budget/seconds": samples * SECONDS_PER_SAMPLE[run.arm] * (1 + 0.05 * run.seed)}
        tracker.log_rows(run_id, [(key, value, mark) for key, value in rows.items()])
        if point:
            tracker.log_rows(run_id, [("train/reward_mean", 0.5, mark - 50), ("train/samples", 16, mark + 4)])
        tracker.log_table(run_id, [{"prompt": "1+1=", "completion": "2", "reward": 1.0}],
                          f"evaluations/{mark:09d}/completions.json")
        tracker.log_npz(run_id, {"rewards": rewards, "hard": p < 0.3}, f"evaluations/{mark:09d}/per_prompt_rewards.npz")
    tracker.finish(run_id, status)
    return run_id


def log_study(tracker, study) -> str:
    parent_id = tracker.start_parent(f"{study.name} test", {"arena.study": study.name, "arena.git_commit": "test",
                                                            "arena.profile": "none"})
    for run in study.runs():
        log_run(tracker, run, parent_id)
    tracker.finish(parent_id)
    return parent_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three studies in one store: 'synthetic' (3 arms x 4 seeds), 'pair' (3 arms x 2 seeds: t bands wider than
    the reward range) and 'single' (3 arms x 1 seed)."""
    folder = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    studies = {name: load_study(study_file(folder, name, seeds)) for name, seeds in
               (("synthetic", [0, 1, 2, 3]), ("pair", [0, 1]), ("single", [0]))}
    parents = {name: log_study(Tracker(uri, name), study) for name, study in studies.items()}
    return folder, uri, studies, parents


def report_of(store, name: str):
    folder, uri, studies, _ = store
    return write_study_report(studies[name], Tracker(uri, name), folder / f"direct-{name}", log=False)


@pytest.fixture(scope="module")
def synthetic(store):
    return report_of(store, "synthetic")


def final_values(study, key: str) -> dict[str, np.ndarray]:
    """Per arm, each seed's value of ``key`` at the last mark, recomputed here from the synthetic rewards."""
    start = synthetic_rewards("grpo", 0, 0).mean(axis=1)
    out = {}
    for arm in ARMS:
        values = []
        for seed in study.seeds:
            p = synthetic_rewards(arm, seed, POINTS - 1).mean(axis=1)
            values.append({"tail_gain": lower_cvar(p, ALPHA) - lower_cvar(start, ALPHA), "mean": p.mean()}[key])
        out[arm] = np.array(values)
    return out



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


def lines_of(axis, arms):
    return [line for line in axis.get_lines() if line.get_label() in arms]


def bands_of(axis):
    return [c for c in axis.collections if isinstance(c, PolyCollection)]


def test_each_curve_figure_has_one_line_and_one_band_per_arm(synthetic):
    study = synthetic.results.study
    tail = synthetic.figures["tail_reward"].axes
    assert len(tail) == 2  # block_grpo is twice as slow: a second panel at equal wall-clock
    for axis in tail + synthetic.figures["mean_reward"].axes + synthetic.figures["levels"].axes:
        assert [line.get_label() for line in lines_of(axis, ARMS)] == list(ARMS)
        assert len(bands_of(axis)) == len(ARMS)
    assert len(synthetic.figures["levels"].axes) == 2  # levels 1 and 2
    colours = {line.get_label(): line.get_color() for line in lines_of(tail[0], ARMS)}
    for figure in synthetic.figures.values():  # one colour per arm across every figure
        for axis in figure.axes:
            assert all(line.get_color() == colours[line.get_label()] for line in lines_of(axis, ARMS))
    # x: the marks in the study's unit; on the wall-clock panel, the mean logged seconds at each mark
    first, second = (lines_of(axis, ARMS)[1] for axis in tail)  # block_grpo
    assert list(first.get_xdata()) == MARKS
    seconds = [np.mean([(m + 4 * (m > 0)) * 0.2 * (1 + 0.05 * s) for s in study.seeds]) for m in MARKS]
    assert np.allclose(second.get_xdata(), seconds)
    profile_top, profile_bottom = synthetic.figures["tail_profile"].axes
    assert [line.get_label() for line in profile_top.get_lines() if not line.get_label().startswith("_")] == [
        "start", *ARMS]
    assert len(lines_of(profile_bottom, ARMS)) == len(ARMS) and len(bands_of(profile_bottom)) == len(ARMS)
    dots = synthetic.figures["final_tail_gain"].axes[0]
    assert [label.get_text() for label in dots.get_yticklabels()] == list(ARMS)
    assert all(text.get_fontsize() >= 8 for figure in synthetic.figures.values() for axis in figure.axes
               for text in [axis.xaxis.label, axis.yaxis.label, *axis.get_xticklabels(), *axis.get_yticklabels()])


def test_the_curves_against_flops_sit_at_the_flops_each_arm_logged(store):
    """--x flops: each arm's points at the (seed-mean) budget/flops it had used at each mark."""
    folder, uri, studies, _ = store
    report = write_study_report(studies["synthetic"], Tracker(uri, "synthetic"), folder / "flops", x="flops", log=False)
    axis = report.figures["tail_reward"].axes[0]
    assert "token-FLOPs" in axis.get_xlabel()
    for arm, line in zip(ARMS, lines_of(axis, ARMS)):
        assert np.allclose(line.get_xdata(), [(m + 4 * (m > 0)) * FLOPS_PER_SAMPLE[arm] for m in MARKS])


@pytest.mark.parametrize("ticks, labels", [([0, 1000, 2000, 3000], ["0", "1000", "2000", "3000"]),
                                           ([0, 1e4, 2e4], ["0", "10k", "20k"]),
                                           ([0, 1.5e6, 3e6], ["0", "1.5M", "3M"]),
                                           ([0, 5e12, 1e13, 1.5e13], ["0", "5T", "10T", "15T"])])
def test_budget_ticks_are_short_and_in_one_scale(ticks, labels):
    """A FLOPs axis to 1.5e13 once read 0, 5000G, 10000G, 15000G: labels that ran into each other."""
    from arena.report.figures import Curve, _budget_axis, _figure, style

    with style():
        figure, axes = _figure(2.0)
        axis = axes[0, 0]
        axis.set_xticks(ticks)
        _budget_axis(axis, [Curve("a", np.asarray(ticks, dtype=float), np.zeros(len(ticks)))])
        figure.canvas.draw()
        assert [tick.get_text() for tick in axis.get_xticklabels()] == labels


def t_interval(values):
    """scipy's Student-t interval of a mean over seeds."""
    values = np.asarray(values)
    return stats.t.interval(0.95, len(values) - 1, values.mean(), stats.sem(values))


def prompt_bootstrap_variance(start, end, statistic, resamples=1000):
    """The evaluation part, recomputed by a plain loop: whole prompts resampled by the generator keyed (12, 0)
    (draw 0), the same prompts for every seed, the variance of the mean over seeds of the gain."""
    index = numpy_generator(12, 0).integers(0, start.shape[1], (resamples, start.shape[1]))
    means = [np.mean([statistic(s[i], e[i]) for s, e in zip(start, end)]) for i in index]
    return float(np.var(means, ddof=1))


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


def test_the_printed_summary_fits_a_narrow_terminal_one_arm_at_a_time(synthetic):
    """At 80 columns the summary's table (about 150 wide) is printed one arm per block, a line per number, with
    every cell of the wide table; given no width (a file, a pipe) it stays a table."""
    from arena.report import comparison, tables

    rows, setup = synthetic.rows, comparison.setup(synthetic.results)
    wide, narrow = tables.text(rows, setup), tables.text(rows, setup, width=80)
    assert max(map(len, wide.splitlines())) > 80
    assert all(len(line) <= 80 for line in narrow.splitlines()), narrow
    for row in rows:
        block = narrow.split(f"\n{row.arm}\n", 1)[1] if not narrow.startswith(row.arm) else narrow
        assert f"{row.tail_gain.value:+.3f} [{row.tail_gain.low:+.3f}, {row.tail_gain.high:+.3f}]" in block
        assert tables.verdict_cell(row, "holm") in block.split("\n\n")[0]


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


def test_the_runs_read_are_those_of_the_study_as_it_is_now(store):
    """Per (arm, seed), newest first: a run with the config hash wins; else a run whose params agree with the
    study and lack only options the study leaves at their defaults (logged before the option existed); a run
    at another setting (stale) or an unfinished run never counts."""
    folder, uri, _, _ = store
    study = load_study(study_file(folder, "older", [0]))
    tracker = Tracker(uri, "older")
    parent = tracker.start_parent("older test", {"arena.study": "older"})
    grpo, es = (next(r for r in study.runs() if r.arm == arm) for arm in ("grpo", "es"))
    unset = next(key for key in es.resolved()["options"] if key not in es.options)  # left at its default
    def without(run, option):
        resolved = run.resolved()
        return {**resolved, "options": {k: v for k, v in resolved["options"].items() if k != option}}
    def other_hash(run):
        return {"arena.study": "older", "arena.arm": run.arm, "arena.seed": "0", "arena.config_hash": "0123456789ab"}
    exact = log_run(tracker, grpo, parent)
    log_run(tracker, grpo, parent, other_hash(grpo), without(grpo, "lr"))  # newer, agrees but lacks a set option
    predating = log_run(tracker, es, parent, other_hash(es), without(es, unset))
    changed = es.resolved()
    changed["options"] = {**changed["options"], "population": 8}
    log_run(tracker, es, parent, other_hash(es), changed)  # newer, at another population: stale
    log_run(tracker, es, parent, status="FAILED")  # newest, with the hash, unfinished
    found = finished_runs(tracker, study.runs())
    assert found.runs[("grpo", 0)].run_id == exact and found.runs[("es", 0)].run_id == predating
    assert found.predating == {("es", 0): [f"options.{unset}"]} and found.stale == 2
    report = write_study_report(study, tracker, folder / "older-report", log=False)
    summary = (folder / "older-report" / "summary.md").read_text()
    assert f"matched by parameters, not by config hash (logged before the code had `options.{unset}`" in summary
    assert "left out: 2 finished runs" in summary and "missing (no finished run at the study's configuration): " \
        "block_grpo seed 0" in summary
    assert [row.arm for row in report.rows] == ["grpo", "es"]


def test_a_study_without_finished_runs_is_one_line_exit_2(tmp_path, capsys):
    path = study_file(tmp_path, "empty", [0])
    code = main(["report", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'missing.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and "no tracking store at" in err and "Traceback" not in err
    assert not (tmp_path / "missing.db").exists()
    Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "empty")
    code = main(["report", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and "no finished run of study 'empty'" in err and "arena run" in err and "Traceback" not in err


def plan_rows(store, capsys, *extra: str) -> dict[str, tuple]:
    """``arena report --plan`` on the synthetic study: per comparison, (eval SE, seeds to differ, seeds for equivalence)."""
    folder, uri, _, _ = store
    assert main(["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--plan", "--margin", "0.1",
                 *extra]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        if " vs " in line and not line.startswith("plan"):
            name, rest = line.split("  ", 1)
            fields = rest.replace("none decides", "none").split()
            seeds = [math.inf if f == "none" else int(f) for f in fields[2:4]]
            rows[name.strip()] = (float(fields[1]), *seeds)
    return rows


def test_the_plan_counts_seeds_at_a_planned_evaluation(store, capsys):
    """--evaluation N x k: at the pilot's own size it is the default plan; at a 64x larger evaluation V_e shrinks,
    no comparison needs more seeds, and one that no seed count decided at the pilot's size becomes decidable."""
    default = plan_rows(store, capsys)
    assert set(default) == {"block_grpo vs grpo", "es vs grpo"}
    assert plan_rows(store, capsys, "--evaluation", f"{PROMPTS}x{SAMPLES}") == default
    larger = plan_rows(store, capsys, "--evaluation", f"{16 * PROMPTS}x{4 * SAMPLES}")
    for name, (se, differ, equivalent) in larger.items():
        assert se < default[name][0] and differ <= default[name][1] and equivalent <= default[name][2], name
    assert any(math.isinf(default[n][2]) and not math.isinf(larger[n][2]) for n in larger), (default, larger)


def test_a_malformed_planned_evaluation_is_a_usage_error(store, capsys):
    folder, uri, _, _ = store
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--plan", "--evaluation", "1024"])
    assert exit_.value.code == 2 and "--evaluation: expected PROMPTSxSAMPLES" in capsys.readouterr().err


def test_reach_tests_each_mark_against_the_target_and_stops_at_the_first_that_fails(store, capsys, tmp_path):
    """--reach synthetic.yaml:block_grpo@100: each arm's gain at every mark minus block_grpo's at 100, recomputed
    here from the synthetic rewards; the answer is the smallest mark of the unbroken run of passing marks from the
    largest down (fixed sequence), on the p values the table prints; a target on another draw is refused."""
    folder, uri, studies, _ = store
    path = str(folder / "synthetic.yaml")
    assert main(["report", path, "--tracking-uri", uri, "--reach", f"{path}:block_grpo@100", "--margin", "0.02"]) == 0
    out = capsys.readouterr().out
    start = lower_cvar(synthetic_rewards("grpo", 0, 0).mean(axis=1), ALPHA)
    gain = lambda arm, point: np.mean([lower_cvar(synthetic_rewards(arm, s, point).mean(axis=1), ALPHA) - start  # noqa: E731
                                       for s in studies["synthetic"].seeds])
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in ARMS]
    for arm in ARMS:
        mine = [row for row in rows if row[0] == arm]
        assert [float(row[1]) for row in mine] == MARKS[1:]
        for point, row in enumerate(mine, start=1):
            assert row[5] == f"{gain(arm, point) - gain('block_grpo', 1):+.3f}", (arm, point, row)
        p = [1.0 if row[8] == "n/a" else 0.0005 if row[8] == "<0.001" else float(row[8]) for row in mine]
        passing = [mark for i, mark in enumerate(MARKS[1:]) if all(q < 0.05 for q in p[i:])]
        answer = next(line for line in out.splitlines() if line.startswith(f"{arm}:"))
        assert (f"reaches it from {passing[0]:g} samples" in answer) if passing else ("does not reach" in answer), \
            (arm, p, answer)
    assert "grpo: does not reach it within 300 samples" in out  # its drift is 0: never as far as block_grpo at 1x

    moved = study_file(tmp_path, "moved", [0, 1])
    raw = yaml.safe_load(moved.read_text())
    moved.write_text(yaml.safe_dump({**raw, "evaluation": {**raw["evaluation"], "seed": 3}}))  # other prompts
    log_study(Tracker(uri, "moved"), load_study(moved))
    assert main(["report", path, "--tracking-uri", uri, "--reach", f"{moved}:block_grpo@100",
                 "--margin", "0.02"]) == 2
    assert "evaluate on different draws" in capsys.readouterr().err


def test_versus_compares_every_arm_with_another_studys_arm_at_the_end_and_at_shared_marks(store, capsys):
    """--versus synthetic.yaml:block_grpo (the study against its own arm, so every mark is shared): at the end and
    at each mark, each arm's mean tail gain minus block_grpo's, recomputed here from the synthetic rewards; a study
    on another draw is refused (exit 2)."""
    folder, uri, studies, _ = store
    path = str(folder / "synthetic.yaml")
    assert main(["report", path, "--tracking-uri", uri, "--versus", f"{path}:block_grpo"]) == 0
    out = capsys.readouterr().out
    start = lower_cvar(synthetic_rewards("grpo", 0, 0).mean(axis=1), ALPHA)
    gain = lambda arm, point: np.mean([lower_cvar(synthetic_rewards(arm, s, point).mean(axis=1), ALPHA) - start  # noqa: E731
                                       for s in studies["synthetic"].seeds])
    end, marks = out.split("on draw 0 at the marks")
    for arm in ARMS:
        final = next(line for line in end.splitlines() if line.startswith(f"{arm} "))
        assert final.split()[1] == f"{gain(arm, POINTS - 1) - gain('block_grpo', POINTS - 1):+.3f}"
        curve = next(line for line in marks.splitlines() if line.startswith(f"{arm} "))
        for point, mark in enumerate(MARKS[1:], start=1):
            assert f"at {mark} samples: {gain(arm, point) - gain('block_grpo', point):+.3f}" in curve
    assert "holm over each arm's 3 marks" in marks and "100 against block_grpo's 104" in marks
    moved = study_file(folder, "moved_versus", [0, 1])
    raw = yaml.safe_load(moved.read_text())
    moved.write_text(yaml.safe_dump({**raw, "evaluation": {**raw["evaluation"], "seed": 3}}))  # other prompts
    log_study(Tracker(uri, "moved_versus"), load_study(moved))
    assert main(["report", path, "--tracking-uri", uri, "--versus", f"{moved}:block_grpo"]) == 2
    assert "evaluate on different draws" in capsys.readouterr().err


def test_shared_marks_pair_the_marks_both_studies_reached_at_equal_use():
    from arena.report.reach import shared_marks

    flops = [0.0, 3.7e12, 7.4e12, 1.1e13, 1.48e13]  # a curve study's marks in token-FLOPs
    target = [0.0, 7.4e12 * 1.01, 1.48e13]  # an arm that ran in samples, its mean FLOPs at its marks
    assert shared_marks(flops, target) == [(2, 1), (4, 2)]
    assert shared_marks(flops, [0.0, 8.0e12]) == []  # 8% past 7.4e12: not the same budget


def test_the_es_scaling_pair_decodes_one_draw_so_reach_compares_them():
    """studies/es_scaling.yaml and es_scaling_grpo.yaml differ in points and budget, not in the draw: --reach takes
    them; another evaluation seed is another draw."""
    import dataclasses
    from pathlib import Path

    from arena.report.reach import same_draw

    root = Path(__file__).resolve().parents[1]
    es, grpo = (load_study(root / "studies" / f"{name}.yaml") for name in ("es_scaling", "es_scaling_grpo"))
    assert es.evaluation.points != grpo.evaluation.points and same_draw(es, grpo)
    moved = dataclasses.replace(grpo, evaluation=dataclasses.replace(grpo.evaluation, seed=grpo.evaluation.seed + 1))
    assert not same_draw(es, moved)


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


# ---------------------------------------------------------------------------------------------
# paper-ready figures (issue 56, item 4)


def pdf_width(path) -> float:
    """The page width of a PDF in inches, from its MediaBox (points)."""
    x0, _, x1, _ = map(float, re.search(rb"/MediaBox\s*\[([^\]]*)\]", path.read_bytes()).group(1).split())
    return (x1 - x0) / 72


def png_width(path) -> float:
    """The width of a PNG in inches: its pixels at the dpi it records."""
    image = Image.open(path)
    return image.size[0] / image.info["dpi"][0]


def assert_one_column(report):
    """Every figure file 3.4 in wide (the PDFs measured 4.38-4.64 in when a long note widened the tight bounding
    box), and nothing drawn outside the page: the drawn extent of every artist lies within the figure."""
    for name, figure in report.figures.items():
        for width in (pdf_width(report.directory / f"{name}.pdf"), png_width(report.directory / f"{name}.png")):
            assert width == pytest.approx(3.4, abs=0.01), name
        figure.canvas.draw()  # lay it out again at the canvas's dpi, which the measure below uses
        drawn = figure.get_tightbbox(figure.canvas.get_renderer())
        assert drawn.x0 >= -0.01 and drawn.x1 <= 3.41 and drawn.y0 >= -0.01, (name, drawn)
        assert drawn.y1 <= figure.get_figheight() + 0.01, (name, drawn)


@pytest.mark.parametrize("name", ["synthetic", "pair", "single"])
def test_every_figure_is_one_column_wide_on_the_page(store, name):
    assert_one_column(report_of(store, name))


def texts(figure) -> list[str]:
    return [text.get_text() for text in figure.findobj(Text) if text.get_text()]


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


def test_the_final_gain_whisker_is_the_tables_interval(store):
    """The dot plot draws exactly the row's tail-gain interval (the table's), for each arm and control."""
    for name in ("synthetic", "pair"):
        report = report_of(store, name)
        rows = {row.arm: row for row in report.rows}
        axis = report.figures["final_tail_gain"].axes[0]
        drawn = {c.get_label(): c.lines[2][0].get_segments()[0] for c in axis.containers}  # the whisker's ends
        assert set(drawn) == set(rows)
        for arm, ((low, _), (high, _)) in drawn.items():
            assert (low, high) == pytest.approx((rows[arm].tail_gain.low, rows[arm].tail_gain.high)), arm


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


def table_heads(out) -> list[str]:
    lines = (out / "table.tex").read_text().splitlines()
    return [cell.strip() for cell in lines[lines.index(r"\toprule") + 1].removesuffix(r"\\").split("&")]


def test_the_table_columns_are_chosen_by_short_names(store, capsys):
    """--columns tail,over_sharpen,verdict: those columns after the arm's; all: every column of summary.md; an
    unknown name is a usage error that names it and lists the known ones."""
    folder, uri, _, _ = store
    out = folder / "columns"
    base = ["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--out", str(out)]
    assert main(base + ["--columns", "tail,over_sharpen,verdict"]) == 0
    assert table_heads(out) == ["arm", r"tail gain ($\alpha$=0.25)", "over sharpen", "verdict"]
    assert main(base + ["--columns", "all"]) == 0
    summary = (out / "summary.md").read_text()
    assert len(table_heads(out)) == 14 == summary.splitlines()[[l.startswith("| arm |") for l in
                                                                 summary.splitlines()].index(True)].count("|") - 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(base + ["--columns", "tail,nonsense,Verdict"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unknown column(s) 'nonsense', 'Verdict'" in err
    assert "known: arm, seeds, tail, over_sharpen, hard, mean, se, sd, vs_reference, verdict, auc, mean_reward, " \
        "budget, seconds, all" in err
