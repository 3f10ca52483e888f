"""The controls on the real tiny model, with rewards built so that the best temperature is known: a reward for
decoding the model's own greedy completion is best at τ = 0; a reward for anything else is best at the largest τ.
A task that rewards the greedy answer on training prompts and anything else on held-out ones shows that the
temperature is chosen on the training split only."""
import dataclasses
from functools import cache

import pytest
import yaml

from arena.controls import SHARPEN_GRID, best_temperature, control_specs, evaluate_control
from arena.evaluate import Evaluator
from arena.model import load_policy
from arena.model.sampler import SamplerConfig, generate
from arena.study import EvaluationSpec, load_study
from arena.tracking import Tracker
from rewards.noisy_arithmetic import NoisyArithmeticTask

SPEC = EvaluationSpec(prompts=16, samples=4, max_new_tokens=8, points=2)


@cache
def tiny():
    return load_policy("tiny")


@cache
def greedy(prompt: str) -> str:
    policy = tiny()
    return generate(policy, [policy.encode(prompt)], SamplerConfig(max_new_tokens=SPEC.max_new_tokens), seed=0).texts[0]


class Greedy(NoisyArithmeticTask):
    """Reward 1 for the tiny model's own greedy completion: the best temperature is 0."""

    name = "greedy"

    def __init__(self, levels=(1, 2)):
        super().__init__(levels)

    def wants_greedy(self, example) -> bool:
        return True

    def reward(self, completion, example):
        return float((completion == greedy(self.prompt(example))) == self.wants_greedy(example))


class NotGreedy(Greedy):
    """Reward 1 for anything but the greedy completion: the best temperature is the largest."""

    def wants_greedy(self, example):
        return False


class SplitMinded(Greedy):
    """The greedy answer on training prompts, anything else on held-out ones."""

    def wants_greedy(self, example):
        return self.train_prompts is None or self.prompt(example) in self.train_prompts

    train_prompts = None


@pytest.mark.parametrize("task,best", [(Greedy(), 0.0), (NotGreedy(), max(SHARPEN_GRID))])
def test_sharpen_finds_the_temperature_the_reward_is_built_for(task, best):
    evaluator = Evaluator(task, dataclasses.replace(SPEC, split="train"))
    tau, tails = best_temperature(evaluator, tiny(), SPEC.primary_alpha)
    assert tau == best, tails
    assert set(tails) == set(SHARPEN_GRID)


def test_controls_choose_on_training_prompts_and_log_what_the_report_reads(tmp_path):
    SplitMinded.train_prompts = frozenset(Evaluator(SplitMinded(), dataclasses.replace(SPEC, split="train")).texts)
    path = tmp_path / "controls.yaml"
    path.write_text(yaml.safe_dump({
        "name": "controls", "task": {"name": "test_controls:SplitMinded"},
        "evaluation": {**{k: v for k, v in dataclasses.asdict(SPEC).items() if k != "alphas"}, "draws": 2},
        "budget": {"unit": "samples", "amount": 32}, "seeds": [0], "controls": ["frozen", "sharpen"],
        "arms": {"grpo": {"method": "grpo"}}}))
    study = load_study(path)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "controls")
    outcomes = {c.arm: evaluate_control(c, tracker, None, tmp_path / "work") for c in control_specs(study)}
    assert {o.status for o in outcomes.values()} == {"finished"}
    sharpen = tracker.history(outcomes["sharpen"].run_id, "control/temperature")
    assert sharpen[-1][1] == 0.0  # chosen on training prompts, where greedy is right; held out it is wrong
    held_out_gain = tracker.history(outcomes["sharpen"].run_id, "eval/mean_gain")[-1][1]
    assert held_out_gain < 0  # so greedy loses on the held-out prompts, and the control shows it honestly
    for key in ("eval/tail_gain", "eval/mean_gain", "draws/1/tail_gain"):
        assert tracker.history(outcomes["frozen"].run_id, key)[-1][1] == 0.0  # zero by construction
    again = evaluate_control(control_specs(study)[0], tracker, None, tmp_path / "work")
    assert again.status == "skipped" and again.run_id == outcomes["frozen"].run_id
    from arena.report.records import read_control

    run = read_control(tracker, control_specs(study)[1], [0, 32])
    assert run.start_rewards.shape == run.end_rewards.shape == (16, 4) and len(run.other_draws) == 1
    assert run.other_draws[0]["start"].shape == (16, 4)
