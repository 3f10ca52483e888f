"""GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300) and the core shared by its variants.

One step: for each prompt, sample a group of G completions with the block-diffusion sampler; score
them; advantages A = r - mean_group(r) (``advantage="mean"``, d1) or (r - mean)/std (``"zscore"``).
Then μ inner iterations, each with fresh estimator masks keyed (seed, step, iteration) and the same
masks for θ and θ_old, minimise per unit u (token or block, by estimator)

    L = agg_u [ -min(ρ_u A, clip(ρ_u, 1-ε, 1+ε_high) A) + β k3_u ],   ρ_u = exp(ℓ̂_θ,u - ℓ̂_old,u),
    k3_u = exp(ℓ̂_ref,u - ℓ̂_θ,u) - (ℓ̂_ref,u - ℓ̂_θ,u) - 1   (k3 KL estimator, Schulman 2020)

with AdamW, gradient clipping, and aggregation ``token_mean`` (Σ over all units / number of units,
DAPO/d1 style) or ``sequence_mean`` (mean over units inside a sequence, then over sequences).

Vanilla ``grpo`` uses the ``ar`` estimator: causal attention, the logit at j-1 scores token j. It is
exact for an AR model and mismatched with the block-diffusion sampler: the baseline arm.
Variants (``diffu_grpo``, ``block_grpo``) change only the estimator (``_estimator``).

Distributed: with torch.distributed initialised (``accelerate launch`` or torchrun), every rank
receives the same prompt batch, takes prompts rank::world, and gradients are summed across ranks
with the loss normalised by the global unit count, so N processes compute what one would.
``sharding: fsdp`` shards parameters, gradients and AdamW moments over the ranks instead of
replicating them (``methods.fsdp``; needed for full fine-tuning at 7B, see docs/distributed.md).
Low-precision (bf16) weights train through fp32 master copies in both modes.

Statistics: the common ones (``methods.base.COMMON_STATS``; update_norm needs one fp32 copy of this
rank's masters during the step) and those TRL/verl users expect: loss, clip_frac, kl, ratio_mean,
ratio_max, estimator_std (spread of the estimator's draws), grad_norm, frac_zero_std_groups,
completion_length.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Literal

import torch

from arena.config import Checked
from arena.rng import seed_of
from arena.model.sampler import SamplerConfig, generate
from methods import fsdp, likelihood
from methods.base import (StepResult, Trainable, all_reduce_sum, all_reduce_sums, common_stats, make_trainable,
                          reference_context, register, world)


@dataclass
class GRPOConfig(Checked):
    group_size: int = 6  # G completions per prompt (d1: 6)
    advantage: Literal["mean", "zscore"] = "mean"  # "mean": r - group mean (d1, Dr. GRPO); "zscore": / group std (DeepSeekMath)
    clip_eps: float = 0.2  # ε, PPO clip (d1 uses 0.5)
    clip_eps_high: float | None = None  # ε_high (DAPO, arXiv 2503.14476); None = clip_eps
    inner_iterations: int = 1  # μ updates per batch (d1: 12)
    beta: float = 0.0  # k3 KL to the frozen reference (d1: 0.04; TRL default 0)
    loss_aggregation: Literal["token_mean", "sequence_mean"] = "token_mean"
    max_grad_norm: float = 1.0  # gradient clipping (d1: 0.2)
    lr: float = 3e-6  # AdamW (d1: 3e-6 with LoRA); 0 freezes the policy (a control arm)
    weight_decay: float = 0.0  # AdamW (d1: 0.1)
    micro_batch: int = 0  # sequences per forward/backward; 0 = the whole batch at once
    max_new_tokens: int = 64  # rollout length, rounded up to whole blocks
    temperature: float = 1.0  # rollout temperature; the estimators score at the same temperature
    threshold: float = 1.0  # sampler confidence threshold (1.0: one token per step)
    trainable: Literal["full", "lora"] = "full"  # peft for LoRA
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = Trainable.lora_targets  # the same default as ES: never a confound
    sharding: Literal["none", "fsdp"] = "none"  # "none": replicas, summed gradients; "fsdp": FSDP2 (Zhao et al. 2023), full FT only

    def problems(self):
        at_least = {"group_size": 2, "inner_iterations": 1, "micro_batch": 0, "max_new_tokens": 1, "beta": 0,
                    "weight_decay": 0, "lr": 0}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                yield name, f"must be >= {low}, got {getattr(self, name)!r}"
        for name in ("clip_eps", "temperature", "max_grad_norm"):
            if getattr(self, name) <= 0:
                yield name, f"must be > 0, got {getattr(self, name)!r}"
        if self.clip_eps_high is not None and self.clip_eps_high <= 0:
            yield "clip_eps_high", f"must be > 0 (or null: clip_eps), got {self.clip_eps_high!r}"
        if not 0 < self.threshold <= 1:
            yield "threshold", f"must be in (0, 1], got {self.threshold!r}"
        yield from Trainable.of(self).problems()
        if self.sharding == "fsdp" and self.trainable != "full":
            yield "sharding", "'fsdp' shards full fine-tuning; LoRA runs replicate the model (sharding: none)"


def group_advantages(rewards: torch.Tensor, group_size: int, mode: str) -> torch.Tensor:
    """Group-relative advantages; rewards are laid out group after group."""
    groups = rewards.view(-1, group_size)
    centered = groups - groups.mean(1, keepdim=True)
    if mode == "zscore":
        centered = centered / (groups.std(1, keepdim=True) + 1e-4)
    return centered.flatten()


def clipped_objective(logp, old_logp, ref_logp, advantages, units, config: GRPOConfig):
    """Per-unit GRPO loss terms (n, U) and the ratios; the update rule of every GRPO variant."""
    ratio = torch.exp(logp - old_logp)
    high = config.clip_eps if config.clip_eps_high is None else config.clip_eps_high
    a = advantages[:, None]
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - config.clip_eps, 1 + high) * a)
    loss = -surrogate
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        loss = loss + config.beta * kl
    return loss * units, ratio, kl


@register("grpo")
class GRPO:
    Config = GRPOConfig

    def __init__(self, policy, config: GRPOConfig, seed: int):
        self.policy, self.config, self.seed = policy, config, seed
        fsdp.check_launcher(config.sharding)
        self.params = make_trainable(policy, Trainable.of(config), seed)
        self.reference = None  # full fine-tuning with β > 0 keeps a frozen copy; LoRA disables the adapter
        if config.beta > 0 and config.trainable == "full":
            self.reference = copy.deepcopy(policy.model).eval().requires_grad_(False)
        self.sharded = config.sharding == "fsdp"
        if self.sharded:
            for model in (policy.model, self.reference):
                if model is not None:
                    fsdp.shard(model)
            self.params = [(n, p) for n, p in policy.model.named_parameters() if p.requires_grad]
        self.master = fsdp.MasterWeights([p for _, p in self.params])
        self.optimizer = torch.optim.AdamW(self.master.masters, lr=config.lr, weight_decay=config.weight_decay)
        self.sampler = SamplerConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                                     threshold=config.threshold)
        self.forward_tokens = 0  # estimator forward tokens of the current step

    def _estimator(self) -> tuple[str, dict]:
        return "ar", {}

    # ---------------------------------------------------------------------------------------
    def _score(self, batch, key, grad: bool, policy=None) -> likelihood.Estimate:
        """The estimator of ``policy`` (default: the trained one) on ``batch`` with masks keyed ``key``."""
        name, options = self._estimator()
        with torch.set_grad_enabled(grad):
            est = likelihood.estimate(name, policy or self.policy, batch, key, **options)
        self.forward_tokens += est.forward_tokens
        return est

    def _reference_logp(self, batch, key):
        if self.config.beta == 0:
            return None
        if self.reference is not None:
            frozen = dataclasses.replace(self.policy, model=self.reference)  # a view: self.policy is untouched
            return self._score(batch, key, grad=False, policy=frozen).logp
        with reference_context(self.policy):
            return self._score(batch, key, grad=False).logp

    def step(self, prompts: list[list[int]], reward_fn, step: int) -> StepResult:
        config, G, start = self.config, self.config.group_size, time.perf_counter()
        rank, size = world()
        if self.sharded and len(prompts) % size:
            # every rank must run the same number of sharded forwards (each one is a collective)
            raise ValueError(f"sharding='fsdp' needs the prompt batch ({len(prompts)}) divisible by the world "
                             f"size ({size})")
        mine = list(range(rank, len(prompts), size))  # this rank's prompts (all of them on one process)
        rows = [(i, g) for i in mine for g in range(G)]
        sample_ids = [i * G + g for i, g in rows]  # global ids: the same draws whatever the world size
        self.forward_tokens = 0

        # ---- rollout and rewards
        self.policy.model.eval()
        with fsdp.gathered(self.policy.model):
            out = generate(self.policy, [prompts[i] for i, _ in rows], self.sampler, seed=seed_of(self.seed, step),
                           row_ids=sample_ids)
        scores = [float(reward_fn(i, text)) for (i, _), text in zip(rows, out.texts)]
        rewards = torch.tensor(scores)
        advantages = group_advantages(rewards, G, config.advantage).to(self.policy.device)
        batch = likelihood.ScoringBatch.build([prompts[i] for i, _ in rows], out.tokens, self.policy.pad_id,
                                              self.policy.block_size, config.temperature, sample_ids,
                                              device=self.policy.device)
        name, _ = self._estimator()
        units = likelihood.unit_mask(name, batch, self.policy.block_size)
        local_units = float(units.sum()) if config.loss_aggregation == "token_mean" else len(rows)
        normaliser = all_reduce_sums({"normaliser": local_units})["normaliser"]

        # ---- θ_old (iteration 0: the current pass, detached) and reference scores, before any update
        keys = [(self.seed, step, it) for it in range(config.inner_iterations)]
        old = {it: self._score(batch, keys[it], grad=False).logp for it in range(1, config.inner_iterations)}
        refs = [self._reference_logp(batch, key) for key in keys]

        # ---- μ inner iterations of the clipped objective
        n, micro = len(rows), config.micro_batch or len(rows)
        high = config.clip_eps if config.clip_eps_high is None else config.clip_eps_high
        sums = dict.fromkeys(("loss", "units", "clipped", "ratio", "ratio_max", "kl", "draw_std", "draw_units"), 0.0)
        grad_norm = 0.0
        before = [fsdp.local(m.detach()).clone() for m in self.master.masters]  # for update_norm
        for it in range(config.inner_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for lo in range(0, n, micro):
                part = slice(lo, lo + micro)
                est = self._score(batch.rows(part), keys[it], grad=True)
                old_logp = est.logp.detach() if it == 0 else old[it][part]
                ref = None if refs[it] is None else refs[it][part]
                terms, ratio, kl = clipped_objective(est.logp, old_logp, ref, advantages[part], est.units, config)
                if config.loss_aggregation == "token_mean":
                    loss = terms.sum() / normaliser
                else:
                    loss = (terms.sum(-1) / est.units.sum(-1).clamp_min(1)).sum() / normaliser
                loss.backward()
                self.master.accumulate()
                u = est.units
                sums["loss"] += loss.item()
                sums["units"] += float(u.sum())
                sums["clipped"] += float((((ratio < 1 - config.clip_eps) | (ratio > 1 + high)) & u).sum())
                sums["ratio"] += float((ratio.detach() * u).sum())
                sums["kl"] += float((kl.detach() * u).sum())
                sums["ratio_max"] = max(sums["ratio_max"], float(ratio.detach()[u].max()) if u.any() else 0.0)
                if est.draw_values is not None and est.draw_values.shape[1] > 1:
                    sums["draw_std"] += float(est.draw_values.detach().std(1)[u].sum())
                    sums["draw_units"] += float(u.sum())
            if not self.sharded:  # FSDP has reduce-scattered (summed) them already
                for master in self.master.masters:
                    if master.grad is not None:
                        all_reduce_sum(master.grad)
            grad_norm += float(torch.nn.utils.clip_grad_norm_(self.master.masters, config.max_grad_norm))
            self.optimizer.step()
            self.master.publish()

        # ---- statistics and consumption over all ranks
        groups = rewards.view(-1, G)
        totals = all_reduce_sums({
            **sums, "samples": n, "tokens": sum(map(len, out.tokens)),
            "forward_tokens": out.forward_tokens + self.forward_tokens,
            "reward_sum": sum(scores), "reward_squares": sum(r * r for r in scores),
            "zero_std_groups": float((groups.std(1) == 0).sum()), "groups": len(groups),
            "completion_tokens": sum(out.lengths), "update_squares": self._update_squares(before),
        }, max_keys=("ratio_max",))
        consumption, stats = common_stats(totals, math.sqrt(totals["update_squares"]), time.perf_counter() - start)
        units = max(totals["units"], 1)
        stats |= {
            "frac_zero_std_groups": totals["zero_std_groups"] / totals["groups"],
            "loss": totals["loss"] / config.inner_iterations, "clip_frac": totals["clipped"] / units,
            "kl": totals["kl"] / units, "ratio_mean": totals["ratio"] / units, "ratio_max": totals["ratio_max"],
            "estimator_std": totals["draw_std"] / max(totals["draw_units"], 1),
            "grad_norm": grad_norm / config.inner_iterations,
            "completion_length": totals["completion_tokens"] / totals["samples"],
        }
        sample = [{"prompt": i, "text": text, "reward": float(r)} for (i, _), text, r in zip(rows, out.texts, rewards)]
        return StepResult(consumption, stats, sample[: 2 * G])

    def _update_squares(self, before: list[torch.Tensor]) -> float:
        """Σ (θ - θ_before)² over this rank's fp32 masters; summed over ranks, the squared global norm
        (FSDP ranks hold one shard each; replicas hold the whole update, which rank 0 alone counts)."""
        if not self.sharded and world()[0] != 0:
            return 0.0
        pairs = zip(self.master.masters, before)
        return sum(float((fsdp.local(m.detach()) - b).double().square().sum()) for m, b in pairs)

    # ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """fp32 masters, optimizer and reference; under FSDP, this rank's shards (see ``methods.fsdp``)."""
        state = {
            "params": {name: m.detach().clone() for (name, _), m in zip(self.params, self.master.masters)},
            "optimizer": fsdp.optimizer_state(self.policy.model, self.optimizer),
        }
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            for (name, _), master in zip(self.params, self.master.masters):
                master.copy_(state["params"][name])
        self.master.publish()
        fsdp.load_optimizer_state(self.policy.model, self.optimizer, state["optimizer"])
        if self.reference is not None:
            self.reference.load_state_dict(state["reference"])
