"""``arena report STUDY --reach OTHER.yaml:ARM@MARK``: from which budget does each arm of STUDY gain as much tail
as ARM of the study OTHER gained at MARK? Issue 24 asks it of ES: the budget, on each compute axis, at which the
best ES arm reaches block-GRPO's gain at 1x (``studies/es_scaling.yaml`` against ``studies/es_scaling_grpo.yaml``,
two files because a study has one budget for every arm).

Both studies must decode the same draw 0 (model, task and the evaluation keys that pick prompts, decoding and the
hard subset alike; points may differ), so that the two gains are measured from one start on the same prompts. At
each evaluation mark b of an arm, d(b) = gain(b) - target, with the interval of ``stats.difference_interval`` (the
seeds of both arms and the shared draw's prompt bootstrap). "Reaches" is non-inferiority at the margin m:
H0 d(b) <= -m, rejected one-sided at the level. The marks are tested from the largest budget down, and testing stops at the first mark
that fails (a fixed-sequence procedure: the family's error stays at the level with no correction); the arm
reaches from the smallest mark of that unbroken run, or not within its budget. Each mark is shown in samples,
FLOPs and seconds (means over the arm's seeds) beside the target's, so that one answer reads on every axis.

``arena report STUDY --versus OTHER.yaml:ARM`` compares every arm of STUDY with ARM of OTHER, a study run before
(archived runs included) on the same draws: at the end on the pooled draws, with the study's verdicts, and at every
mark the two reached at equal use of STUDY's unit. So a curve study at a compute budget (``budget: {unit: flops}``)
is compared with an arm that ran in samples, without running that arm again.
"""
from __future__ import annotations

import math

import numpy as np

from arena.report import stats
from arena.report.comparison import judge, statistics
from arena.report.records import ReportError, Results, draw_at
from arena.report.tables import estimate_cell

AXES = ("samples", "flops", "seconds")


def parse_target(text: str) -> tuple[str, str, float]:
    """``OTHER.yaml:ARM@MARK`` -> (path, arm, mark); ValueError saying what was expected."""
    path, _, mark = text.rpartition("@")
    path, _, arm = path.rpartition(":")
    try:
        value = float(mark)
    except ValueError:
        value = math.nan
    if not (path and arm and math.isfinite(value) and value > 0):
        raise ValueError("expected STUDY.yaml:ARM@MARK (e.g. studies/es_scaling_grpo.yaml:block_grpo@3072), "
                         f"got {text!r}")
    return path, arm, value


DRAW_KEYS = ("prompts", "split", "samples", "temperature", "max_new_tokens", "seed", "hard_fraction")


def same_draw(study, other) -> bool:
    """Whether two studies decode the same draw 0 from the same start: model, task, profile and the evaluation keys
    that pick the prompts, the decoding and the hard subset (not the points, the CVaR levels or the extra draws)."""
    def draw(s):
        return (s.model, s.task, s.profile, *(getattr(s.evaluation, key) for key in DRAW_KEYS))
    return draw(study) == draw(other)


def reach(results: Results, target: Results, tracker, target_tracker, arm: str, mark: float, margin: float) -> str:
    """The table and each arm's answer, as text (``tracker``: results' store, ``target_tracker``: target's)."""
    study, other = results.study, target.study
    if not same_draw(study, other):
        raise ReportError(f"{study.name} and {other.name} evaluate on different draws (model, task or evaluation "
                          "differ): their gains are not measured from the same start on the same prompts")
    if arm not in target.arms:
        raise ReportError(f"no finished run of arm {arm!r} in {other.name}; arms there: {', '.join(target.arms)}")
    if not np.any(np.isclose(target.marks, mark)):
        raise ReportError(f"{mark:g} is not an evaluation mark of {other.name} ({other.budget.unit}: "
                          + ", ".join(f"{m:g}" for m in target.marks) + ")")
    statistic, level = statistics(study)["tail"], study.analysis.level
    goal = draw_at(target_tracker, target, arm, mark)
    goal_gain = stats.gain_interval([goal], statistic)
    index = int(np.argmin(np.abs(target.marks - mark)))
    spent = {axis: float(target.values(arm, f"budget/{axis}")[:, index].mean()) for axis in AXES}
    lines = [f"reach of {arm}'s tail gain at {mark:g} {other.budget.unit} in {other.name}: "
             f"{estimate_cell(goal_gain)} ({', '.join(f'{spent[a]:.4g} {a}' for a in AXES)}); non-inferiority at "
             f"margin {margin:g}, one-sided level {level:g}, marks tested from the largest down (fixed sequence); "
             f"draw 0 of {study.evaluation.prompts} prompts x {study.evaluation.samples} samples", ""]
    head = f"{'arm':<18} {'mark':>10}  {'gain':>24}  {'minus target':>24}  {'p':>7}  " + "  ".join(
        f"{a + ' (x target)':>20}" for a in AXES)
    lines.append(head)
    answers = []
    for name in results.arms:
        rows, reached, broken = [], None, False
        for i in reversed(range(1, len(results.marks))):  # the largest budget first
            here = draw_at(tracker, results, name, results.marks[i])
            difference = stats.difference_interval([here], [goal], statistic)
            p = stats.noninferiority_p(difference, margin)
            passes = not broken and math.isfinite(p) and p < level
            broken = broken or not passes
            used = {a: float(results.values(name, f"budget/{a}")[:, i].mean()) for a in AXES}
            reached = (results.marks[i], used) if passes else reached
            rows.append(f"{name:<18} {results.marks[i]:>10g}  {estimate_cell(stats.gain_interval([here], statistic)):>24}  "
                        f"{estimate_cell(difference):>24}  {_p(p):>7}  " + "  ".join(
                            f"{_amount(used[a], spent[a]):>20}" for a in AXES) + ("  reaches" if passes else ""))
        lines += reversed(rows)
        if reached is None:
            answers.append(f"{name}: does not reach it within {results.marks[-1]:g} {study.budget.unit}")
        else:
            at, used = reached
            answers.append(f"{name}: reaches it from {at:g} {study.budget.unit}: "
                           + ", ".join(f"{_amount(used[a], spent[a])} {a}" for a in AXES))
    return "\n".join(lines + [""] + answers)


FINAL_DRAW_KEYS = ("draws", "draw_prompts", "draw_samples")


SHARED_TOLERANCE = 0.05  # a run evaluates after the step that reaches a mark: its use overshoots by up to a step


def shared_marks(marks, spent, tolerance: float = SHARED_TOLERANCE) -> list[tuple[int, int]]:
    """(i, j) for each mark i > 0 of ``marks`` that the target reached too: ``spent[j]`` (the target's mean use, in
    the unit of ``marks``, at its mark j) within ``tolerance`` of it, relatively."""
    return [(i, j) for i, mark in enumerate(marks) if i > 0
            for j, used in enumerate(spent) if j > 0 and abs(used - mark) <= tolerance * mark]


def versus(results: Results, target: Results, tracker, target_tracker, arm: str) -> str:
    """Every arm of ``results`` against ``arm`` of another study (its finished runs, e.g. archived ones) on the
    same evaluation draws: at the end on the pooled draws, judged over the arms (the study's margin and
    correction); and on draw 0 at every mark where both studies evaluated at equal use of this study's budget
    unit (e.g. token-FLOPs), judged per arm over those marks. As text."""
    study, other = results.study, target.study
    if not same_draw(study, other) or any(getattr(study.evaluation, key) != getattr(other.evaluation, key)
                                          for key in FINAL_DRAW_KEYS) or study.pooled_draws() != other.pooled_draws():
        raise ReportError(f"{study.name} and {other.name} evaluate on different draws (model, task, evaluation or the "
                          "draws the verdicts pool differ): their gains are not measured on the same prompts")
    if arm not in target.arms:
        raise ReportError(f"no finished run of arm {arm!r} in {other.name}; arms there: {', '.join(target.arms)}")
    statistic, unit = statistics(study)["tail"], study.budget.unit
    final = judge({name: stats.difference_interval(results.pooled(name), target.pooled(arm), statistic)
                   for name in results.arms}, study.analysis)
    spent = {axis: float(target.values(arm, f"budget/{axis}")[:, -1].mean()) for axis in AXES}
    lines = [f"every arm of {study.name} against {arm} of {other.name} ({len(target.arms[arm])} seeds; at its end "
             + ", ".join(f"{spent[a]:.4g} {a}" for a in AXES) + f"); tail gain at α = {study.evaluation.primary_alpha:g}",
             "", f"at the end, pooled draws {', '.join(map(str, study.pooled_draws()))} ({study.analysis.correction} "
             f"over the {len(final)} arms, margin ±{study.analysis.margin}):", "",
             f"{'arm':<18} {'minus ' + arm:>26}  {'verdict':<28} " + "  ".join(f"{a + ' (x its)':>20}" for a in AXES)]
    for name, comparison in final.items():
        used = {a: float(results.values(name, f"budget/{a}")[:, -1].mean()) for a in AXES}
        lines.append(f"{name:<18} {estimate_cell(comparison.difference):>26}  "
                     f"{comparison.verdict + ', p ' + _p(comparison.p_adjusted):<28} "
                     + "  ".join(f"{_amount(used[a], spent[a]):>20}" for a in AXES))
    theirs = target.values(arm, f"budget/{unit}").mean(axis=0)
    pairs = shared_marks(results.marks, theirs)
    lines += ["", f"on draw 0 at the marks both reached at equal {unit}, within {SHARED_TOLERANCE:.0%} ("
              + ", ".join(f"{results.marks[i]:g} against {arm}'s {theirs[j]:.4g}" for i, j in pairs)
              + f"; {study.analysis.correction} over each arm's {len(pairs)} marks):" if pairs
              else f"no mark of {study.name} is one {arm} reached in {unit}: no curve comparison"]
    for name in results.arms if pairs else []:
        found = {f"{results.marks[i]:g}": stats.difference_interval(
            [draw_at(tracker, results, name, results.marks[i])],
            [draw_at(target_tracker, target, arm, target.marks[j])], statistic) for i, j in pairs}
        lines.append(f"{name:<18} " + "  ".join(f"at {mark} {unit}: {estimate_cell(c.difference)} {c.verdict}"
                                              for mark, c in judge(found, study.analysis).items()))
    return "\n".join(lines)


def _p(p: float) -> str:
    return "n/a" if not math.isfinite(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def _amount(used: float, target: float) -> str:
    return f"{used:.3g} ({used / target:.2f}x)" if target > 0 else f"{used:.3g}"
