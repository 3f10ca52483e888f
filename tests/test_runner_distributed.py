"""One run across two processes: `torchrun -m arena run` on the CPU (gloo), asserting on what MLflow holds.

- replicas (``sharding: none``): one FINISHED child run, every evaluation point once, and the evaluation
  curve of the same run in one process; a rerun is skipped by both ranks;
- FSDP (``sharding: fsdp``): a reward that raises at an evaluation point fails the run; the rerun resumes
  from the per-rank shards and ends on the one-process curve too (weight drift summed over the shards);
- a launch that selects two runs exits 2 and says why.
"""
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from arena.cli import main
from conftest import MARKS, STUDY, children, client_for, write

ROOT = Path(__file__).resolve().parents[1]
# noisy_arithmetic, whose reward raises at the N-th call of a process when $ARENA_TEST_REWARD_FAILS_AT=N
TASK = {"name": "study_plugins:FlakyArithmetic", "levels": [1, 2]}
EVAL = ("eval/mean_reward", "eval/tail_reward", "eval/tail_gain", "eval/hard_gain", "eval/zero_share")


def study(sharding: str) -> dict:
    arm = STUDY["arms"]["block_grpo"]
    return {**STUDY, "task": TASK, "seeds": [0],
            "arms": {"block_grpo": {**arm, "options": {**arm["options"], "sharding": sharding}}}}


def arena_run(folder: Path, processes: int, **env) -> subprocess.CompletedProcess:
    """``arena run study.yaml`` in ``folder``: plainly, or under torchrun with ``processes`` ranks."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else []
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "OMP_NUM_THREADS": "1", **env}
    environment.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, *launcher, "-m", "arena", "run", "study.yaml"], cwd=folder,
                          env=environment, capture_output=True, text=True, timeout=300)


def rewarded(folder: Path) -> list[Counter]:
    """The prompts each process of a launch in ``folder`` rewarded, with how often (``ARENA_TEST_REWARD_LOG``)."""
    return [Counter(path.read_text().splitlines()) for path in sorted(folder.glob("rewarded.*"))]


def curves(folder: Path):
    """The study's one child run and its evaluation histories, (step, value) sorted by step."""
    client = client_for(folder)
    (run,), _ = children(client, "e2e")
    history = {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
               for key in run.data.metrics if key.startswith(("eval/", "matched/", "draws/"))}
    return run, history


def assert_same_curves(mine: dict, reference: dict) -> None:
    """Every point once, at the same budget. Replicas and shards differ from one process only by the rounding of
    gradient sums (about 1e-7 relative): no decoded token changes, and the weight drift agrees to 1e-5."""
    for key in EVAL:
        assert [step for step, _ in mine[key]] == MARKS, key
    exact = set(reference) - {"eval/weight_drift"}  # every evaluation metric, matched decoding's included
    assert set(mine) == set(reference) and len(exact) > len(EVAL)
    assert {key: mine[key] for key in exact} == {key: reference[key] for key in exact}
    for (_, a), (_, b) in zip(mine["eval/weight_drift"], reference["eval/weight_drift"]):
        assert abs(a - b) <= 1e-5 * b
    assert mine["eval/weight_drift"][-1][1] > 0


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    """The replicated study run in one plain process: the curve that two processes must give."""
    folder = tmp_path_factory.mktemp("one-process")
    write(folder, study("none"))
    done = arena_run(folder, 1, ARENA_TEST_REWARD_LOG=str(folder / "rewarded"))
    assert done.returncode == 0, done.stderr[-3000:]
    return curves(folder)[1], rewarded(folder)[0]


@pytest.mark.slow  # 20-31 s on 2 shared cores, and 10-17 s for the one-process run it is compared with
def test_replicas_on_two_processes_log_the_one_process_run_once_and_a_rerun_skips(tmp_path, one_process):
    """... and each rank decodes and rewards its share of every evaluation: between them, the two ranks reward
    each prompt as often as one process does, with the same metrics to the last digit."""
    write(tmp_path, study("none"))
    done = arena_run(tmp_path, 2, ARENA_TEST_REWARD_LOG=str(tmp_path / "rewarded"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("arena run e2e:") == 1 and "one run across 2 processes" in done.stdout  # rank 0 prints
    run, history = curves(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["arena.processes"] == "2"
    assert_same_curves(history, one_process[0])
    ranks = rewarded(tmp_path)
    assert len(ranks) == 2 and ranks[0] + ranks[1] == one_process[1]
    assert ranks[0].total() == ranks[1].total() == one_process[1].total() / 2  # 12 + 12 of every 24 rows
    (directory,) = (tmp_path / ".arena/e2e/block_grpo").iterdir()
    assert [p.name for p in directory.iterdir()] == ["checkpoint.pt"]  # the replicas' one state, by rank 0

    again = arena_run(tmp_path, 2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 runs finished, 1 already finished (skipped)" in again.stdout
    runs, parents = children(client_for(tmp_path), "e2e")
    assert len(runs) == 1 and len(parents) == 2


@pytest.mark.slow  # 22-39 s on 2 shared cores
def test_fsdp_on_two_processes_resumes_from_its_shards_onto_the_one_process_curve(tmp_path, one_process):
    write(tmp_path, study("fsdp"))
    # each rank counts its own reward calls: 24 for its half of the starting evaluation (12 x 2 rows, twice), 8 for
    # its half of a step, 12 per further evaluation point; the 60th is in the evaluation at 32 samples, after the
    # checkpoint at 16
    failed = arena_run(tmp_path, 2, ARENA_TEST_REWARD_FAILS_AT="60")
    assert failed.returncode != 0 and "reward raised ZeroDivisionError" in failed.stderr
    run, history = curves(tmp_path)
    assert [step for step, _ in history["eval/tail_reward"]] == MARKS[:2]
    (directory,) = (tmp_path / ".arena/e2e/block_grpo").iterdir()
    assert sorted(p.name for p in directory.iterdir()) == ["checkpoint.pt", "shards-0002"]
    assert sorted(p.name for p in (directory / "shards-0002").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]

    resumed = arena_run(tmp_path, 2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again, history = curves(tmp_path)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert_same_curves(history, one_process[0])
    assert sorted(p.name for p in directory.iterdir()) == ["checkpoint.pt", "shards-0003"]  # earlier ones removed


def test_a_launch_runs_one_run_and_says_so_otherwise(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; the checks come before joining a process group
    path = write(tmp_path, STUDY)
    assert main(["run", str(path), "--only", "seed=0"]) == 2
    err = capsys.readouterr().err
    assert "launched as 2 processes (WORLD_SIZE=2)" in err and "2 runs of" in err and "--only arm=NAME,seed=N" in err
    assert main(["run", str(path), "--only", "arm=es,seed=0", "--jobs", "2"]) == 2
    assert "--jobs, --devices and --backend place several runs" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()
