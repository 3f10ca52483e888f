"""arena.tracking against what MLflow holds: everything is read back with a fresh MlflowClient.

Local stores are copies of one SQLite file migrated once per session (a migration costs seconds); the
parallel test and the server test start from brand-new files on purpose.
"""
import ast
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from arena import tracking
from arena.tracking import DEFAULT_URI, PARAM_VALUE_LIMIT, TRUNCATED, Tracker, resolve_uri

ROOT = Path(__file__).resolve().parents[1]


def fresh_client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mlflow") / "template.db"
    Tracker(f"sqlite:///{path}", "template")
    return path


@pytest.fixture
def uri(migrated_db, tmp_path) -> str:
    shutil.copy(migrated_db, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_uri_precedence_is_flag_then_environment_then_study_then_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert DEFAULT_URI == "sqlite:///mlflow.db"
    assert resolve_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"  # absolute: sqlite:////tmp/...
    assert resolve_uri().startswith("sqlite:////")
    assert resolve_uri(study_uri="sqlite:///runs/s.db") == f"sqlite:///{tmp_path / 'runs' / 's.db'}"
    assert resolve_uri(study_uri="http://study:5000") == "http://study:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://environment:5000")
    assert resolve_uri(study_uri="http://study:5000") == "http://environment:5000"
    assert resolve_uri("http://flag:5000", "http://study:5000") == "http://flag:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # empty counts as unset
    assert resolve_uri(study_uri="sqlite:////abs/s.db") == "sqlite:////abs/s.db"


def round_trip(tracker: Tracker, tmp_path: Path) -> None:
    """Parent and child, tags, flattened params, aligned metric histories, resume, artifacts."""
    client = fresh_client(tracker.uri)
    parent = tracker.start_parent("invocation", {"arena.study": "toy"})
    tags = {"arena.study": "toy", "arena.arm": "grpo", "arena.seed": "0", "arena.config_hash": "abc"}
    params = {"method": "block_grpo", "options": {"lr": 1e-4, "schedule": {"warmup": 5}, "sizes": [1, 2]},
              "prompt": "x" * 2000, "wide": {f"k{i:03d}": i for i in range(150)}}  # 155 params: two batches
    run_id = tracker.start_run("grpo/seed0", parent, tags, params)
    run = client.get_run(run_id)
    assert run.info.run_name == "grpo/seed0" and run.info.experiment_id == tracker.experiment_id
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert {k: run.data.tags[k] for k in tags} == tags
    assert client.get_run(parent).data.tags["arena.study"] == "toy"
    got = run.data.params
    assert len(got) == 155 and got["method"] == "block_grpo" and got["wide.k149"] == "149"
    assert float(got["options.lr"]) == 1e-4 and got["options.schedule.warmup"] == "5"
    assert json.loads(got["options.sizes"]) == [1, 2]
    assert len(got["prompt"]) == PARAM_VALUE_LIMIT and got["prompt"].endswith(TRUNCATED)

    for step in (0, 128, 256):
        tracker.log_metrics(run_id, {"eval/tail_reward": step / 1000, "eval/mean_reward": step / 500}, step)
    for key, scale in (("eval/tail_reward", 1000), ("eval/mean_reward", 500)):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert history == [(s, s / scale) for s in (0, 128, 256)]
        assert tracker.history(run_id, key) == history

    tracker.finish(run_id, "KILLED")
    assert client.get_run(run_id).info.status == "KILLED"
    tracker.reopen(run_id)
    assert client.get_run(run_id).info.status == "RUNNING"
    rows = [("train/loss", 1.0, 10), ("train/loss", 0.5, 20), ("eval/tail_reward", 0.256, 256)]
    assert tracker.log_missing(run_id, rows) == 2  # the eval row is there already
    assert tracker.log_missing(run_id, rows + [("train/loss", 0.25, 30)]) == 1
    assert tracker.log_missing(run_id, rows + [("train/loss", 0.25, 30)]) == 0
    loss = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train/loss"))
    assert loss == [(10, 1.0), (20, 0.5), (30, 0.25)]
    assert len(client.get_metric_history(run_id, "eval/tail_reward")) == 3

    tracker.log_text(run_id, "name: toy\n", "study.yaml")
    completions = [{"prompt": "1+1=", "completion": "2", "reward": 1.0}]
    tracker.log_table(run_id, completions, "evaluations/000000128/completions.json")
    tracker.log_table(run_id, completions * 2, "evaluations/000000256/completions.json")
    tracker.log_npz(run_id, {"rewards": [0.0, 0.5, 1.0]}, "evaluations/000000256/per_prompt_rewards.npz")
    tracker.finish(run_id)
    assert client.get_run(run_id).info.status == "FINISHED"
    listed = {a.path for a in client.list_artifacts(run_id, "evaluations/000000256")}
    assert listed == {"evaluations/000000256/completions.json", "evaluations/000000256/per_prompt_rewards.npz"}
    where = Path(client.download_artifacts(run_id, "", str(tmp_path / "fresh")))
    assert (where / "study.yaml").read_text() == "name: toy\n"
    assert json.loads((where / "evaluations/000000128/completions.json").read_text()) == completions
    assert json.loads((where / "evaluations/000000256/completions.json").read_text()) == completions * 2
    import numpy as np

    assert np.load(tracker.download(run_id, "evaluations/000000256/per_prompt_rewards.npz", tmp_path / "mine"))[
        "rewards"].tolist() == [0.0, 0.5, 1.0]


def test_round_trip_on_sqlite(uri, tmp_path):
    tracker = Tracker(uri, "toy")
    round_trip(tracker, tmp_path)
    # artifacts sit beside the database, wherever the process happens to run
    artifact_uri = fresh_client(uri).get_experiment(tracker.experiment_id).artifact_location
    assert artifact_uri == (tmp_path / "mlartifacts" / "toy").as_uri()


def test_find_runs_filters_by_every_tag_newest_first(uri):
    tracker = Tracker(uri, "toy")
    parent = tracker.start_parent("invocation", {"arena.study": "toy"})
    made = {}
    for arm in ("a", "b"):
        for seed in ("0", "1"):
            made[arm, seed] = tracker.start_run(f"{arm}/{seed}", parent, {"arena.study": "toy", "arena.arm": arm,
                                                                         "arena.seed": seed}, {})
            time.sleep(0.01)  # distinct start times
    other = Tracker(uri, "other").start_run("x", None, {"arena.study": "toy", "arena.arm": "a"}, {})
    tracker.finish(made["a", "1"], "FAILED")

    found = tracker.find_runs({"arena.study": "toy", "arena.arm": "a"})
    assert [r.run_id for r in found] == [made["a", "1"], made["a", "0"]] and other not in [r.run_id for r in found]
    assert found[0].status == "FAILED" and found[1].status == "RUNNING"
    assert found[0].tags["arena.seed"] == "1" and found[0].tags["mlflow.parentRunId"] == parent
    assert [r.run_id for r in tracker.find_runs({"arena.arm": "b", "arena.seed": "0"})] == [made["b", "0"]]
    assert tracker.find_runs({"arena.arm": "it's not there"}) == []
    assert parent in {r.run_id for r in tracker.find_runs({"arena.study": "toy"})}


def test_a_figure_and_a_file_are_artifacts(uri, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tracker = Tracker(uri, "toy")
    run_id = tracker.start_run("r", None, {}, {})
    figure, axes = plt.subplots()
    axes.plot([0, 1], [0, 1])
    tracker.log_figure(run_id, figure, "plots/tail.png")
    plt.close(figure)
    (tmp_path / "notes.txt").write_text("hello")
    tracker.log_file(run_id, tmp_path / "notes.txt", "extra")
    assert {a.path for a in fresh_client(uri).list_artifacts(run_id, "plots")} == {"plots/tail.png"}
    assert tracker.download(run_id, "extra/notes.txt", tmp_path / "d").read_text() == "hello"
    assert tracker.download(run_id, "plots/tail.png", tmp_path / "d").read_bytes()[:4] == b"\x89PNG"
    import numpy as np

    tracker.log_table(run_id, [{"reward": np.float32(0.5), "tokens": np.arange(2)}], "t/completions.json")
    assert json.loads(tracker.download(run_id, "t/completions.json", tmp_path / "d").read_text()) == [
        {"reward": 0.5, "tokens": [0, 1]}]


def test_retry_waits_out_a_locked_database_and_nothing_else(monkeypatch):
    """The errors as MLflow's SQLite store raises them: MlflowException from SQLAlchemy from sqlite3."""
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    calls = []

    def flaky(fail_times, message):
        calls.append(1)
        if len(calls) <= fail_times:
            error = sqlalchemy.exc.OperationalError("INSERT INTO metrics ...", {}, sqlite3.OperationalError(message))
            raise MlflowException(message=error, error_code="TEMPORARILY_UNAVAILABLE") from error
        return "done"

    assert tracking._retry(flaky, 3, "database is locked") == "done" and len(calls) == 4
    calls.clear()
    with pytest.raises(MlflowException):
        tracking._retry(flaky, 1, "no such column: x")
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setattr(tracking, "RETRY_SECONDS", 0.3)
    with pytest.raises(MlflowException, match="database table is locked"):
        tracking._retry(flaky, 10**6, "database table is locked")
    assert 1 < len(calls) < 20


def _parallel_worker(uri: str, index: int, barrier) -> None:
    barrier.wait()  # all four open the brand-new file at once: migration and experiment creation race
    tracker = Tracker(uri, "parallel")
    run_id = tracker.start_run(f"w{index}", None, {"arena.study": "parallel", "arena.seed": str(index)},
                               {"worker": index, "options": {f"p{i}": i for i in range(120)}})
    for step in range(30):
        tracker.log_metrics(run_id, {"eval/tail_reward": index + step / 100, "budget/samples": step}, step)
    tracker.finish(run_id)


@pytest.mark.slow  # about 25 s: four fresh interpreters importing mlflow
def test_four_processes_write_one_fresh_sqlite_file_at_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    workers = [context.Process(target=_parallel_worker, args=(uri, i, barrier)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=240)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]

    client = fresh_client(uri)
    experiments = [e for e in client.search_experiments() if e.name == "parallel"]
    assert len(experiments) == 1
    runs = client.search_runs([experiments[0].experiment_id])
    assert sorted(r.data.tags["arena.seed"] for r in runs) == ["0", "1", "2", "3"]
    for run in runs:
        index = int(run.data.tags["arena.seed"])
        assert run.info.status == "FINISHED" and len(run.data.params) == 121
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/tail_reward"))
        assert history == [(s, index + s / 100) for s in range(30)]
        assert len(client.get_metric_history(run.info.run_id, "budget/samples")) == 30


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server(migrated_db, tmp_path):
    """A real ``mlflow server`` on loopback (its own process group, ended in teardown)."""
    executable = shutil.which("mlflow")
    if executable is None:
        pytest.skip("no mlflow executable on PATH")
    shutil.copy(migrated_db, tmp_path / "server.db")
    port, log = _free_port(), open(tmp_path / "server.log", "wb")
    command = [executable, "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
               "--artifacts-destination", str(tmp_path / "served"), "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not answer /health:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # the server and the workers it started
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.mark.slow  # about 25 s: the server's start is most of it
def test_round_trip_through_a_tracking_server(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    round_trip(Tracker(server, "toy"), tmp_path)
    assert any((tmp_path / "served").rglob("completions.json"))  # uploaded through the server

    # and a whole study through the same server: `arena run --tracking-uri http://...`
    from arena.cli import main
    from conftest import STUDY, write

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    study = {**STUDY, "seeds": [0], "arms": {"es": STUDY["arms"]["es"]}}
    assert main(["run", str(write(work, study)), "--jobs", "1", "--tracking-uri", server]) == 0
    client = fresh_client(server)
    runs = client.search_runs([client.get_experiment_by_name("e2e").experiment_id])
    child = next(r for r in runs if r.data.tags.get("arena.arm") == "es")
    assert child.info.status == "FINISHED" and not (work / "mlflow.db").exists()
    assert [m.step for m in client.get_metric_history(child.info.run_id, "eval/tail_reward")] == [0, 16, 32]
    assert any((tmp_path / "served").rglob("per_prompt_rewards.npz"))


def test_tracking_is_the_only_module_that_imports_mlflow():
    found = []
    for path in sorted(p for package in ("arena", "methods", "rewards") for p in (ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(n.split(".")[0] == "mlflow" for n in names):
                found.append(str(path.relative_to(ROOT)))
    assert set(found) == {"arena/tracking.py"}


def test_a_tracker_travels_to_worker_processes_as_uri_and_experiment(uri):
    import pickle

    tracker = Tracker(uri, "toy")
    copy = pickle.loads(pickle.dumps(tracker))
    assert (copy.uri, copy.experiment, copy.experiment_id) == (tracker.uri, "toy", tracker.experiment_id)


def test_an_invocations_parent_run_ends_finished_failed_or_killed(uri):
    """``parent_run`` (arena run's and arena tune's): FINISHED, FAILED when the invocation says so, KILLED when
    its block raises (and the error goes on); each tagged an invocation, named with the time it started."""
    tracker = Tracker(uri, "toy")
    client = fresh_client(uri)
    with tracker.parent_run("toy", {"arena.study": "toy"}) as finished:
        assert client.get_run(finished.run_id).info.status == "RUNNING"
    with tracker.parent_run("toy", {"arena.study": "toy"}) as failed:
        failed.failed = True
    with pytest.raises(KeyboardInterrupt), tracker.parent_run("toy", {"arena.study": "toy"}) as killed:
        raise KeyboardInterrupt
    runs = {parent.run_id: client.get_run(parent.run_id) for parent in (finished, failed, killed)}
    assert [run.info.status for run in runs.values()] == ["FINISHED", "FAILED", "KILLED"]
    for run in runs.values():
        assert run.data.tags["arena.kind"] == "invocation" and run.data.tags["arena.study"] == "toy"
        assert re.fullmatch(r"toy \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", run.info.run_name)
