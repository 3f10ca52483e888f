"""`arena run --backend ray` on a Ray instance started here: MLflow ends up with the same runs, tags, params and
evaluation values as with the local backend (methods and evaluation are deterministic given the seeds; both run on
CPU with one torch thread), and a run whose reward raises comes back failed while the command exits 2."""
import os
from pathlib import Path

import pytest
import ray
import torch

from arena.cli import main
from conftest import MARKS, STUDY, children, client_for, write

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def local_ray():
    """Two CPUs, no GPU, no dashboard, a small object store. The workers inherit this environment: the tests folder
    on the path (study_plugins) and a reward that raises at its 60th call (only study_plugins:FlakyArithmetic's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]))
        patch.setenv("ARENA_TEST_REWARD_FAILS_AT", "60")  # 48 calls evaluate the start; the 60th is in step 0
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, object_store_memory=80 * 2**20,
                 log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


def run_in(folder: Path, study: dict, *options: str) -> int:
    folder.mkdir()
    old = Path.cwd()
    os.chdir(folder)
    try:
        return main(["run", str(write(folder, study)), "--devices", "cpu", *options])
    finally:
        os.chdir(old)


def contents(folder: Path) -> dict:
    """Per (arm, seed): status, run name, arena tags, params, and every eval/ metric's (step, value) history."""
    client = client_for(folder)
    runs, parents = children(client, "e2e")
    assert len(parents) == 1
    found = {}
    for run in runs:
        tags = {k: v for k, v in run.data.tags.items() if k.startswith("arena.") or k == "mlflow.runName"}
        curves = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                  for key in run.data.metrics if key.startswith("eval/")}
        found[tags["arena.arm"], tags["arena.seed"]] = (run.info.status, tags, run.data.params, curves)
    return found


@pytest.mark.slow  # 20-40 s on 2 shared cores, about half of it the local run it is compared with
def test_ray_backend_logs_what_the_local_backend_logs(local_ray, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the local backend runs one slot in this process, without setting threads
    try:
        assert run_in(tmp_path / "local", STUDY) == 0
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    assert run_in(tmp_path / "ray", STUDY, "--backend", "ray") == 0  # --cpus-per-run 1: one thread per task
    out = capsys.readouterr().out
    assert "Ray at a local instance, 1 CPU and 0 GPU per run" in out and "4 runs finished" in out
    assert all(f"{arm} seed {seed}: finished" in out for arm in STUDY["arms"] for seed in STUDY["seeds"])

    local, remote = contents(tmp_path / "local"), contents(tmp_path / "ray")
    assert set(remote) == {(arm, str(seed)) for arm in STUDY["arms"] for seed in STUDY["seeds"]}
    for key, (status, tags, params, curves) in remote.items():
        assert status == "FINISHED" and (tags, params) == local[key][1:3], key
        assert [step for step, _ in curves["eval/tail_reward"]] == MARKS
        for metric in ("eval/mean_reward", "eval/tail_reward"):
            assert curves[metric] == local[key][3][metric], (key, metric)  # exactly: same values, same steps
        assert curves == local[key][3], key  # and every other eval/ metric (gains, hard subset, weight drift)


@pytest.mark.slow
def test_a_run_that_raises_in_a_ray_task_comes_back_failed(local_ray, tmp_path, capsys):
    study = {**STUDY, "seeds": [0], "task": {"name": "study_plugins:FlakyArithmetic", "levels": [1, 2]},
             "arms": {"block_grpo": STUDY["arms"]["block_grpo"]}}
    assert run_in(tmp_path / "flaky", study, "--backend", "ray") == 2
    captured = capsys.readouterr()
    assert "block_grpo seed 0: failed (1 of 1)" in captured.out
    assert "1 of 1 runs failed" in captured.err and "reward raised ZeroDivisionError" in captured.err
    (run,), (parent,) = children(client_for(tmp_path / "flaky"), "e2e")
    assert run.info.status == "FAILED" and parent.info.status == "FAILED"


def test_backend_options_go_together(tmp_path, capsys):
    path = str(write(tmp_path, STUDY))
    assert main(["run", path, "--address", "auto"]) == 2
    assert "--address and --cpus-per-run go with --backend ray" in capsys.readouterr().err
    assert main(["run", path, "--backend", "ray", "--jobs", "2"]) == 2
    assert "--jobs goes with --backend local" in capsys.readouterr().err
