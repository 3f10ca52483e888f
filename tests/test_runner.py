"""`arena run` end to end on the shipped tiny model, asserting on what MLflow holds: runs, tags, aligned
metric histories, artifacts; skip and resume; a killed run resumes with every point exactly once."""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from arena.cli import build_parser, main
from conftest import MARKS, STUDY, children, client_for, steps, write

@pytest.mark.slow
def test_a_study_lands_in_mlflow_with_aligned_curves_and_a_rerun_skips(in_tmp, capsys):
    path = write(in_tmp, STUDY)
    assert main(["run", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("arena run e2e: model tiny, profile none")
    assert "tail gain (α=0.5)" in out and "arena ui" in out and "arena report" in out
    assert "controls: off (the study sets controls: [])" in out  # opted out: the table says why it has no controls
    header = next(line for line in out.splitlines() if line.startswith("arm "))
    promised = " ".join(build_parser()._subparsers._group_actions[0].choices["run"].description.split())
    for column in re.split(r"\s{2,}", header):  # `arena run --help` describes each column the summary shows
        assert column.split(" (")[0] in promised, (column, promised)

    client = client_for(in_tmp)
    runs, parents = children(client, "e2e")
    assert len(parents) == 1 and len(runs) == 4
    assert {(r.data.tags["arena.arm"], r.data.tags["arena.seed"]) for r in runs} == {
        (a, s) for a in ("block_grpo", "es") for s in ("0", "1")}
    for run in runs:
        tags = run.data.tags
        assert run.info.status == "FINISHED" and tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert tags["arena.study"] == "e2e" and len(tags["arena.config_hash"]) == 12 and tags["arena.git_commit"]
        assert tags["arena.method"] == tags["arena.arm"] and tags["arena.profile"] == "none"
        assert tags.get("arena.estimator") == ("elbo" if tags["arena.method"] == "block_grpo" else None)
        assert run.data.params["options.lr" if tags["arena.method"] == "block_grpo" else "options.sigma"]
        for key in ("eval/mean_reward", "eval/tail_reward", "eval/tail_gain", "eval/tail_reward_a0.25",
                    "eval/hard_gain", "eval/weight_drift", "budget/samples", "budget/seconds"):
            assert steps(client, run.info.run_id, key) == MARKS, key  # every arm at the same budget points
        assert client.get_metric_history(run.info.run_id, "eval/tail_gain")[0].value == 0.0
        assert [m.value for m in client.get_metric_history(run.info.run_id, "budget/samples")] == MARKS
        assert steps(client, run.info.run_id, "train/reward_mean") and steps(client, run.info.run_id, "train/update_norm")
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"study.yaml", "evaluations"} <= artifacts
        points = [a.path for a in client.list_artifacts(run.info.run_id, "evaluations")]
        assert len(points) == 3  # one folder per point: nothing overwritten
        local = client.download_artifacts(run.info.run_id, points[-1], str(in_tmp / run.info.run_id))
        rewards = np.load(Path(local) / "per_prompt_rewards.npz")["rewards"]
        assert rewards.shape == (12, 2)
        maps = [a.path for a in client.list_artifacts(run.info.run_id, "rollouts")]
        if tags["arena.method"] == "block_grpo":  # every step's rollout diagnostics; its step maps at each mark
            history = client.get_metric_history(run.info.run_id, "train/tokens_per_forward")
            assert [m.value for m in history] == [1.0, 1.0]  # threshold 1: one token per forward
            assert steps(client, run.info.run_id, "train/identical_share") == [m.step for m in history]
            assert maps == ["rollouts/000000016.npz", "rollouts/000000032.npz"]  # the step before each mark
            record = np.load(client.download_artifacts(run.info.run_id, maps[-1], str(in_tmp / run.info.run_id)))
            assert record["step"].tolist() == [1] * 16 and record["offsets"][-1] == len(record["forward"]) > 16
        else:
            assert maps == []  # ES decodes no groups
    # the same start for every run: common prompts and decoding seeds
    starts = {tuple(m.value for m in client.get_metric_history(r.info.run_id, "eval/mean_reward")[:1]) for r in runs}
    assert len(starts) == 1

    # the parent run compares the arms: each arm's mean over its seeds at every mark, inside its 95% interval
    parent = parents[0].info.run_id
    for arm in ("block_grpo", "es"):
        seeds = [r.info.run_id for r in runs if r.data.tags["arena.arm"] == arm]
        for key in ("tail_reward", "tail_gain", "mean_reward"):
            curves = np.array([[m.value for m in client.get_metric_history(run, f"eval/{key}")] for run in seeds])
            mean, low, high = ([m.value for m in client.get_metric_history(parent, f"arms/{arm}/{key}{end}")]
                               for end in ("", "_low", "_high"))
            assert steps(client, parent, f"arms/{arm}/{key}") == MARKS
            np.testing.assert_allclose(mean, curves.mean(axis=0), rtol=0, atol=1e-12)
            assert all(lo <= m <= hi for lo, m, hi in zip(low, mean, high)), (key, low, mean, high)
    # the UI's first view: model training, the study's question and summary, the runs grouped by arm
    experiment = client.get_experiment_by_name("e2e")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    note = experiment.tags["mlflow.note.content"]
    assert f"arena run {path}" in note and "block_grpo" in note and "tail gain (α=0.5)" in note
    view = json.loads(experiment.tags["mlflow.sharedViewState.arena"])
    assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "arena.arm"}]
    assert view["compareRunCharts"][0]["metricKey"] == "eval/tail_reward"

    assert main(["run", str(path), "--jobs", "1"]) == 0  # finished runs are skipped, not rerun
    assert "0 runs finished, 4 already finished (skipped)" in capsys.readouterr().out
    runs_again, parents_again = children(client, "e2e")
    assert len(runs_again) == 4 and len(parents_again) == 2

    changed = {**STUDY, "arms": {**STUDY["arms"], "es": {**STUDY["arms"]["es"],
                                                        "options": {**STUDY["arms"]["es"]["options"], "alpha": 0.02}}}}
    assert main(["run", str(write(in_tmp, changed)), "--only", "arm=es,seed=0", "--jobs", "1"]) == 0
    runs_changed, _ = children(client, "e2e")
    assert len(runs_changed) == 5  # a changed study starts a new run; it never resumes the old one


@pytest.mark.slow
def test_a_frozen_policy_shows_exactly_zero_gain(in_tmp):
    """Common random numbers: the same prompts and decoding seeds at every point, so a policy that does
    not move (learning rate 0) has tail, hard-subset and mean gain exactly 0 at every point."""
    frozen = {**STUDY, "seeds": [0], "arms": {"frozen": {"method": "grpo", "options": {
        "lr": 0.0, "group_size": 4, "max_new_tokens": 8}}}}
    assert main(["run", str(write(in_tmp, frozen)), "--jobs", "1"]) == 0
    client = client_for(in_tmp)
    (run,), _ = children(client, "e2e")
    for key in ("eval/tail_gain", "eval/hard_gain", "eval/mean_gain", "eval/weight_drift"):
        assert [m.value for m in client.get_metric_history(run.info.run_id, key)] == [0.0, 0.0, 0.0], key


@pytest.mark.slow
def test_a_reward_that_raises_stops_its_run_with_a_named_error_and_the_rerun_resumes(in_tmp, capsys, monkeypatch):
    study = {**STUDY, "seeds": [0], "task": {"name": "study_plugins:FlakyArithmetic", "levels": [1, 2]},
             "arms": {"block_grpo": STUDY["arms"]["block_grpo"]}}
    path = write(in_tmp, study)
    monkeypatch.setenv("ARENA_TEST_REWARD_FAILS_AT", "60")  # 48 calls evaluate the start; the 60th is in step 0
    assert main(["run", str(path), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "1 of 1 runs failed" in err and "task 'flaky_arithmetic': reward raised ZeroDivisionError" in err
    assert "prompt '" in err and "completion '" in err
    client = client_for(in_tmp)
    (run,), _ = children(client, "e2e")
    assert run.info.status == "FAILED" and steps(client, run.info.run_id, "eval/tail_gain") == [0]  # kept
    monkeypatch.delenv("ARENA_TEST_REWARD_FAILS_AT")
    assert main(["run", str(path), "--jobs", "1"]) == 0
    (resumed,), _ = children(client, "e2e")
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert steps(client, run.info.run_id, "eval/tail_gain") == MARKS


@pytest.mark.slow
def test_a_method_that_goes_non_finite_fails_its_run_naming_the_step_and_the_statistic(in_tmp, capsys):
    options = {"lr": 1e-4, "group_size": 4, "max_new_tokens": 8, "max_skipped_steps": 2}
    study = {**STUDY, "seeds": [0], "arms": {"nan": {"method": "study_plugins:NaNGradientGRPO", "options": options}}}
    assert main(["run", str(write(in_tmp, study)), "--jobs", "1"]) == 2  # 2 steps of 16 samples: both skipped
    err = capsys.readouterr().err
    assert "1 of 1 runs failed" in err
    assert "NonFiniteError: block_grpo step 1 (inner iteration 0): gradient norm is nan" in err
    assert "2 consecutive steps skipped (max_skipped_steps: 2)" in err
    (run,), _ = children(client_for(in_tmp), "e2e")
    assert run.info.status == "FAILED"


@pytest.mark.slow
def test_a_corrupt_checkpoint_fails_its_run_naming_the_file_and_the_others_finish(in_tmp, capsys):
    """An interrupted run whose checkpoint is garbage: its rerun fails with one line naming the run, the file and
    the way out, the run ends FAILED, the other run finishes, the summary prints and the parent ends FAILED."""
    study = {**STUDY, "arms": {"block_grpo": STUDY["arms"]["block_grpo"]}}
    path = write(in_tmp, study)
    assert main(["run", str(path), "--jobs", "1", "--only", "seed=0"]) == 0
    client = client_for(in_tmp)
    (interrupted,), _ = children(client, "e2e")
    client.set_terminated(interrupted.info.run_id, "KILLED")  # as Ctrl-C leaves it: resumable
    (checkpoint,) = (in_tmp / ".arena").glob("e2e/block_grpo/seed0-*/checkpoint.pt")
    checkpoint.write_bytes(np.random.default_rng(0).bytes(5000))
    capsys.readouterr()

    assert main(["run", str(path), "--jobs", "1"]) == 2
    out, err = capsys.readouterr()
    assert "1 run finished, 0 already finished (skipped), 1 failed" in out and "tail gain (α=0.5)" in out
    relative = checkpoint.relative_to(in_tmp)
    assert (f"  block_grpo seed 0: ResumeError: cannot resume from {relative} (UnpicklingError: " in err
            and "delete that file to start this run over, or rerun with --force --only arm=block_grpo,seed=0" in err)
    assert "Traceback" not in err
    runs, parents = children(client, "e2e")
    status = {r.data.tags["arena.seed"]: r.info.status for r in runs}
    assert status == {"0": "FAILED", "1": "FINISHED"}
    assert max(parents, key=lambda r: r.info.start_time).info.status == "FAILED"


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_gives_the_uninterrupted_curve(tmp_path):
    """SIGKILL in a subprocess after the first training evaluation; the rerun continues from that
    checkpoint; every metric has each step exactly once, with the values of an uninterrupted run."""
    study = {**STUDY, "seeds": [0], "evaluation": {**STUDY["evaluation"], "points": 5}, "budget": {
        "unit": "samples", "amount": 64}, "arms": {"block_grpo": STUDY["arms"]["block_grpo"]}}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", "arena", "run", "study.yaml", "--jobs", "1"]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    for folder in (killed, whole):
        folder.mkdir()
        write(folder, study)
    subprocess.run(command, cwd=whole, env=env, check=True, capture_output=True, timeout=600)

    process = subprocess.Popen(command, cwd=killed, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = list((killed / ".arena").glob("**/checkpoint.pt"))
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        checkpoints = list((killed / ".arena").glob("**/checkpoint.pt"))
        if checkpoints and torch.load(checkpoints[0], weights_only=False)["runner"]["point"] >= 2:
            break
        time.sleep(0.2)
    assert process.poll() is None, "the run finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    subprocess.run(command, cwd=killed, env=env, check=True, capture_output=True, timeout=600)

    curves = []
    for folder in (killed, whole):
        client = client_for(folder)
        (run,), _ = children(client, "e2e")
        history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                   for key in ("eval/tail_reward", "eval/mean_reward", "train/reward_mean", "train/update_norm")}
        for key, points in history.items():
            assert len({s for s, _ in points}) == len(points), f"duplicate steps in {key}"
        curves.append(history)
    assert [s for s, _ in curves[0]["eval/tail_reward"]] == [0, 16, 32, 48, 64]
    assert curves[0] == curves[1]


def pool_workers(parent: int) -> list[int]:
    """Pids of the spawned pool workers whose parent is ``parent`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
            if int(fields[1]) == parent and b"spawn_main" in command:
                found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_a_killed_invocation_takes_its_pool_workers_with_it(tmp_path):
    """SIGKILL ``arena run --jobs 2`` while both workers train: within seconds they are gone too, instead of
    training on beside the rerun that resumes their runs."""
    study = {**STUDY, "budget": {"unit": "samples", "amount": 4096}}
    write(tmp_path, study)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    process = subprocess.Popen([sys.executable, "-m", "arena", "run", "study.yaml", "--jobs", "2"], cwd=tmp_path,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, workers = time.time() + 300, []
    while time.time() < deadline and process.poll() is None and not list((tmp_path / ".arena").glob("**/checkpoint.pt")):
        time.sleep(0.2)
    workers = pool_workers(process.pid)
    assert process.poll() is None and len(workers) == 2, "the workers never started training"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.time() + 30
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in workers):
        time.sleep(0.2)
    left = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "pool workers outlived their invocation"


@pytest.mark.slow
def test_parallel_jobs_share_one_sqlite_store(in_tmp):
    assert main(["run", str(write(in_tmp, STUDY)), "--jobs", "2"]) == 0
    runs, _ = children(client_for(in_tmp), "e2e")
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)


def test_dry_run_prints_the_plan_without_loading_a_model(in_tmp, capsys, monkeypatch):
    import arena.model

    monkeypatch.setattr(arena.model, "load_policy", lambda *a, **k: pytest.fail("a dry run must not load a model"))
    assert main(["run", str(write(in_tmp, STUDY)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "study e2e: 4 runs, budget 32 samples per run" in out and "samples = 0, 16, 32" in out
    assert out.count("block_grpo ") >= 2 and not (in_tmp / "mlflow.db").exists()


def test_only_with_a_misspelt_arm_suggests_the_arm_and_a_missing_seed_lists_the_seeds(in_tmp, capsys):
    path = write(in_tmp, STUDY)
    assert main(["run", str(path), "--only", "arm=blockgrpo", "--dry-run"]) == 2
    assert capsys.readouterr().err == (f"arena run: error: --only arm=blockgrpo: {path} has no arm 'blockgrpo'; "
                                       "did you mean 'block_grpo'?\n")
    assert main(["run", str(path), "--only", "arm=es,seed=7", "--dry-run"]) == 2
    assert capsys.readouterr().err == (f"arena run: error: --only arm=es,seed=7: no run of {path} matches "
                                       "(its seeds: 0, 1)\n")


def test_the_plan_keeps_its_columns_under_a_long_arm_name(in_tmp, capsys):
    study = {**STUDY, "arms": {"block_grpo": STUDY["arms"]["block_grpo"],
                               "evolution_strategies_low_rank": STUDY["arms"]["es"]}}
    assert main(["run", str(write(in_tmp, study)), "--dry-run"]) == 0
    table = capsys.readouterr().out.splitlines()[-5:]  # the header and 2 arms x 2 seeds
    assert table[0].startswith("arm ") and table[-1].startswith("evolution_strategies_low_rank ")
    hash_starts = {re.search(r" ([0-9a-f]{12}) ", line).start(1) for line in table[1:]}
    assert hash_starts == {table[0].index("config")}, table  # every row's config hash under its header


@pytest.mark.slow
def test_the_printed_summary_and_summary_md_show_the_same_numbers(in_tmp, capsys):
    """One definition: `arena run`'s closing table and `arena report`'s summary.md print the same cells, for the
    arms and for the controls, on a study with two evaluation draws and a margin."""
    study = {**STUDY, "evaluation": {**STUDY["evaluation"], "draws": 2}, "controls": ["frozen", "sharpen"],
             "analysis": {"margin": 0.05}, "arms": {"block_grpo": STUDY["arms"]["block_grpo"],
                                                    "grpo": {"method": "grpo", "options": {
                                                        "lr": 1e-4, "group_size": 4, "max_new_tokens": 8}}}}
    path = write(in_tmp, study)
    assert main(["run", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    printed = out[out.index("\narm "):]  # the closing table, after the runs' progress lines
    assert main(["report", str(path), "--out", str(in_tmp / "report")]) == 0
    capsys.readouterr()
    summary = (in_tmp / "report" / "summary.md").read_text()
    main_table = summary.split("\n## ")[0]  # the matched, rank, per-mark and per-draw tables follow
    table = [line.split("|")[1:-1] for line in main_table.splitlines() if line.startswith("| ")][1:]
    assert [cells[0].strip() for cells in table] == ["block_grpo", "grpo", "frozen (control)", "sharpen (control)"]
    for cells in table:
        arm, tail, over, hard = (c.strip() for c in (cells[0], cells[2], cells[3], cells[4]))
        line = next(line for line in printed.splitlines() if line.startswith(arm))
        assert tail in line and over in line and hard in line, (line, tail, over, hard)
        assert "[" in tail  # intervals, not bare numbers: two seeds and two draws
    assert "grpo" in printed and ("different" in printed or "inconclusive" in printed or "equivalent" in printed)
    assert "2 draws of 12 distinct prompts" in summary


def test_the_plan_counts_every_es_decode_per_step(in_tmp, capsys):
    """ES's samples per step: members x prompts per member (at most the batch) x samples per member."""
    es = {"method": "es", "options": {"population": 4, "prompts_per_member": 3, "samples_per_member": 2,
                                      "temperature": 1.0, "max_new_tokens": 8}}
    study = {**STUDY, "budget": {"unit": "samples", "amount": 48}, "arms": {"es": es}}
    assert main(["run", str(write(in_tmp, study)), "--dry-run"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("es ")]
    assert rows and all(row[4:6] == ["24", "2"] for row in rows), rows  # 4 x 3 x 2 samples, 2 steps to 48


@pytest.mark.slow
def test_every_draws_start_is_the_start_model_whichever_run_ends_first(in_tmp):
    """Draw d's start is the *start* policy decoded on draw d, for every run and control, whichever run reaches its
    end first: the oracle is a fresh start model decoded on draw 1 here. (A start cached at the end of the first
    run to finish would be that run's trained policy, and every other run's draw-1 gain would be measured from
    it.)"""
    from arena.evaluate import Evaluator
    from arena.model import load_policy
    from arena.study import load_study
    from rewards import load_task

    study = {**STUDY, "evaluation": {**STUDY["evaluation"], "draws": 2}, "controls": ["frozen"], "seeds": [0],
             "arms": {"block_grpo": {"method": "block_grpo", "options": {"lr": 3e-3, "group_size": 4,
                                                                         "max_new_tokens": 8}}}}
    path = write(in_tmp, study)
    assert main(["run", str(path), "--jobs", "1"]) == 0
    spec = load_study(path)
    policy = load_policy("tiny")
    oracle = Evaluator(load_task(spec.task.name, spec.task.levels), spec.evaluation, policy.tokenizer, draw=1).decode(policy).rewards

    client = client_for(in_tmp)
    runs, _ = children(client, "e2e")
    assert {r.data.tags["arena.arm"] for r in runs} == {"block_grpo", "frozen"}
    for run in runs:
        local = client.download_artifacts(run.info.run_id, "evaluations/draws/01.npz", str(in_tmp / run.info.run_id))
        saved = np.load(local)
        np.testing.assert_array_equal(saved["start"], oracle, err_msg=run.data.tags["arena.arm"])
    trained = next(r for r in runs if r.data.tags["arena.arm"] == "block_grpo")
    saved = np.load(in_tmp / trained.info.run_id / "01.npz")
    assert not np.array_equal(saved["end"], saved["start"])  # it trained: a start taken at its end would differ


@pytest.mark.slow
def test_final_draws_have_their_own_size_and_the_verdicts_pool_only_the_draws_the_study_names(in_tmp, capsys):
    """Draws 1-2 decoded at 6 prompts x 3 samples beside a 12 x 2 draw 0, and analysis.draws [1, 2]: the table's tail
    gain is the mean over seeds and those two draws of lower CVaR (end) - lower CVaR (start), recomputed here from
    the arrays MLflow holds, and summary.md shows each draw alone."""
    import math

    study = {**STUDY, "evaluation": {**STUDY["evaluation"], "draws": 3, "draw_prompts": 6, "draw_samples": 3},
             "analysis": {"draws": [1, 2]}, "controls": ["frozen"],
             "arms": {"block_grpo": STUDY["arms"]["block_grpo"],
                      "grpo": {"method": "grpo", "options": {"lr": 1e-4, "group_size": 4, "max_new_tokens": 8}}}}
    path = write(in_tmp, study)
    assert main(["run", str(path), "--jobs", "1"]) == 0
    client = client_for(in_tmp)
    runs, _ = children(client, "e2e")
    gains = {}
    for run in runs:
        arm, folder = run.data.tags["arena.arm"], in_tmp / run.info.run_id
        first = np.load(client.download_artifacts(run.info.run_id, "evaluations/000000000/per_prompt_rewards.npz",
                                                  str(folder)))
        assert first["rewards"].shape == (12, 2)
        for d in (1, 2):
            saved = np.load(client.download_artifacts(run.info.run_id, f"evaluations/draws/{d:02d}.npz", str(folder)))
            assert saved["start"].shape == saved["end"].shape == (6, 3), (arm, d)
            count = math.ceil(0.5 * 6)  # the study's primary alpha 0.5 over 6 prompts
            cvar = lambda rewards: np.sort(rewards.mean(axis=1))[:count].mean()  # noqa: E731
            gains.setdefault(arm, []).append(cvar(saved["end"]) - cvar(saved["start"]))
    assert main(["report", str(path), "--out", str(in_tmp / "report")]) == 0
    summary = (in_tmp / "report" / "summary.md").read_text()
    assert "draw 0 of 12 distinct prompts x 2 samples at every point, draws 1-2 of 6 x 3" in summary
    assert "the verdicts pool draws 1, 2" in summary and "| draw 1 (6 x 3) | vs block_grpo |" in summary
    main_table = [line for line in summary.split("## Each evaluation draw")[0].splitlines() if line.startswith("| grpo")]
    assert main_table[0].split("|")[3].strip().startswith(f"{np.mean(gains['grpo']):+.3f}"), (main_table, gains)

    assert main(["report", str(path), "--plan", "--margin", "0.05"]) == 0  # the plan's pilot: the pooled draws
    assert "from its pilot (2 draw(s) of 6 prompts x 3 samples)" in capsys.readouterr().out
    write(in_tmp, {**study, "analysis": {"draws": None}})  # every draw: 12 x 2 and 6 x 3, no one pilot size
    assert main(["report", str(path), "--plan", "--margin", "0.05"]) == 2
    assert "differ in size" in capsys.readouterr().err


def test_a_runs_threads_follow_the_jobs_asked_for_not_the_runs_left(in_tmp, monkeypatch):
    """A run's numbers depend on its torch thread count (float sums in another order), so the last run of a
    resumed study, alone in its invocation, must get the threads its siblings got two at a time; each run
    records its count (``arena.torch_threads``)."""
    from arena.scheduler import Placement

    cores = os.cpu_count() or 1
    assert main(["run", str(write(in_tmp, STUDY)), "--only", "arm=es,seed=0", "--jobs", "2"]) == 0
    (run,), _ = children(client_for(in_tmp), "e2e")
    assert run.data.tags["arena.torch_threads"] == str(max(1, cores // 2))

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [(p.slots, p.threads()) for p in (Placement.auto(4, None, 1), Placement.auto(4, None, 10),
                                             Placement.auto(1, None, 10))] == [(1, 2), (4, 2), (1, 8)]


def test_runs_that_start_at_once_decode_the_shared_start_evaluation_once(tmp_path):
    """Two runs reaching the same start cache together: one decodes it, the other waits on the lock and reads
    the file (before the lock, each decoded it). Threads stand in for the runs' processes: each opens the lock
    file itself, and flock excludes two open files as it excludes two processes."""
    import threading
    from types import SimpleNamespace

    from arena.evaluate import Evaluation
    from arena.runner import starting_evaluation

    decodes, entered = [], threading.Barrier(2)

    class SlowEvaluator:
        spec, draw = SimpleNamespace(prompts=2, samples=1), 0

        def decode(self, policy):
            decodes.append(threading.get_ident())
            time.sleep(0.5)  # long enough for the other run to arrive while this one decodes
            return Evaluation(np.array([[0.25], [0.75]]), [["a"], ["b"]])

        def hard_subset(self, policy):
            return np.array([True, False])

    results = []

    def run():
        entered.wait()
        results.append(starting_evaluation(SlowEvaluator(), SimpleNamespace(model=torch.nn.Linear(1, 1)),
                                           tmp_path / "study" / "start-x.npz"))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(decodes) == 1
    assert len(results) == 2 and all(np.array_equal(r[0].rewards, [[0.25], [0.75]]) for r in results)
    assert all(np.array_equal(r[1], [True, False]) and r[0].completions == [["a"], ["b"]] for r in results)
