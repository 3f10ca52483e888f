"""Zeroth-order sign-SGD (Liu et al. 2019, "signSGD via Zeroth-Order Oracle"), a method named in a study by
import path (docs/extending.md). Each step scores θ ± σε_j for q directions ε_j, regenerated from the key
(seed, step, j, parameter name), by the mean reward F on the step's prompts (one decoding seed for all),
and moves every trainable weight by ±lr (fp32 masters; perturbations restored by copy). One process.

    ĝ = (1/q) Σ_j (F(θ + σε_j) − F(θ − σε_j)) / (2σ) · ε_j          θ ← θ + lr · sign(ĝ)
"""
import math
import time
from dataclasses import dataclass
from typing import Literal

import torch

from arena.model.sampler import SamplerConfig, generate
from arena.rng import name_key, seed_of, torch_generator
from methods.base import MethodConfig, ParameterCount, StepResult, Trainable, common_stats, make_trainable

NOISE, DECODE = 1, 2  # key domains


@dataclass
class SignSGDConfig(MethodConfig):
    directions: int = 4  # q: 2q completions per prompt per step
    sigma: float = 0.01  # perturbation scale
    lr: float = 1e-4  # every trained weight moves by exactly lr (or 0) per step
    temperature: float = 0.0  # decoding of the perturbed policies; 0: greedy
    max_new_tokens: int = 64
    trainable: Literal["full", "lora"] = "full"  # the contract test runs every registered method with lora too
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = Trainable.lora_targets

    def problems(self):
        yield from super().problems()
        for name, low in {"directions": 1, "max_new_tokens": 1, "temperature": 0}.items():
            if getattr(self, name) < low:
                yield name, f"must be >= {low}, got {getattr(self, name)!r}"
        for name in ("sigma", "lr"):
            if not getattr(self, name) > 0:
                yield name, f"must be > 0, got {getattr(self, name)!r}"
        yield from Trainable.of(self).problems()


class SignSGD:
    name = "sign_sgd"
    Config = SignSGDConfig  # arena builds and validates a study's options with it

    def __init__(self, policy, config: SignSGDConfig, seed: int):
        self.policy, self.config, self.seed = policy, config, seed
        self.params = make_trainable(policy, Trainable.of(config), seed)
        self.parameters = ParameterCount.of(policy.model, self.params)  # what a token passes through: the flops
        self.master = {name: p.detach().to(torch.float32, copy=True) for name, p in self.params}
        self.sampler = SamplerConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)

    def noise(self, step: int, j: int, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.randn(like.shape, generator=torch_generator(self.seed, NOISE, step, j, name_key(name))).to(like)

    def score(self, prompts, reward_fn, step: int, j: int, sign: float, totals: dict):
        """The completions and rewards of θ + sign·σ·ε_j on the prompts; counts added to ``totals``."""
        for name, param in self.params:
            param.copy_(self.master[name] + sign * self.config.sigma * self.noise(step, j, name, self.master[name]))
        out = generate(self.policy, prompts, self.sampler, seed=seed_of(self.seed, DECODE, step))
        rewards = [float(reward_fn(i, text)) for i, text in enumerate(out.texts)]
        for key, value in {"samples": len(rewards), "tokens": sum(map(len, out.tokens)), "reward_sum": sum(rewards),
                           "forward_tokens": out.forward_tokens, "reward_squares": sum(r * r for r in rewards)}.items():
            totals[key] = totals.get(key, 0) + value
        return out.texts, rewards

    @torch.no_grad()
    def step(self, prompts: list[list[int]], reward_fn, step: int) -> StepResult:
        cfg, began, totals, gaps, completions = self.config, time.perf_counter(), {}, [], []
        try:
            for j in range(cfg.directions):
                texts, plus = self.score(prompts, reward_fn, step, j, +1.0, totals)
                _, minus = self.score(prompts, reward_fn, step, j, -1.0, totals)
                gaps.append((sum(plus) - sum(minus)) / len(plus))  # F(θ + σε_j) − F(θ − σε_j)
                completions = completions or [{"prompt": i, "text": t, "reward": r}
                                              for i, (t, r) in enumerate(zip(texts, plus))]
        finally:  # θ restored whatever happened
            for name, param in self.params:
                param.copy_(self.master[name])
        squares = 0.0
        for name, param in self.params:
            theta, estimate = self.master[name], torch.zeros_like(self.master[name])
            for j, gap in enumerate(gaps):  # ĝ without its positive factor 1/(2σq): the sign ignores it
                if gap:
                    estimate.add_(self.noise(step, j, name, theta), alpha=gap)
            moved = theta + cfg.lr * torch.sign(estimate)
            squares += float((moved - theta).double().square().sum())
            theta.copy_(moved)
            param.copy_(moved)
        consumption, stats = common_stats(totals, math.sqrt(squares), time.perf_counter() - began,
                                          self.parameters)
        stats["fd_abs_mean"] = sum(map(abs, gaps)) / len(gaps)  # mean |F+ − F−|, besides COMMON_STATS
        return StepResult(consumption, stats, completions)  # never logged here: the runner logs stats

    def state_dict(self) -> dict:  # the trained weights: the runner saves nothing else of the model
        return {"theta": {name: theta.clone() for name, theta in self.master.items()}}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        for name, param in self.params:
            self.master[name].copy_(state["theta"][name])
            param.copy_(self.master[name])
