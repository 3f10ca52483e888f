"""`arena tune` on the shipped tiny model (``arena.tune.sweep``): a sweep gives every arm exactly N trials, each a
nested MLflow run, and writes a snippet that validates in the study; pruned trials are recorded and count; a
SIGKILLed sweep resumes without repeating finished trials; parallel workers share the journal."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import types

import numpy as np
import optuna
import pytest
import torch
import yaml
from optuna.trial import TrialState

from arena import tune as tuning
from arena.tune.sweep import ArmOutcome, snippet
from arena.tune.trials import Counts
from arena.cli import main
from arena.study import validate
from tune_support import ARMS, STUDY, mlflow_runs, states, trials, write_tune, tune_dir  # noqa: F401 (the fixture in_tmp)


def test_a_sweep_gives_every_arm_n_trials_as_nested_runs_and_writes_a_snippet_that_validates(in_tmp, capsys):
    path = write_tune(in_tmp, objective="tail_auc")
    assert main(["tune", str(path), "--trials-per-arm", "3", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "arena tune tune: 2 arms x 3 trials, objective tail_auc, evaluation train split seed 1" in out
    assert "best tail_auc" in out and "wrote reports/tune/best.yaml" in out
    assert "\r" not in out and "\x1b" not in out  # capsys is no terminal: plain lines, no redrawn bars
    assert len(re.findall(r"^\S+ seed \d+: start at 0/\d+ samples$", out, re.M)) == 6  # one per trial
    assert len(re.findall(r"^\S+ seed \d+: finished at (\d+)/\1 samples after \d+ s$", out, re.M)) == 6

    found = trials(in_tmp)
    assert states(found) == {arm: ["COMPLETE"] * 3 for arm in ARMS}
    client, runs, parents = mlflow_runs(in_tmp)
    assert len(parents) == 1 and parents[0].data.tags["arena.tune"] == "tune"
    assert len(runs) == 6
    for run in runs:
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parents[0].info.run_id and tags["arena.tune"] == "tune"
        assert tags["arena.study"] == "tune" and tags["arena.seed"] == "1"  # the first seed the study does not use
        assert run.data.params["evaluation.seed"] == "1" and run.info.status == "FINISHED"
    by_id = {r.info.run_id: r for r in runs}
    for arm, ts in found.items():
        assert sorted(t.number for t in ts) == [0, 1, 2]
        for t in ts:  # the objective: area under the run's tail-reward curve over the budget, from MLflow
            run = by_id[t.user_attrs["arena.run_id.seed1"]]
            assert run.data.tags["arena.trial"] == str(t.number) and run.data.tags["arena.arm"] == arm
            option = "lr" if arm == "block_grpo" else "sigma"
            assert float(run.data.params[f"options.{option}"]) == pytest.approx(t.params[option])
            history = client.get_metric_history(run.info.run_id, "eval/tail_reward")
            marks, values = [m.step for m in history], [m.value for m in history]
            assert marks == [0, 16, 32]
            assert t.value == pytest.approx(np.trapezoid(values, marks) / 32)
    assert len({t.params["lr"] for t in found["block_grpo"]}) == 3  # TPE proposes, not replays

    text = (in_tmp / "reports" / "tune" / "best.yaml").read_text()
    assert "# sampler TPE, the first 10 trials of each arm random (all of them; n_startup_trials)" in text
    assert "# tuning seeds: [1]." in text and "confirm it on seeds tuning never used" in text
    assert "(the study's [0] are such seeds)" in text
    snippet = yaml.safe_load(text)
    best = {arm: max(ts, key=lambda t: (t.value, -t.number)) for arm, ts in found.items()}
    assert list(snippet) == ["arms"] and list(snippet["arms"]) == list(ARMS)
    assert snippet["arms"]["block_grpo"] == {"method": "block_grpo", "options": {
        "lr": best["block_grpo"].params["lr"], "group_size": 4, "max_new_tokens": 8}}
    assert snippet["arms"]["es"]["options"]["sigma"] == best["es"].params["sigma"]
    study = validate({**STUDY, "arms": {**STUDY["arms"], **snippet["arms"]}}, "study.yaml")  # study-ready
    assert study.arms["es"].options["sigma"] == best["es"].params["sigma"]

    assert main(["tune", str(path), "--trials-per-arm", "3", "--jobs", "1"]) == 0  # done: nothing reruns
    assert "0 trials in this invocation" in capsys.readouterr().out
    assert main(["tune", str(path), "--trials-per-arm", "4", "--jobs", "1"]) == 0  # extended: one more each
    assert states(trials(in_tmp)) == {arm: ["COMPLETE"] * 4 for arm in ARMS}
    assert len(mlflow_runs(in_tmp)[1]) == 8


def test_the_snippet_marks_confounded_exactly_the_tuned_arms_that_differ_from_the_reference_in_more(in_tmp):
    """With its best options, an arm of the reference's method that already varied the tuned option still differs
    in one variable (no mark); one that varied another now differs in two (confounded_because); an arm of
    another method differs in its method alone (no mark); and the snippet validates in the study."""
    same = {"method": "block_grpo", "options": {"lr": 1e-4, "group_size": 4, "max_new_tokens": 8}}
    study = {**STUDY, "arms": {**STUDY["arms"], "lr_only": {**same, "options": {**same["options"], "lr": 3e-4}},
                               "wider": {**same, "options": {**same["options"], "group_size": 8}}}}
    (in_tmp / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    lr = {"lr": {"log_uniform": [1e-5, 1e-2]}}
    tune = tuning.load_tune(write_tune(in_tmp, trials_per_arm=1, arms=["lr_only", "wider", "es"], space={
        "lr_only": lr, "wider": lr, "es": {"sigma": {"log_uniform": [1e-3, 1e-1]}}}))
    best = {"lr_only": {"lr": 5e-4}, "wider": {"lr": 5e-4}, "es": {"sigma": 0.03}}
    found = [ArmOutcome(arm, Counts(finished=1), 0.1, 0, params) for arm, params in best.items()]
    text = snippet(tune, found)
    arms = yaml.safe_load(text)["arms"]
    assert {arm: entry.get("confounded_because") for arm, entry in arms.items()} == {
        "lr_only": None, "wider": "options tuned separately by arena tune (tune)", "es": None}
    assert arms["wider"]["options"] == {"lr": 5e-4, "group_size": 8, "max_new_tokens": 8}
    assert "does not validate" not in text
    validate({**study, "arms": {**study["arms"], **arms}}, "study.yaml")


def test_pruned_trials_are_recorded_and_count_toward_the_trials_per_arm(in_tmp, capsys):
    """A threshold no tail gain reaches prunes every trial at its first evaluation after the start."""
    path = write_tune(in_tmp, trials_per_arm=2, pruner={"name": "threshold", "lower": 2.0})
    assert main(["tune", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("pruned at 16 samples") == 4
    found = trials(in_tmp)
    assert states(found) == {arm: ["PRUNED", "PRUNED"] for arm in ARMS}
    assert all(list(t.intermediate_values) == [16] for ts in found.values() for t in ts)
    client, runs, _ = mlflow_runs(in_tmp)
    assert len(runs) == 4 and all(r.info.status == "KILLED" for r in runs)  # what they logged stays
    assert all([m.step for m in client.get_metric_history(r.info.run_id, "eval/tail_gain")] == [0, 16] for r in runs)
    text = (in_tmp / "reports" / "tune" / "best.yaml").read_text()
    assert "# no finished trial (not here): block_grpo, es" in text and yaml.safe_load(text) == {"arms": {}}
    assert (in_tmp / ".arena" / "tune" / "tune").is_dir()
    assert not list((in_tmp / ".arena" / "tune" / "tune").glob("*/trial*"))  # checkpoints go with their trial


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_repeating_finished_trials(in_tmp, capsys):
    """SIGKILL the sweep after one trial has finished, while another is past its first training evaluation; the
    rerun retries the dead trial with its options, resuming its run from the checkpoint, keeps the finished
    ones (no new MLflow run for them) and ends with exactly N per arm."""
    path = write_tune(in_tmp, trials_per_arm=2)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "arena", "tune", str(path), "--jobs", "1"], cwd=in_tmp, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready, deadline = False, time.time() + 300
    while not ready and time.time() < deadline and process.poll() is None:
        time.sleep(0.1)
        try:
            found = trials(in_tmp)
        except (KeyError, FileNotFoundError, ValueError):  # the journal or a study does not exist yet
            continue
        finished = any(t.state == TrialState.COMPLETE for ts in found.values() for t in ts)
        # a running trial's checkpoints only: a finished trial's stay a moment after it is told, and killing then
        # would catch the next trial before its first checkpoint (seen on a loaded machine)
        running = {f"{arm}/trial{t.number}" for arm, ts in found.items() for t in ts if t.state == TrialState.RUNNING}
        runs = in_tmp / ".arena" / "tune" / "tune"
        try:
            checkpoints = [path for path in (runs.glob("*/trial*/**/checkpoint.pt") if finished else ())
                           if "/".join(path.relative_to(runs).parts[:2]) in running]
        except FileNotFoundError:  # a finished trial's folder went away while the glob walked it
            continue
        for checkpoint in checkpoints:
            with contextlib.suppress(OSError, RuntimeError, EOFError):  # deleted as its trial ended
                ready = ready or torch.load(checkpoint, weights_only=False)["runner"]["point"] >= 2
    assert process.poll() is None and ready, "the sweep ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = trials(in_tmp)
    finished = {(arm, t.number): (t.params, t.value) for arm, ts in before.items() for t in ts
                if t.state == TrialState.COMPLETE}
    dead = [(arm, t) for arm, ts in before.items() for t in ts if t.state == TrialState.RUNNING]
    assert finished and len(dead) == 1

    assert main(["tune", str(path), "--jobs", "1"]) == 0
    assert f"{dead[0][0]} trial {dead[0][1].number}: its process is gone" in capsys.readouterr().out
    after = trials(in_tmp)
    for arm, ts in after.items():
        assert sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in ts) == 2
    for (arm, number), (params, value) in finished.items():  # kept as they were
        kept = after[arm][number]
        assert kept.state == TrialState.COMPLETE and kept.params == params and kept.value == value
    arm, killed = dead[0]
    assert after[arm][killed.number].state == TrialState.FAIL
    (retry,) = [t for t in after[arm] if t.user_attrs.get("arena.retry_of") == killed.number]
    assert retry.params == killed.params and retry.state in (TrialState.COMPLETE, TrialState.PRUNED)

    client, runs, _ = mlflow_runs(in_tmp)  # one run per trial: the retry resumed the dead trial's run
    for arm in ARMS:
        assert len([r for r in runs if r.data.tags["arena.arm"] == arm]) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    resumed = retry.user_attrs["arena.run_id.seed1"]
    assert [m.step for m in client.get_metric_history(resumed, "eval/tail_gain")] == [0, 16, 32]  # each once
    assert sorted(r.data.tags["arena.trial"] for r in runs if r.data.tags["arena.arm"] == arm) == \
        sorted({str(t.user_attrs.get("arena.retry_of", t.number)) for t in after[arm]
                if t.state == TrialState.COMPLETE})


@pytest.mark.slow
def test_parallel_workers_share_the_journal_and_give_every_arm_exactly_n(in_tmp, capsys):
    path = write_tune(in_tmp, trials_per_arm=2)
    assert main(["tune", str(path), "--jobs", "2"]) == 0
    assert "2 at a time" in capsys.readouterr().out
    found = trials(in_tmp)
    assert {arm: [t.state.name for t in ts if t.state != TrialState.FAIL] for arm, ts in found.items()} == {
        arm: ["COMPLETE", "COMPLETE"] for arm in ARMS}
    assert all(t.user_attrs.get("arena.surplus") for ts in found.values() for t in ts if t.state == TrialState.FAIL)
    _, runs, parents = mlflow_runs(in_tmp)
    assert len(parents) == 1 and len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)


def test_a_seeds_curve_reports_the_running_objective_at_the_budget_used_and_stops_when_pruned():
    """Without a model: the pruner sees the area so far (numpy's trapezoid, the oracle) at step offset + mark,
    never the start; Stop names where it stopped, but never at the trial's last mark; a resumed run's curve
    starts with the points it logged before (read back by its tags), each reported once."""
    from arena.runner import Stop
    from arena.tune.sweep import Curve

    logged = {"eval/tail_reward": [(0, 0.2), (16, 0.5), (32, 0.9)], "eval/tail_gain": [(0, 0.0), (16, 0.3), (32, 0.7)]}
    tracker = types.SimpleNamespace(find_runs=lambda tags: [types.SimpleNamespace(run_id="r")] if tags else [],
                                    history=lambda run_id, key: logged[key])
    point = {mark: {"tail_reward": r, "tail_gain": g} for (mark, r), (_, g) in zip(*logged.values())}
    prune = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=2.0))

    trial = prune.ask()
    curve = Curve(trial, "tail_auc", tracker, {}, 32.0, None, "samples of seed 1")
    curve(0, point[0])
    assert prune.trials[-1].intermediate_values == {}  # the start is every trial's
    with pytest.raises(Stop, match="^at 16 samples of seed 1$"):
        curve(16, point[16])
    assert prune.trials[-1].intermediate_values == {48: pytest.approx(np.trapezoid([0.2, 0.5], [0, 16]) / 16)}

    trial = prune.ask()
    curve = Curve(trial, "tail_auc", tracker, {"arena.trial": "0"}, 0.0, 32, "samples")
    curve(32, point[32])  # resumed at the last mark: the pruner would stop it, but the trial is over
    assert prune.trials[-1].intermediate_values == {
        16: np.trapezoid([0.2, 0.5], [0, 16]) / 16, 32: pytest.approx(np.trapezoid([0.2, 0.5, 0.9], [0, 16, 32]) / 32)}
    assert [mark for mark, _, _ in curve.points] == [0, 16, 32]
