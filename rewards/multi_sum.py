"""The multi-block testbed: eleven one-digit sums per prompt, answered in one long completion.

The short testbed (``noisy_arithmetic``) answers in 1-3 characters, so at most about four answer
tokens are ever decoded jointly and its headroom is sharpening: the start model's mode is mostly
right (docs/testbed.md). This task makes the completion span three blocks of 16 with every
sub-block of 8 decoded jointly, and makes the pretrained model's *mode* wrong on a stated share of
the parts, so that greedy and low-temperature decoding are wrong there and RL must move probability
mass against the mode.

Design (the testbed's spec; calibration in docs/testbed.md):

- prompt: twelve digits separated by spaces and closed by ``=``, 24 characters, e.g.
  ``"3 5 7 8 9 1 2 3 4 5 6 7="``; part i (i = 0..10) is the sum of neighbours d_i + d_(i+1);
- answer: the eleven sums, each written as two digits least-significant first (``8`` -> ``"80"``,
  ``15`` -> ``"51"``), joined by ``;``: 32 characters plus the stop token. With the 24-token prompt
  the completion fills the second sub-block of block 1 (positions 24-31), block 2 and half of
  block 3 (blocks of 16, sub-blocks of 8), the stop token at position 56;
- reward: the fraction of the eleven parts right, position by position (a part is right when its
  two characters are); ``exact_match`` (all eleven right) is reported as a metric;
- the pretraining teacher, per part and independently: a sum with a carry (d_i + d_(i+1) >= 10,
  45 of the 100 digit pairs) is written right with probability ``CARRY_RIGHT`` = 0.4 and with the
  carry dropped (tens digit 0) with probability 0.6, so the mode of a model that learns the teacher
  is the dropped carry; a sum without a carry is written right with probability
  ``NO_CARRY_RIGHT`` = 0.9, else with its units digit one off (+1 or -1 mod 10, equal odds) and its
  tens digit 0. The teacher's expected share of right parts is 0.55 * 0.9 + 0.45 * 0.4 = 0.675;
- prompts: 10^12 digit strings; a prompt is held out when a keyed hash of the whole prompt falls in
  the held-out fifth (``rewards.data.is_heldout``), so held-out never shares a prompt with the
  train split; a draw never repeats a prompt within itself, and two train-split draws (training
  rollouts and tuning evaluation, with different seeds) share a prompt with probability about
  n1 * n2 / 8e11 (below 1e-4 for any study here). Every digit pair occurs in both splits: the
  question is whether RL moves mass against the mode on parts it has seen, not generalisation to
  unseen pairs;
- one difficulty level, ``11`` (the number of sums), so ``levels: [11]``.
"""
from __future__ import annotations

import numpy as np

from rewards.base import Task, chat_prompt
from rewards.data import generate_split

DIGITS = 12
CARRY_RIGHT = 0.4  # teacher: a carry sum written right; else the carry is dropped
NO_CARRY_RIGHT = 0.9  # teacher: a sum without carry written right; else its units digit one off


def part_answer(total: int) -> str:
    """A sum 0..18 as two digits, least-significant first: 8 -> "80", 15 -> "51"."""
    return f"{total % 10}{total // 10}"


def sums(digits: list[int]) -> list[int]:
    return [a + b for a, b in zip(digits, digits[1:])]


def teacher_part(total: int, rng: np.random.Generator) -> str:
    """One part as the teacher writes it (the probabilities of the module docstring)."""
    if total >= 10:
        return part_answer(total) if rng.random() < CARRY_RIGHT else f"{total % 10}0"
    if rng.random() < NO_CARRY_RIGHT:
        return part_answer(total)
    return f"{(total + (1 if rng.random() < 0.5 else -1)) % 10}0"


def part_results(completion: str, example: dict) -> list[bool]:
    """Per part, whether the completion's part (split at ``;``, by position) is right."""
    written = completion.strip().split(";")
    return [i < len(written) and written[i] == part_answer(total) for i, total in enumerate(example["sums"])]


class NeighbourSumsTask(Task):
    """What the neighbour-sum tasks share: the prompt (digits and ``=``), the partial-credit reward and exact
    match, the split draws, and a teacher that writes each part independently (the subclass's ``teacher_part``,
    ``_draw`` and ``levels``)."""

    reward_range = (0.0, 1.0)
    levels: tuple[int, ...]

    def reward(self, completion: str, example: dict) -> float:
        results = part_results(completion, example)
        return sum(results) / len(results)

    def sample_metrics(self, completion: str, example: dict) -> dict[str, float]:
        """Per-sample metrics besides the reward, averaged by the evaluator: all parts right."""
        return {"exact_match": float(all(part_results(completion, example)))}

    def prompt(self, example: dict, tokenizer=None) -> str:
        text = " ".join(str(d) for d in example["digits"]) + "="
        return text if tokenizer is None else chat_prompt(text, tokenizer)

    def examples(self, split: str, n: int | None = None, seed: int = 0, source: str | None = None) -> list[dict]:
        """``n`` distinct prompts (default 64) of ``split``, balanced over the levels, deterministic in ``seed``."""
        if source is not None:
            raise ValueError(f"{self.name}: items are generated from the seed; 'source' is not supported")
        return generate_split(self.name, split, 64 if n is None else n, seed, self.levels, self._draw)

    def teacher_answer(self, example: dict, rng: np.random.Generator) -> str:
        """The pretraining target: every part written by the noisy teacher, independently."""
        return ";".join(self.teacher_part(total, rng) for total in example["sums"])

    def teacher_part(self, total: int, rng: np.random.Generator) -> str:
        raise NotImplementedError(f"{type(self).__name__} defines no teacher_part(total, rng)")

    def _draw(self, rng, level: int) -> dict:
        raise NotImplementedError(f"{type(self).__name__} defines no _draw(rng, level)")


class MultiSumTask(NeighbourSumsTask):
    name = "multi_sum"

    def __init__(self, levels: tuple[int, ...] = (DIGITS - 1,)):
        if tuple(levels) != (DIGITS - 1,):
            raise ValueError(f"multi_sum: the only level is {DIGITS - 1} (the number of sums), got {list(levels)}")
        self.levels = tuple(levels)

    def make(self, digits: list[int]) -> dict:
        totals = sums(digits)
        return {"digits": digits, "sums": totals, "answer": ";".join(part_answer(t) for t in totals),
                "difficulty": len(totals)}

    def teacher_part(self, total: int, rng: np.random.Generator) -> str:
        return teacher_part(total, rng)

    def _draw(self, rng, level: int) -> dict:
        digits = [int(d) for d in rng.integers(0, 10, size=DIGITS)]
        return {**self.make(digits), "key": "".join(map(str, digits))}
