"""A task and a method defined outside the registries, for study files that name them by import path."""
import json
import math
import os
from dataclasses import dataclass

import torch

from arena.config import Checked
from methods.base import MethodConfig
from methods.block_grpo import BlockGRPO
from methods.grpo import GRPO, GRPOConfig
from rewards import Task
from rewards.noisy_arithmetic import NoisyArithmeticTask


class CountingTask(Task):
    """Prompts 'n' with answer n+1, on levels 1..3 (the number of digits of n)."""

    name = "counting"
    reward_range = (0.0, 1.0)

    def __init__(self, levels: tuple[int, ...] = (1, 2, 3)):
        if not set(levels) <= {1, 2, 3}:
            raise ValueError(f"counting: levels must be among 1, 2, 3, got {list(levels)}")
        self.levels = tuple(levels)

    def reward(self, completion: str, example: dict) -> float:
        return 1.0 if completion.strip() == example["answer"] else 0.0

    def prompt(self, example: dict, tokenizer=None) -> str:
        return example["prompt"]

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        return [{"prompt": str(i), "answer": str(i + 1)} for i in range(n or 8)]


def make_counting_task(levels=(1, 2)):
    """A factory, not a class."""
    return CountingTask(levels)


def not_a_task():
    return 42


@dataclass
class StayConfig(MethodConfig):
    lr: float = 0.1
    mode: str = "still"

    def problems(self):
        if self.lr <= 0:
            yield "lr", f"must be > 0, got {self.lr!r}"


class Stay:
    """A method that never moves."""

    Config = StayConfig

    def __init__(self, policy, config: StayConfig, seed: int):
        self.config = config


class FlakyArithmetic(NoisyArithmeticTask):
    """noisy_arithmetic whose reward raises at the N-th call of this process, N from
    $ARENA_TEST_REWARD_FAILS_AT (unset: never), as a user's buggy reward would; with $ARENA_TEST_REWARD_LOG set,
    each call appends its prompt to the file $ARENA_TEST_REWARD_LOG.<process id> (what each process rewarded)."""

    name = "flaky_arithmetic"
    calls = 0

    def reward(self, completion: str, example: dict) -> float:
        FlakyArithmetic.calls += 1
        if FlakyArithmetic.calls == int(os.environ.get("ARENA_TEST_REWARD_FAILS_AT", 0)):
            return 1 / 0
        if os.environ.get("ARENA_TEST_REWARD_LOG"):
            with open(f"{os.environ['ARENA_TEST_REWARD_LOG']}.{os.getpid()}", "a") as log:
                log.write(json.dumps(self.prompt(example)) + "\n")
        return super().reward(completion, example)


class NaNGradientGRPO(BlockGRPO):
    """block_grpo whose output layer's gradient is NaN at every backward, as a diverging run's would be."""

    def __init__(self, policy, config, seed: int):
        super().__init__(policy, config, seed)
        policy.model.get_output_embeddings().weight.register_hook(lambda gradient: gradient * math.nan)



@dataclass
class PlainConfig(Checked):
    lr: float = 0.1


class PlainConfigMethod:
    """A method whose Config is a checked dataclass but no MethodConfig: arena cannot ask it what it needs."""

    Config = PlainConfig


@dataclass
class DualClipConfig(GRPOConfig):
    dual_clip: float = 3.0  # c > 1: a negative advantage's term never goes below c A

    def problems(self):
        yield from super().problems()
        if not self.dual_clip > 1:
            yield "dual_clip", f"must be > 1, got {self.dual_clip!r}"


class DualClipGRPO(GRPO):
    """GRPO with dual-clip PPO (Ye et al. 2020): the variant of docs/extending.md, by overriding ``surrogate``."""

    Config = DualClipConfig

    def surrogate(self, ratio, advantages):
        clipped = super().surrogate(ratio, advantages)
        return torch.where(advantages < 0, torch.maximum(clipped, self.config.dual_clip * advantages), clipped)
