"""Evolution strategies (Salimans et al. 2017, https://arxiv.org/abs/1703.03864), as Qiu et al. 2025
run them on LLMs (https://arxiv.org/abs/2509.24372), with EGGROLL's low-rank noise as an option
(https://arxiv.org/abs/2511.16652). No log-probability is computed: perturb, score, move.

Member m of a step evaluates θ + s_m σ ε_j: for antithetic pairs j = m // 2 and s_m = +1 for even m,
-1 for odd m; otherwise j = m and s_m = +1. Its fitness is its mean reward over the step's first
``prompts_per_member`` prompts, each decoded ``samples_per_member`` times, with the same decoding seeds
by every member. The reward is the task's own, so the fitness has partial credit exactly where the task
gives it (sudoku4: the share of cells right; countdown: 0.1 for a well-formed wrong answer; arithmetic
and gsm8k: none). With the shaped fitnesses F̃ (centered ranks in [-0.5, 0.5] with ties averaged, or
z-scores; equal fitnesses shape to exactly 0) and c_j = Σ_{m uses ε_j} s_m F̃_m, the update over a
population of n is

    θ ← θ + (α/n) Σ_j c_j ε_j - αλθ         alpha_absorbs_sigma (default; Qiu et al.)
    θ ← θ + (α/(nσ)) Σ_j c_j ε_j - αλθ      otherwise (Salimans et al., evosax)

with α constant, or, with ``alpha_decay_from: k``, α_t = α·min(1, √(k/(t+1))) at step t: the tuned α for the
first k steps, then the classic 1/√t decay (k = 1 decays from the start). A run whose budget is several times the
one its α was tuned at (k steps) then repeats the tuned run and takes smaller steps after it, where a constant α
keeps adding noise of the same size.

Relative noise (``sigma_scale: relative``). Every tensor t then takes σ·r_t and α·r_t in place of σ and α,
r_t the RMS of θ_t at the start of the step: ES in the coordinates θ_t / r_t, where every tensor has
unit RMS, so σ = 1e-3 perturbs a norm weight (RMS 1) and a projection (RMS 0.02) alike by 0.1% of its
size. The peers state σ in absolute terms at the scale of 7B weights (Qiu et al. σ = 1e-3 against
an RMS of about 0.02, i.e. 5% relative); an absolute σ moved to the tiny model, whose weights have
another RMS, means something else. A tensor of RMS 0 cannot be perturbed relatively (LoRA's B starts
at 0): relative noise goes with full or subset training.

Size of one update. Every coordinate of ε_j has mean 0 and variance 1, independently across j, so
for given fitnesses one coordinate of the move (λ = 0) has standard deviation (α/n)‖c‖₂ (over σ if
α does not absorb it). ‖c‖₂² is at most n/4 for centered ranks, n/2 for antithetic centered ranks,
exactly n for z-scores and at most 2n for antithetic z-scores. With the defaults (n = 32 antithetic,
centered ranks, α = 5e-4) that is at most α/√(2n) = 6.25e-5 per coordinate; the tests check that one
default step moves no weight of the tiny model by more than 2.5% of max(its tensor's RMS, 0.02).
(A prototype whose α carried a stray 1/σ took steps 1000x that and destroyed the model silently.)

Noise (``methods.es_noise``): ε_j of a parameter is regenerated from the key (seed, step, j, parameter name) on
the parameter's device, never stored; ``full`` noise is dense, ``lowrank`` noise is EGGROLL's E = A Bᵀ/√r, which
trainable ``nn.Linear`` weights take in the forward pass.

Memory per trainable parameter. A parameter perturbed in place is restored by copy from an fp32
master (bit-exact in fp32 and bf16; subtracting the noise is not), and every update accumulates in
fp32 (bf16 swallows steps of 1e-5). So: ``full`` noise, 4 bytes (the master); ``lowrank``, 0 bytes for
fp32 Linear weights and 4 bytes for everything else. Transient: a few fp32 tensors of one parameter's size.

Across processes (torch.distributed, e.g. under accelerate launch) each rank evaluates members
rank, rank + world, ...; only fitness scalars and counters are all-reduced (``all_reduce_sums``), every
rank applies the same update, and every ``checksum_every`` steps an all-gather of a parameter checksum
raises on drift.

The method as ask / tell / statistics: ``ask(step, member)`` is the policy as one member (perturbed in place or
hooked, restored bit-exactly on exit), ``tell(step, fitness)`` the update alone, and ``methods.es_stats`` the
statistics, none of which the update reads.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.distributed as dist

from arena.config import IDENTITY_WHEN_SET
from arena.model.sampler import SamplerConfig, generate
from arena.rng import RunKey, seed_of
from methods.base import MethodConfig, RewardFn, StepResult, common_stats, register
from methods.collectives import all_reduce_sums, world
from methods.es_noise import make_noise
from methods.es_stats import Movement, population_stats, sigma_over_rms
from methods.trainable import ParameterCount, Trainable, make_trainable


def centered_rank(fitness: torch.Tensor) -> torch.Tensor:
    """Ranks mapped to [-0.5, 0.5]; tied fitnesses share their average rank (all equal -> all 0)."""
    n = len(fitness)
    if n < 2:
        return torch.zeros_like(fitness)
    below = (fitness[None, :] < fitness[:, None]).sum(1).to(fitness.dtype)
    ties = (fitness[None, :] == fitness[:, None]).sum(1).to(fitness.dtype)
    return (below + (ties - 1) / 2) / (n - 1) - 0.5


def zscore(fitness: torch.Tensor) -> torch.Tensor:
    """(F - mean) / std (population std); all equal -> all 0 (their float mean need not equal them)."""
    if fitness.max() == fitness.min():
        return torch.zeros_like(fitness)
    return (fitness - fitness.mean()) / fitness.std(correction=0)


SHAPING = {"centered_rank": centered_rank, "zscore": zscore}


def pair(member: int, antithetic: bool) -> tuple[int, float]:
    """(j, s_m): the noise a member uses and its sign."""
    return (member // 2, 1.0 - 2.0 * (member % 2)) if antithetic else (member, 1.0)


@register("es")
class ES:
    @dataclass
    class Config(MethodConfig):
        population: int = 32  # members per step, both signs counted (Qiu et al.: 30)
        sigma: float = 1e-3  # noise scale σ (Qiu et al.)
        alpha: float = 5e-4  # step size α (Qiu et al.: σ/2, with 1/σ absorbed)
        alpha_absorbs_sigma: bool = True  # True: θ += (α/n)Σcε (Qiu); False: θ += (α/(nσ))Σcε (Salimans)
        # null: α at every step; k: α·min(1, √(k/(t+1))) at step t, the tuned α for k steps, then decaying as 1/√t
        alpha_decay_from: int | None = field(default=None, metadata={IDENTITY_WHEN_SET: True})
        antithetic: bool = True  # mirrored pairs ±ε (Salimans et al., evosax)
        shaping: Literal["centered_rank", "zscore"] = "centered_rank"  # Salimans / Qiu
        weight_decay: float = 0.0  # λ in -αλθ (Salimans et al. use 0.005)
        temperature: float = 0.0  # member decoding: 0 greedy (Qiu et al.), > 0 sampled, common seeds
        prompts_per_member: int | None = None  # the first k prompts of the step's batch; None: all
        samples_per_member: int = 1  # decodes per prompt and member (EGGROLL: generations_per_prompt 8)
        sigma_scale: Literal["absolute", "relative"] = "absolute"  # relative: σ, α per tensor times its RMS
        max_new_tokens: int = 64
        trainable: Literal["full", "lora", "subset"] = "full"  # what ES moves (LoRA: Hu et al.; EGGROLL, ESSA)
        lora_rank: int = 8
        lora_alpha: float = 16.0
        lora_targets: tuple[str, ...] = Trainable.lora_targets
        trainable_names: tuple[str, ...] = ()  # subset: regular expressions over parameter names (Trainable)
        noise: Literal["full", "lowrank"] = "full"  # lowrank: EGGROLL, E = ABᵀ/√r
        noise_rank: int = 1  # r (EGGROLL's default)
        checksum_every: int = 10  # steps between cross-process parameter checksums

        def problems(self):
            if self.population < 2 or (self.antithetic and self.population % 2):
                yield "population", f"must be >= 2 (and even when antithetic), got {self.population!r}"
            if self.sigma <= 0:
                yield "sigma", f"must be > 0, got {self.sigma!r}"
            for name in ("alpha", "weight_decay", "temperature"):  # alpha 0 freezes the policy (a control arm)
                if getattr(self, name) < 0:
                    yield name, f"must be >= 0, got {getattr(self, name)!r}"
            for name in ("max_new_tokens", "noise_rank", "checksum_every"):
                if getattr(self, name) < 1:
                    yield name, f"must be >= 1, got {getattr(self, name)!r}"
            if self.prompts_per_member is not None and self.prompts_per_member < 1:
                yield "prompts_per_member", f"must be >= 1 or null (all prompts), got {self.prompts_per_member!r}"
            if self.alpha_decay_from is not None and self.alpha_decay_from < 1:
                yield "alpha_decay_from", f"must be >= 1 (steps at the full α) or null, got {self.alpha_decay_from!r}"
            if self.samples_per_member < 1:
                yield "samples_per_member", f"must be >= 1, got {self.samples_per_member!r}"
            elif self.samples_per_member > 1 and self.temperature == 0:
                yield "samples_per_member", (f"{self.samples_per_member} samples per prompt need temperature > 0: "
                                             "greedy decoding gives the same completion every time")
            if self.sigma_scale == "relative" and self.trainable == "lora":
                yield "sigma_scale", ("relative noise scales σ by each tensor's RMS, and LoRA's B starts at 0 "
                                      "(it would never move): use absolute with trainable: lora")
            yield from Trainable.of(self).problems()

        def samples_per_step(self, prompts: int) -> int:
            return self.population * min(self.prompts_per_member or prompts, prompts) * self.samples_per_member

    def __init__(self, policy, config: Config, seed: int):
        self.policy, self.config, self.seed = policy, config, seed
        self.params = make_trainable(policy, Trainable.of(config), seed)
        self.parameters = ParameterCount.of(policy.model, self.params)
        self.noise = make_noise(config.noise, seed, config.noise_rank)
        names = {name for name, _ in self.params}
        self.hooked = {}  # parameter name -> nn.Linear that takes its low-rank noise in the forward
        if self.noise.in_forward:
            self.hooked = {f"{m}.weight": module for m, module in policy.model.named_modules()
                           if isinstance(module, torch.nn.Linear) and f"{m}.weight" in names}
        self.master = {name: p.detach().to(torch.float32, copy=True) for name, p in self.params
                       if name not in self.hooked or p.dtype != torch.float32}
        self.sampler = SamplerConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)
        self.scales = dict.fromkeys((name for name, _ in self.params), 1.0)  # r_t of relative noise, per step
        self.movement = Movement()  # update_norm and update_cosine, watching the update

    @torch.no_grad()
    def rms(self) -> dict[str, float]:
        """The RMS of every trainable tensor's fp32 θ (the same bits on every process)."""
        return {name: float(self.master.get(name, param).double().square().mean().sqrt())
                for name, param in self.params}

    def set_scales(self, rms: dict[str, float], step: int) -> None:
        """r_t of this step: 1 for absolute noise, the tensor's RMS for relative noise."""
        if self.config.sigma_scale == "absolute":
            return
        zero = [name for name, value in rms.items() if value == 0]
        if zero:
            raise ValueError(f"es: sigma_scale: relative cannot perturb tensors of RMS 0 at step {step}: "
                             f"{', '.join(zero[:3])}{' ...' if len(zero) > 3 else ''} (freeze them with "
                             "trainable: subset, or use sigma_scale: absolute)")
        self.scales = rms

    # ---- ask: the policy as one member; tell: the update

    @contextlib.contextmanager
    @torch.no_grad()
    def ask(self, step: int, member: int):
        """The policy as member ``member`` of step ``step``; every parameter restored bit-exactly on exit."""
        j, sign = pair(member, self.config.antithetic)
        handles = []
        try:
            for name, param in self.params:
                scaled = self.config.sigma * self.scales[name]  # σ·r_t (r_t = 1.0 exactly for absolute noise)
                if name in self.hooked:
                    hook = self.noise.hook(step, j, name, param, sign * scaled)
                    handles.append(self.hooked[name].register_forward_hook(hook))
                else:
                    noise = self.noise.dense(step, j, name, param.shape, param.device)
                    param.copy_(self.master[name] + sign * scaled * noise)
            yield
        finally:
            for handle in handles:
                handle.remove()
            for name, param in self.params:
                if name not in self.hooked:
                    param.copy_(self.master[name])

    def step_size(self, step: int) -> float:
        """α at step ``step`` (counted from 0): the configured α, decayed after ``alpha_decay_from`` steps."""
        k = self.config.alpha_decay_from
        return self.config.alpha if k is None else self.config.alpha * min(1.0, math.sqrt(k / (step + 1)))

    @torch.no_grad()
    def tell(self, step: int, fitness: torch.Tensor) -> None:
        """θ ← θ + scale·r_t·Σ_j c_j ε_j - αλθ in fp32 from the members' fitnesses, identical on every process."""
        cfg, shaped, n = self.config, SHAPING[self.config.shaping](fitness), len(fitness)
        coef = torch.zeros(n // 2 if cfg.antithetic else n, dtype=torch.float64)  # c_j = Σ_{m uses ε_j} s_m F̃_m
        for member in range(n):
            j, sign = pair(member, cfg.antithetic)
            coef[j] += sign * shaped[member]
        alpha = self.step_size(step)
        scale = alpha / n / (1.0 if cfg.alpha_absorbs_sigma else cfg.sigma)
        self.movement.begin()
        for name, param in self.params:
            theta = self.master.get(name, param)
            delta = torch.zeros_like(theta)
            for j in coef.nonzero().flatten().tolist():
                noise = self.noise.dense(step, j, name, param.shape, theta.device)
                delta.add_(noise, alpha=float(coef[j]) * scale * self.scales[name])
            if cfg.weight_decay:
                delta.sub_(theta, alpha=alpha * cfg.weight_decay)
            moved = theta + delta
            self.movement.add(name, moved - theta)
            theta.copy_(moved)
            if theta is not param:
                param.copy_(theta)

    # ---- one step: evaluate this rank's members, share the fitnesses, update

    def step(self, prompts: list[list[int]], reward_fn: RewardFn, step: int) -> StepResult:
        cfg, start = self.config, time.perf_counter()
        if world()[1] > 1 and step % cfg.checksum_every == 0:
            self.check_replicas(step)
        rms = self.rms()
        self.set_scales(rms, step)
        totals, completions = self.evaluate(prompts[: cfg.prompts_per_member or len(prompts)], reward_fn, step)
        fitness = torch.tensor([totals[_fitness(m)] for m in range(cfg.population)], dtype=torch.float64)
        self.tell(step, fitness)
        moved = self.movement.stats()
        consumption, stats = common_stats(totals, moved.pop("update_norm"), time.perf_counter() - start,
                                          self.parameters)
        stats |= population_stats(fitness, totals, cfg.antithetic) | {"sigma": cfg.sigma}
        stats |= sigma_over_rms(cfg.sigma, self.scales, rms) | moved
        return StepResult(consumption, stats, completions)

    def evaluate(self, prompts: list[list[int]], reward_fn: RewardFn, step: int) -> tuple[dict[str, float], list]:
        """This rank's members (rank, rank + world, ...) on ``prompts``, each decoded ``samples_per_member``
        times with the step's common decoding seed: the all-rank sums of their fitnesses and counters, and a
        sample of completions."""
        (rank, size), k, n = world(), self.config.samples_per_member, self.config.population
        rows = [prompt for prompt in prompts for _ in range(k)]  # row r: prompt r // k, draw r % k
        counters = ("samples", "tokens", "forward_tokens", "reward_sum", "reward_squares", "member_seconds",
                    "perturb_seconds")
        sums = dict.fromkeys([*map(_fitness, range(n)), *counters], 0.0)  # every name on every rank
        completions = []
        for member in range(rank, n, size):
            begun = time.perf_counter()
            with self.ask(step, member):
                perturbed_at = time.perf_counter()
                out = generate(self.policy, rows, self.sampler, seed=seed_of(self.seed, RunKey.ES_DECODE, step))
                rewards = [float(reward_fn(r // k, text)) for r, text in enumerate(out.texts)]
                evaluated_at = time.perf_counter()
            restored_at = time.perf_counter()
            sums[_fitness(member)] = sum(rewards) / len(rewards)
            counts = {"samples": len(out.tokens), "tokens": sum(map(len, out.tokens)),
                      "forward_tokens": out.forward_tokens, "reward_sum": sum(rewards),
                      "reward_squares": sum(r * r for r in rewards), "member_seconds": evaluated_at - perturbed_at,
                      "perturb_seconds": (perturbed_at - begun) + (restored_at - evaluated_at)}
            for name, value in counts.items():
                sums[name] += value
            if not completions:
                completions = [{"prompt": row // k, "text": t, "reward": r, "member": member}
                               for row, (t, r) in enumerate(zip(out.texts, rewards))]
        return all_reduce_sums(sums), completions

    @torch.no_grad()
    def check_replicas(self, step: int) -> None:
        """All-gather a checksum of the fp32 parameter bits; raise if any process differs."""
        local = torch.zeros(1, dtype=torch.int64, device=self.policy.device)
        for name, param in self.params:
            local += self.master.get(name, param).view(torch.int32).sum(dtype=torch.int64)
        gathered = [torch.zeros_like(local) for _ in range(world()[1])]
        dist.all_gather(gathered, local)
        sums = [int(g) for g in gathered]
        if len(set(sums)) > 1:
            raise RuntimeError(f"ES replicas drifted apart at step {step}: parameter checksums per rank {sums}")

    def state_dict(self) -> dict:
        return {"theta": {name: self.master.get(name, p).detach().clone() for name, p in self.params},
                "previous_update": {name: change.clone() for name, change in self.movement.previous.items()}}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        for name, param in self.params:
            theta = self.master.get(name, param)
            theta.copy_(state["theta"][name])
            if theta is not param:
                param.copy_(theta)
        self.movement = Movement({name: change.clone() for name, change in state.get("previous_update", {}).items()})


def _fitness(member: int) -> str:
    """The name under which a member's fitness travels in the step's all-reduce."""
    return f"fitness[{member}]"
