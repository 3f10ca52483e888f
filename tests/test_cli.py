"""The command line: `arena sample` reproduces with a seed; user mistakes exit 2 with one line."""
import pytest

from arena.cli import main
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


def test_user_mistakes_exit_2_without_traceback(checkpoint, capsys, tmp_path):
    code, out = sample(capsys, "--model", str(tmp_path / "missing"), "--prompt", "1+1=")
    assert code == 2 and "Use --model tiny" in out.err and "Traceback" not in out.err
    code, out = sample(capsys, "--model", str(checkpoint), "--prompt", "")
    assert code == 2 and "--prompt" in out.err
