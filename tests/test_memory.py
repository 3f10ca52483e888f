"""Device memory faults and deterministic kernels (arena.memory), on the CPU: an out-of-memory error injected into
each phase of a GRPO step is named by that phase; in a study it stops the run with one line, and the rerun resumes
from the last checkpoint onto the full curve; deterministic kernels change nothing on the CPU."""
import pytest
import torch

from arena.cli import main
from arena.memory import PHASES, MemoryFault, out_of_memory
from arena.model.tiny import build_policy
from conftest import SMALL, digit_share, sharpen
from methods import grpo, likelihood
from methods.base import make_method
from conftest import MARKS, STUDY, children, client_for, steps, write

TORCH_SAYS = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"


def run_out(*args, **kwargs):
    raise torch.OutOfMemoryError(TORCH_SAYS)


@pytest.mark.parametrize("phase, owner, name", [
    ("rollout", grpo, "generate"),
    ("scoring", likelihood.Scorer, "__call__"),
    ("backward", torch.Tensor, "backward"),
    ("optimizer", torch.optim.AdamW, "step"),
])
def test_an_out_of_memory_error_in_each_phase_of_a_grpo_step_names_that_phase(phase, owner, name, monkeypatch):
    policy = sharpen(build_policy(SMALL), std=0.1)
    monkeypatch.setattr(owner, name, run_out)
    method = make_method("block_grpo", policy, {"group_size": 2, "max_new_tokens": 4, "estimator": "elbo"}, seed=0)
    with pytest.raises(MemoryFault) as fault:
        with out_of_memory("step 3", "its checkpoint at evaluation mark 16"):
            method.step([policy.encode("1+2=")], digit_share, 3)
    message = str(fault.value)
    assert message.startswith(f"out of device memory at step 3, in the {phase} phase (CUDA out of memory): lower ")
    assert PHASES[phase] in message and message.endswith("which resumes it from its checkpoint at evaluation mark 16")
    assert "\n" not in message


def test_an_unmarked_out_of_memory_error_is_named_by_where_it_happened():
    with pytest.raises(MemoryFault, match=r"mark 32, in the evaluation phase .* lower evaluation.decode_batch"):
        with out_of_memory("evaluation mark 32", "its start", "evaluation"):
            run_out()
    with out_of_memory("step 1", "its start"):  # anything else passes through
        with pytest.raises(ValueError):
            raise ValueError("not a memory fault")


@pytest.mark.slow  # two runs of a study, 30-60 s on 2 shared cores
def test_a_run_out_of_memory_stops_with_one_line_and_the_rerun_resumes_from_its_checkpoint(in_tmp, capsys,  # noqa: F811
                                                                                         monkeypatch):
    study = {**STUDY, "seeds": [0], "arms": {"block_grpo": STUDY["arms"]["block_grpo"]}}
    path = write(in_tmp, study)
    calls, adamw_step = [], torch.optim.AdamW.step

    def second_step_runs_out(self, *args, **kwargs):  # step 0's update goes through; step 1's runs out
        calls.append(1)
        if len(calls) == 2:
            run_out()
        return adamw_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", second_step_runs_out)
    assert main(["run", str(path), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "1 of 1 runs failed" in err
    assert ("MemoryFault: out of device memory at step 1, in the optimizer phase (CUDA out of memory): lower the "
            "trained parameters") in err and "resumes it from its checkpoint at evaluation mark 16" in err
    assert "Traceback" not in err
    client = client_for(in_tmp)
    (run,), _ = children(client, "e2e")
    assert run.info.status == "FAILED" and steps(client, run.info.run_id, "eval/tail_gain") == MARKS[:2]

    monkeypatch.setattr(torch.optim.AdamW, "step", adamw_step)
    assert main(["run", str(path), "--jobs", "1"]) == 0
    (resumed,), _ = children(client, "e2e")
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert steps(client, run.info.run_id, "eval/tail_gain") == MARKS
    assert steps(client, run.info.run_id, "train/reward_mean") == [16, 32]  # each step once


@pytest.mark.slow  # two runs of a study, 30-60 s on 2 shared cores
def test_deterministic_kernels_hold_during_the_run_and_change_nothing_on_the_cpu(in_tmp, monkeypatch):  # noqa: F811
    arm = {"block_grpo": STUDY["arms"]["block_grpo"]}
    seen = []
    original = make_method.__globals__["REGISTRY"]["block_grpo"].step

    def step(self, *args, **kwargs):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(make_method.__globals__["REGISTRY"]["block_grpo"], "step", step)
    histories = []
    try:
        for name, train in (("plain", {"prompts_per_step": 4}), ("fixed", {"prompts_per_step": 4,
                                                                            "deterministic": True})):
            path = write(in_tmp, {**STUDY, "name": name, "seeds": [0], "train": train, "arms": arm}, f"{name}.yaml")
            assert main(["run", str(path), "--jobs", "1"]) == 0
            client = client_for(in_tmp)
            (run,), _ = children(client, name)
            histories.append({key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                              for key in run.data.metrics if key.startswith("eval/")})
    finally:
        torch.use_deterministic_algorithms(False)
    assert seen == [False, False, True, True]
    assert histories[0] == histories[1] and len(histories[0]) > 5
