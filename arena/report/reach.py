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
"""
from __future__ import annotations

import math

import numpy as np

from arena.report import stats
from arena.report.comparison import statistics
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


def _p(p: float) -> str:
    return "n/a" if not math.isfinite(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def _amount(used: float, target: float) -> str:
    return f"{used:.3g} ({used / target:.2f}x)" if target > 0 else f"{used:.3g}"
