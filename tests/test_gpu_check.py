"""benchmarks/gpu.py, the prepared GPU check: its CPU mode runs every row, so the script cannot rot before a
device comes; its guards (an error in a row, a spent budget, MLflow missing) report in the row and go on."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu

ROOT = Path(__file__).resolve().parents[1]

# what the table must hold, written out here rather than read from the script
CORRECTNESS = ["sampler bf16 vs cpu fp32", "sampler fp32 vs cpu fp32", "cached vs uncached generation",
               "packed scorer vs per-block dense", "block_grpo step bf16 vs cpu fp32", "es step bf16 vs cpu fp32",
               "import chain"]
MEASURE = ["build the random model", "matmul peak and copy bandwidth",
           *(f"generate batch {b}, threshold {t}" for b in (1, 8) for t in (1.0, 0.9)),
           "denoising step batch 1", "denoising step batch 8", "sub-block cache step batch 1",
           "sub-block cache step batch 8", "packed scoring forward",
           "packed scoring forward+backward", "elbo K=1 per sequence", "elbo K=2 per sequence", "elbo K=4 per sequence",
           "trajectory memory B=4", "es perturb+restore, full noise", "es perturb+restore, low-rank noise",
           "block_grpo step, lora", "block_grpo step, full", "es step, lora", "es step, full", "es overhead share",
           "save checkpoint (real format)"]
RUNNER = ["arena run, 2-step study"]
REHEARSAL = ["rehearsal at full depth vs arena plan"]  # measured in the CPU mode: tiny widths say nothing of the plan


@pytest.mark.slow
def test_cpu_mode_runs_every_row_and_the_correctness_rows_pass(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "benchmarks/gpu.py", "--device", "cpu", "--small", "--budget-seconds", "900",
                           "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = {row["name"]: row for row in table["rows"]}
    assert sorted(rows) == sorted(CORRECTNESS + MEASURE + RUNNER + REHEARSAL)
    failed = {name: row for name, row in rows.items() if row["status"] not in ("pass", "measured")}
    assert not failed, failed  # no error, no skip, no failed criterion
    assert all(rows[name]["status"] == "pass" for name in CORRECTNESS + RUNNER)
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert all(f"| {name} |" in markdown for name in rows)
    assert "arena run, 2-step study" in done.stdout  # the table is printed as it fills


def test_a_failing_row_reports_its_error_and_the_check_goes_on():
    check = gpu.Check("cpu", budget=60)

    def broken(check):
        raise ValueError("no such tensor")

    check.row("measure", "broken", broken)
    check.row("measure", "fine", lambda check: ("1 ms", "", "measured", ""))
    assert [(r.status, r.note) for r in check.rows] == [("error", "ValueError: no such tensor"), ("measured", "")]


def test_rows_after_the_budget_are_skipped():
    check = gpu.Check("cpu", budget=0)
    check.row("measure", "late", lambda check: ("1 ms", "", "measured", ""))
    assert (check.rows[0].status, check.rows[0].note) == ("skipped", "budget spent")


def test_arena_run_without_mlflow_is_a_skipped_row(monkeypatch, tmp_path):
    real = gpu.importlib.util.find_spec
    monkeypatch.setattr(gpu.importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    check = gpu.Check("cpu", budget=60)
    row = check.row("runner", "arena run, 2-step study", gpu.arena_run_row, 2, tmp_path)
    assert row.status == "skipped" and "mlflow not installed" in row.note


def test_agreement_counts_matches_and_the_first_divergence():
    assert gpu.agreement([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]]) == (1.0, None, 1.0)
    assert gpu.agreement([[1, 2, 3, 4], [5, 6]], [[1, 9, 3, 4], [5, 6]]) == (5 / 6, 1, 0.5)
    assert gpu.agreement([[1, 2, 3]], [[1, 2]]) == (2 / 3, 2, 0.0)  # a shorter completion diverges where it ends


def test_the_sub_block_cache_row_times_both_steps_on_the_small_model():
    check = gpu.Check("cpu", budget=120)
    big = gpu.build_model(check, small=True)
    row = check.row("measure", "sub-block cache step batch 2", gpu.sub_block_step_row, big, 2)
    assert row.status == "measured", row.note
    assert "ms cached" in row.value and "ms full" in row.value
