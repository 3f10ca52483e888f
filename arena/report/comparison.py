"""``arena report STUDY``: the study's arms compared, from what MLflow holds (``records``), with the numbers of
``stats``, drawn by ``figures`` and typeset by ``tables``; everything written to one folder and the figures
logged to the study's latest parent run (``report/``). What each file shows: docs/reporting.md.

    tail_reward.{png,pdf}     tail reward at the primary α against budget, mean over seeds and 95% t band over
                              seeds (given the evaluation draw), the sharpening control as a dashed line; a
                              second panel against training seconds when the arms' speeds differ by > 10%
    mean_reward.{png,pdf}     mean reward against budget
    levels.{png,pdf}          mean reward per difficulty level (when the task has levels)
    final_tail_gain.{png,pdf} final tail gain per arm and control: mean, the table's 95% interval over seeds and
                              evaluation draws, each seed (its gain averaged over the draws the verdicts pool)
    tail_profile.{png,pdf}    reward of the p-th worst prompt against p at the end (and at the start), and the
                              tail gain at every level p (lower CVaR at p, end minus start)
    <figure>.caption.txt      each figure's caption: what its bands or whiskers are, over how many seeds
    summary.md, table.tex     the table per arm (arena.report.tables); summary.md also each evaluation draw alone

Bands and intervals of a reward are cut to the task's reward range, those of a gain to the range a gain can take
(``stats.clipped``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arena.report import figures, stats, tables
from arena.report.figures import Curve, Dot, Panel
from arena.report.records import Results, draw_at, read_results

X_LABELS = {"samples": "samples generated", "tokens": "completion tokens generated",  # one per arena.budget.UNITS
            "forward_tokens": "forward tokens (generation and scoring)",
            "flops": "token-FLOPs (2P per forward, 2P + 2P_trained per backward token)",
            "seconds": "training wall-clock (s)"}
SPEED_TOLERANCE = 0.1  # a panel at equal wall-clock when the arms' training seconds differ by more


@dataclass
class Report:
    """What ``write_study_report`` wrote (``paths``), the figures it drew and the table rows it computed."""

    directory: Path
    paths: list[Path]
    figures: dict  # name -> matplotlib Figure
    rows: list[tables.Row]
    results: Results
    logged_to: str | None = None  # the parent run the figures went to
    notes: list[str] = field(default_factory=list)
    captions: dict[str, str] = field(default_factory=dict)  # name -> the caption written beside the figure


# ---------------------------------------------------------------------------------------------
# numbers: curves and rows from the results


def x_values(results: Results, arm: str, x: str) -> np.ndarray:
    """The x of each evaluation point: its mark in the study's unit, else the mean over seeds of the
    ``budget/<x>`` logged there."""
    if x == results.study.budget.unit:
        return results.marks
    return results.values(arm, f"budget/{x}").mean(axis=0)


@functools.cache
def reward_range(task) -> tuple[float, float]:
    """The rewards the task (a ``TaskSpec``) can give: its ``reward_range`` (``rewards.Task``'s default: (0, 1))."""
    from rewards import load_task

    low, high = load_task(task.name, task.levels).reward_range
    return float(low), float(high)


def gain_range(task) -> tuple[float, float]:
    """The values a gain (a difference of two rewards, or of two means of rewards) can take."""
    low, high = reward_range(task)
    return low - high, high - low


def curves(results: Results, key: str, x: str) -> list[Curve]:
    """One curve per arm: mean over seeds of metric ``key`` (a reward) and its pointwise t band over seeds."""
    out = []
    for arm in results.arms:
        mean, low, high = stats.curve_band(results.values(arm, key), reward_range(results.study.task))
        out.append(Curve(arm, x_values(results, arm, x), mean, low, high))
    return out


def final(results: Results, arm: str, key: str) -> np.ndarray:
    """Each seed's value of ``key`` at the last evaluation point."""
    return results.values(arm, key)[:, -1]


def seconds_per_arm(results: Results) -> dict[str, float]:
    return {arm: float(final(results, arm, "budget/seconds").mean()) for arm in results.arms}


def statistics(study) -> dict[str, stats.Statistic]:
    """The gains every row reports, by name."""
    return {"tail": stats.tail_gain(study.evaluation.primary_alpha), "hard": stats.hard_gain, "mean": stats.mean_gain}


def gain(results: Results, arm: str, name: str, draws=None) -> stats.Interval:
    """Statistic ``name``'s gain over ``draws`` (default: the pooled ones), its interval cut to a gain's range."""
    draws = results.pooled(arm) if draws is None else draws
    found = stats.gain_interval(draws, statistics(results.study)[name], arm in results.controls)
    return stats.clipped(found, gain_range(results.study.task))


def difference(results: Results, arm: str, other: str, name: str = "tail") -> stats.Interval:
    return stats.difference_interval(results.pooled(arm), results.pooled(other), statistics(results.study)[name],
                                     arm in results.controls, other in results.controls)


def judge(found: dict[str, stats.Interval], analysis) -> dict[str, tables.Comparison]:
    """One family of verdicts: each difference's p value and TOST p value, adjusted over the family (the study's
    correction), and the verdict at the study's margin."""
    arms = list(found)
    p = [stats.p_value(found[arm]) for arm in arms]
    tost = [stats.tost_p(found[arm], analysis.margin) if analysis.margin else math.nan for arm in arms]
    p_adjusted, tost_adjusted = stats.adjust(p, analysis.correction), stats.adjust(tost, analysis.correction)
    return {arm: tables.Comparison(found[arm], p[i], float(p_adjusted[i]), tost[i], float(tost_adjusted[i]),
                                   stats.verdict(p_adjusted[i], tost_adjusted[i], analysis.level, analysis.margin))
            for i, arm in enumerate(arms)}


def comparisons(results: Results) -> dict[str, tables.Comparison]:
    """Each trained arm's tail gain against the reference's, judged as one family (``judge``)."""
    reference = results.study.reference
    others = [arm for arm in results.arms if arm != reference] if reference in results.arms else []
    return judge({arm: difference(results, arm, reference) for arm in others}, results.study.analysis)


def rank_rows(results: Results, compared: dict[str, tables.Comparison]) -> list[tables.RankRow]:
    """The rank-based sensitivity of each difference from the reference (``stats.hodges_lehmann`` over the seeds'
    pooled tail gains), beside the difference of means it accompanies; none where either arm has one seed."""
    reference, tail = results.study.reference, statistics(results.study)["tail"]
    if not compared:
        return []
    theirs = stats.seed_gains(results.pooled(reference), tail).mean(axis=1)
    out = []
    for arm, comparison in compared.items():
        mine = stats.seed_gains(results.pooled(arm), tail).mean(axis=1)
        if min(len(mine), len(theirs)) > 1:
            out.append(tables.RankRow(arm, comparison.difference, *stats.hodges_lehmann(mine, theirs)))
    return out


def mark_rows(results: Results, tracker) -> list[tables.MarkRow]:
    """Each trained arm against the reference along the budget: at every evaluation mark after the start, the
    tail-gain difference on draw 0 (the draw every mark decodes) with its interval over seeds and that draw's
    prompts, judged with the p values adjusted over the arm's marks (one family per arm); and the whole curve in
    one number, the difference of the tail-reward AUCs (the curve averaged over the budget) with Welch's t interval
    over seeds, given the draw. Empty without a reference run or with one mark after the start."""
    study, tail = results.study, statistics(results.study)["tail"]
    reference = study.reference
    if reference not in results.arms or len(results.marks) < 2:
        return []

    def areas(arm):
        return stats.area_under_curve(results.marks, results.values(arm, "eval/tail_reward"))

    theirs = {mark: draw_at(tracker, results, reference, mark) for mark in results.marks[1:]}
    out = []
    for arm in results.arms:
        if arm == reference:
            continue
        found = {f"{mark:g}": stats.difference_interval([draw_at(tracker, results, arm, mark)], [theirs[mark]], tail)
                 for mark in results.marks[1:]}
        out.append(tables.MarkRow(arm, list(judge(found, study.analysis).values()),
                                  stats.welch_interval(areas(arm), areas(reference))))
    return out


def matched_rows(results: Results, table: list[tables.Row]) -> list[tables.MatchedRow]:
    """Each trained arm at its own best temperature (``arena.runner.matched_decoding``) against the sharpening
    control, the start model at *its* best temperature by the same rule: the tail gain at τ and its difference
    from sharpen's, judged as one family over the arms that have it; the same difference at the study's
    temperature beside it (the main ``table``'s over-sharpen cell). Empty without a finished sharpen control; an arm
    whose runs predate matched decoding has a row without numbers."""
    if "sharpen" not in results.controls:
        return []
    tail, sharpen = statistics(results.study)["tail"], results.pooled("sharpen")
    matched = [arm for arm in results.arms if results.has_matched(arm)]
    at_study = {r.arm: r.over_sharpen for r in table}
    compared = judge({arm: stats.difference_interval(results.matched_pooled(arm), sharpen, tail, b_control=True)
                      for arm in matched}, results.study.analysis)
    return [tables.MatchedRow(arm, len(runs), [run.temperature for run in runs if run.temperature is not None],
                              gain(results, arm, "tail", results.matched_pooled(arm)) if arm in compared else None,
                              at_study[arm], compared.get(arm))
            for arm, runs in results.arms.items()]


def row(results: Results, arm: str, compared: dict[str, tables.Comparison]) -> tables.Row:
    study, control = results.study, arm in results.controls
    tail, rewards = results.pooled(arm), reward_range(study.task)
    gains = stats.seed_gains(tail, statistics(study)["tail"]).mean(axis=1)
    sharpen = "sharpen" in results.controls and arm != "sharpen"
    return tables.Row(
        arm, 0 if control else len(gains), control, gain(results, arm, "tail"),
        difference(results, arm, "sharpen") if sharpen else None,
        gain(results, arm, "hard"), gain(results, arm, "mean"),
        float(gains.std(ddof=1)) if len(gains) > 1 and not control else math.nan,
        stats.between_draw_sd(tail, statistics(study)["tail"]),
        None if control else stats.clipped(stats.t_interval(stats.area_under_curve(
            results.marks, results.values(arm, "eval/tail_reward"))), rewards),
        stats.clipped(stats.t_interval(final(results, arm, "eval/mean_reward")), rewards) if not control
        else stats.Interval(float(final(results, arm, "eval/mean_reward")[0]), seeds=0),
        float(final(results, arm, f"budget/{study.budget.unit}").mean()),
        float(final(results, arm, "budget/seconds").mean()), compared.get(arm), arm == study.reference)


def rows(results: Results) -> list[tables.Row]:
    """The table: the trained arms in the study's order, then the controls."""
    compared = comparisons(results)
    return [row(results, arm, compared) for arm in [*results.arms, *results.controls]]


def draw_rows(results: Results, table: list[tables.Row]) -> list[tables.DrawRow]:
    """Each row's tail gain and its difference from the reference on every evaluation draw alone (the interval over
    seeds and that draw's prompts), then pooled over the draws the verdicts use; none with one draw."""
    study, statistic = results.study, statistics(results.study)["tail"]
    if study.evaluation.draws < 2:
        return []
    reference = study.reference if study.reference in results.arms else None
    out = []
    for r in table:
        mine = results.draws(r.arm)
        gains = [gain(results, r.arm, "tail", [draw]) for draw in mine] + [r.tail_gain]
        differences = None
        if reference and r.arm != reference:
            theirs = results.draws(reference)
            differences = [stats.difference_interval([a], [b], statistic, r.control) for a, b in zip(mine, theirs)]
            differences.append(r.comparison.difference if r.comparison else difference(results, r.arm, reference))
        out.append(tables.DrawRow(r.arm, r.control, gains, differences))
    return out


def setup(results: Results) -> tables.Setup:
    study, evaluation = results.study, results.study.evaluation
    extra = evaluation.of_draw(1)
    return tables.Setup(study.name, study.reference, evaluation.primary_alpha, study.budget.unit,
                        study.budget.amount, evaluation.prompts, evaluation.samples, results.missing,
                        results.stale, results.predating, min((len(results.draws(arm)) for arm in results.arms),
                                                              default=1),
                        study.analysis.margin, study.analysis.correction, study.analysis.level,
                        *tail_cover(results), (extra.prompts, extra.samples),
                        study.pooled_draws(), draw_composition(study), study.labels())


def draw_composition(study) -> list[str]:
    """What the study's evaluation draws hold, rebuilt from the study alone (the prompts are keyed, no run needed):
    each draw's prompts by difficulty level, and how many prompts each pair of draws shares (a "fresh" draw of a
    small pool repeats many of another's prompts; only its decoding seeds are fresh). Empty when the task's items
    cannot be had here (a hub dataset offline)."""
    from arena.evaluate import Evaluator
    from rewards import load_task

    try:
        task = load_task(study.task.name, study.task.levels)
        draws = [Evaluator(task, study.evaluation, None, study.task.source, draw=d)
                 for d in range(study.evaluation.draws)]
    except (ValueError, OSError, ImportError):
        return []
    parts = []
    for evaluator in draws:
        levels = [level for level in evaluator.levels if level is not None]
        shares = ", ".join(f"level {level}: {levels.count(level)} ({levels.count(level) / len(evaluator.levels):.1%})"
                           for level in sorted(set(levels)))
        parts.append(f"draw {evaluator.draw}: {len(evaluator.texts)} prompts" + (f" ({shares})" if shares else ""))
    shared = [f"draws {a.draw} and {b.draw} share {len(set(a.texts) & set(b.texts))}"
              for i, a in enumerate(draws) for b in draws[i + 1:]]
    return ["; ".join(parts)] + (["prompts in common: " + "; ".join(shared)] if shared else [])


def tail_cover(results: Results) -> tuple[int, int]:
    """(prompts in one run's tail, distinct prompts in the union of every run's tail at the end) on draw 0."""
    count = math.ceil(results.study.evaluation.primary_alpha * results.study.evaluation.prompts - 1e-9)
    union = set()
    for runs in results.arms.values():
        for run in runs:
            union.update(np.argsort(run.end, kind="stable")[:count].tolist())
    return count, len(union)


def seed_count(results: Results) -> str:
    """How many seeds each trained arm has: "4", or "3–5" where the arms differ."""
    counts = sorted({len(seeds) for seeds in results.arms.values()})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def agreeing(per_arm: dict[str, np.ndarray], labels: dict[str, str], where) -> list[str]:
    """Where a band has zero width: ``per_arm[arm]`` is True at each point where every seed of the arm has the same
    value, so that its band has no width and nothing shows there (as at the start every run shares). A point where
    every arm agrees is named once; ``where(indices)`` words a list of points."""
    if not any(mask.any() for mask in per_arm.values()):
        return []
    common = np.logical_and.reduce(list(per_arm.values()))
    parts = [f"every arm at {where(np.flatnonzero(common))}"] if common.any() else []
    return parts + [f"{labels[arm]} at {where(np.flatnonzero(mask & ~common))}" for arm, mask in per_arm.items()
                    if (mask & ~common).any()]


def zero_width(parts: list[str]) -> str:
    """The caption's sentence on bands of zero width (``agreeing``); none without one."""
    return f" Where all seeds agree (a band of zero width, not drawn): {'; '.join(parts)}." if parts else ""


def band_caption(results: Results, keys: dict[str, str], labels: dict[str, str]) -> str:
    """What a curve figure's lines and bands are, over how many seeds, and where a band has zero width; ``keys``:
    the metric of each panel, by the name the caption gives it ("" with one panel)."""
    if all(len(seeds) == 1 for seeds in results.arms.values()):
        return " Lines: one seed per arm: no band."
    low, high = reward_range(results.study.task)
    unit = results.study.budget.unit.replace("_", " ")

    def marks(indices):
        return ", ".join(f"{results.marks[i]:g}" for i in indices) + f" {unit}"
    banded = [arm for arm, seeds in results.arms.items() if len(seeds) > 1]
    parts = [part + (f" ({name})" if name else "") for name, key in keys.items()
             for part in agreeing({arm: np.ptp(results.values(arm, key), axis=0) == 0 for arm in banded}, labels,
                                  marks)]
    return (f" Lines: the mean over {seed_count(results)} seeds; bands: the {stats.SEEDS_ONLY} (draw 0, which "
            f"every mark decodes), cut to the task's reward range [{low:g}, {high:g}].{zero_width(parts)}")


def draw_zero_prompts(results: Results) -> str:
    """The prompts every curve is measured on, in the captions' words."""
    evaluation = results.study.evaluation
    split = "held-out" if evaluation.split == "heldout" else "training"
    return f"the {evaluation.prompts} {split} prompts of evaluation draw 0 ({evaluation.samples} samples each)"


# ---------------------------------------------------------------------------------------------
# figures: each drawn with its caption


def references(results: Results, key: str) -> dict[str, float]:
    """The controls' levels of ``key`` (on draw 0), drawn as dashed lines across a curve panel."""
    return {arm: float(final(results, arm, key)[0]) for arm in results.controls if arm == "sharpen"}


def control_caption(results: Results) -> str:
    return " Dashed: the sharpening control (the start model at its best temperature; no training seed)." \
        if "sharpen" in results.controls else ""


def tail_figure(results: Results, x: str, colors: dict[str, str], labels: dict[str, str]):
    alpha = results.study.evaluation.primary_alpha
    ylabel = f"tail reward (α = {alpha:g})"
    lines = references(results, "eval/tail_reward")
    panels = [Panel(X_LABELS[x], ylabel, curves(results, "eval/tail_reward", x), references=lines)]
    caption = (f"Tail reward (lower CVaR at α = {alpha:g}: the mean per-prompt reward of the worst {alpha:g} share "
               f"of {draw_zero_prompts(results)}) against {X_LABELS[x]}.")
    if x != "seconds" and stats.speeds_differ(seconds_per_arm(results), SPEED_TOLERANCE):
        panels[0].title = f"at equal {x.replace('_', ' ')}"
        panels.append(Panel(X_LABELS["seconds"], ylabel, curves(results, "eval/tail_reward", "seconds"),
                            "at equal wall-clock", lines))
        caption += (f" Bottom: the same points against training wall-clock (the arms' training seconds differ by "
                    f"more than {SPEED_TOLERANCE:.0%}).")
    caption += band_caption(results, {"": "eval/tail_reward"}, labels) + control_caption(results)
    return figures.curves_figure(panels, colors, labels), caption


def mean_figure(results: Results, x: str, colors: dict[str, str], labels: dict[str, str]):
    panel = Panel(X_LABELS[x], "mean reward", curves(results, "eval/mean_reward", x),
                  references=references(results, "eval/mean_reward"))
    caption = (f"Mean reward over {draw_zero_prompts(results)} against {X_LABELS[x]}."
               + band_caption(results, {"": "eval/mean_reward"}, labels) + control_caption(results))
    return figures.curves_figure([panel], colors, labels), caption


def levels_figure(results: Results, x: str, colors: dict[str, str], labels: dict[str, str]):
    keys = {f"level {level}": f"eval/level{level}_mean_reward" for level in results.levels}
    panels = [Panel(X_LABELS[x], "mean reward", curves(results, key, x), name) for name, key in keys.items()]
    caption = (f"Mean reward per difficulty level (one panel each) over the prompts of that level among "
               f"{draw_zero_prompts(results)}, against {X_LABELS[x]}." + band_caption(results, keys, labels))
    return figures.levels_figure(panels, colors, labels), caption


def gain_figure(results: Results, rows: list[tables.Row], matched: list[tables.MatchedRow], colors: dict[str, str],
                labels: dict[str, str]):
    """The dots are the table's rows: the whisker is exactly the tail gain's interval in summary.md and table.tex;
    the diamonds are the matched table's tail gain at each arm's own τ."""
    statistic = statistics(results.study)["tail"]  # each seed's gain, averaged over the draws the interval pools
    dots = [Dot(r.arm, r.tail_gain.value, r.tail_gain.low, r.tail_gain.high,
                stats.seed_gains(results.pooled(r.arm), statistic).mean(axis=1)) for r in rows]
    alpha, (low, high) = results.study.evaluation.primary_alpha, gain_range(results.study.task)
    pooled = results.study.pooled_draws()
    caption = (f"Tail gain (lower CVaR at α = {alpha:g}, end minus start) at the end of the budget, per arm and "
               f"control (controls have no training seed). ")
    if any(r.tail_gain.has_interval for r in rows):
        caption += (f"Filled dot and whisker: the mean over {seed_count(results)} seeds and the "
                    f"{stats.SEEDS_AND_EVALUATION} (the table's tail gain, summary.md), cut to [{low:g}, {high:g}]; open circles: each "
                    f"seed's gain, averaged over evaluation draw{'s' if len(pooled) > 1 else ''} "
                    f"{', '.join(map(str, pooled))}.")
    else:
        caption += "One seed per arm: no interval; open circles: each seed's gain."
    at_tau = {row.arm: row.tail_gain for row in matched if row.tail_gain is not None}
    if at_tau:
        caption += (" Open diamond above a trained arm: its tail gain at its own best temperature τ, chosen on "
                    "training prompts by the sharpen control's rule (summary.md, \"at matched decoding\"), same "
                    "interval; the sharpen control's dot is the start model at its own τ.")
    xlabel = f"tail gain at the end of the budget (α = {alpha:g})"
    return figures.dot_figure(dots, colors, labels, xlabel, at_tau), caption


def profile_figure(results: Results, colors: dict[str, str], labels: dict[str, str]):
    """Top: the end profile per arm (each seed's per-prompt rewards sorted, then averaged over seeds) and the
    start profile. Bottom: the tail gain at every level p (lower CVaR at p, end minus start) per arm."""
    starts = {arm: stats.sorted_profiles([run.start for run in runs]) for arm, runs in results.arms.items()}
    ends = {arm: stats.sorted_profiles([run.end for run in runs]) for arm, runs in results.arms.items()}
    start = np.concatenate(list(starts.values())).mean(axis=0)  # one start for every run of a study
    count = len(start)
    profiles, gains, agree = [], [], {}
    alpha, bounds = results.study.evaluation.primary_alpha, gain_range(results.study.task)
    for arm in results.arms:
        profiles.append(Curve(arm, (np.arange(count) + 0.5) / count, ends[arm].mean(axis=0)))
        gain = stats.tail_profiles(ends[arm]) - stats.tail_profiles(starts[arm])
        gains.append(Curve(arm, np.arange(1, count + 1) / count, *stats.curve_band(gain, bounds)))
        if len(gain) > 1:
            agree[arm] = np.ptp(gain, axis=0) == 0

    def levels(indices):
        return (f"{len(indices)} of {count} levels p" if len(indices) > 4
                else "p = " + ", ".join(f"{(i + 1) / count:.3g}" for i in indices))
    caption = (f"Top: the reward of the p-th worst of {draw_zero_prompts(results)} against p at the end of the budget, per "
               f"arm (each seed's per-prompt rewards sorted, then averaged over seeds), and at the start (grey, "
               f"dashed). Bottom: the tail gain at every level p (lower CVaR at p, end minus start), the final tail "
               f"gain on draw 0 at p = α = {alpha:g} (dotted) and the mean-reward gain at p = 1.")
    caption += (" One seed per arm: no band." if not agree else
                f" Lines: the mean over {seed_count(results)} seeds; bands: the {stats.SEEDS_ONLY}, cut to "
                f"[{bounds[0]:g}, {bounds[1]:g}]." + zero_width(agreeing(agree, labels, levels)))
    return figures.profile_figure(start, profiles, gains, colors, labels, alpha), caption


# ---------------------------------------------------------------------------------------------
# the report


def write_study_report(study, tracker, directory: Path, x: str | None = None, log: bool = True,
                       columns: tuple[str, ...] | None = None) -> Report:
    """Read ``study``'s finished runs from ``tracker``, write the figures and tables into ``directory``, and
    log them to the study's latest parent run (``report/``) unless ``log`` is False. ``x``: the budget axis
    of the curves (one of arena.budget.UNITS; default: the study's unit); ``columns``: table.tex's
    (``tables.COLUMN_NAMES``; default ``tables.PAPER_COLUMNS``; summary.md has every column)."""
    results = read_results(tracker, study)
    x = x or study.budget.unit
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    colors = figures.arm_colors([*study.arms, *study.controls])  # every arm: colours never shift with missing runs
    labels = study.labels()
    table = rows(results)
    matched = matched_rows(results, table)
    report = Report(directory, [], {}, table, results)
    with figures.style():
        drawn = {"tail_reward": tail_figure(results, x, colors, labels),
                 "mean_reward": mean_figure(results, x, colors, labels),
                 **({"levels": levels_figure(results, x, colors, labels)} if results.levels else {}),
                 "final_tail_gain": gain_figure(results, table, matched, colors, labels),
                 "tail_profile": profile_figure(results, colors, labels)}
        for name, (figure, caption) in drawn.items():
            report.figures[name], report.captions[name] = figure, caption
            report.paths += figures.save_figure(figure, directory, name, caption)
    ranks = rank_rows(results, {r.arm: r.comparison for r in table if r.comparison is not None})
    layout = setup(results)  # rebuilds the evaluation draws (their composition): once for both files
    for name, text in (("summary.md", tables.markdown(table, layout, draw_rows(results, table),
                                                       matched, ranks,
                                                       mark_rows(results, tracker), list(results.marks[1:]))),
                       ("table.tex", tables.latex(table, layout, columns or tables.PAPER_COLUMNS))):
        (directory / name).write_text(text)
        report.paths.append(directory / name)
    if log and results.parent_id:
        for path in report.paths:
            tracker.log_file(results.parent_id, path, "report")
        report.logged_to = results.parent_id
    elif log:
        report.notes.append("no parent run of the study in the store: the report was not logged to MLflow")
    return report
