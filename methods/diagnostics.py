"""Rollout diagnostics: how a step's completions were decoded, logged every step beside the method's statistics.

Two failures show nowhere in the rewards until it is late. A decoder that ignores temperature collapses a group to
one completion repeated G times (every advantage 0, nothing learns): ``identical_share`` is the share of completions
that equal, token for token through the stop token, another member of their group (0 when all G differ, 1 when the
group is one completion). Parallel decoding (``threshold`` < 1) commits several tokens per forward:
``tokens_per_forward`` is the decoded completion tokens over the forwards that decoded them, per rollout (the
distinct values of its step map), summed over all rollouts of the step; ``tokens_per_forward_len_upto<L>`` and
``..._over<L>`` split it by answer length (tokens through the stop token) into quarters of the rollout length, a
bucket without rollouts being left out. Completions cover whole blocks, so the tokens after the stop token in its
block count as decoded. At ``threshold: 1`` every forward commits one token: exactly 1.0.

The step map itself (the forward index at which each token was decoded, as the trajectory estimator reads it) goes
to the runner in ``RolloutResult.decoding`` (``decoding_record``), which logs it as an artifact per evaluation mark.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arena.model.sampler import Generation
from methods.base import StepResult


@dataclass
class RolloutResult(StepResult):
    """A step's result with this rank's step maps (``decoding_record``), for the runner to log."""

    decoding: dict[str, np.ndarray] | None = None


def length_edges(max_new_tokens: int) -> list[int]:
    """The answer-length buckets' upper edges: quarters of the rollout length (distinct, at least 1)."""
    return sorted({max(1, round(max_new_tokens * q / 4)) for q in (1, 2, 3, 4)})


def bucket_names(max_new_tokens: int) -> list[str]:
    edges = length_edges(max_new_tokens)
    return [f"len_upto{edge}" for edge in edges] + [f"len_over{edges[-1]}"]


def identical_completions(texts: list[list[int]], group_size: int) -> int:
    """How many completions (token lists, laid out group after group) equal another member of their group."""
    count = 0
    for start in range(0, len(texts), group_size):
        group = [tuple(t) for t in texts[start: start + group_size]]
        count += sum(group.count(t) > 1 for t in group)
    return count


def decoding_sums(out: Generation, group_size: int, max_new_tokens: int) -> dict[str, float]:
    """This rank's sums behind the diagnostics (sum them over ranks, then ``decoding_stats``): identical
    completions, and decoded tokens and decoding forwards, overall and per answer-length bucket."""
    edges, names = length_edges(max_new_tokens), bucket_names(max_new_tokens)
    texts = [tokens[:length] for tokens, length in zip(out.tokens, out.lengths)]
    sums = {"identical": float(identical_completions(texts, group_size)), "decoded": 0.0, "forwards": 0.0}
    sums |= {f"{kind}_{name}": 0.0 for name in names for kind in ("decoded", "forwards")}
    for steps, length in zip(out.steps, out.lengths):
        bucket = names[int(np.searchsorted(edges, length))]
        for kind, value in (("decoded", len(steps)), ("forwards", len(set(steps)))):
            sums[kind] += value
            sums[f"{kind}_{bucket}"] += value
    return sums


def decoding_stats(totals: dict[str, float], samples: float, max_new_tokens: int) -> dict[str, float]:
    """``identical_share``, ``tokens_per_forward`` and its buckets from the all-rank ``decoding_sums``."""
    stats = {"identical_share": totals["identical"] / samples,
             "tokens_per_forward": totals["decoded"] / max(totals["forwards"], 1.0)}
    for name in bucket_names(max_new_tokens):
        if totals[f"forwards_{name}"]:
            stats[f"tokens_per_forward_{name}"] = totals[f"decoded_{name}"] / totals[f"forwards_{name}"]
    return stats


def decoding_record(out: Generation, rows: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """This rank's rollouts in flat arrays: ``prompt`` and ``member`` of each, its answer ``length``, and the
    forward index at which each of its tokens was decoded, ``forward[offsets[i]:offsets[i+1]]`` for rollout i."""
    return {"prompt": np.array([i for i, _ in rows], dtype=np.int32),
            "member": np.array([g for _, g in rows], dtype=np.int32),
            "length": np.array(out.lengths, dtype=np.int32),
            "offsets": np.cumsum([0, *map(len, out.steps)]).astype(np.int64),
            "forward": np.array([s for steps in out.steps for s in steps], dtype=np.int32)}


def merged_records(records: list[tuple[int, dict[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    """(training step, ``decoding_record``) pairs (every rank's, several steps) as one record with a ``step``
    column, offsets running over the whole."""
    forward = [record["forward"] for _, record in records]
    shifts = np.cumsum([0, *(len(f) for f in forward[:-1])])
    return {"step": np.concatenate([np.full(len(r["length"]), step, dtype=np.int32) for step, r in records]),
            **{key: np.concatenate([r[key] for _, r in records]) for key in ("prompt", "member", "length")},
            "offsets": np.concatenate([[0], *(r["offsets"][1:] + shift for (_, r), shift in zip(records, shifts))]),
            "forward": np.concatenate(forward)}
