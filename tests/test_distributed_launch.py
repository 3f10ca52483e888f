import pytest
"""The documented launch recipe, run as written: ``accelerate launch`` with the shipped config, two
CPU processes, ``sharding: fsdp``, against one plain process of the same script."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from accelerate.commands.config.config_args import load_config_from_file

from arena.model.tiny import pretrain
from conftest import SMALL

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/accelerate/multi_gpu.yaml"
SCRIPT = ROOT / "examples/distributed_grpo.py"


def _steps(command: list[str]) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_shipped_accelerate_config_is_one_process_per_gpu_without_mixed_precision():
    config = load_config_from_file(str(CONFIG))
    assert config.distributed_type == "MULTI_GPU" and config.mixed_precision == "no" and config.num_machines == 1


@pytest.mark.slow
def test_accelerate_launch_with_fsdp_matches_one_process(tmp_path):
    # 150 pretraining steps (4 s): some 1-digit sums right, so groups have reward variance and gradients
    pretrain(dataclasses.replace(SMALL, steps=150, batch=32), tmp_path / "model", progress=False)
    script = [str(SCRIPT), "--model", str(tmp_path / "model"), "--steps", "2"]
    one = _steps([sys.executable, *script])
    two = _steps([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG),
                  "--num_processes", "2", *script, "--sharding", "fsdp"])
    assert len(one) == len(two) == 2  # rank 0 alone prints
    assert any(step["grad_norm"] > 0 for step in one)
    for a, b in zip(one, two):
        assert (a["samples"], a["tokens"], a["reward_mean"]) == (b["samples"], b["tokens"], b["reward_mean"])
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * a["grad_norm"]
