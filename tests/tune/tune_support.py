"""What the tests of ``arena.tune`` share: a small study (tests/test_runner.py's, one seed), a two-arm tune file
over it, and readers of what a sweep left (its Optuna journal, its MLflow runs)."""
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from optuna.storages.journal import JournalFileBackend

from conftest import STUDY as RUNNER_STUDY

ROOT = Path(__file__).resolve().parents[2]
STUDY = {**RUNNER_STUDY, "name": "small", "seeds": [0]}  # tests/test_runner.py's small study, one seed
TUNE = {
    "study": "study.yaml",
    "space": {"block_grpo": {"lr": {"log_uniform": [1e-5, 1e-2]}}, "es": {"sigma": {"log_uniform": [1e-3, 1e-1]}}},
    "pruner": {"name": "none"},
}
ARMS = ("block_grpo", "es")


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

@pytest.fixture(name="in_tmp")  # imported by the tune tests: a second conftest.py would shadow tests/conftest.py
def tune_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model is fastest on one thread, far more so on a loaded machine
    yield tmp_path
    torch.set_num_threads(threads)
