"""`arena report` on studies this file logs itself, with known synthetic curves, through arena.tracking into a
SQLite store (runs, tags, params, metrics and artifacts as arena/runner.py writes them; no model): the files,
the figures' lines and bands, the numbers against numpy and scipy computed here, one seed per arm, which runs
are read, and the figures logged to the parent run."""
import math

import numpy as np
import pytest
import yaml
from matplotlib.collections import PolyCollection
from mlflow.tracking import MlflowClient
from scipy import stats

from arena.cli import main
from arena.report.comparison import curves, write_study_report
from arena.report.records import finished_runs
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


def study_file(folder, name: str, seeds: list[int]):
    study = {
        "name": name, "task": {"name": "noisy_arithmetic", "levels": [1, 2]}, "train": {"prompts_per_step": 4},
        "evaluation": {"prompts": PROMPTS, "samples": SAMPLES, "points": POINTS, "alphas": [ALPHA, 0.5],
                       "primary_alpha": ALPHA},
        "budget": {"unit": "samples", "amount": AMOUNT}, "seeds": seeds, "reference": "grpo",
        "arms": {"grpo": {"method": "grpo", "options": {"lr": 1e-4, "group_size": 4}},
                 "block_grpo": {"method": "block_grpo", "options": {"lr": 1e-4, "group_size": 4}},
                 "es": {"method": "es", "options": {"population": 4}}},
    }
    path = folder / f"{name}.yaml"
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
    """Two studies in one store: 'synthetic' (3 arms x 4 seeds) and 'single' (3 arms x 1 seed)."""
    folder = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    studies = {name: load_study(study_file(folder, name, seeds)) for name, seeds in
               (("synthetic", [0, 1, 2, 3]), ("single", [0]))}
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


def percentile_bootstrap(values, *names):
    """The documented interval, recomputed: 10,000 resamples of the seeds from the generator keyed by
    (12, name_key(arm), name_key(statistic)), 2.5th and 97.5th percentiles of the resampled means."""
    values = np.asarray(values)
    index = numpy_generator(12, *(name_key(n) for n in names)).integers(0, len(values), (10_000, len(values)))
    return np.percentile(values[index].mean(axis=1), [2.5, 97.5], axis=0)


def test_the_command_writes_every_file_and_logs_them_to_the_parent_run(store, capsys):
    folder, uri, studies, parents = store
    out = folder / "reports"
    code = main(["report", str(folder / "synthetic.yaml"), "--tracking-uri", uri, "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "| arm | seeds |" in printed and f"logged to the parent run {parents['synthetic']}" in printed
    expected = {f"{name}.{suffix}" for name in FIGURES for suffix in ("png", "pdf")} | {"summary.md", "table.tex"}
    assert {p.name for p in out.iterdir()} == expected
    assert all((out / name).stat().st_size > 1000 for name in expected if not name.endswith((".md", ".tex")))
    assert (out / "tail_reward.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "tail_reward.pdf").read_bytes()[:4] == b"%PDF"
    logged = {a.path for a in MlflowClient(uri).list_artifacts(parents["synthetic"], "report")}
    assert logged == {f"report/{name}" for name in expected}
    table = (out / "table.tex").read_text()
    assert r"\toprule" in table and r"block\_grpo" in table and table.count(r" \\") == 1 + len(ARMS)


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


def test_intervals_probability_of_improvement_and_test_match_numpy_and_scipy(synthetic):
    study = synthetic.results.study
    gains, means = final_values(study, "tail_gain"), final_values(study, "mean")
    rows = {row.arm: row for row in synthetic.rows}
    assert list(rows) == list(ARMS)
    summary = (synthetic.directory / "summary.md").read_text()
    for arm in ARMS:
        row = rows[arm]
        assert row.seeds == 4 and row.budget == AMOUNT + 4
        assert row.tail_gain.value == pytest.approx(gains[arm].mean())
        assert [row.tail_gain.low, row.tail_gain.high] == pytest.approx(
            percentile_bootstrap(gains[arm], arm, "final tail gain"))
        assert row.tail_gain.low < row.tail_gain.value < row.tail_gain.high
        assert row.mean_reward.value == pytest.approx(means[arm].mean())
        assert [row.mean_reward.low, row.mean_reward.high] == pytest.approx(
            percentile_bootstrap(means[arm], arm, "final mean reward"))
        tail = synthetic.results.values(arm, "eval/tail_reward")
        areas = np.trapezoid(tail, MARKS, axis=1) / AMOUNT  # the tail reward averaged over the budget
        assert row.area.value == pytest.approx(areas.mean())
        assert [row.area.low, row.area.high] == pytest.approx(percentile_bootstrap(areas, arm, "tail-reward area"))
        assert row.seed_sd == pytest.approx(gains[arm].std(ddof=1))
        assert (f"| {arm} | 4 | {row.tail_gain.value:+.3f} [{row.tail_gain.low:+.3f}, {row.tail_gain.high:+.3f}] | "
                f"{row.seed_sd:.3f} / {row.evaluation_se:.3f} | "
                f"{row.area.value:.3f} [{row.area.low:.3f}, {row.area.high:.3f}] |") in summary
        if arm == "grpo":
            assert row.improvement is None and row.test is None
            continue
        x, y = gains[arm], gains["grpo"]
        assert row.improvement.value == pytest.approx(stats.mannwhitneyu(x, y).statistic / (len(x) * len(y)))
        generator = numpy_generator(12, name_key(arm), name_key("grpo"), name_key("improvement"))
        xs = x[generator.integers(0, 4, (10_000, 4))][:, :, None]  # each arm's seeds resampled within the arm
        ys = y[generator.integers(0, 4, (10_000, 4))][:, None, :]
        resampled = np.mean((xs > ys) + 0.5 * (xs == ys), axis=(1, 2))
        assert [row.improvement.low, row.improvement.high] == pytest.approx(np.percentile(resampled, [2.5, 97.5]))
        welch = stats.ttest_ind(x, y, equal_var=False)
        assert (row.test.statistic, row.test.p) == pytest.approx((welch.statistic, welch.pvalue))
        assert f"t = {welch.statistic:+.2f}, p = {welch.pvalue:.3f}, detectable {row.test.detectable:.3f}" in summary
    assert rows["block_grpo"].improvement.value == 1.0 and rows["block_grpo"].test.p < 0.05  # the drift shows
    assert "Welch's t-test vs reference (tail gain)" in summary and "average over budget" in summary


def test_curve_bands_are_the_percentile_bootstrap_of_whole_seed_curves(synthetic):
    axis = synthetic.figures["mean_reward"].axes[0]
    for arm, curve, band in zip(ARMS, curves(synthetic.results, "eval/mean_reward", "samples"), bands_of(axis)):
        values = synthetic.results.values(arm, "eval/mean_reward")
        low, high = percentile_bootstrap(values, arm, "eval/mean_reward")
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
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "seeds" not in line]
    assert len(rows) == len(ARMS)
    # 3 intervals per arm; the other arms' probability of improvement and test too
    assert [line.count("n/a (1 seed)") for line in rows] == [3, 5, 5]
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


@pytest.mark.parametrize("n,sd_x,sd_y", [(5, 0.02, 0.02), (5, 0.05, 0.02), (8, 0.03, 0.03)])
def test_the_detectable_effect_is_found_with_80_percent_power(n, sd_x, sd_y):
    """Simulation as the oracle: seeds with these spreads and a true difference equal to the detectable effect
    are told apart by Welch's test at 5% in about 80% of 20,000 simulated studies (the t-quantile formula
    approximates the noncentral t to a few points at 5-8 seeds); half that difference, far less often."""
    from arena.report.stats import detectable_effect

    z = np.linspace(-1, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)  # n seeds whose sample standard deviation is exactly 1
    delta = detectable_effect(sd_x * z + 0.3, sd_y * z)  # depends on the spreads and counts, not on the means
    generator = np.random.default_rng(11)

    def power(difference):
        x = generator.normal(difference, sd_x, (20_000, n))
        y = generator.normal(0.0, sd_y, (20_000, n))
        return float(np.mean(stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05))

    assert 0.74 < power(delta) < 0.86, (delta, power(delta))
    assert power(delta / 2) < 0.4


def test_the_evaluation_se_is_the_spread_of_the_tail_gain_over_fresh_evaluations():
    """Oracle: a policy that does not change, whose prompts have known success rates, evaluated afresh many times
    (64 prompts x 8 samples at the start and at the end): the standard deviation of its measured tail gain over
    2,000 such pairs. The bootstrap from one pair of evaluations recovers it to within 25%: it runs low, about 15%
    (median over 20 pairs: 0.83-0.87 of the truth over three generator seeds), from the tail's selection."""
    from arena.evaluate import lower_cvar
    from arena.report.stats import evaluation_se

    generator = np.random.default_rng(5)
    rates = np.linspace(0.05, 0.95, 64)
    draw = lambda: (generator.random((64, 8)) < rates[:, None]).astype(float)  # noqa: E731
    fresh = [lower_cvar(draw().mean(1), 0.25) - lower_cvar(draw().mean(1), 0.25) for _ in range(2000)]
    truth = float(np.std(fresh, ddof=1))
    estimates = [evaluation_se(draw(), draw(), 0.25, (3, i), resamples=500) for i in range(20)]
    assert 0.75 < np.median(estimates) / truth < 1.05, (np.median(estimates), truth)
