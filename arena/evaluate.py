"""The evaluation protocol: fixed held-out prompts, k samples each, common random numbers (docs/studies.md).

Every arm and every evaluation point of a study decodes the same ``N`` held-out prompts with the same
decoding settings and the same decoding seeds, keyed by (evaluation seed, prompt, sample): the
differences between two curves are then differences between policies, not between draws. With
r_ij the reward of sample j of prompt i:

- p_i = mean_j r_ij, the per-prompt reward; ``mean_reward`` = mean_i p_i;
- ``tail_reward`` at α (lower CVaR) = the mean of the ceil(αN) smallest p_i; ``tail_gain`` =
  tail(now) - tail(start) of the same run;
- ``zero_share``: the share of prompts with p_i = 0; ``pass_at_k`` (binary rewards): the mean over
  prompts of Chen et al.'s unbiased 1 - C(k-c_i, k)/C(k, k) with n = k, i.e. "any of the k right";
- per-level means where the task has difficulty levels;
- the task's own per-sample metrics, where its ``sample_metrics(completion, example)`` gives any (a dict
  of numbers, e.g. ``multi_sum``'s exact match beside its partial-credit reward): each averaged over
  all samples, with its gain against the start;
- the hard subset: the ceil(h N) prompts with the lowest per-prompt reward under the *starting*
  policy in a separate decoding (its own seeds), so that the samples that pick the subset are
  independent of those that measure it: a frozen policy shows zero hard-subset gain in expectation,
  where selecting on the measured samples would show a regression-to-the-mean gain.

An evaluation *draw* is one set of N distinct prompts with its decoding seeds. Draw 0 is the one every
evaluation point decodes; a study with ``evaluation.draws: D`` also decodes draws 1..D-1 at the start and
at the end, each an independent sample of prompts (keyed by (evaluation seed, EvaluationKey.DRAW_PROMPTS, d)) with its
own decoding seeds, so that the report can count, and measure, what one finite draw adds to a gain. Those
final draws may be larger than draw 0 (``draw_prompts``, ``draw_samples``): a final comparison at 512 x 16 costs
two decodes per draw, where the curve's draw 0 is decoded at every point.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass

import numpy as np

from arena.model.sampler import SamplerConfig, generate
from arena.rng import EvaluationKey, numpy_generator, seed_of
from arena.shards import gather, share

DRAW_METRICS = ("tail_gain", "mean_gain", "hard_gain", "tail_reward")  # logged per evaluation draw 1..D-1
SHARPEN_GRID = (0.0, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # τ: 0 is greedy, 1 the start policy itself


def lower_cvar(per_prompt: np.ndarray, alpha: float) -> float:
    """Mean of the ceil(alpha N) smallest values."""
    count = max(1, math.ceil(alpha * len(per_prompt) - 1e-9))
    return float(np.sort(per_prompt)[:count].mean())


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are right (Chen et al. 2021): 1 - C(n-c, k)/C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def select_hard(per_prompt: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Mask of the ceil(fraction N) lowest values; ties broken by an order keyed by ``seed``, not by index."""
    count = max(1, math.ceil(fraction * len(per_prompt) - 1e-9))
    tiebreak = numpy_generator(seed, EvaluationKey.SELECT).random(len(per_prompt))
    mask = np.zeros(len(per_prompt), dtype=bool)
    mask[np.lexsort((tiebreak, per_prompt))[:count]] = True
    return mask


@dataclass
class Evaluation:
    rewards: np.ndarray  # (N, k) reward of each sample
    completions: list[dict]  # prompt, completion, reward: every sample
    forward_tokens: int = 0

    @property
    def per_prompt(self) -> np.ndarray:
        return self.rewards.mean(1)


class Evaluator:
    """Decodes one draw of the study's evaluation prompts (held out, or the train split's when tuning); ``spec`` is
    the study's evaluation section, ``draw`` the draw (0: the one every evaluation point decodes; draws 1.. are
    sized by the section's draw_prompts and draw_samples)."""

    def __init__(self, task, spec, tokenizer=None, source: str | None = None, draw: int = 0):
        self.task, self.spec, self.draw = task, spec.of_draw(draw), draw
        self.prompt_seed = spec.seed if draw == 0 else seed_of(spec.seed, EvaluationKey.DRAW_PROMPTS, draw)
        sized_by = "evaluation.draw_prompts" if draw and spec.draw_prompts else "evaluation.prompts"
        self.examples = distinct_examples(task, self.spec, source, self.prompt_seed, sized_by)
        self.texts = [task.prompt(e, tokenizer) for e in self.examples]
        self.levels = [e.get("difficulty") for e in self.examples]
        self.binary = tuple(task.reward_range) == (0.0, 1.0)

    @classmethod
    def final_draws(cls, task, spec, tokenizer=None, source: str | None = None) -> list["Evaluator"]:
        """The evaluators of draws 1..D-1, which only a run's end (and a control) decodes."""
        return [cls(task, spec, tokenizer, source, draw=d) for d in range(1, spec.draws)]

    def decode(self, policy, domain: EvaluationKey = EvaluationKey.MEASURE, temperature: float | None = None) -> Evaluation:
        """k samples of every prompt with decoding seeds keyed by (evaluation seed, domain[, draw], prompt, sample);
        ``temperature`` replaces the study's (the sharpening control).

        Row i*k + j is sample j of prompt i, and the sampler keys its draws by (decoding seed, row). In a run across
        processes each rank decodes and rewards its share of the rows (``arena.shards``) and every rank receives all
        of them: the same tokens as one process decoding them all (a row's tokens do not depend on its batch mates),
        so the same rewards and metrics, bit for bit; for the same reason ``evaluation.decode_batch`` may cut a
        rank's rows into generate calls of that many. ``forward_tokens`` is summed over the calls and ranks (a call
        stops when its own rows have, so chunks may count fewer than one call)."""
        spec, k = self.spec, self.spec.samples
        config = SamplerConfig(max_new_tokens=spec.max_new_tokens,
                               temperature=spec.temperature if temperature is None else temperature)
        key = (spec.seed, domain) if self.draw == 0 else (spec.seed, domain, self.draw)
        rows = share(len(self.texts) * k)
        mine, forward_tokens = [], 0
        if rows:  # more processes than rows leave a rank without any
            encoded = {i: policy.encode(self.texts[i]) for i in sorted({row // k for row in rows})}
            size = spec.decode_batch or len(rows)
            for chunk in (rows[i:i + size] for i in range(0, len(rows), size)):
                out = generate(policy, [encoded[row // k] for row in chunk], config, seed=seed_of(*key),
                               row_ids=chunk)
                mine += [(row, text, self._reward(row // k, text)) for row, text in zip(chunk, out.texts)]
                forward_tokens += out.forward_tokens
        parts = gather([(mine, forward_tokens)])
        every = sorted(sample for part, _ in parts for sample in part)
        rewards = np.array([reward for _, _, reward in every]).reshape(-1, k)
        completions = [{"prompt": self.texts[row // k], "completion": text, "reward": reward}
                       for row, text, reward in every]
        return Evaluation(rewards, completions, sum(tokens for _, tokens in parts))

    def _reward(self, index: int, text: str) -> float:
        return checked_reward(self.task, self.examples[index], self.texts[index], text)

    def hard_subset(self, policy) -> np.ndarray:
        """Boolean mask of the ceil(h N) hardest prompts by a decoding independent of the measuring one.

        Ties (many prompts share a per-prompt reward) are broken by a keyed random order, not by index.
        """
        return select_hard(self.decode(policy, EvaluationKey.SELECT).per_prompt, self.spec.hard_fraction, self.prompt_seed)

    def metrics(self, now: Evaluation, start: Evaluation, hard: np.ndarray) -> dict[str, float]:
        """Every evaluation metric of ``now``, with gains against ``start`` (same prompts and seeds)."""
        spec = self.spec
        p, p0 = now.per_prompt, start.per_prompt
        out = {"mean_reward": float(p.mean()), "mean_gain": float(p.mean() - p0.mean()),
               "tail_reward": lower_cvar(p, spec.primary_alpha),
               "tail_gain": lower_cvar(p, spec.primary_alpha) - lower_cvar(p0, spec.primary_alpha),
               "zero_share": float((p == 0).mean()),
               "hard_reward": float(p[hard].mean()), "hard_gain": float(p[hard].mean() - p0[hard].mean())}
        for alpha in spec.alphas:
            out[f"tail_reward_a{alpha:g}"] = lower_cvar(p, alpha)
            out[f"tail_gain_a{alpha:g}"] = lower_cvar(p, alpha) - lower_cvar(p0, alpha)
        if self.binary and np.isin(now.rewards, (0.0, 1.0)).all():
            k = now.rewards.shape[1]
            out[f"pass_at_{k}"] = float(np.mean([pass_at_k(k, int(c), k) for c in now.rewards.sum(1)]))
        if any(level is not None for level in self.levels):
            levels = np.array([-1 if level is None else level for level in self.levels])
            for level in sorted(set(levels.tolist()) - {-1}):
                out[f"level{level}_mean_reward"] = float(p[levels == level].mean())
        if now.completions and start.completions:
            then = self.sample_means(start)
            for name, value in self.sample_means(now).items():
                out[name], out[f"{name}_gain"] = value, value - then[name]
        return out

    def sample_means(self, evaluation: Evaluation) -> dict[str, float]:
        """The task's per-sample metrics, each averaged over every sample of ``evaluation``."""
        k = evaluation.rewards.shape[1]
        totals: dict[str, float] = {}
        for row, sample in enumerate(evaluation.completions):
            for name, value in self.task.sample_metrics(sample["completion"], self.examples[row // k]).items():
                totals[name] = totals.get(name, 0.0) + float(value)
        return {name: total / len(evaluation.completions) for name, total in totals.items()}


# ---------------------------------------------------------------------------------------------
# the sharpening rule: a policy's best temperature, chosen on training prompts (arena.controls, matched decoding)


def best_temperature(evaluator: Evaluator, policy, alpha: float) -> tuple[float, dict[float, float]]:
    """τ of ``SHARPEN_GRID`` with the highest tail reward on ``evaluator``'s prompts (a training-split draw), and
    every τ's tail; ties go to the larger τ, the smaller change."""
    tails = {tau: lower_cvar(evaluator.decode(policy, temperature=tau * evaluator.spec.temperature).per_prompt, alpha)
             for tau in SHARPEN_GRID}
    return max(SHARPEN_GRID, key=lambda tau: (tails[tau], tau)), tails


def choose_temperature(task, spec, policy, source: str | None) -> tuple[float, dict[float, float]]:
    """The sharpening rule for ``policy``: τ and every τ's tail on the training split's prompts of ``spec`` (the
    study's evaluation section), decoded with the evaluation's own keyed seeds."""
    training = Evaluator(task, dataclasses.replace(spec, split="train"), policy.tokenizer, source)
    return best_temperature(training, policy, spec.primary_alpha)


class EvaluationError(ValueError):
    """The evaluation cannot draw what the study asks for (more distinct prompts than the split holds)."""


def distinct_examples(task, spec, source: str | None, seed: int, sized_by: str = "evaluation.prompts") -> list[dict]:
    """``spec.prompts`` distinct items of ``spec.split`` (asked of the task as ``distinct=True`` where its
    ``examples`` takes it); EvaluationError naming ``sized_by`` (the study key that asked) when they are not to be
    had."""
    strata = [(task, spec.prompts)] if spec.level_shares is None else level_strata(task, spec.level_shares, spec.prompts)
    examples = []
    for part, count in strata:
        distinct = {"distinct": True} if "distinct" in inspect.signature(part.examples).parameters else {}
        try:
            examples += part.examples(spec.split, n=count, seed=seed, source=source, **distinct) if count else []
        except ValueError as error:
            raise EvaluationError(f"{sized_by}: {spec.prompts} distinct prompts are not to be had: {error}") from None
    texts = [task.prompt(e) for e in examples]
    if len(examples) < spec.prompts or len(set(texts)) < len(texts):
        raise EvaluationError(f"{sized_by}: task {task.name!r} gave {len(set(texts))} distinct prompts of the "
                              f"{spec.prompts} asked for on the {spec.split} split; ask for at most that many")
    return examples


def level_counts(shares, n: int) -> list[tuple[int, int]]:
    """(level, prompts) for ``n`` prompts at ``shares``: floors, then the largest remainders (ties to the lower
    level), so the counts sum to ``n`` and each is within one of its share."""
    exact = [(level, share * n) for level, share in shares]
    counts = {level: math.floor(x + 1e-9) for level, x in exact}
    for level, x in sorted(exact, key=lambda pair: (-(pair[1] - counts[pair[0]]), pair[0]))[: n - sum(counts.values())]:
        counts[level] += 1
    return sorted(counts.items())


def level_strata(task, shares, n: int) -> list[tuple[object, int]]:
    """A stratified draw's parts: the task at one level each (built as its class with ``levels=(level,)``), with
    its number of prompts. Each part's items are keyed by (seed, split, level, item), as in a balanced draw."""
    if task.levels is None:
        raise EvaluationError(f"evaluation.level_shares: task {task.name!r} has no difficulty levels to stratify")
    unknown = [level for level, _ in shares if level not in task.levels]
    if unknown:
        raise EvaluationError(f"evaluation.level_shares: level(s) {unknown} are not among the task's levels {list(task.levels)}")
    return [(type(task)(levels=(level,)), count) for level, count in level_counts(shares, n)]


class RewardError(RuntimeError):
    """A reward function raised or returned a non-finite value; names the task, prompt and completion."""


def checked_reward(task, example: dict, prompt: str, completion: str) -> float:
    """``task.reward`` with a named error instead of an exception or a NaN deep inside a run."""
    try:
        value = float(task.reward(completion, example))
    except Exception as error:
        raise RewardError(f"task {task.name!r}: reward raised {type(error).__name__}: {error} "
                          f"(prompt {prompt!r}, completion {completion!r})") from error
    if not math.isfinite(value):
        raise RewardError(f"task {task.name!r}: reward returned {value} (prompt {prompt!r}, completion {completion!r})")
    return value
