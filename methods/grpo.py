"""GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300) and the core shared by its variants.

One step: for each prompt, sample a group of G completions with the block-diffusion sampler; score
them; advantages A = r - mean_group(r) (``advantage="mean"``, d1) or (r - mean)/std (``"zscore"``).
Then μ inner iterations, each with fresh estimator masks keyed (seed, step, iteration) and the same
masks for θ and θ_old, minimise per unit u (token or block, by estimator)

    L = agg_u [ -min(ρ_u A, clip(ρ_u, 1-ε, 1+ε_high) A) + β k3_u ],   ρ_u = exp(ℓ̂_θ,u - ℓ̂_old,u),
    k3_u = exp(ℓ̂_ref,u - ℓ̂_θ,u) - (ℓ̂_ref,u - ℓ̂_θ,u) - 1   (k3 KL estimator, Schulman 2020)

with AdamW, gradient clipping, and aggregation ``token_mean`` (Σ over all units / number of units,
DAPO/d1 style) or ``sequence_mean`` (mean over units inside a sequence, then over sequences).
θ, θ_old and the reference are scored on the same micro-batches (same rows, same shapes), so where
they agree every log-ratio is exactly 0: a zero reward moves nothing, not even by rounding noise.

Non-finite safety. Log-ratios enter exp() clamped to ±20 nats (``LOG_RATIO_BOUND``; k3 continues
along its tangent beyond it), with the share of clamped units reported as ``clamped_frac``. A step
whose loss or gradient norm (all ranks) is not finite is skipped: no further inner iterations, the
masters back where the step found them (AdamW's moments keep the finite updates' gradients), counted
in ``skipped_steps`` (cumulative over the run). ``max_skipped_steps`` consecutive skips raise
``NonFiniteError`` naming the step and the statistic; the runner fails the run with that message.

Vanilla ``grpo`` uses the ``ar`` estimator: causal attention, the logit at j-1 scores token j. It is
exact for an AR model and mismatched with the block-diffusion sampler: the baseline arm.
Variants (``diffu_grpo``, ``block_grpo``) change only the estimator (``_estimator``); a variant of the update
rule (dual-clip, say) overrides ``GRPO.surrogate``, the min(...) term above.

Distributed: with torch.distributed initialised (``accelerate launch`` or torchrun), every rank
receives the same prompt batch, takes prompts rank::world, and gradients are summed across ranks
with the loss normalised by the global unit count, so N processes compute what one would.
``sharding: fsdp`` shards parameters, gradients and AdamW moments over the ranks instead of
replicating them (``methods.fsdp``; needed for full fine-tuning at 7B, see docs/distributed.md).
Low-precision (bf16) weights train through fp32 master copies in both modes.

Statistics: the common ones (``methods.base.COMMON_STATS``; update_norm needs one fp32 copy of this
rank's masters during the step) and those TRL/verl users expect: loss, clip_frac, kl, ratio_mean,
ratio_max, estimator_std (spread of the estimator's draws), grad_norm, frac_zero_std_groups,
completion_length; and clamped_frac, skipped_steps (above); the rollout diagnostics identical_share and
tokens_per_forward (``methods.diagnostics``), whose step maps go to the runner in the result's ``decoding``.
An out-of-memory error names its phase: rollout, scoring, backward or optimizer (``arena.memory``).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Literal

import torch

from arena.config import IDENTITY_WHEN_SET
from arena.memory import phase
from arena.rng import seed_of
from arena.model.sampler import Generation, SamplerConfig, generate
from methods import diagnostics, fsdp, likelihood
from methods.base import MethodConfig, NonFiniteError, StepResult, common_stats, register
from methods.collectives import all_reduce_sum, all_reduce_sums, world
from methods.trainable import ParameterCount, Trainable, make_trainable, reference_context


@dataclass
class GRPOConfig(MethodConfig):
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
    # rollouts through Fast-dLLM v2's sub-block cache (arena.model.sampler); off: the hashes of earlier runs
    sub_block_cache: bool = field(default=False, metadata={IDENTITY_WHEN_SET: True})
    trainable: Literal["full", "lora", "subset"] = "full"  # peft for LoRA; subset: trainable_names
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = Trainable.lora_targets  # the same default as ES: never a confound
    trainable_names: tuple[str, ...] = ()  # subset: regular expressions over parameter names (Trainable)
    sharding: Literal["none", "fsdp"] = "none"  # "none": replicas, summed gradients; "fsdp": FSDP2 (Zhao et al. 2023), full FT only
    max_skipped_steps: int = 3  # stop the run when this many consecutive steps are skipped as non-finite

    def problems(self):
        at_least = {"group_size": 2, "inner_iterations": 1, "micro_batch": 0, "max_new_tokens": 1, "beta": 0,
                    "weight_decay": 0, "lr": 0, "max_skipped_steps": 1}
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

    def samples_per_step(self, prompts: int) -> int:
        return self.group_size * prompts


def group_advantages(rewards: torch.Tensor, group_size: int, mode: str) -> torch.Tensor:
    """Group-relative advantages; rewards are laid out group after group."""
    groups = rewards.view(-1, group_size)
    centered = groups - groups.mean(1, keepdim=True)
    if mode == "zscore":
        centered = centered / (groups.std(1, keepdim=True) + 1e-4)
    return centered.flatten()


# Log-ratios enter exp() clamped to ±LOG_RATIO_BOUND nats (verl's bound). e^20 = 4.9e8 keeps ρ·A, the
# k3 term, their sums over units and Adam's squared gradients far below float32's 3.4e38 = e^88.7; an
# honest per-unit log-ratio is far smaller (the PPO clip at ε = 0.2 is 0.18 nats; the uniform-form
# ELBO's 99th percentile between nearby θ is 15), so only a runaway unit (85 nats seen) is clamped.
LOG_RATIO_BOUND = 20.0


def clipped_surrogate(ratio, advantages, config: GRPOConfig):
    """PPO's clipped surrogate per unit, min(ρ A, clip(ρ, 1-ε, 1+ε_high) A): what GRPO maximises."""
    high = config.clip_eps if config.clip_eps_high is None else config.clip_eps_high
    return torch.minimum(ratio * advantages, ratio.clamp(1 - config.clip_eps, 1 + high) * advantages)


def clipped_objective(logp, old_logp, ref_logp, advantages, units, config: GRPOConfig, surrogate=None):
    """Per-unit GRPO loss terms (n, U) and the ratios; the update rule of every GRPO variant.

    ``surrogate(ratio, advantages)``: the term to maximise, from the ratios (n, U) and the advantages (n, 1);
    ``clipped_surrogate`` if None. A step passes its method's ``GRPO.surrogate``, which a variant overrides.
    Log-ratios are clamped to ±LOG_RATIO_BOUND before exp. In ρ the clamp stops the gradient (a
    clamped ρ is constant, as a clipped one is). k3 continues beyond the bound along its tangent,
    so a clamped unit keeps a finite gradient (e^20 - 1 at most) pulling it back to the reference.
    """
    bound = LOG_RATIO_BOUND
    ratio = torch.exp((logp - old_logp).clamp(-bound, bound))
    a = advantages[:, None]
    loss = -(surrogate(ratio, a) if surrogate else clipped_surrogate(ratio, a, config))
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        delta = ref_logp - logp
        inside = delta.clamp(-bound, bound)
        kl = torch.exp(inside) * (1 + delta - inside) - delta - 1  # = e^δ - δ - 1 for |δ| <= bound
        loss = loss + config.beta * kl
    return loss * units, ratio, kl


def clamped_units(logp, old_logp, ref_logp) -> torch.Tensor:
    """(n, U) bool: units whose ratio or k3 log-ratio ``clipped_objective`` clamps (NaN: not counted)."""
    logp = logp.detach()
    clamped = (logp - old_logp).abs() > LOG_RATIO_BOUND
    if ref_logp is not None:
        clamped |= (ref_logp - logp).abs() > LOG_RATIO_BOUND
    return clamped


@dataclass
class Rollout:
    """One step's completions on this rank, their rewards and advantages, and the batch that scores them."""

    rows: list[tuple[int, int]]  # (prompt, member of its group) of each completion
    generation: Generation
    scores: list[float]  # the rewards, as floats
    rewards: torch.Tensor
    advantages: torch.Tensor
    batch: likelihood.ScoringBatch
    normaliser: float  # the loss's divisor over all ranks: units (token_mean) or sequences


@dataclass
class InnerIterations:
    """What the inner iterations of a step summed, and how they ended."""

    sums: dict[str, float]  # loss, units, clipped, clamped, ratio, ratio_max, kl, draw_std, draw_units
    before: list[torch.Tensor]  # this rank's masters before the step (update_norm, and a skip)
    grad_norm: float = 0.0  # summed over the iterations
    updates: int = 0  # optimizer steps taken
    failure: tuple | None = None  # (iteration, loss, gradient norm, non-finite rewards) of a non-finite iteration


@register("grpo")
class GRPO:
    Config = GRPOConfig

    def __init__(self, policy, config: GRPOConfig, seed: int):
        self.policy, self.config, self.seed = policy, config, seed
        self.scorer = likelihood.Scorer(*self._estimator())  # the config checked the estimator's options
        fsdp.check_launcher(config.sharding)
        self.params = make_trainable(policy, Trainable.of(config), seed)
        self.parameters = ParameterCount.of(policy.model, self.params)  # before FSDP flattens them
        self.reference = None  # full or subset fine-tuning with β > 0 keeps a frozen copy; LoRA disables the adapter
        if config.beta > 0 and config.trainable != "lora":
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
                                     threshold=config.threshold, sub_block_cache=config.sub_block_cache)
        self.forward_tokens = 0  # estimator forward tokens of the current step
        self.backward_tokens = 0  # of them, those the loss's backward pass goes through
        self.skipped_steps = 0  # steps skipped as non-finite, this run (checkpointed)
        self.consecutive_skips = 0  # of them, the latest in a row

    def _estimator(self) -> tuple[str, dict]:
        """The estimator's name and every one of its options, as the config holds them (and checked them)."""
        return "ar", {}

    def surrogate(self, ratio: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """The per-unit term the update maximises, from the ratios ρ (n, U) and the advantages (n, 1): PPO's clipped
        surrogate. A variant overrides it (docs/extending.md: dual-clip); the clamp of ρ, the KL term and the
        aggregation stay the core's. At ``inner_iterations: 1`` ρ is exactly 1: no override can act (``warnings``)."""
        return clipped_surrogate(ratio, advantages, self.config)

    @classmethod
    def warnings(cls, config: GRPOConfig) -> list[str]:
        """Valid settings that cannot change a run: at ``inner_iterations: 1`` θ_old is θ, ρ = 1 exactly, so a
        subclass's ``surrogate`` and the clip options do nothing, and the run is bit-identical to plain GRPO's."""
        if config.inner_iterations > 1:
            return []
        inert = [f"the surrogate of {cls.__module__}:{cls.__qualname__}"] if cls.surrogate is not GRPO.surrogate else []
        inert += [f"{name}: {getattr(config, name)}" for name in ("clip_eps", "clip_eps_high")
                  if getattr(config, name) != getattr(GRPOConfig, name)]
        if not inert:
            return []
        return [f"with inner_iterations: 1 every ratio is exactly 1, so {' and '.join(inert)} cannot change the "
                "update (the run is, bit for bit, what it would be without them); set inner_iterations >= 2 to let "
                "the ratios move"]

    # ---------------------------------------------------------------------------------------
    def _score(self, batch, key, grad: bool, policy=None) -> likelihood.Estimate:
        """The estimator of ``policy`` (default: the trained one) on ``batch`` with masks keyed ``key``."""
        with torch.set_grad_enabled(grad):
            est = self.scorer(policy or self.policy, batch, key)
        self.forward_tokens += est.forward_tokens
        if grad:  # every pass with a graph is backpropagated (step: loss.backward per micro-batch)
            self.backward_tokens += est.forward_tokens
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
        start = time.perf_counter()
        with phase("rollout"):
            rollout = self._rollout(prompts, reward_fn, step)
        with phase("scoring"):  # the inner iterations' forwards; their backward and optimizer phases inside
            inner = self._inner_iterations(rollout, step)
        return self._result(rollout, inner, step, start)

    def _rollout(self, prompts: list[list[int]], reward_fn, step: int) -> Rollout:
        """This rank's groups of completions, their rewards and advantages, and the batch that scores them."""
        config, G = self.config, self.config.group_size
        rank, size = world()
        if self.sharded and len(prompts) % size:
            # every rank must run the same number of sharded forwards (each one is a collective)
            raise ValueError(f"sharding='fsdp' needs the prompt batch ({len(prompts)}) divisible by the world "
                             f"size ({size})")
        mine = list(range(rank, len(prompts), size))  # this rank's prompts (all of them on one process)
        rows = [(i, g) for i in mine for g in range(G)]
        sample_ids = [i * G + g for i, g in rows]  # global ids: the same draws whatever the world size
        self.forward_tokens = self.backward_tokens = 0
        self.policy.model.eval()
        with fsdp.gathered(self.policy.model):
            out = generate(self.policy, [prompts[i] for i, _ in rows], self.sampler, seed=seed_of(self.seed, step),
                           row_ids=sample_ids)
        scores = [float(reward_fn(i, text)) for (i, _), text in zip(rows, out.texts)]
        rewards = torch.tensor(scores)
        advantages = group_advantages(rewards, G, config.advantage).to(self.policy.device)
        batch = likelihood.ScoringBatch.build([prompts[i] for i, _ in rows], out.tokens, self.policy.pad_id,
                                              self.policy.block_size, config.temperature, sample_ids,
                                              device=self.policy.device,
                                              # the rollout's sub-block (None: the policy's, as the sampler)
                                              # and decoding steps (the trajectory estimator needs them)
                                              sub_block=self.sampler.sub_block, steps=out.steps)
        units = likelihood.unit_mask(self.scorer.name, batch, self.policy.block_size)
        local_units = float(units.sum()) if config.loss_aggregation == "token_mean" else len(rows)
        normaliser = all_reduce_sums({"normaliser": local_units})["normaliser"]
        return Rollout(rows, out, scores, rewards, advantages, batch, normaliser)

    def _inner_iterations(self, rollout: Rollout, step: int) -> InnerIterations:
        """μ inner iterations of the clipped objective on ``rollout``; a non-finite one skips the whole step."""
        config, batch = self.config, rollout.batch
        keys = [(self.seed, step, it) for it in range(config.inner_iterations)]
        n, micro = len(rollout.rows), config.micro_batch or len(rollout.rows)
        parts = [slice(lo, lo + micro) for lo in range(0, n, micro)]
        old, refs = self._fixed_scores(batch, keys, parts)
        sums = dict.fromkeys(("loss", "units", "clipped", "clamped", "ratio", "ratio_max", "kl", "draw_std",
                              "draw_units"), 0.0)
        bad_rewards = float((~torch.isfinite(rollout.rewards)).sum())
        inner = InnerIterations(sums, before=[fsdp.local(m.detach()).clone() for m in self.master.masters])
        for it in range(config.inner_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            iteration_loss = 0.0
            for j, part in enumerate(parts):
                est = self._score(batch.rows(part), keys[it], grad=True)
                old_logp = est.logp.detach() if it == 0 else old[it][j]
                ref = refs[it][j]
                terms, ratio, kl = clipped_objective(est.logp, old_logp, ref, rollout.advantages[part], est.units,
                                                     config, self.surrogate)
                if config.loss_aggregation == "token_mean":
                    loss = terms.sum() / rollout.normaliser
                else:
                    loss = (terms.sum(-1) / est.units.sum(-1).clamp_min(1)).sum() / rollout.normaliser
                with phase("backward"):
                    loss.backward()
                    self.master.accumulate()
                iteration_loss += loss.item()
                self._count(sums, est, ratio, kl, old_logp, ref)
            if not self.sharded:  # FSDP has reduce-scattered (summed) them already
                for master in self.master.masters:
                    if master.grad is not None:
                        all_reduce_sum(master.grad)
            norm = float(torch.nn.utils.clip_grad_norm_(self.master.masters, config.max_grad_norm))  # global
            checked = all_reduce_sums({"loss": iteration_loss, "bad_rewards": bad_rewards})  # every rank decides alike
            sums["loss"] += iteration_loss
            inner.grad_norm += norm
            if not (math.isfinite(checked["loss"]) and math.isfinite(norm)):
                inner.failure = (it, checked["loss"], norm, checked["bad_rewards"])
                break
            with phase("optimizer"):
                self.optimizer.step()
                self.master.publish()
            inner.updates += 1
        if inner.failure is not None:
            self._skip(inner)
        else:
            self.consecutive_skips = 0
        return inner

    def _fixed_scores(self, batch, keys, parts) -> tuple[dict, list]:
        """θ_old (iteration 0: the current pass, detached) and reference scores, before any update, on the θ pass's
        own micro-batches: the same rows and shapes give the same bits, so where θ, θ_old and the reference agree
        every log-ratio is exactly 0 (not a rounding residue Adam would amplify)."""
        old = {it: [self._score(batch.rows(part), keys[it], grad=False).logp for part in parts]
               for it in range(1, self.config.inner_iterations)}
        refs = [[self._reference_logp(batch.rows(part), key) for part in parts] for key in keys]
        return old, refs

    def _skip(self, inner: InnerIterations) -> None:
        """Skip the whole step: the masters go back to where it started."""
        self.optimizer.zero_grad(set_to_none=True)
        if inner.updates:
            self._restore(inner.before)
        self.skipped_steps += 1
        self.consecutive_skips += 1

    def _count(self, sums: dict[str, float], est, ratio, kl, old_logp, ref) -> None:
        """Add one micro-batch's units, clipped and clamped units, ratios, KL and estimator spread to ``sums``."""
        config, u = self.config, est.units
        high = config.clip_eps if config.clip_eps_high is None else config.clip_eps_high
        sums["units"] += float(u.sum())
        sums["clipped"] += float((((ratio < 1 - config.clip_eps) | (ratio > 1 + high)) & u).sum())
        sums["clamped"] += float((clamped_units(est.logp, old_logp, ref) & u).sum())
        sums["ratio"] += float((ratio.detach() * u).sum())
        sums["kl"] += float((kl.detach() * u).sum())
        sums["ratio_max"] = max(sums["ratio_max"], float(ratio.detach()[u].max()) if u.any() else 0.0)
        if est.draw_values is not None and est.draw_values.shape[1] > 1:
            sums["draw_std"] += float(est.draw_values.detach().std(1)[u].sum())
            sums["draw_units"] += float(u.sum())

    def _result(self, rollout: Rollout, inner: InnerIterations, step: int, start: float) -> StepResult:
        """The step's statistics and consumption over all ranks; NonFiniteError after too many skips in a row."""
        config, G, out, scores = self.config, self.config.group_size, rollout.generation, rollout.scores
        iterations = inner.updates + (inner.failure is not None)  # the inner iterations that ran
        groups = rollout.rewards.view(-1, G)
        totals = all_reduce_sums({
            **inner.sums, "samples": len(rollout.rows), "tokens": sum(map(len, out.tokens)),
            "forward_tokens": out.forward_tokens + self.forward_tokens, "backward_tokens": self.backward_tokens,
            "reward_sum": sum(scores), "reward_squares": sum(r * r for r in scores),
            "zero_std_groups": float((groups.std(1) == 0).sum()), "groups": len(groups),
            "completion_tokens": sum(out.lengths), "update_squares": self._update_squares(inner.before),
            **diagnostics.decoding_sums(out, G, config.max_new_tokens),
        }, max_keys=("ratio_max",))
        if inner.failure is not None and self.consecutive_skips >= config.max_skipped_steps:
            raise NonFiniteError(self._non_finite_message(step, *inner.failure))
        consumption, stats = common_stats(totals, math.sqrt(totals["update_squares"]), time.perf_counter() - start,
                                          self.parameters)
        units = max(totals["units"], 1)
        stats |= {
            "frac_zero_std_groups": totals["zero_std_groups"] / totals["groups"],
            "loss": totals["loss"] / iterations, "clip_frac": totals["clipped"] / units,
            "clamped_frac": totals["clamped"] / units, "skipped_steps": float(self.skipped_steps),
            "kl": totals["kl"] / units, "ratio_mean": totals["ratio"] / units, "ratio_max": totals["ratio_max"],
            "estimator_std": totals["draw_std"] / max(totals["draw_units"], 1),
            "grad_norm": inner.grad_norm / iterations,
            "completion_length": totals["completion_tokens"] / totals["samples"],
            **diagnostics.decoding_stats(totals, totals["samples"], config.max_new_tokens),
        }
        sample = [{"prompt": i, "text": text, "reward": float(r)}
                  for (i, _), text, r in zip(rollout.rows, out.texts, rollout.rewards)]
        return diagnostics.RolloutResult(consumption, stats, sample[: 2 * G],
                                         diagnostics.decoding_record(out, rollout.rows))

    def _non_finite_message(self, step: int, iteration: int, loss: float, norm: float, bad_rewards: float) -> str:
        what = (f"loss is {loss} (gradient norm {norm:.4g})" if not math.isfinite(loss)
                else f"gradient norm is {norm} (loss {loss:.4g})")
        cause = f"; {int(bad_rewards)} of this step's rewards are not finite" if bad_rewards else ""
        streak = self.consecutive_skips
        return (f"{self.name} step {step} (inner iteration {iteration}): {what}{cause}; {streak} consecutive "
                f"step{'s' if streak > 1 else ''} skipped (max_skipped_steps: {self.config.max_skipped_steps}), the "
                f"parameters are those from before the first of them; check the rewards and the learning rate")

    def _restore(self, before: list[torch.Tensor]) -> None:
        """Put this rank's masters back to ``before`` (their local shards) and publish them."""
        with torch.no_grad():
            for master, saved in zip(self.master.masters, before):
                fsdp.local(master.detach()).copy_(saved)
        self.master.publish()

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
            "skipped_steps": self.skipped_steps, "consecutive_skips": self.consecutive_skips,
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
        self.skipped_steps = state.get("skipped_steps", 0)  # checkpoints from before the counters: none skipped
        self.consecutive_skips = state.get("consecutive_skips", 0)
        if self.reference is not None:
            self.reference.load_state_dict(state["reference"])
