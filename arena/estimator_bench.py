"""``arena estimators``: bias, spread and cost of every likelihood estimator, on the model's own samples.

This module measures; ``arena.report`` renders the records (table, figure, files).

The model samples completions of held-out prompts (``arena estimators --task``, arithmetic by default,
through the model's chat template if it has one) with the sampler whose likelihood the block estimators target: temperature
1, uniformly random unmasking order inside each sub-block, the policy's own sub-block size (as the
rollouts use it), its decoding steps recorded for the ``trajectory`` estimator. Every estimator and
setting of ``methods.likelihood`` then scores each completion ``repeats`` times under independent
mask keys, with the sampler's sub-block. Per completion block b, with ē_b the mean and s_b² the
variance of the repeats and r_b the reference:

- reference: the analytic sub-block-chain ELBO (first-token term + Σ over sub-blocks of the
  sub-block's ELBO, each summed over all 2^m_s mask sets with the later sub-blocks masked,
  ``methods.oracle``) when the block size is <= 8; otherwise a high-draw Monte Carlo ELBO (count
  form, sub-block aware, ``reference_draws`` draws, keys apart from the measured ones);
- bias = mean_b (ē_b - r_b), in nats per block; bias_stderr = sqrt(Σ_b s_b²/R + var(r_b)) / #blocks,
  the Monte Carlo error of that mean given the sampled completions (the blocks are fixed, the masks
  random), so an unbiased estimator has |bias| within a few stderr;
- std = sqrt(mean_b s_b²): the spread of one estimate of one block across mask keys;
- std_sequence = sqrt(mean_i var(Σ_b e_ib)): the spread of one estimate of a whole completion (the sum
  over its blocks) across mask keys, where the blocks' joint law acts (``ebpo`` stratifies its levels
  across a sequence's blocks; the other estimators draw each block's masks independently);
- rmse = sqrt(mean_b ((ē_b - r_b)² + s_b²)): the error of one estimate, bias and spread together;
- bias_exact: the same bias against the exact log-likelihood of the random-order sampler with
  sub-blocks (the chain over sub-blocks, each enumerated over its unmasking orders; only with the
  analytic reference), which the sub-block ELBO bounds from below;
- cost: forward tokens and wall seconds per scored sequence (forward only, batched, this machine).

Token-unit estimators (``ar``, ``d1``) are summed over each block's completion tokens. ``trajectory``
is deterministic (std 0): log p(y | the recorded unmasking order). Given y, the recorded order σ is a
draw from the posterior P(σ | y), so its expectation is log P(y) + KL(P(σ | y) || P(σ)): on average
at or above the exact log-likelihood, and above the ELBO = E_{σ~P(σ)} log p(y | σ).

The settings come from the vocabulary itself (``methods.likelihood.ESTIMATORS``): every estimator,
with its draw or node count over the given lists, each flag both ways, each enumerated option over
its values and the others at their defaults, so an estimator added there is measured here.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import time
import typing
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from arena.config import problems_of
from arena.rng import BenchKey
from arena.model.sampler import SamplerConfig, generate
from methods.likelihood import ESTIMATORS, ScoringBatch, estimate
from methods.oracle import completion_blocks

EXACT_BLOCK_LIMIT = 8  # the analytic ELBO enumerates 2^(B-1) mask sets per block
CHUNK_TOKENS = 16384  # packed tokens per scoring forward
REFERENCE_CALL_DRAWS = 16  # draws per forward of the Monte Carlo reference
COUNTS = ("draws", "nodes")  # the options that set an estimator's cost, swept over the given lists


@dataclass(frozen=True)
class Setting:
    estimator: str  # a name of ``methods.likelihood.ESTIMATORS``
    options: dict  # every option of that estimator, defaults included

    @property
    def count(self) -> int | None:
        """Monte Carlo draws or Gauss-Legendre nodes; None for single-pass estimators."""
        return next((self.options[name] for name in COUNTS if name in self.options), None)

    @property
    def streams(self) -> int:
        """Masks per sequence (draws or nodes, else 1); the block estimators score each in B/S views."""
        return self.count or 1

    def views(self, block_size: int, sub_block: int) -> int:
        """Noisy streams per sequence in the packed forward (an upper bound for ``trajectory``: one per step)."""
        if self.estimator == "trajectory":
            return block_size - 1
        if ESTIMATORS[self.estimator].unit == "block":
            return self.streams * (block_size // sub_block)
        return 1

    @property
    def variant(self) -> str:
        """The options other than the count, as ``name=value``; a flag by its name when on, omitted when off."""
        return " ".join(name if value is True else f"{name}={value}" for name, value in self.options.items()
                        if name not in COUNTS and value is not False)


def settings(draws: list[int], nodes: list[int]) -> list[Setting]:
    """Every estimator at every combination of its option values (see the module docstring), the count
    varying fastest; combinations its options reject (an odd number of antithetic draws) are left out."""
    counts = {"draws": draws, "nodes": nodes}
    out = []
    for name, spec in ESTIMATORS.items():
        hints = typing.get_type_hints(spec.options)
        axes = {}
        for f in sorted(dataclasses.fields(spec.options), key=lambda f: f.name in counts):
            hint = hints[f.name]
            axes[f.name] = (counts[f.name] if f.name in counts else (False, True) if hint is bool
                            else typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else (f.default,))
        for values in itertools.product(*axes.values()):
            options = dict(zip(axes, values))
            if not problems_of(spec.options, **options):
                out.append(Setting(name, options))
    return out


@dataclass
class Measurement:
    records: list[dict]
    model: str
    sequences: int
    blocks: int
    sub_block: int  # the sampler's sub-block size, which every block estimator and the references use
    reference: str
    repeats: int
    seconds: float
    device: str  # where the seconds were measured
    samples: list[str]  # a few decoded completions, for the reader


def sample_completions(policy, prompts: list[list[int]], max_new_tokens: int, seed: int):
    """Random unmasking order with the policy's own sub-block: the sampler the block estimators target."""
    config = SamplerConfig(max_new_tokens=max_new_tokens, temperature=1.0, order="random", sub_block=policy.sub_block)
    return generate(policy, prompts, config, seed=seed)


def replicate(batch: ScoringBatch, repeats: int) -> ScoringBatch:
    """``repeats`` copies of every row; row r*n + i keys its masks by sample id r*n + i (independent)."""
    n = batch.ids.shape[0]
    return dataclasses.replace(batch, ids=batch.ids.repeat(repeats, 1), valid=batch.valid.repeat(repeats, 1),
                               prompt_lengths=batch.prompt_lengths.repeat(repeats), sample_ids=list(range(n * repeats)),
                               steps=None if batch.steps is None else batch.steps.repeat(repeats, 1))


def block_values(logp: torch.Tensor, units: torch.Tensor, unit: str, block_size: int) -> torch.Tensor:
    """(rows, blocks) per-block estimates; token-unit estimates are summed over each block."""
    if unit == "token":
        logp = (logp * units).reshape(logp.shape[0], -1, block_size).sum(-1)
    return logp


@torch.no_grad()
def score(policy, batch: ScoringBatch, setting: Setting, key: tuple[int, ...], repeats: int):
    """(repeats, n, blocks) estimates under independent keys, forward tokens and seconds per sequence."""
    n, T = batch.ids.shape
    many = replicate(batch, repeats)
    per_call = max(1, CHUNK_TOKENS // (T * (1 + setting.views(policy.block_size, batch.sub_block or policy.sub_block))))
    values, tokens, seconds = [], 0, 0.0
    for start in range(0, n * repeats, per_call):
        chunk = many.rows(slice(start, start + per_call))
        began = time.perf_counter()
        est = estimate(setting.estimator, policy, chunk, key, **setting.options)
        seconds += time.perf_counter() - began
        tokens += est.forward_tokens
        values.append(block_values(est.logp, est.units, ESTIMATORS[setting.estimator].unit, policy.block_size))
    values = torch.cat(values).reshape(repeats, n, -1).double().cpu().numpy()
    return values, tokens / (n * repeats), seconds / (n * repeats)


def exact_references(policy, batch: ScoringBatch, prompts, completions, progress: bool):
    """(n, blocks) analytic sub-block-chain ELBO and exact random-order log-lik with the batch's sub-blocks of every
    completion block (NaN elsewhere)."""
    elbo = np.full((len(prompts), batch.ids.shape[1] // policy.block_size), np.nan)
    exact = elbo.copy()
    for i in tqdm(range(len(prompts)), desc="analytic ELBO", disable=not progress):
        for block in completion_blocks(policy, prompts[i], completions[i], batch.temperature, batch.sub_block):
            elbo[i, block.index], exact[i, block.index] = block.elbo, block.exact
    return elbo, exact


@torch.no_grad()
def monte_carlo_reference(policy, batch: ScoringBatch, seed: int, calls: int, progress: bool):
    """(n, blocks) mean and variance of the mean of a count-form ELBO of ``calls`` x 16 draws, keyed
    (seed, BenchKey.REFERENCE, call)."""
    n, T = batch.ids.shape
    per_call = max(1, CHUNK_TOKENS // (T * (1 + REFERENCE_CALL_DRAWS)))
    samples = []
    for call in tqdm(range(calls), desc="reference ELBO", disable=not progress):
        values = []
        for start in range(0, n, per_call):
            est = estimate("elbo", policy, batch.rows(slice(start, start + per_call)), (seed, BenchKey.REFERENCE, call),
                           draws=REFERENCE_CALL_DRAWS, form="count")
            values.append(est.draw_values)
        samples.append(torch.cat(values))
    samples = torch.cat(samples, 1).double().cpu().numpy()  # (n, draws, blocks), each draw unbiased
    return samples.mean(1), samples.var(1, ddof=1) / samples.shape[1]


def summarize(values: np.ndarray, counted: np.ndarray, reference: np.ndarray, reference_var: np.ndarray,
              exact: np.ndarray | None) -> dict:
    """Bias (with its stderr), spread and RMSE per block over the counted blocks; see the module docstring."""
    e = values[:, counted]  # (R, blocks)
    R, blocks = e.shape
    mean, var = e.mean(0), (e.var(0, ddof=1) if R > 1 else np.zeros(blocks))
    sequences = np.where(counted, values, 0.0).sum(-1)  # (R, n): each completion's sum over its blocks
    error = mean - reference[counted]
    return {
        "bias": float(error.mean()),
        "bias_stderr": float(math.sqrt((var / R + reference_var[counted]).sum()) / blocks),
        "std": float(math.sqrt(var.mean())),
        "std_sequence": float(math.sqrt(sequences.var(0, ddof=1).mean())) if R > 1 else 0.0,
        "rmse": float(math.sqrt((error**2 + var).mean())),
        "bias_exact": None if exact is None else float((mean - exact[counted]).mean()),
    }


def measure(policy, prompts: list[list[int]], draws=(1, 2, 4, 8), nodes=(1, 2, 3, 4), repeats: int = 16,
            max_new_tokens: int = 16, seed: int = 0, exact: bool | None = None, reference_draws: int = 512,
            progress: bool = True) -> Measurement:
    """Sample completions of ``prompts`` and score them with every estimator setting (see the module docstring).

    ``exact`` None: the analytic reference when the block size is <= 8, else the Monte Carlo one, whose
    ``reference_draws`` are rounded up to a multiple of 16.
    """
    began = time.perf_counter()
    B, S = policy.block_size, policy.sub_block
    exact = B <= EXACT_BLOCK_LIMIT if exact is None else exact
    generation = sample_completions(policy, prompts, max_new_tokens, seed)
    batch = ScoringBatch.build(prompts, generation.tokens, policy.pad_id, B, temperature=1.0, device=policy.device,
                               sub_block=S, steps=generation.steps)
    counted = batch.completion.reshape(len(prompts), -1, B).any(-1).cpu().numpy()
    if exact:
        reference, exact_logp = exact_references(policy, batch, prompts, generation.tokens, progress)
        reference_var = np.zeros_like(reference)
    else:
        calls = -(-reference_draws // REFERENCE_CALL_DRAWS)
        reference, reference_var = monte_carlo_reference(policy, batch, seed, calls, progress)
        exact_logp, reference_draws = None, calls * REFERENCE_CALL_DRAWS
    score(policy, batch.rows(slice(0, 1)), Setting("masked", {}), (seed, BenchKey.MEASURED, 0), 1)  # warm-up, untimed
    records = []
    for setting in tqdm(settings(list(draws), list(nodes)), desc="estimators", disable=not progress):
        values, tokens, seconds = score(policy, batch, setting, (seed, BenchKey.MEASURED, 0), repeats)
        records.append({
            "estimator": setting.estimator, "variant": setting.variant, "options": setting.options,
            "draws": setting.options.get("draws"), "nodes": setting.options.get("nodes"), "block_size": B, "sub_block": S,
            **summarize(values, counted, reference, reference_var, exact_logp),
            "forward_tokens": tokens, "seconds": seconds,
            "reference": "analytic" if exact else f"monte_carlo ({reference_draws} draws)", "repeats": repeats,
        })
    return Measurement(records, model=policy.source, sequences=len(prompts), blocks=int(counted.sum()), sub_block=S,
                       reference=records[0]["reference"], repeats=repeats, seconds=time.perf_counter() - began,
                       device=_device_name(policy), samples=generation.texts[:4])


def _device_name(policy) -> str:
    device = policy.device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} torch threads"
