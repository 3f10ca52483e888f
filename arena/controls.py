"""Controls: arms that train nothing, each one evaluation, so that a table says what training adds.

    frozen    the start policy. Its gain is zero by construction: every evaluation point decodes the same prompts
              with the same decoding seeds (common random numbers), so a policy that does not change decodes the
              same samples. It is the row every "differs from doing nothing" reads against.
    sharpen   the start weights with the logits divided by a temperature τ, i.e. decoding at τ x the evaluation
              temperature, τ the best of ``SHARPEN_GRID`` by tail reward on the *training* split's prompts (never
              the held-out ones): the best one-parameter change of the start policy. On a testbed whose start
              model's mode is right, much of any optimizer's gain is available this way; "gain over sharpen" is
              the share that is not.

Matched decoding: a trained arm's gain over ``sharpen`` at the study's temperature compares a policy decoded at
1.0 with one decoded at its best temperature. So, in a study with ``sharpen`` (and held-out evaluation), every
trained run ends with ``arena.runner.matched_decoding``: the same rule (``arena.evaluate.choose_temperature``: the same grid, the same
training-split prompts and decoding seeds, the same tie-break) applied to the trained policy, then every evaluation
draw decoded at the temperature it picks. A policy equal to the start picks sharpen's τ and decodes sharpen's
samples, so its matched difference from ``sharpen`` is exactly zero.

A control is logged as a child run of the invocation (``arena.control`` tag, seed 0, its own config hash), with the
evaluation metrics and per-prompt rewards at the study's final mark (its start: the study's cached start), and the
other evaluation draws as a trained run has them; a finished control is skipped when the study runs again.
"""
from __future__ import annotations

import functools
from pathlib import Path

from arena.budget import UNITS, marks
from arena.evaluate import SHARPEN_GRID, Evaluator, choose_temperature
from arena.progress import announce
from arena.tracking import evaluation_artifact
from rewards import load_task


def evaluate_control(control, tracker, parent_id: str | None, workdir: Path, device: str | None = None,
                     force: bool = False):
    """Evaluate one control (``arena.study.ControlSpec``; or skip it, finished before) and log it as a child run
    of ``parent_id``; its ``arena.runner.Outcome``."""
    from arena.model import load_policy
    from arena.runner import (Outcome, decide, draw_starts, git_commit, other_draws, start_cache,
                              starting_evaluation, temperature_rows)

    tags = {"arena.study": control.study, "arena.arm": control.arm, "arena.seed": "0",
            "arena.config_hash": control.config_hash, "arena.control": control.arm}
    action, run_id = decide(tracker, tags, Path(workdir) / control.study / "no-checkpoint", force)
    if action == "skip":
        return Outcome(control.arm, 0, run_id, "skipped")
    say = functools.partial(announce, f"control {control.arm}")
    say("evaluating the start model" + (f" at {len(SHARPEN_GRID)} temperatures on training prompts, then at the "
                                        "best one on every draw" if control.arm == "sharpen" else " on every draw"))
    policy = load_policy(control.model, device=device)
    task = load_task(control.task.name, control.task.levels)
    spec = control.evaluation
    evaluator = Evaluator(task, spec, policy.tokenizer, control.task.source)
    start, hard = starting_evaluation(evaluator, policy, start_cache(workdir, control), say)
    at = marks(control.budget.amount, spec.points)
    first, last = at[0], at[-1]
    run_id = tracker.start_run(f"{control.arm} (control)", parent_id,
                               {**tags, "arena.method": "control", "arena.git_commit": git_commit(),
                                "arena.profile": control.profile or "none"}, control.resolved())
    try:
        temperature, rows = None, []
        if control.arm == "sharpen":
            tau, tails = choose_temperature(task, spec, policy, control.task.source)
            temperature = tau * spec.temperature
            rows += temperature_rows("control", tau, tails, last)
        end = start if temperature is None else evaluator.decode(policy, temperature=temperature)
        rows += [(f"eval/{key}", value, last) for key, value in evaluator.metrics(end, start, hard).items()]
        rows += [(f"budget/{unit}", 0.0, last) for unit in UNITS]  # a control trains nothing
        tracker.log_npz(run_id, {"rewards": start.rewards, "hard": hard}, evaluation_artifact(first, "per_prompt_rewards.npz"))
        tracker.log_npz(run_id, {"rewards": end.rewards, "hard": hard}, evaluation_artifact(last, "per_prompt_rewards.npz"))
        tracker.log_table(run_id, end.completions, evaluation_artifact(last, "completions.json"))
        extra = Evaluator.final_draws(task, spec, policy.tokenizer, control.task.source)
        starts = draw_starts(extra, policy, workdir, control, say)
        rows += other_draws(extra, starts, policy, last, tracker, run_id, temperature, control.arm == "frozen")
        tracker.log_rows(run_id, rows)
    except BaseException as error:
        tracker.finish(run_id, "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        raise
    tracker.finish(run_id, "FINISHED")
    return Outcome(control.arm, 0, run_id, "finished")
