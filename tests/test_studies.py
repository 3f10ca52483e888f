"""The shipped studies validate at every scale, and a malformed study fails the command line cleanly:
exit 2, every problem with its YAML path (and line), no traceback."""
import subprocess
import sys
from pathlib import Path

import pytest

from arena.cli import main
from arena.profiles import PROFILES
from arena.study import load_study

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "studies").rglob("*.yaml"))  # studies/confirm/ too: the pre-registered confirmations


@pytest.mark.parametrize("profile", [None, *PROFILES])
@pytest.mark.parametrize("study", SHIPPED, ids=[str(p.relative_to(ROOT / "studies").with_suffix("")) for p in SHIPPED])
def test_shipped_studies_validate_and_dry_run_at_every_scale(study, profile, capsys):
    scale = ["--profile", profile] if profile else []
    assert main(["validate", str(study), *scale]) == 0
    assert main(["run", str(study), "--dry-run", *scale]) == 0
    out = capsys.readouterr().out
    assert "valid;" in out and "budget" in out
    first = study.read_text().splitlines()[0]
    assert first.startswith("# arena run studies/"), "a study opens with the command that runs it"


MALFORMED = {
    "wrong type": ("budget: {amount: lots}\narms: {a: {method: grpo}}\n", "budget.amount: expected a number"),
    "unknown key": ("evaluaton: {prompts: 8}\narms: {a: {method: grpo}}\n", "did you mean 'evaluation'"),
    "missing arms": ("model: tiny\n", "arms: required"),
    "two variables": ("arms:\n  a: {method: grpo}\n  b: {method: grpo, options: {lr: 1.0e-4, group_size: 4}}\n",
                      "differs from the reference arm 'a' in 2 variables"),
    "unknown method": ("arms: {a: {method: sgd}}\n", "unknown method 'sgd'"),
    "bad option": ("arms:\n  a:\n    method: es\n    options: {sigma: -1}\n", ":4: arms.a.options.sigma: must be > 0"),
    "negative budget": ("budget: {amount: -5}\narms: {a: {method: grpo}}\n", "budget.amount"),
    "bad syntax": ("arms: {a: [\n", "invalid YAML"),
    "empty file": ("", "the file is empty"),
    "unknown profile name": ("arms:\n  a: {method: grpo, at: {fast-dllm-v2-8b: {lr: 1}}}\n",
                             "arms.a.at.fast-dllm-v2-8b: unknown profile; did you mean 'fast-dllm-v2-7b'?"),
    "unknown profile in the study's at": ("at: {fast-dllm-v2-8b: {seeds: 3}}\narms: {a: {method: grpo}}\n",
                                          ":1: at.fast-dllm-v2-8b: unknown profile; did you mean 'fast-dllm-v2-7b'?"),
    "a section a profile may not set": ("at: {fast-dllm-v2-7b: {arms: {}}}\narms: {a: {method: grpo}}\n",
                                        "at.fast-dllm-v2-7b.arms: a profile may set budget, seeds, train, evaluation"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_study_exits_2_naming_the_yaml_path(case, tmp_path, capsys):
    text, expected = MALFORMED[case]
    path = tmp_path / "study.yaml"
    path.write_text(text)
    for command in ("validate", "run"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err and str(path) in err


def test_several_mistakes_come_together_and_without_a_traceback(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("budget: {amount: -1, unit: hours}\narms:\n  a: {method: es, options: {sigma: 0, populaton: 8}}\n")
    done = subprocess.run([sys.executable, "-m", "arena", "validate", str(path)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "4 problems" in done.stderr
    for expected in ("budget.amount", "budget.unit: must be one of", "arms.a.options.sigma", "did you mean 'population'"):
        assert expected in done.stderr


def test_missing_weights_are_one_clear_error_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "study.yaml"
    path.write_text("arms: {a: {method: grpo}}\n")
    assert main(["run", str(path), "--model", str(tmp_path / "no-weights-here")]) == 2
    err = capsys.readouterr().err
    assert "no-weights-here" in err and "hf download" in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists()  # nothing started


def test_a_model_directory_that_is_no_checkpoint_is_one_error_before_any_run(tmp_path, capsys, monkeypatch):
    """Checked by its config and tokenizer before the tracking store is opened: no parent run, no experiment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "study.yaml").write_text("arms: {a: {method: grpo}}\n")
    (tmp_path / "downloads").mkdir()
    assert main(["run", "study.yaml", "--model", str(tmp_path / "downloads")]) == 2
    err = capsys.readouterr().err
    assert err == (f"arena run: error: {tmp_path / 'downloads'} holds no config.json: not a Fast-dLLM v2 checkpoint "
                   "directory (--model tiny is the embedded tiny model)\n")
    assert not (tmp_path / "mlflow.db").exists()


def test_ui_serves_the_study_store(tmp_path, monkeypatch, capsys):
    import os

    calls = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(os, "execvp", lambda program, argv: calls.append(argv))
    path = tmp_path / "study.yaml"
    path.write_text("tracking: {uri: sqlite:///runs.db}\narms: {a: {method: grpo}}\n")
    assert main(["ui", str(path), "--port", "5123"]) == 0
    (argv,) = calls
    assert argv[1:4] == ["-m", "mlflow", "ui"] and f"sqlite:///{tmp_path / 'runs.db'}" in argv and "5123" in argv
    assert "open http://127.0.0.1:5123\n" in capsys.readouterr().out  # no store yet: the UI's front page


def test_ui_on_a_busy_port_is_one_error_naming_it_and_starts_nothing(tmp_path, monkeypatch, capsys):
    import os
    import socket

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(os, "execvp", lambda program, argv: pytest.fail("the UI must not start on a busy port"))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert main(["ui", "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"arena ui: error: --port {port}: 127.0.0.1:{port} is in use (")
    assert "choose another port with --port N" in err and len(err.splitlines()) == 1 and "open http" not in out


def test_the_studys_at_block_sets_shared_sections_for_its_profile_only(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("budget: {amount: 3072}\nseeds: [0, 1, 2, 3, 4]\n"
                    "at:\n  fast-dllm-v2-7b: {budget: {amount: 12288}, seeds: [0, 1, 2]}\n"
                    "  fast-dllm-v2-1.5b: {seeds: 2}\n"
                    "arms: {a: {method: grpo}}\n")
    tiny, large, small = (load_study(path, profile) for profile in (None, "fast-dllm-v2-7b", "fast-dllm-v2-1.5b"))
    assert (tiny.budget.amount, tiny.seeds) == (3072, (0, 1, 2, 3, 4))
    assert (large.budget.amount, large.budget.unit, large.seeds) == (12288, "samples", (0, 1, 2))
    assert (small.budget.amount, small.seeds) == (3072, (0, 1))


def test_a_method_given_by_import_path_takes_the_scale_settings_of_the_method_it_extends(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("arms:\n  a: {method: 'experiments.silent_bugs:SeedBugBlockGRPO', options: {lr: 1.0e-4, "
                    "bug: log_of_sum}}\n")
    options = load_study(path, "fast-dllm-v2-7b").arms["a"].options
    assert options["lr"] == PROFILES["fast-dllm-v2-7b"]["methods"]["block_grpo"]["lr"] and options["bug"] == "log_of_sum"
