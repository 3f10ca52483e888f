"""The user documentation's examples work: examples/plugins/ (a task and a method by import path) validates,
runs end to end and honours the method contract, and every `arena ...` command in docs/*.md parses."""
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import yaml

import methods
from arena.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "plugins" / "study.yaml"


def test_the_plugin_study_validates(capsys):
    assert main(["validate", str(STUDY)]) == 0, capsys.readouterr().err
    assert "valid; 2 arms x 1 seeds = 2 runs" in capsys.readouterr().out


@pytest.mark.slow
def test_the_plugin_study_runs_end_to_end(tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study = yaml.safe_load(STUDY.read_text())
    study["budget"]["amount"] = 16  # one step per arm, evaluated at 0 and 16: the file as shipped, smaller
    study["evaluation"] |= {"prompts": 8, "points": 2}
    study["controls"] = []  # the plugins' test, not the controls'
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    # the arm that uses both plugins (es is a built-in, run by tests/test_runner.py)
    assert main(["run", str(path), "--jobs", "1", "--only", "arm=sign_sgd"]) == 0, capsys.readouterr().err
    assert "1 run finished, 0 already finished (skipped), 0 failed" in capsys.readouterr().out

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(study["name"])
    (run,) = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("arena.arm")]
    assert run.info.status == "FINISHED" and run.data.tags["arena.method"] == "examples.plugins.sign_sgd:SignSGD"
    assert run.data.params["task.name"] == "examples.plugins.digits_task:DigitsTask"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/tail_reward")] == [0, 16]
    for key in ("eval/pass_at_2", "eval/level1_mean_reward", "eval/level2_mean_reward", "train/reward_mean",
                "train/update_norm", "train/fd_abs_mean"):
        assert client.get_metric_history(run.info.run_id, key), key


@pytest.mark.slow
def test_the_plugin_method_honours_the_method_contract(monkeypatch):
    """tests/methods/test_contract.py, as it would run the method if it were registered."""
    from examples.plugins.sign_sgd import SignSGD

    spec = importlib.util.spec_from_file_location("method_contract", ROOT / "tests" / "methods" / "test_contract.py")
    contract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(contract)
    monkeypatch.setitem(methods.REGISTRY, "sign_sgd", SignSGD)
    monkeypatch.setitem(contract.SMOKE, "sign_sgd", {"directions": 2, "sigma": 0.05, "max_new_tokens": 8})
    contract.test_step_consumes_changes_and_round_trips("sign_sgd")
    contract.test_step_reports_the_common_statistics("sign_sgd")
    contract.test_lora_moves_only_the_adapter("sign_sgd")
    contract.test_unknown_options_are_named("sign_sgd")


@pytest.mark.slow
def test_the_readmes_python_example_runs_and_prompts_through_the_tokenizer(monkeypatch, capsys):
    """README.md's method-from-Python snippet takes a step, and builds its prompts with the policy's tokenizer, so
    that a Fast-dLLM v2 model gets its chat template (the tiny model has none: the prompt text shows nothing)."""
    from rewards import get_task

    seen = []
    task_class = type(get_task("arithmetic"))
    original = task_class.prompt
    monkeypatch.setattr(task_class, "prompt", lambda self, example, tokenizer=None: seen.append(tokenizer)
                        or original(self, example, tokenizer))
    block = re.search(r"## Using a method from Python\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    namespace = {}
    exec(block.group(1), namespace)
    assert len(seen) == 8 and all(tokenizer is namespace["policy"].tokenizer for tokenizer in seen)
    assert "Consumption(samples=48" in capsys.readouterr().out


def test_the_dual_clip_example_of_extending_md_is_the_tested_plugin():
    """docs/extending.md's dual-clip GRPO, run as written, computes what tests/study_plugins.py's does: PPO's term
    except where a negative advantage meets a ratio above the clip, which the dual clip bounds at c A."""
    import torch

    import study_plugins
    from arena.model.tiny import build_policy
    from conftest import SMALL

    block = next(code for code in re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "extending.md").read_text(), re.S)
                 if "class DualClipGRPO" in code)
    namespace = {}
    exec(block, namespace)
    ratio, advantages = torch.tensor([[0.5, 1.0, 5.0]] * 2), torch.tensor([[-1.0], [1.0]])
    terms = [cls(build_policy(SMALL), cls.Config(), 0).surrogate(ratio, advantages)
             for cls in (namespace["DualClipGRPO"], study_plugins.DualClipGRPO, study_plugins.GRPO)]
    assert torch.equal(terms[0], terms[1])
    torch.testing.assert_close(terms[0], torch.tensor([[-0.8, -1.0, -3.0], [0.5, 1.0, 1.2]]))
    assert terms[2][0, 2] == -5.0  # plain GRPO: the unclipped ρ A for a negative advantage


ENVIRONMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")  # VAR=value before a command
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.")


def doc_commands() -> list[tuple[str, list[str]]]:
    """(file:line, arguments) of every `arena ...` (or `python -m arena ...`) command in a ```bash block of
    docs/ (its appendices in docs/results/ too), continuation lines joined, `VAR=value` prefixes dropped; commands with placeholders left out."""
    found = []
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        inside, command, start = False, "", 0
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.startswith("```"):
                inside = line.strip() == "```bash" if not inside else False
                continue
            if not inside:
                continue
            command, start = (command + " " + line.strip(), start) if command else (line.strip(), number)
            if command.endswith("\\"):
                command = command[:-1].rstrip()
                continue
            segments = [[]]
            for word in shlex.split(command, comments=True):  # a && b | c: each command on its own
                if word in ("&&", "||", "|", ";"):
                    segments.append([])
                else:
                    segments[-1].append(word)
            command = ""
            for words in segments:
                while words and ENVIRONMENT.fullmatch(words[0]):
                    words.pop(0)
                if words[:3] == ["python", "-m", "arena"]:
                    words = ["arena", *words[3:]]
                if words[:1] == ["arena"] and not any(PLACEHOLDER.search(w) for w in words):
                    found.append((f"{doc.relative_to(ROOT / 'docs')}:{start}", words[1:]))
    return found


def test_the_docs_have_commands_to_check():
    assert len(doc_commands()) >= 10


@pytest.mark.parametrize("where, arguments", doc_commands(), ids=[where for where, _ in doc_commands()])
def test_every_documented_command_parses(where, arguments):
    try:
        build_parser().parse_args(arguments)
    except SystemExit as error:
        pytest.fail(f"{where}: 'arena {shlex.join(arguments)}' does not parse (exit {error.code})")


def test_ci_runs_the_readme_s_full_test_command_and_the_default_is_the_fast_loop():
    """CI (.ci/run) must run what README.md tells a contributor is the full suite; plain pytest leaves out `slow`."""
    import tomllib

    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line for line in ci.splitlines() if line.startswith("python -m pytest"))
    assert command in (ROOT / "README.md").read_text() and '-m ""' in command
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow'" in options["addopts"]
