import pytest
"""Progress outside a terminal reads as plain lines (a log file, CI, SLURM); in a terminal the bars stay."""
import io
import re
import subprocess
import sys
from pathlib import Path

import yaml

from arena.model import tiny
from arena.model.tiny import TinyConfig
from arena.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
STUDY = {
    "name": "logs",
    "task": {"name": "noisy_arithmetic", "levels": [1, 2]},
    "train": {"prompts_per_step": 2},
    "evaluation": {"prompts": 8, "samples": 2, "points": 3, "max_new_tokens": 8, "alphas": [0.5], "primary_alpha": 0.5},
    "budget": {"unit": "samples", "amount": 16},
    "seeds": [0, 1],
    "controls": [],
    "arms": {"block_grpo": {"method": "block_grpo", "options": {"group_size": 4, "max_new_tokens": 8}}},
}
ESCAPES = ("\r", "\x1b")  # a redrawn bar's carriage return; cursor movement and colours


@pytest.mark.slow
def test_arena_run_through_a_pipe_prints_a_start_a_line_per_evaluation_and_an_end_per_run(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))
    done = subprocess.run([sys.executable, "-m", "arena", "run", "study.yaml", "--jobs", "1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                               "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    for stream in (done.stdout, done.stderr):
        assert not any(code in stream for code in ESCAPES), stream[-2000:]
    for seed in (0, 1):
        lines = [line for line in done.stdout.splitlines() if line.startswith(f"block_grpo seed {seed}: ")]
        if seed == 0:  # the first run decodes the shared start, and says so before any bar moves
            assert lines.pop(0) == ("block_grpo seed 0: decoding the start model on evaluation draw 0 (8 prompts x 2 "
                                    "samples, and again to pick the hard prompts), once for every run of the study")
        assert lines[0] == f"block_grpo seed {seed}: start at 0/16 samples"
        for line, mark in zip(lines[1:4], (0, 8, 16)):
            assert re.fullmatch(rf"block_grpo seed {seed}: evaluated at {mark}/16 samples, \d+ s, tail \d\.\d{{3}}",
                                line), line
        assert re.fullmatch(rf"block_grpo seed {seed}: finished at 16/16 samples after \d+ s", lines[4]), lines[4]
        assert len(lines) == 5


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_terminal_the_bar_is_redrawn_and_no_plain_line_is_printed(monkeypatch):
    out, err = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    bar = Progress("es seed 0", 10, "samples")
    bar.update(5.0, tail="0.250")  # the meter counts in floats
    bar.line("evaluated at 5/10 samples")
    bar.update(10.0)
    bar.close("finished")
    assert out.getvalue() == ""
    assert "\r" in err.getvalue() and "es seed 0" in err.getvalue() and "100%" in err.getvalue()
    assert "10/10" in err.getvalue() and ".0/10" not in err.getvalue()


def test_a_resumed_or_disabled_progress_says_so_or_nothing(capsys):
    bar = Progress("grpo seed 1", 32, "samples", initial=16)
    bar.update(40)  # capped at the total
    bar.close("finished")
    Progress("quiet", 4, "steps", enabled=False).close("finished")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "grpo seed 1: resume at 16/32 samples"
    assert re.fullmatch(r"grpo seed 1: finished at 32/32 samples after \d+ s", lines[1]) and len(lines) == 2


def test_pretraining_outside_a_terminal_prints_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tiny, "evaluate_levels", lambda policy, task: {})  # the held-out evaluation: not tested here
    tiny.pretrain(TinyConfig(layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, steps=10, batch=4, warmup=2),
                  tmp_path / "tiny")
    out = capsys.readouterr().out
    assert not any(code in out for code in ESCAPES)
    lines = [line for line in out.splitlines() if line.startswith("pretrain on noisy_arithmetic: ")]
    assert lines[0] == "pretrain on noisy_arithmetic: start at 0/10 steps"
    assert [re.fullmatch(r"pretrain on noisy_arithmetic: step (\d+)/10, \d+ s, loss \d+\.\d{3}", line).group(1)
            for line in lines[1:-1]] == [str(step) for step in range(1, 11)]
    assert re.fullmatch(r"pretrain on noisy_arithmetic: trained at 10/10 steps after \d+ s", lines[-1])
