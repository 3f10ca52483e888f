"""`arena tune` on the shipped tiny model: a sweep gives every arm exactly N trials, each a nested MLflow run,
and writes a snippet that validates in the study; pruned trials are recorded and count; a SIGKILLed sweep
resumes without repeating finished trials; the trial protocol (surplus, stale) holds without a model; the
tune file's mistakes are all reported at once with their lines."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from arena import tune as tuning
from arena.tune.sweep import ArmOutcome, snippet
from arena.tune.trials import Counts
from arena.cli import main
from arena.study import StudyError, load_study, validate
from test_runner import STUDY as RUNNER_STUDY

ROOT = Path(__file__).resolve().parents[1]
STUDY = {**RUNNER_STUDY, "name": "small", "seeds": [0]}  # tests/test_runner.py's small study, one seed
TUNE = {
    "study": "study.yaml",
    "space": {"block_grpo": {"lr": {"log_uniform": [1e-5, 1e-2]}}, "es": {"sigma": {"log_uniform": [1e-3, 1e-1]}}},
    "pruner": {"name": "none"},
}
ARMS = ("block_grpo", "es")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model is fastest on one thread, far more so on a loaded machine
    yield tmp_path
    torch.set_num_threads(threads)


def write_tune(folder: Path, **changes) -> Path:
    path = folder / "tune.yaml"
    path.write_text(yaml.safe_dump({**TUNE, **changes}, sort_keys=False))
    return path


def trials(folder: Path, name: str = "tune") -> dict[str, list]:
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(folder / ".arena" / "tune" / f"{name}.journal")))
    return {arm: optuna.load_study(study_name=f"{name}/{arm}", storage=storage).get_trials() for arm in ARMS}


def states(found: dict[str, list]) -> dict[str, list[str]]:
    return {arm: sorted(t.state.name for t in ts) for arm, ts in found.items()}


def mlflow_runs(folder: Path, experiment: str = "tune"):
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=500)
    children = [r for r in runs if r.data.tags.get("arena.arm")]
    return client, children, [r for r in runs if not r.data.tags.get("arena.arm")]


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
            finished = any(t.state == TrialState.COMPLETE for ts in trials(in_tmp).values() for t in ts)
        except (KeyError, FileNotFoundError, ValueError):  # the journal or a study does not exist yet
            continue
        runs = in_tmp / ".arena" / "tune" / "tune"
        try:
            checkpoints = list(runs.glob("*/trial*/**/checkpoint.pt") if finished else ())
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


def test_every_arm_gets_the_same_number_of_trials_and_dead_trials_are_retried():
    """The protocol, without a model: trials go to the arm with the fewest; a trial that would be one too many
    (a parallel worker's) fails before it runs; a trial of a dead process is failed and queued again."""
    tune = types.SimpleNamespace(arms=list(ARMS), trials_per_arm=2)
    studies = {arm: optuna.create_study(direction="maximize") for arm in ARMS}
    order = []
    while (arm := tuning.next_arm(tune, studies)) is not None:
        trial = tuning.claim(tune, studies[arm])
        trial.suggest_float("x", 0, 1)
        order.append(arm)
        if len(order) == 3:  # a parallel worker claims while the arm's second trial runs: one too many
            assert tuning.claim(tune, studies[arm]) is None
            (surplus,) = studies[arm].get_trials(states=(TrialState.FAIL,))
            assert surplus.user_attrs["arena.surplus"] is True and tuning.counts(studies[arm]).failed == 0
        studies[arm].tell(trial, 1.0)
    assert order == ["block_grpo", "es", "block_grpo", "es"]
    for study in studies.values():
        assert tuning.counts(study).finished == 2

    study = studies["es"] = optuna.create_study(direction="maximize")
    trial = tuning.claim(tune, study)
    trial.suggest_float("x", 0, 1)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    trial.set_user_attr("arena.owner", {"host": tuning.HOST, "pid": gone.pid})
    assert tuning.fail_stale(study) == [trial.number]
    assert study.trials[0].state == TrialState.FAIL and tuning.counts(study).failed == 0  # not a failure
    retry = tuning.claim(tune, study)
    assert retry.user_attrs["arena.retry_of"] == 0 and retry.suggest_float("x", 0, 1) == trial.params["x"]
    retry.set_user_attr("arena.owner", {"host": "elsewhere", "pid": 1})  # another machine: its heartbeat decides
    assert tuning.fail_stale(study) == []
    retry.set_user_attr("arena.heartbeat", time.time() - tuning.STALE_AFTER - 1)
    assert tuning.fail_stale(study) == [retry.number]
    assert tuning.claim(tune, study).user_attrs["arena.retry_of"] == 0  # the chain keeps its first trial


def test_the_tpe_startup_trials_are_set_stated_and_obeyed(in_tmp, capsys):
    """sampler.n_startup_trials: stated in the plan, rejected below 1, and given to TPE: on a smooth toy
    objective, the second half of 24 trials lands nearer the optimum after 3 random ones than when all 24 are
    random (median distance 0.064 against 0.173 at seed 0; 0.06-0.08 against 0.17-0.23 for seeds 0-2)."""
    assert main(["tune", str(write_tune(in_tmp, sampler={"n_startup_trials": 4})), "--trials-per-arm", "16",
                 "--dry-run"]) == 0
    assert "sampler TPE, the first 4 trials of each arm random (4 of 16; n_startup_trials)" in capsys.readouterr().out
    with pytest.raises(StudyError, match="sampler.n_startup_trials: must be >= 1, got 0"):
        tuning.load_tune(write_tune(in_tmp, sampler={"n_startup_trials": 0}, trials_per_arm=4))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    errors = {}
    for startup in (3, 24):
        study = optuna.create_study(direction="maximize", sampler=tuning.TrialSeeded(0, "toy", startup))
        study.optimize(lambda trial: -(trial.suggest_float("x", 0, 1) - 0.8) ** 2, n_trials=24)
        errors[startup] = np.median([abs(t.params["x"] - 0.8) for t in study.trials[12:]])
    assert errors[3] < errors[24] / 2, errors


def test_tune_file_mistakes_are_reported_at_once_with_their_lines(in_tmp, capsys):
    path = in_tmp / "tune.yaml"
    path.write_text(
        "study: study.yaml\n"                                      # 1
        "trails_per_arm: 3\n"                                      # 2
        "objective: tail\n"                                        # 3
        "pruner: {name: threshold}\n"                              # 4
        "space:\n"                                                 # 5
        "  block_grpo:\n"                                          # 6
        "    lrr: {log_uniform: [1.0e-5, 1.0e-3]}\n"               # 7
        "    group_size: {int_uniform: [1, 8]}\n"                  # 8
        "    lr: {uniform: [0.1, 0.01]}\n"                         # 9
        "  es:\n"                                                  # 10
        "    sigma: {log_uniform: [0, 0.1]}\n"                     # 11
        "    shaping: {choice: [zscore, ranks]}\n"                 # 12
        "  nope:\n"                                                # 13
        "    lr: {uniform: [0, 1]}\n")                             # 14
    with pytest.raises(StudyError) as error:
        tuning.load_tune(path)
    lines = [str(p) for p in error.value.problems]
    tune = str(path)
    expected = [
        f"{tune}:2: trails_per_arm: unknown option; did you mean 'trials_per_arm'?",
        f"{tune}:3: objective: must be one of 'tail_gain', 'tail_auc', got 'tail'",
        f"{tune}:4: pruner.name: a threshold pruner needs lower, upper or both",
        f"{tune}:7: space.block_grpo.lrr: unknown option; did you mean 'lr'? (block_grpo options)",
        f"{tune}:8: space.block_grpo.group_size.int_uniform[0]: must be >= 2, got 1",
        f"{tune}:9: space.block_grpo.lr.uniform: expected finite low < high, got [0.1, 0.01]",
        f"{tune}:11: space.es.sigma.log_uniform: a log-uniform range needs low > 0, got 0",
        f"{tune}:13: space.nope: unknown arm; known: block_grpo, es",
    ]
    for line in expected:
        assert line in lines, (line, lines)
    assert any(line.startswith(f"{tune}:12: space.es.shaping.choice[1]: must be one of") for line in lines)
    assert any("trials_per_arm: required: here or as --trials-per-arm N" in line for line in lines)
    assert main(["tune", str(path)]) == 2
    assert f"arena tune: {len(lines)} problems:" in capsys.readouterr().err


def test_the_tune_files_own_keys_are_checked_by_the_one_validator(in_tmp):
    path = write_tune(in_tmp, name="my tune", seed=-1, storage=5, trials_per_arm=0, tracking={"uri": 3},
                      pruner={"name": "median", "lower": 0.1})
    with pytest.raises(StudyError) as error:
        tuning.load_tune(path)
    assert {p.path: p.message for p in error.value.problems} == {
        "name": "must use only letters, digits, _ . - (it names files), got 'my tune'",
        "seed": "must be >= 0, got -1",
        "storage": "expected a string or null, got 5",
        "trials_per_arm": "expected an integer >= 1, got 0",
        "tracking.uri": "expected a string or null, got 3",
        "pruner.lower": "goes with name: threshold, not 'median'",
    }
    assert tuning.load_tune(write_tune(in_tmp, name=None, seeds=None), trials_per_arm=2).name == "tune"


def test_dry_run_and_the_shipped_tune_file(in_tmp, capsys, monkeypatch):
    assert main(["tune", str(write_tune(in_tmp)), "--trials-per-arm", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "tune tune: study study.yaml, 2 arms x 3 trials" in out
    assert "evaluation on the train split, seed 1 (the study reports on the heldout split, seed 0)" in out and "block_grpo (block_grpo): lr log_uniform" in out
    assert not (in_tmp / ".arena").exists() and not (in_tmp / "mlflow.db").exists()
    monkeypatch.chdir(ROOT)
    shipped = tuning.load_tune("tunes/es_vs_blockgrpo.yaml")
    base = load_study("studies/es_vs_blockgrpo.yaml")
    assert shipped.arms == list(base.arms) and shipped.settings.evaluation.seed != base.evaluation.seed
    assert (shipped.settings.evaluation.draws, base.evaluation.draws) == (1, 2)  # the objective reads draw 0 only
    assert not set(shipped.settings.seeds) & set(base.seeds)


def test_a_trial_avoids_every_arms_seeds_trains_its_own_and_ignores_the_final_draws(in_tmp):
    """Trial seeds are free of the study's and of each arm's own seeds, a trial runs them (not the arm's), and a
    study whose verdicts rest on larger final draws still tunes on one draw."""
    arms = {**STUDY["arms"], "block_grpo": {**STUDY["arms"]["block_grpo"], "seeds": [0, 1, 2]}}
    (in_tmp / "study.yaml").write_text(yaml.safe_dump({**STUDY, "arms": arms, "analysis": {"draws": [1, 2]},
                                                       "evaluation": {**STUDY["evaluation"], "draws": 3,
                                                                      "draw_prompts": 6}}))
    tune = tuning.load_tune(write_tune(in_tmp, seeds=2), trials_per_arm=2)
    assert tune.settings.seeds == (3, 4) and tune.settings.evaluation.draws == 1
    trial = tune.study_for("block_grpo", {"lr": 1e-4})
    assert [run.seed for run in trial.runs()] == [3, 4]


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


@pytest.mark.parametrize("path", sorted((ROOT / "tunes").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_tune_file_dry_runs(path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["tune", str(path.relative_to(ROOT)), "--dry-run"]) == 0
    assert f"study studies/{path.stem}.yaml" in capsys.readouterr().out  # a tune file is named after its study


@pytest.mark.parametrize("value, pruned", [(0.25, False), (0.15, True)])
def test_the_percentile_pruner_prunes_the_bottom_share_it_names(value, pruned):
    """pruner {name: percentile, percentile: 25}: a trial is pruned below the 25th percentile of the finished
    trials' values at that step (numpy's, the oracle: 0.175 of 0.1..0.4), not below the 75th. Optuna's own argument
    means the share kept at the top, so passed through unchanged it would prune 0.25 too."""
    from arena.tune.spec import PrunerSpec

    study = optuna.create_study(direction="maximize",
                                pruner=PrunerSpec(name="percentile", percentile=25.0, n_startup_trials=4).make())
    for finished in (0.1, 0.2, 0.3, 0.4):
        trial = study.ask()
        trial.report(finished, 1)
        study.tell(trial, finished)
    assert np.percentile([0.1, 0.2, 0.3, 0.4], 25) == pytest.approx(0.175)
    trial = study.ask()
    trial.report(value, 1)
    assert bool(trial.should_prune()) is pruned
