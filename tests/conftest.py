import contextlib
import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
import torch.distributed as dist
import yaml

from arena.model.tiny import TinyConfig, build_policy
from arena.processes import leave_process_group
from arena.rng import torch_generator

if TYPE_CHECKING:  # mlflow is imported by the tests that read a store, not by every test
    from mlflow.tracking import MlflowClient

SMALL = TinyConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, block_size=4, sub_block=2)


def sharpen(policy, std: float = 0.25, seed: int = 7):
    """Re-initialise with a large std so that predictions are peaked and depend on the context."""
    generator = torch_generator(seed, 99)
    with torch.no_grad():
        for name, param in sorted(policy.model.named_parameters()):
            if "norm" not in name:
                param.normal_(0.0, std, generator=generator)
    return policy


class StopShifted:
    """``policy`` with ``shift`` added to the stop token's logit everywhere (+40: it stops at once; -inf: never)."""

    def __init__(self, policy, shift: float):
        self.policy, self.shift = policy, shift

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def logits(self, hidden):
        logits = self.policy.logits(hidden)
        logits[..., self.policy.eos_id] += self.shift
        return logits


@contextlib.contextmanager
def gloo_rank(store: str, rank: int, world: int, seconds: int = 120):
    """Run the block as rank ``rank`` of a ``world``-process gloo group, then end this spawned process.

    After a success the ranks leave together and the process ends by ``os._exit`` (``leave_process_group``):
    a plain return lets the interpreter shut down under gloo's worker threads, which aborts it ('terminate
    called without an active exception'; one CI run in several). After an error the group is torn down and
    the error raised, for ``mp.spawn`` to report."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=seconds))
    try:
        yield
    except BaseException:
        dist.destroy_process_group()
        raise
    leave_process_group(0)


def digit_share(index: int, text: str) -> float:
    """Toy reward with a known optimum: all completion characters digits."""
    return sum(c.isdigit() for c in text) / max(1, len(text))


def share_of_ones(index: int, text: str) -> float:
    """Toy reward with a known optimum: every completion character a '1'."""
    return text.count("1") / max(1, len(text))


@pytest.fixture(scope="session")
def tiny_policy():
    """A random-init tiny policy, block 4, sub-block 2, sharpened so that outputs vary with context."""
    return sharpen(build_policy(SMALL))


@pytest.fixture(scope="session")
def small_vocab_policy():
    """A policy whose model has only 8 output ids (tokens 0..7), for exact enumeration."""
    return sharpen(build_policy(SMALL, vocab=8), std=0.6)


def write_records(tmp_path, suffix: str, rows: list[dict]):
    """Rows in a public dataset's file format (.jsonl, .json or .parquet), as the loaders read them."""
    path = tmp_path / f"rows{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        import pandas as pd

        pd.DataFrame(rows).to_parquet(path)
    return path

# The small study every whole-study test runs (tests/test_runner.py first), and readers of what it left in MLflow.
STUDY = {
    "name": "e2e",
    "task": {"name": "noisy_arithmetic", "levels": [1, 2]},
    "train": {"prompts_per_step": 4},
    "evaluation": {"prompts": 12, "samples": 2, "points": 3, "max_new_tokens": 8, "alphas": [0.25, 0.5],
                   "primary_alpha": 0.5},
    "budget": {"unit": "samples", "amount": 32},
    "seeds": [0, 1],
    "controls": [],  # on by default; the tests that are about them list them
    "arms": {
        "block_grpo": {"method": "block_grpo", "options": {"lr": 1e-4, "group_size": 4, "max_new_tokens": 8}},
        "es": {"method": "es", "options": {"population": 4, "max_new_tokens": 8, "sigma": 0.01, "alpha": 0.01}},
    },
}
MARKS = [0, 16, 32]


def write(tmp_path: Path, study: dict, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(study))
    return path


def client_for(tmp_path: Path) -> "MlflowClient":
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def children(client: "MlflowClient", study: str):
    """The study's (arm runs, other runs: invocations and controls) in the store."""
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    return [r for r in runs if r.data.tags.get("arena.arm")], [r for r in runs if not r.data.tags.get("arena.arm")]


def steps(client: "MlflowClient", run_id: str, key: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path
