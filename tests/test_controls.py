"""The controls on the real tiny model, with rewards built so that the best temperature is known: a reward for
decoding the model's own greedy completion is best at τ = 0; a reward for anything else is best at the largest τ.
A task that rewards the greedy answer on training prompts and anything else on held-out ones shows that the
temperature is chosen on the training split only."""
import dataclasses
from functools import cache

import pytest
import yaml

from arena.controls import evaluate_control
from arena.evaluate import SHARPEN_GRID, best_temperature
from arena.evaluate import Evaluator
from arena.model import load_policy
from arena.model.sampler import SamplerConfig, generate
from arena.study import EvaluationSpec, load_study
from arena.tracking import Tracker
from rewards import load_task
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


@pytest.mark.slow
@pytest.mark.parametrize("task,best", [(Greedy(), 0.0), (NotGreedy(), max(SHARPEN_GRID))])
def test_sharpen_finds_the_temperature_the_reward_is_built_for(task, best):
    evaluator = Evaluator(task, dataclasses.replace(SPEC, split="train"))
    tau, tails = best_temperature(evaluator, tiny(), SPEC.primary_alpha)
    assert tau == best, tails
    assert set(tails) == set(SHARPEN_GRID)


@pytest.mark.slow
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
    outcomes = {c.arm: evaluate_control(c, tracker, None, tmp_path / "work") for c in study.control_specs()}
    assert {o.status for o in outcomes.values()} == {"finished"}
    sharpen = tracker.history(outcomes["sharpen"].run_id, "control/temperature")
    assert sharpen[-1][1] == 0.0  # chosen on training prompts, where greedy is right; held out it is wrong
    held_out_gain = tracker.history(outcomes["sharpen"].run_id, "eval/mean_gain")[-1][1]
    assert held_out_gain < 0  # so greedy loses on the held-out prompts, and the control shows it honestly
    for key in ("eval/tail_gain", "eval/mean_gain", "draws/1/tail_gain"):
        assert tracker.history(outcomes["frozen"].run_id, key)[-1][1] == 0.0  # zero by construction
    again = evaluate_control(study.control_specs()[0], tracker, None, tmp_path / "work")
    assert again.status == "skipped" and again.run_id == outcomes["frozen"].run_id
    from arena.report.records import read_control

    run = read_control(tracker, study.control_specs()[1], [0, 32])
    assert run.start_rewards.shape == run.end_rewards.shape == (16, 4) and len(run.other_draws) == 1
    assert run.other_draws[0]["start"].shape == (16, 4)


@pytest.mark.slow
def test_matched_decoding_applies_the_sharpen_rule_to_each_arm_and_is_zero_for_a_frozen_one(tmp_path, capsys):
    """A study with the sharpen control ends every trained run at its own best temperature. An arm that trains
    nothing (GRPO at lr 0) must pick sharpen's τ from the same training tails and decode sharpen's samples, so its
    matched difference is exactly zero; a trained arm's τ is the one its checkpointed policy's training tails
    (decoded here, independently of the runner) say, ties to the larger τ."""
    import numpy as np

    from arena.cli import main
    from arena.evaluate import lower_cvar
    from arena.report.comparison import matched_rows, rows
    from arena.report.records import read_results
    from arena.runner import checkpoint_file, load
    from arena.tracking import draw_artifact, evaluation_artifact, matched_artifact
    from methods import method_class

    path = tmp_path / "matched.yaml"
    path.write_text(yaml.safe_dump({
        "name": "matched", "evaluation": {**{k: v for k, v in dataclasses.asdict(SPEC).items() if k != "alphas"},
                                          "draws": 2},
        "train": {"prompts_per_step": 4}, "budget": {"unit": "samples", "amount": 32}, "seeds": [0],
        "controls": ["frozen", "sharpen"], "reference": "still",
        "arms": {"still": {"method": "grpo", "options": {"lr": 0.0, "group_size": 4}},
                 "trained": {"method": "grpo", "options": {"lr": 3e-3, "group_size": 4}}}}))
    uri, workdir = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "work"
    assert main(["run", str(path), "--jobs", "1", "--tracking-uri", uri, "--workdir", str(workdir)]) == 0
    printed = capsys.readouterr().out
    study, tracker = load_study(path), Tracker(uri, "matched")
    results = read_results(tracker, study)
    still, trained, sharpen = results.arms["still"][0], results.arms["trained"][0], results.controls["sharpen"]
    last = int(results.marks[-1])

    def metric(run_id, key):
        return tracker.history(run_id, key)[-1][1]

    def arrays(run_id, artifact):
        with np.load(tracker.download(run_id, artifact, str(tmp_path / "dl" / run_id))) as saved:
            return {key: saved[key] for key in saved.files}

    for tau in SHARPEN_GRID:  # the same prompts and decoding seeds as the control's: the same training tails
        assert metric(still.run_id, f"matched/train_tail_t{tau:g}") == metric(sharpen.run_id, f"control/train_tail_t{tau:g}")
    assert still.temperature == metric(sharpen.run_id, "control/temperature")
    np.testing.assert_array_equal(arrays(still.run_id, matched_artifact(0))["end"],
                                  arrays(sharpen.run_id, evaluation_artifact(last, "per_prompt_rewards.npz"))["rewards"])
    np.testing.assert_array_equal(arrays(still.run_id, matched_artifact(1))["end"],
                                  arrays(sharpen.run_id, draw_artifact(1))["end"])
    matched = {row.arm: row for row in matched_rows(results, rows(results))}
    assert matched["still"].comparison.difference.value == 0.0
    assert metric(still.run_id, "matched/eval/tail_gain") == metric(sharpen.run_id, "eval/tail_gain")

    # the trained arm: its τ by the rule, from its final policy decoded here on the training split
    policy = load_policy("tiny")
    method = method_class("grpo")(policy, study.runs()[1].config, 0)
    load(checkpoint_file(workdir, study.runs()[1]), method, policy.device)
    training = Evaluator(load_task("noisy_arithmetic", None), dataclasses.replace(study.evaluation, split="train"),
                         policy.tokenizer)
    tails = {tau: lower_cvar(training.decode(policy, temperature=tau).per_prompt, SPEC.primary_alpha)
             for tau in SHARPEN_GRID}
    assert trained.temperature == max(tau for tau in SHARPEN_GRID if tails[tau] == max(tails.values()))
    assert metric(trained.run_id, "matched/eval/tail_reward") == pytest.approx(
        lower_cvar(arrays(trained.run_id, matched_artifact(0))["end"].mean(axis=1), SPEC.primary_alpha))
    assert "At matched decoding" in printed and "over sharpen at τ" in printed

    # the final-gain figure draws each trained arm at its own τ too: the matched table's tail gain
    from arena.report.comparison import write_study_report
    report = write_study_report(study, tracker, tmp_path / "report", log=False)
    drawn = {line.get_label(): line.get_xdata()[0] for line in report.figures["final_tail_gain"].axes[0].lines}
    assert {arm: drawn[f"{arm} at τ"] for arm in ("still", "trained")} == {
        arm: matched[arm].tail_gain.value for arm in ("still", "trained")}
    assert "own best temperature" in report.captions["final_tail_gain"]
