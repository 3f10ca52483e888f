"""The command line: `arena sample` reproduces with a seed, `arena estimators` writes its report; user mistakes
exit 2 with one line naming the argument; help describes each command; building the parser is light."""
import argparse
import subprocess
import sys

import pytest

from arena.cli import build_parser, main
from arena.model.policy import save_checkpoint
from arena.model.tiny import build_policy
from conftest import SMALL, sharpen


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    policy = sharpen(build_policy(SMALL), std=0.1)
    return save_checkpoint(policy.model, policy.tokenizer, tmp_path_factory.mktemp("ckpt"), SMALL.block_size,
                           SMALL.sub_block)


def sample(capsys, *args):
    code = main(["sample", *args])
    return code, capsys.readouterr()


def test_sample_is_reproducible(checkpoint, capsys):
    args = ("--model", str(checkpoint), "--prompt", "12+7=", "--n", "3", "--temperature", "1.0")
    first = sample(capsys, *args, "--seed", "4")
    again = sample(capsys, *args, "--seed", "4")
    other = sample(capsys, *args, "--seed", "5")
    assert first[0] == 0 and first[1].out == again[1].out
    assert all(f"[{i}] 12+7=" in first[1].out for i in range(3)) and first[1].out != other[1].out


def test_sample_decodes_through_the_sub_block_cache_when_asked(checkpoint, capsys, monkeypatch):
    import arena.model.sampler as sampler

    configs, real = [], sampler.generate
    monkeypatch.setattr(sampler, "generate", lambda policy, prompts, config, **kw: configs.append(config)
                        or real(policy, prompts, config, **kw))
    for flag in ((), ("--sub-block-cache",)):
        code, out = sample(capsys, "--model", str(checkpoint), "--prompt", "12+7=", *flag)
        assert code == 0 and "[0] 12+7=" in out.out
    assert [c.sub_block_cache for c in configs] == [False, True]


def test_user_mistakes_exit_2_without_traceback(checkpoint, capsys, tmp_path):
    code, out = sample(capsys, "--model", str(tmp_path / "missing"), "--prompt", "1+1=")
    assert code == 2 and "hf download" in out.err and "--model tiny" in out.err and "Traceback" not in out.err
    code, out = sample(capsys, "--model", str(checkpoint), "--prompt", "")
    assert code == 2 and "--prompt" in out.err


def test_estimators_command_writes_the_report(checkpoint, capsys, tmp_path):
    code = main(["estimators", "--model", str(checkpoint), "--prompts", "2", "--draws", "2", "--nodes", "1",
                 "--repeats", "2", "--max-new-tokens", "4", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "| masked |" in out and f"wrote {tmp_path / 'estimators.json'}" in out
    assert {p.name for p in tmp_path.iterdir()} == {"estimators.json", "estimators.md", "estimators.png"}


def test_estimators_samples_the_prompts_of_the_named_task(checkpoint, monkeypatch, tmp_path):
    """--task picks the prompts the model completes (the task it was trained on), at the task's own levels."""
    import arena.estimator_bench
    from rewards import get_task

    class Measured(Exception):
        pass

    def measure(policy, prompts, *args):
        raise Measured([policy.tokenizer.decode(p) for p in prompts])

    monkeypatch.setattr(arena.estimator_bench, "measure", measure)
    with pytest.raises(Measured) as measured:
        main(["estimators", "--model", str(checkpoint), "--task", "swap_sums", "--prompts", "3", "--out", str(tmp_path)])
    task = get_task("swap_sums")
    assert measured.value.args[0] == [task.prompt(e) for e in task.examples("heldout", n=3, seed=0)]


BAD_ARGUMENTS = [
    ("sample", "--n", "0"), ("sample", "--n", "two"), ("sample", "--seed", "-1"), ("sample", "--temperature", "-1"),
    ("sample", "--temperature", "nan"), ("sample", "--top-p", "0"), ("sample", "--top-p", "1.5"),
    ("sample", "--threshold", "0"), ("sample", "--threshold", "1.01"), ("sample", "--max-new-tokens", "0"),
    ("pretrain", "--steps", "0"), ("estimators", "--prompts", "0"), ("estimators", "--draws", "1,x"),
    ("estimators", "--nodes", "0"), ("estimators", "--repeats", "-3"), ("estimators", "--seed", "-1"),
    ("estimators", "--task", "swap_summs"),
]


@pytest.mark.parametrize("command, option, value", BAD_ARGUMENTS)
def test_out_of_range_argument_exits_2_naming_it(command, option, value, capsys):
    required = ["--prompt", "1+1="] if command == "sample" else []
    with pytest.raises(SystemExit) as exit_info:
        main([command, *required, option, value])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert f"arena {command}: error: argument {option}: expected " in err and repr(value) in err
    assert "Traceback" not in err


def test_bad_argument_in_a_fresh_process_is_one_line():
    done = subprocess.run([sys.executable, "-m", "arena", "sample", "--prompt", "1+1=", "--n", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == "arena sample: error: argument --n: expected a positive integer, got '0'"


@pytest.mark.parametrize("command", [[], ["pretrain"], ["sample"], ["estimators"]])
def test_help_works_and_mentions_an_example(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0 and "example" in capsys.readouterr().out


def test_every_option_says_its_default_or_that_it_is_required():
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, parser in commands.items():
        assert parser.description and parser.epilog.startswith("example:\n  arena " + name), name
        for action in parser._actions:
            if action.dest != "help":
                assert "(default: " in action.help or "(required)" in action.help, (name, action.dest)


def test_building_the_parser_imports_nothing_heavy():
    """--help and argument errors must not pay for torch: commands import what they need when they run."""
    heavy = ("torch", "transformers", "numpy", "mlflow", "methods")
    code = ("import arena.cli, sys; arena.cli.build_parser(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
