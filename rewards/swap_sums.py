"""The in-block testbed: neighbour sums whose wrong mode is the same number with its two digits swapped.

The multi-block testbed (``multi_sum``) has a teacher that writes each token nearly independently of
its neighbours (a dropped carry changes one digit), so a model of it is close to a product of its
single-position marginals and an in-block likelihood estimator has little to capture; and its
prompts all have one length, so its block starts always land on the same answer characters. Here
the teacher's error is a *coherent two-token alternative*: a part is written right ("51" for 15,
least-significant digit first) or swapped ("15"), never mixed ("55", "11"). A carry sum is swapped
more often than not, so the joint has two modes per part, the wrong one heavier, while each digit's
marginal is a near coin-flip between the two digits: the marginals say little about the joint (the
dependence, measured by ``arena.dependence``, is what an in-block estimator must capture). The
prompt length varies, so the block boundary at position 32 lands on different answer characters.

Design (the spec; the measured numbers are in docs/testbed.md):

- prompt: n digits (n uniform on 8..13) separated by spaces and closed by ``=``, 2n characters;
  part i (i = 0..n-2) is the neighbour sum d_i + d_(i+1);
- answer: the n-1 sums, each two digits least-significant first (``8`` -> ``"80"``, ``15`` ->
  ``"51"``), joined by ``;``: 3n-4 characters and the stop token; prompt and answer take 5n-3 <= 62
  positions, so every sequence fits two blocks of 32 (sub-blocks of 8, Fast-dLLM v2's geometry);
- reward: the fraction of parts right; ``exact_match`` as a metric (both ``multi_sum.NeighbourSumsTask``'s);
- levels (the hard subset): the digits' range. Level 1: digits 0-4, no sum carries (the teacher's
  mode is right everywhere); level 2: digits 0-9, 45 of 100 pairs carry; level 3: digits 5-9, every
  sum carries (the mode is wrong on every part but 11, whose swap is itself);
- the pretraining teacher, per part and independently: a carry sum is written right with
  probability ``CARRY_RIGHT`` = 0.4, else swapped; a sum without carry right with probability
  ``NO_CARRY_RIGHT`` = 0.8, else swapped. A sum whose two digits agree (0, 11) is always right;
- informative tokens: a character is *reward-relevant* when the reward reads it as a digit of a
  part, and *informative* when it is a digit that the right part and its swap write differently
  (the choice RL must fix). ``block_start_share`` gives, exactly, the share of block starts inside
  the answer that land on each kind;
- splits as ``multi_sum``'s: held out by a keyed hash of the whole prompt, distinct within a draw.
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from rewards.multi_sum import NeighbourSumsTask, part_answer, sums

LENGTHS = tuple(range(8, 14))  # digits per prompt, uniform
DIGIT_RANGES = {1: (0, 4), 2: (0, 9), 3: (5, 9)}  # level -> inclusive digit range
CARRY_RIGHT = 0.4  # teacher: a carry sum written right; else swapped (the mode is wrong)
NO_CARRY_RIGHT = 0.8  # teacher: a sum without carry written right; else swapped
PART = 3  # characters per part in the answer: two digits and the separator


def swapped(total: int) -> str:
    """The coherent wrong alternative: the part's two digits in the other order (15 -> "15")."""
    return part_answer(total)[::-1]


def teacher_part(total: int, rng: np.random.Generator) -> str:
    """One part as the teacher writes it (the probabilities of the module docstring)."""
    right = CARRY_RIGHT if total >= 10 else NO_CARRY_RIGHT
    return part_answer(total) if rng.random() < right else swapped(total)


def answer_length(n: int) -> int:
    return PART * (n - 1) - 1


def block_starts(prompt_length: int, answer_chars: int, block_size: int) -> list[int]:
    """Answer-character indices that sit at a block start (absolute positions multiple of ``block_size``)."""
    first = -(-prompt_length // block_size) * block_size
    return [p - prompt_length for p in range(first, prompt_length + answer_chars, block_size)]


def block_start_share(levels: tuple[int, ...], block_size: int) -> dict[str, Fraction]:
    """Exact share of the block starts inside the answer that land on a reward-relevant, an informative, or a
    wrong-mode character, over the task's draws (levels equally often, n uniform on ``LENGTHS``; each start
    counts once).

    An answer character at index a is a digit when a % 3 < 2; its part's digits are one uniform pair of the
    level's range; the digit is informative when that pair's sum is not written the same swapped, and
    wrong-mode when, besides, the sum carries (the teacher's mode is the swap: what training must fix)."""
    shares = dict.fromkeys(("reward_relevant", "informative", "wrong_mode"), Fraction(0))
    starts = Fraction(0)
    for level, n in itertools.product(levels, LENGTHS):
        lo, hi = DIGIT_RANGES[level]
        totals = [a + b for a in range(lo, hi + 1) for b in range(lo, hi + 1)]
        differs = [total for total in totals if part_answer(total) != swapped(total)]
        weight = Fraction(1, len(levels) * len(LENGTHS))
        for index in block_starts(2 * n, answer_length(n), block_size):
            starts += weight
            if index % PART < 2:
                shares["reward_relevant"] += weight
                shares["informative"] += weight * Fraction(len(differs), len(totals))
                shares["wrong_mode"] += weight * Fraction(sum(total >= 10 for total in differs), len(totals))
    return {kind: share / starts for kind, share in shares.items()}


class SwapSumsTask(NeighbourSumsTask):
    name = "swap_sums"

    def __init__(self, levels: tuple[int, ...] = tuple(DIGIT_RANGES)):
        unknown = [level for level in levels if level not in DIGIT_RANGES]
        if unknown or not levels:
            raise ValueError(f"swap_sums: levels must be among {list(DIGIT_RANGES)} (the digits' range), got {list(levels)}")
        self.levels = tuple(levels)

    def make(self, digits: list[int], level: int) -> dict:
        totals = sums(digits)
        return {"digits": digits, "sums": totals, "answer": ";".join(part_answer(t) for t in totals),
                "difficulty": level}

    def teacher_part(self, total: int, rng: np.random.Generator) -> str:
        return teacher_part(total, rng)

    def _draw(self, rng, level: int) -> dict:
        lo, hi = DIGIT_RANGES[level]
        length = int(rng.choice(LENGTHS))
        digits = [int(d) for d in rng.integers(lo, hi + 1, size=length)]
        return {**self.make(digits, level), "key": "".join(map(str, digits))}
